// Argument checks a generated wrapper runs before its hand-written kernel:
// `<kernel>_check(args...)` here is called with the kernel's arguments (the
// generator finds it by name), as CPU validates in front of its kernels.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <limits>
#include <optional>

namespace rbln::checks {

// CUDA's segment_reduce kernel wants lengths and offsets on the data's device; they are keyword-only, so no
// generated device check covers them, and the CPU kernel the fallback runs does not check.
inline void segment_reduce_check(const at::Tensor& data, c10::string_view, const std::optional<at::Tensor>& lengths,
                                 const std::optional<at::Tensor>&, const std::optional<at::Tensor>& offsets, int64_t,
                                 bool, const std::optional<at::Scalar>&) {
  for (const auto* t : {&lengths, &offsets}) {
    TORCH_CHECK(!*t || !(*t)->defined() || (*t)->device() == data.device(), "segment_reduce: expected ",
                t == &lengths ? "lengths" : "offsets", " on the data's device ", data.device(), ", got ",
                (*t)->device());
  }
}

// CPU's pooling kernels take their window arguments as int (safe_downcast<int, int64_t>).
inline void window_fits_int(std::initializer_list<at::IntArrayRef> args) {
  for (const auto& values : args) {
    for (int64_t v : values) {
      TORCH_CHECK(v >= std::numeric_limits<int>::min() && v <= std::numeric_limits<int>::max(),
                  "value cannot be converted to type int without overflow");
    }
  }
}

// CPU's pool2d_shape_check: a 3-D input or a 4-D batch, where only the batch may be empty.
inline void pool2d_input(const at::Tensor& self) {
  const int64_t ndim = self.dim();
  bool valid = ndim == 3 || ndim == 4;
  for (int64_t d = ndim == 4 ? 1 : 0; valid && d < ndim; ++d) valid = self.size(d) != 0;
  TORCH_CHECK(valid, "Expected 3D or 4D (batch mode) tensor with optional 0 dim batch size for input, but got:",
              self.sizes());
}

// CPU's adaptive pooling check: dims from `first` on are non-empty.
inline void adaptive_input(const at::Tensor& self, int64_t first, const char* op) {
  for (int64_t d = std::max<int64_t>(first, 0); d < self.dim(); ++d) {
    TORCH_CHECK(self.size(d) > 0, op, "(): Expected input to have non-zero size for non-batch dimensions, but input ",
                "has sizes ", self.sizes(), " with dimension ", d, " being empty");
  }
}

inline void max_pool2d_with_indices_check(const at::Tensor& self, at::IntArrayRef kernel_size, at::IntArrayRef stride,
                                          at::IntArrayRef padding, at::IntArrayRef dilation, bool) {
  window_fits_int({kernel_size, stride, padding, dilation});
  pool2d_input(self);
}
inline void max_pool3d_with_indices_check(const at::Tensor&, at::IntArrayRef kernel_size, at::IntArrayRef stride,
                                          at::IntArrayRef padding, at::IntArrayRef dilation, bool) {
  window_fits_int({kernel_size, stride, padding, dilation});
}
inline void avg_pool2d_check(const at::Tensor& self, at::IntArrayRef kernel_size, at::IntArrayRef stride,
                             at::IntArrayRef padding, bool, bool, std::optional<int64_t>) {
  window_fits_int({kernel_size, stride, padding});
  pool2d_input(self);
}
inline void avg_pool3d_check(const at::Tensor&, at::IntArrayRef kernel_size, at::IntArrayRef stride,
                             at::IntArrayRef padding, bool, bool, std::optional<int64_t>) {
  window_fits_int({kernel_size, stride, padding});
}
inline void _adaptive_avg_pool2d_check(const at::Tensor& self, c10::SymIntArrayRef) {
  adaptive_input(self, self.dim() - 2, "adaptive_avg_pool2d");  // CPU checks the spatial dims only
}
inline void adaptive_max_pool2d_check(const at::Tensor& self, at::IntArrayRef) {
  adaptive_input(self, 1, "adaptive_max_pool2d");
}
inline void _adaptive_avg_pool3d_check(const at::Tensor& self, c10::SymIntArrayRef) {
  adaptive_input(self, 1, "adaptive_avg_pool3d");
}
inline void adaptive_max_pool3d_check(const at::Tensor& self, at::IntArrayRef) {
  adaptive_input(self, 1, "adaptive_max_pool3d");
}

}  // namespace rbln::checks
