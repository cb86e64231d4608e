// Pointwise ops with several operands or results, composed of device ops:
// glu, prelu and the cross product, with their backwards, and dropout's backward.
#include <ATen/ExpandUtils.h>
#include <ATen/TensorOperators.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/where.h>

#include "generated/RBLNNativeFunctions.h"
#include "kernels/Common.h"

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

// CPU's two products: an integer or bool grad times the double scale gives
// the default float dtype, as on CPU.
at::Tensor native_dropout_backward(const at::Tensor& grad_output, const at::Tensor& mask, double scale) {
  check_same_device({&grad_output, &mask});
  return grad_output * mask * scale;
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

at::Tensor& linalg_cross_out(const at::Tensor& self, const at::Tensor& other, int64_t dim, at::Tensor& out) {
  // CPU's order: its meta function's shape checks (the dim as given), then its kernel's dtype check.
  TORCH_CHECK(self.dim() == other.dim(), "linalg.cross: inputs must have the same number of dimensions.");
  TORCH_CHECK(self.size(dim) == 3 && other.size(dim) == 3, "linalg.cross: inputs dimension ", dim,
              " must have length 3. Got ", self.size(dim), " and ", other.size(dim));
  const auto sizes = at::infer_size(self.sizes(), other.sizes());
  dim = at::maybe_wrap_dim(dim, static_cast<int64_t>(sizes.size()));
  TORCH_CHECK(self.scalar_type() == other.scalar_type(), "linalg.cross: expected both inputs to have the same dtype, ",
              "but input has dtype ", self.scalar_type(), " and other has dtype ", other.scalar_type());
  check_same_device({&self, &other, &out});
  check_no_overlap(out, {&self, &other});
  auto a = [&](int64_t i) { return self.narrow(dim, i, 1); };
  auto b = [&](int64_t i) { return other.narrow(dim, i, 1); };
  prepare_out(out, sizes, self.scalar_type(), self, "linalg_cross");
  return at::cat_out(out, {a(1) * b(2) - a(2) * b(1), a(2) * b(0) - a(0) * b(2), a(0) * b(1) - a(1) * b(0)}, dim);
}

}  // namespace rbln::kernels
