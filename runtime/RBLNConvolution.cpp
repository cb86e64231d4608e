// Convolution has no device kernel yet. PyTorch routes a PrivateUse1
// convolution to convolution_overrideable, which the CPU does not implement,
// so the generic fallback cannot serve it: these wrappers run the CPU's
// at::convolution / at::convolution_backward on copies and count the fallback.
#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <ATen/ops/empty.h>

#include "runtime/RBLNFallback.h"
#include "runtime/RBLNOps.h"

namespace rbln {
namespace {
constexpr const char* kReason = "no device convolution kernel yet";

at::Tensor host(const at::Tensor& t) { return t.defined() ? t.cpu() : t; }
at::Tensor back(const at::Tensor& t, const at::Device& device) { return t.defined() ? t.to(device) : t; }
}  // namespace

at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias, c10::SymIntArrayRef stride,
                                    c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed,
                                    c10::SymIntArrayRef output_padding, c10::SymInt groups) {
  count_fallback("aten::convolution_overrideable", kReason);
  std::optional<at::Tensor> cpu_bias = bias ? std::optional<at::Tensor>(host(*bias)) : std::nullopt;
  return back(at::convolution_symint(host(input), host(weight), cpu_bias, stride, padding, dilation, transposed,
                                     output_padding, groups),
              input.device());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::SymIntArrayRef stride,
    c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed, c10::SymIntArrayRef output_padding,
    c10::SymInt groups, std::array<bool, 3> output_mask) {
  count_fallback("aten::convolution_backward_overrideable", kReason);
  std::vector<c10::SymInt> bias_sizes{grad_output.sym_size(1)};
  auto [gi, gw, gb] = at::convolution_backward_symint(host(grad_output), host(input), host(weight), bias_sizes,
                                                      stride, padding, dilation, transposed, output_padding, groups,
                                                      output_mask);
  auto device = input.device();
  return {back(gi, device), back(gw, device), back(gb, device)};
}

}  // namespace rbln
