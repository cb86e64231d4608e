// Device-to-device copies: a byte copy when layouts match, else the
// elementwise engine with dtype conversion and any strides.
#include <ATen/TensorIterator.h>
#include <ATen/ops/empty.h>

#include "kernels/Common.h"
#include "kernels/Elementwise.h"
#include "kernels/Kernels.h"

namespace rbln::kernels {
namespace {
template <class C>
struct identity {
  C operator()(C x) const { return x; }
};
}  // namespace

void device_copy(const at::Tensor& dst, const at::Tensor& src) {
  if (dst.numel() == 0) return;
  if (dst.dtype() == src.dtype() && dst.sizes() == src.sizes() && dst.is_contiguous() && src.is_contiguous()) {
    auto* d = static_cast<char*>(dst.data_ptr());
    const auto* s = static_cast<const char*>(src.const_data_ptr());
    if (d == s) return;
    auto* stream = current_stream(dst.device().index());
    driver_call([&] { driver::memcpy_async(d, s, dst.nbytes(), stream); });
    return;
  }
  auto iter = at::TensorIteratorConfig()
                  .add_output(dst)
                  .add_const_input(src)
                  .resize_outputs(false)
                  .check_all_same_dtype(false)
                  .build();
  AT_DISPATCH_ALL_TYPES_AND_COMPLEX_AND4(at::kHalf, at::kBFloat16, at::kBool, at::kComplexHalf, dst.scalar_type(), "copy_", [&] {
    launch_elementwise<scalar_t, 2>(iter, "aten::copy_", identity<at::opmath_type<scalar_t>>());
  });
}

at::Tensor contiguous(const at::Tensor& t) {
  if (t.is_contiguous()) return t;
  auto out = at::empty(t.sizes(), t.options());
  device_copy(out, t);
  return out;
}

void prepare_out(at::Tensor& out, at::IntArrayRef sizes, at::ScalarType dtype, const at::Tensor& like,
                 const char* op) {
  if (!out.defined()) {  // a functional call: a fresh result
    out = at::empty(sizes, like.options().dtype(dtype));
    return;
  }
  TORCH_CHECK(out.scalar_type() == dtype, op, ": Expected out tensor to have dtype ", dtype, ", but got ",
              out.scalar_type(), " instead");
  check_same_device({&like, &out});
  at::native::resize_output(out, sizes);
}

}  // namespace rbln::kernels
