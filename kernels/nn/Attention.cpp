// Fused scaled dot product attention. The emulated device's fused kernel is
// CPU's flash-attention kernel, run through the op library (kernels/library/Library.h),
// and scaled_dot_product_attention takes it for exactly the inputs CPU takes
// its flash kernel for (the others take the math path on device ops, as on
// CPU), so attention gives CPU's values. A vendor's choice function names the
// inputs its own fused kernel accepts.
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <array>
#include <numeric>
#include <vector>

#include "generated/RBLNNativeFunctions.h"
#include "kernels/common/Common.h"
#include "kernels/library/Library.h"

namespace at::native {
// Exported by libtorch_cpu (ATen/native/transformers/attention.cpp), declared by no header.
int64_t _fused_sdp_choice_cpp(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                              const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                              std::optional<double> scale, bool enable_gqa);
}  // namespace at::native

namespace rbln::kernels {
namespace {

using Tensors = std::vector<at::Tensor>;

// CPU's backend choice (its checks of shapes, strides, dtypes, dropout, masks and the
// user's sdpa_kernel settings), with the device's fused kernel where CPU has flash.
int64_t choose_sdp_backend(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                           const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                           std::optional<double> scale, bool enable_gqa) {
  auto choice = at::native::_fused_sdp_choice_cpp(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa);
  return choice == static_cast<int64_t>(at::SDPBackend::flash_attention) ? static_cast<int64_t>(at::SDPBackend::overrideable)
                                                                           : choice;
}

// The output's layout as the op's meta function gives it (what torch.compile plans
// with): query's own when the shapes agree, else query's dimension order.
at::Tensor empty_like_layout(const at::Tensor& query, at::IntArrayRef sizes) {
  if (query.sizes() == sizes) return at::empty_like(query);
  std::vector<int64_t> order(sizes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return query.stride(a) > query.stride(b); });
  std::vector<int64_t> strides(sizes.size());
  int64_t stride = 1;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    strides[*it] = stride;
    stride *= sizes[*it];
  }
  return at::empty_strided(sizes, strides, query.options());
}

std::optional<at::Tensor> optional_of(const at::Tensor& t) { return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt; }

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor, at::Tensor, at::Tensor>
sdpa_fused(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
           const std::optional<at::Tensor>& attn_bias, double dropout_p, bool is_causal, bool return_debug_mask,
           std::optional<double> scale) {
  const at::Tensor bias = attn_bias.value_or(at::Tensor());
  check_same_device({&query, &key, &value, &bias});
  TORCH_CHECK(query.dim() == 4 && key.dim() == 4 && value.dim() == 4,
              "_scaled_dot_product_fused_attention_overrideable: the device's fused kernel takes 4-d "
              "(batch, heads, sequence, embedding) query, key and value");
  TORCH_CHECK(!return_debug_mask, "_scaled_dot_product_fused_attention_overrideable: no debug mask on rbln");
  const int64_t batch = query.size(0), heads = query.size(1), length = query.size(2);
  auto out = empty_like_layout(query, {batch, heads, length, value.size(-1)});
  auto logsumexp = at::empty({batch, heads, length}, query.options().dtype(at::toOpMathType(query.scalar_type())));
  launch_library("aten::_scaled_dot_product_flash_attention_for_cpu", {query, key, value, bias}, {out, logsumexp},
                 [=](const Tensors& in) {
                   auto [o, lse] = at::_scaled_dot_product_flash_attention_for_cpu(in[0], in[1], in[2], dropout_p,
                                                                                   is_causal, optional_of(in[3]), scale);
                   return Tensors{o, lse};
                 });
  // No dropout, so no random state: the seed and offset are host zeros, as CUDA's flash gives outside graph capture.
  auto no_state = [] { return at::zeros({}, at::kLong); };
  return {out, logsumexp, at::Tensor(), at::Tensor(), length, key.size(2), no_state(), no_state(), at::Tensor()};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> sdpa_fused_backward(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& attn_bias, std::array<bool, 4> grad_input_mask, const at::Tensor& out,
    const at::Tensor& logsumexp, const at::Tensor& cum_seq_q, const at::Tensor& cum_seq_k, c10::SymInt max_q,
    c10::SymInt max_k, double dropout_p, bool is_causal, const at::Tensor& philox_seed,
    const at::Tensor& philox_offset, std::optional<double> scale) {
  check_same_device({&grad_out, &query, &key, &value, &attn_bias, &out, &logsumexp});
  // CPU's flash backward has no mask gradient; scaled_dot_product_attention takes
  // the math path when the mask requires grad, as CPU does.
  TORCH_CHECK(!grad_input_mask[3],
              "_scaled_dot_product_fused_attention_overrideable_backward: the fused kernel has no attn_bias gradient");
  auto grad_query = at::empty_like(query), grad_key = at::empty_like(key), grad_value = at::empty_like(value);
  launch_library("aten::_scaled_dot_product_flash_attention_for_cpu_backward",
                 {grad_out, query, key, value, out, logsumexp, attn_bias}, {grad_query, grad_key, grad_value},
                 [=](const Tensors& in) {
                   auto [gq, gk, gv] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
                       in[0], in[1], in[2], in[3], in[4], in[5], dropout_p, is_causal, optional_of(in[6]), scale);
                   return Tensors{gq, gk, gv};
                 });
  return {grad_query, grad_key, grad_value, at::Tensor()};
}

}  // namespace rbln::kernels

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &rbln::kernels::choose_sdp_backend)
}  // namespace at::native
