// Activations with several operands or results, composed of device ops: glu
// and prelu, with their backwards.
#include <ATen/TensorOperators.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/where.h>

#include "generated/RBLNNativeFunctions.h"
#include "kernels/common/Common.h"

namespace rbln::kernels {
namespace {

std::pair<at::Tensor, at::Tensor> halves(const at::Tensor& self, int64_t dim, const char* op) {
  TORCH_CHECK(self.dim() > 0, op, ": glu does not support scalars because halving size must be even");
  dim = at::maybe_wrap_dim(dim, self.dim());
  const int64_t n = self.size(dim);
  TORCH_CHECK(n % 2 == 0, op, ": Halving dimension must be even, but dimension ", dim, " is size ", n);
  return {self.narrow(dim, 0, n / 2), self.narrow(dim, n / 2, n / 2)};
}

}  // namespace

at::Tensor glu(const at::Tensor& self, int64_t dim) {
  auto [a, b] = halves(self, dim, "glu");
  return a * at::sigmoid(b);
}

at::Tensor glu_backward(const at::Tensor& grad_output, const at::Tensor& self, int64_t dim) {
  check_same_device({&grad_output, &self});
  auto [a, b] = halves(self, dim, "glu_backward");
  auto sig = at::sigmoid(b);
  return at::cat({sig * grad_output, (1 - sig) * sig * a * grad_output}, at::maybe_wrap_dim(dim, self.dim()));
}

at::Tensor _prelu_kernel(const at::Tensor& self, const at::Tensor& weight) {
  check_same_device({&self, &weight});
  return at::where(self > 0, self, weight * self);
}

std::tuple<at::Tensor, at::Tensor> _prelu_kernel_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                                          const at::Tensor& weight) {
  check_same_device({&grad_output, &self, &weight});
  auto positive = self > 0;
  return {at::where(positive, grad_output, weight * grad_output), (self * grad_output).masked_fill(positive, 0)};
}

}  // namespace rbln::kernels
