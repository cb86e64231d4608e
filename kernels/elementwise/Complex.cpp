// complex and polar: a complex result written through its real view, with device copies and device
// elementwise ops. PyTorch's functional overloads are composites over these out= kernels; CPU's dtype
// checks, then its TensorIterator (devices, broadcasting, overlap, the out= resize), come first.
#include <ATen/TensorIterator.h>
#include <ATen/ops/cos.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/sin.h>
#include <ATen/ops/view_as_real.h>

#include "generated/RBLNNativeFunctions.h"
#include "kernels/common/Common.h"

namespace rbln::kernels {
namespace {

// CPU's complex_check_dtype and TensorIterator for complex_out and polar_out; the result's real and
// imaginary parts as views.
std::pair<at::Tensor, at::Tensor> result_parts(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  auto floating = [](at::ScalarType t) { return t == at::kFloat || t == at::kDouble || t == at::kHalf; };
  TORCH_CHECK(floating(a.scalar_type()) && floating(b.scalar_type()),
              "Expected both inputs to be Half, Float or Double tensors but got ", a.scalar_type(), " and ",
              b.scalar_type());
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "Expected object of scalar type ", a.scalar_type(),
              " but got scalar type ", b.scalar_type(), " for second argument");
  const auto complex = c10::toComplexType(a.scalar_type());
  TORCH_CHECK(out.scalar_type() == complex, "Expected object of scalar type ", complex, " but got scalar type ",
              out.scalar_type(), " for argument 'out'");
  at::TensorIteratorConfig().add_output(out).add_const_input(a).add_const_input(b).check_all_same_dtype(false).build();
  const auto parts = at::view_as_real(out);
  return {parts.select(-1, 0), parts.select(-1, 1)};
}

}  // namespace

at::Tensor& complex_out(const at::Tensor& real, const at::Tensor& imag, at::Tensor& out) {
  auto [re, im] = result_parts(real, imag, out);
  device_copy(re, real);
  device_copy(im, imag);
  return out;
}

// CPU's polar kernel: (abs * cos(angle), abs * sin(angle)).
at::Tensor& polar_out(const at::Tensor& abs, const at::Tensor& angle, at::Tensor& out) {
  auto [re, im] = result_parts(abs, angle, out);
  at::mul_out(re, abs, at::cos(angle));
  at::mul_out(im, abs, at::sin(angle));
  return out;
}

}  // namespace rbln::kernels
