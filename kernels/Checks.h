// Argument checks a generated wrapper runs before its hand-written kernel:
// `<kernel>_check(args...)` here is called with the kernel's arguments (the
// generator finds it by name), as CPU validates in front of its kernels.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/Exception.h>

#include <limits>
#include <optional>

namespace rbln::checks {

// CPU's pooling kernels take their window arguments as int (safe_downcast<int, int64_t>).
inline void window_fits_int(std::initializer_list<at::IntArrayRef> args) {
  for (const auto& values : args) {
    for (int64_t v : values) {
      TORCH_CHECK(v >= std::numeric_limits<int>::min() && v <= std::numeric_limits<int>::max(),
                  "value cannot be converted to type int without overflow");
    }
  }
}

inline void max_pool2d_with_indices_check(const at::Tensor&, at::IntArrayRef kernel_size, at::IntArrayRef stride,
                                          at::IntArrayRef padding, at::IntArrayRef dilation, bool) {
  window_fits_int({kernel_size, stride, padding, dilation});
}
inline void max_pool3d_with_indices_check(const at::Tensor& self, at::IntArrayRef kernel_size, at::IntArrayRef stride,
                                          at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode) {
  max_pool2d_with_indices_check(self, kernel_size, stride, padding, dilation, ceil_mode);
}
inline void avg_pool2d_check(const at::Tensor&, at::IntArrayRef kernel_size, at::IntArrayRef stride,
                             at::IntArrayRef padding, bool, bool, std::optional<int64_t>) {
  window_fits_int({kernel_size, stride, padding});
}
inline void avg_pool3d_check(const at::Tensor& self, at::IntArrayRef kernel_size, at::IntArrayRef stride,
                             at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                             std::optional<int64_t> divisor_override) {
  avg_pool2d_check(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override);
}

}  // namespace rbln::checks
