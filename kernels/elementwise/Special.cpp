// Special functions: frexp, and the out= form of mvlgamma (whose functional is PyTorch's composite of
// device ops).
#include <ATen/TensorIterator.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mvlgamma.h>

#include <cmath>

#include "generated/RBLNNativeFunctions.h"
#include "kernels/common/Common.h"

namespace rbln::kernels {

// Each float split into a mantissa in [0.5, 1) of its dtype and an int32 exponent, as CPU's kernel
// (std::frexp in the op-math type).
std::tuple<at::Tensor&, at::Tensor&> frexp_out(const at::Tensor& self, at::Tensor& mantissa, at::Tensor& exponent) {
  TORCH_CHECK(at::isFloatingType(self.scalar_type()), "torch.frexp() only supports floating-point dtypes");
  TORCH_CHECK(mantissa.dtype() == self.dtype(), "torch.frexp() expects mantissa to have dtype ", self.dtype(),
              " but got ", mantissa.dtype());
  TORCH_CHECK(exponent.dtype() == at::kInt, "torch.frexp() expects exponent to have int dtype but got ",
              exponent.dtype());
  // CPU's iterator: its overlap checks, and the outputs resized to the input.
  at::TensorIteratorConfig()
      .add_output(mantissa)
      .add_output(exponent)
      .add_const_input(self)
      .check_all_same_dtype(false)
      .set_check_mem_overlap(true)
      .build();
  if (self.numel() == 0) return {mantissa, exponent};
  const auto x = contiguous(self);
  auto m = contiguous(mantissa);
  auto e = contiguous(exponent);
  RBLN_DISPATCH_FLOATING(self.scalar_type(), "frexp", [&] {
    const auto* xp = x.const_data_ptr<scalar_t>();
    auto* mp = m.data_ptr<scalar_t>();
    auto* ep = e.data_ptr<int32_t>();
    const int64_t n = x.numel();
    launch_on(x, "aten::frexp", [=] {
      for (int64_t i = 0; i < n; ++i) {
        int exp = 0;
        mp[i] = static_cast<scalar_t>(std::frexp(static_cast<at::opmath_type<scalar_t>>(xp[i]), &exp));
        ep[i] = exp;
      }
    });
  });
  if (!m.is_same(mantissa)) device_copy(mantissa, m);
  if (!e.is_same(exponent)) device_copy(exponent, e);
  return {mantissa, exponent};
}

// CPU's mvlgamma_out: the functional's result cast into out.
at::Tensor& mvlgamma_out(const at::Tensor& self, int64_t p, at::Tensor& out) {
  const auto result = at::mvlgamma(self, p);
  TORCH_CHECK(at::canCast(result.scalar_type(), out.scalar_type()), "mvlgamma: result type ", self.scalar_type(),
              " can't be cast to the desired output type ", result.scalar_type());
  at::native::resize_output(out, result.sizes());
  device_copy(out, result);
  return out;
}

}  // namespace rbln::kernels
