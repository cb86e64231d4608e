// The fused LSTM and GRU cells PyTorch calls for accelerator inputs, as
// compositions of device ops. The workspace layouts are CUDA's: LSTM keeps
// the activated gates (i, f, g, o); GRU keeps (r, z, n, hx, hn).
#include <ATen/TensorOperators.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/tanh.h>
#include <ATen/ops/zeros_like.h>

#include "generated/RBLNNativeFunctions.h"
#include "kernels/common/Common.h"

namespace rbln::kernels {
namespace {

at::Tensor with_bias(const at::Tensor& gates, const std::optional<at::Tensor>& bias) {
  return bias && bias->defined() ? gates + *bias : gates;
}

at::Tensor bias_grad(const at::Tensor& grad_gates, bool has_bias) {
  return has_bias ? at::sum(grad_gates, {0}) : at::Tensor();
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> _thnn_fused_lstm_cell(const at::Tensor& input_gates,
                                                                     const at::Tensor& hidden_gates,
                                                                     const at::Tensor& cx,
                                                                     const std::optional<at::Tensor>& input_bias,
                                                                     const std::optional<at::Tensor>& hidden_bias) {
  check_same_device({&input_gates, &hidden_gates, &cx});
  TORCH_CHECK(input_gates.sizes() == hidden_gates.sizes() && input_gates.size(-1) == 4 * cx.size(-1),
              "_thnn_fused_lstm_cell: gates ", input_gates.sizes(), " and ", hidden_gates.sizes(),
              " must match and hold 4 x the cell size ", cx.sizes());
  auto gates = with_bias(with_bias(input_gates, input_bias) + hidden_gates, hidden_bias).chunk(4, 1);
  auto i = at::sigmoid(gates[0]), f = at::sigmoid(gates[1]), g = at::tanh(gates[2]), o = at::sigmoid(gates[3]);
  auto cy = f * cx + i * g;
  auto hy = o * at::tanh(cy);
  return {hy, cy, at::cat({i, f, g, o}, 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> _thnn_fused_lstm_cell_backward_impl(
    const std::optional<at::Tensor>& grad_hy, const std::optional<at::Tensor>& grad_cy, const at::Tensor& cx,
    const at::Tensor& cy, const at::Tensor& workspace, bool has_bias) {
  const bool has_hy = grad_hy && grad_hy->defined(), has_cy = grad_cy && grad_cy->defined();
  if (!has_hy && !has_cy) return {at::Tensor(), at::Tensor(), at::Tensor()};
  auto gates = workspace.chunk(4, 1);
  const auto &i = gates[0], &f = gates[1], &g = gates[2], &o = gates[3];
  auto tanh_cy = at::tanh(cy);
  auto gcx = has_hy ? *grad_hy * o * (1 - tanh_cy * tanh_cy) : at::zeros_like(cy);
  if (has_cy) gcx = gcx + *grad_cy;
  auto go = has_hy ? *grad_hy * tanh_cy * o * (1 - o) : at::zeros_like(o);
  auto gi = gcx * g * i * (1 - i), gf = gcx * cx * f * (1 - f), gg = gcx * i * (1 - g * g);
  auto grad_gates = at::cat({gi, gf, gg, go}, 1);
  return {grad_gates, gcx * f, bias_grad(grad_gates, has_bias)};
}

std::tuple<at::Tensor, at::Tensor> _thnn_fused_gru_cell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                                        const at::Tensor& hx,
                                                        const std::optional<at::Tensor>& input_bias,
                                                        const std::optional<at::Tensor>& hidden_bias) {
  check_same_device({&input_gates, &hidden_gates, &hx});
  TORCH_CHECK(input_gates.sizes() == hidden_gates.sizes() && input_gates.size(-1) == 3 * hx.size(-1),
              "_thnn_fused_gru_cell: gates ", input_gates.sizes(), " and ", hidden_gates.sizes(),
              " must match and hold 3 x the hidden size ", hx.sizes());
  auto in = with_bias(input_gates, input_bias).chunk(3, 1), hid = with_bias(hidden_gates, hidden_bias).chunk(3, 1);
  auto r = at::sigmoid(in[0] + hid[0]), z = at::sigmoid(in[1] + hid[1]);
  auto n = at::tanh(in[2] + r * hid[2]);
  auto hy = n + z * (hx - n);
  return {hy, at::cat({r, z, n, hx, hid[2]}, 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> _thnn_fused_gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  auto parts = workspace.chunk(5, 1);
  const auto &r = parts[0], &z = parts[1], &n = parts[2], &hx = parts[3], &hn = parts[4];
  auto gz = grad_hy * (hx - n) * (1 - z) * z;
  auto ghx = grad_hy * z;
  auto gn = grad_hy * (1 - z) * (1 - n * n);
  auto ghn = gn * r;
  auto gr = gn * hn * (1 - r) * r;
  auto grad_input_gates = at::cat({gr, gz, gn}, 1), grad_hidden_gates = at::cat({gr, gz, ghn}, 1);
  return {grad_input_gates, grad_hidden_gates, ghx, bias_grad(grad_input_gates, has_bias),
          bias_grad(grad_hidden_gates, has_bias)};
}

}  // namespace rbln::kernels
