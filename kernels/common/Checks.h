// Argument checks a generated wrapper runs before its hand-written kernel:
// `<kernel>_check(args...)` here is called with the kernel's arguments (the
// generator finds it by name), as CPU validates in front of its kernels.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/native/Pool.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/Exception.h>
#include <c10/util/TypeCast.h>

#include <array>
#include <optional>

namespace rbln::checks {

// The grid samplers' enum arguments, which CPU's kernels (and so the op library's) read unchecked: an
// unknown mode would sample with an undefined kernel.
inline void grid_sampler_modes_check(int64_t interpolation_mode, int64_t padding_mode, bool bicubic, const char* op) {
  TORCH_CHECK(interpolation_mode >= 0 && interpolation_mode <= (bicubic ? 2 : 1), op,
              "(): expected interpolation_mode to be 0 (bilinear), 1 (nearest)", bicubic ? " or 2 (bicubic)" : "",
              ", but got ", interpolation_mode);
  TORCH_CHECK(padding_mode >= 0 && padding_mode <= 2, op,
              "(): expected padding_mode to be 0 (zeros), 1 (border) or 2 (reflection), but got ", padding_mode);
}
inline void grid_sampler_2d_check(const at::Tensor&, const at::Tensor&, int64_t interpolation_mode,
                                  int64_t padding_mode, bool) {
  grid_sampler_modes_check(interpolation_mode, padding_mode, /*bicubic=*/true, "grid_sampler_2d");
}
inline void grid_sampler_3d_check(const at::Tensor&, const at::Tensor&, int64_t interpolation_mode,
                                  int64_t padding_mode, bool) {
  grid_sampler_modes_check(interpolation_mode, padding_mode, /*bicubic=*/false, "grid_sampler_3d");
}
inline void grid_sampler_2d_backward_check(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                           int64_t interpolation_mode, int64_t padding_mode, bool,
                                           std::array<bool, 2>) {
  grid_sampler_modes_check(interpolation_mode, padding_mode, /*bicubic=*/true, "grid_sampler_2d_backward");
}
inline void grid_sampler_3d_backward_check(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                           int64_t interpolation_mode, int64_t padding_mode, bool,
                                           std::array<bool, 2>) {
  grid_sampler_modes_check(interpolation_mode, padding_mode, /*bicubic=*/false, "grid_sampler_3d_backward");
}

// A pooling window argument as CPU reads it: one int for every spatial dim or one per dim (a stride may
// also be omitted: the kernel size), each taken as an int (safe_downcast). `must` is CPU's wording.
inline std::array<int64_t, 3> window_arg(at::IntArrayRef v, int64_t dims, const char* op, const char* what,
                                         const char* must, const std::array<int64_t, 3>* if_omitted = nullptr) {
  TORCH_CHECK((if_omitted && v.empty()) || v.size() == 1 || static_cast<int64_t>(v.size()) == dims, op, ": ", what,
              " must ", must, if_omitted ? "omitted, " : "", "a single int, or a tuple of ",
              dims == 2 ? "two" : "three", " ints");
  if (v.empty()) return *if_omitted;
  std::array<int64_t, 3> out{};
  for (int64_t d = 0; d < dims; ++d)
    out[d] = d < static_cast<int64_t>(v.size()) ? c10::checked_convert<int, int64_t>(v[d], "int") : out[0];
  return out;
}

// CPU's max and average pooling checks, in its order (DilatedMaxPool2d/3d, AveragePool2d/3d): the window
// arguments, the input's rank (max pooling: its memory format too), a divisor override, each spatial
// dim's output size (pooling_output_shape: stride, padding), then pool2d/pool3d_shape_check (window
// values, empty dims, padding against the kernel, output size; 3-d average: input against the kernel).
inline void pool_window(const at::Tensor& self, int64_t dims, bool max, at::IntArrayRef kernel_size,
                        at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode,
                        std::optional<int64_t> divisor_override) {
  const char* op = max ? (dims == 2 ? "max_pool2d" : "max_pool3d") : (dims == 2 ? "avg_pool2d" : "avg_pool3d");
  const char* must = !max && dims == 3 ? "be " : "either be ";
  const auto k = window_arg(kernel_size, dims, op, "kernel_size", must);
  const auto s = window_arg(stride, dims, op, "stride", must, &k);
  const auto p = window_arg(padding, dims, op, "padding", must);
  const auto dil = max ? window_arg(dilation, dims, op, "dilation", "be either ") : std::array<int64_t, 3>{1, 1, 1};
  if (max) {
    const auto format = self.suggest_memory_format();
    const auto channels_last = dims == 2 ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::ChannelsLast3d;
    TORCH_CHECK(format == channels_last || format == at::MemoryFormat::Contiguous,
                "Unsupported memory format. Supports only ", dims == 2 ? "ChannelsLast" : "ChannelsLast3d",
                ", Contiguous");
  }
  if (max || dims == 3) {
    TORCH_CHECK(self.dim() == dims + 1 || self.dim() == dims + 2, "non-empty ", dims + 1, "D or ", dims + 2,
                "D (batch mode) tensor expected for input");
  }
  if (!max) TORCH_CHECK(!divisor_override || *divisor_override != 0, "divisor must be not zero");
  // 2-d average pooling reads the sizes without a rank check: IndexError below 3 dims.
  const int64_t planes = self.size(-dims - 1);
  std::array<int64_t, 3> in{}, out{};
  for (int64_t d = 0; d < dims; ++d) {
    in[d] = self.size(d - dims);
    out[d] = at::native::pooling_output_shape<int64_t>(in[d], k[d], p[d], s[d], dil[d], ceil_mode);
  }
  if (dims == 2) {
    at::native::pool2d_shape_check(self, k[0], k[1], s[0], s[1], p[0], p[1], dil[0], dil[1], planes, in[0], in[1],
                                   out[0], out[1], self.suggest_memory_format());
    return;
  }
  auto i = [](int64_t v) { return static_cast<int>(v); };  // in range: window_arg converted them
  at::native::pool3d_shape_check(self, planes, i(k[0]), i(k[1]), i(k[2]), i(s[0]), i(s[1]), i(s[2]), i(p[0]),
                                 i(p[1]), i(p[2]), i(dil[0]), i(dil[1]), i(dil[2]), in[0], in[1], in[2], out[0],
                                 out[1], out[2], max ? "max_pool3d_with_indices_out_cpu_template()" : "avg_pool3d()",
                                 /*check_input_size=*/!max);
}

// CPU's adaptive pooling checks: the input's rank, then its non-empty dims from `first` on.
inline void adaptive_input(const at::Tensor& self, int64_t dims, int64_t first, const char* op, const char* got) {
  TORCH_CHECK(self.dim() == dims + 1 || self.dim() == dims + 2, op, "(): Expected ", dims + 1, "D or ", dims + 2,
              "D tensor, but got", got, self.sizes());
  for (int64_t d = first; d < self.dim(); ++d) {
    TORCH_CHECK(self.size(d) > 0, op, "(): Expected input to have non-zero size for non-batch dimensions, but input ",
                "has sizes ", self.sizes(), " with dimension ", d, " being empty");
  }
}

// Adaptive max pooling checks the input before output_size (a negative size fails creating the output).
template <int64_t D>
void adaptive_max_pool(const at::Tensor& self, at::IntArrayRef output_size, const char* op) {
  adaptive_input(self, D, 1, op, ": ");
  TORCH_CHECK(static_cast<int64_t>(output_size.size()) == D, op, "(): internal error: output_size.size() must be ", D);
}
// Adaptive average pooling checks output_size's length first.
template <int64_t D>
void adaptive_avg_pool(const at::Tensor& self, c10::SymIntArrayRef output_size, const char* op) {
  TORCH_CHECK(static_cast<int64_t>(output_size.size()) == D, op, ": output_size must be ", D);
  adaptive_input(self, D, D == 2 ? self.dim() - 2 : 1, op, " ");  // 2-d: CPU checks the spatial dims only
}

inline void max_pool2d_with_indices_check(const at::Tensor& self, at::IntArrayRef kernel_size, at::IntArrayRef stride,
                                          at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode) {
  pool_window(self, 2, true, kernel_size, stride, padding, dilation, ceil_mode, std::nullopt);
}
inline void max_pool3d_with_indices_check(const at::Tensor& self, at::IntArrayRef kernel_size, at::IntArrayRef stride,
                                          at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode) {
  pool_window(self, 3, true, kernel_size, stride, padding, dilation, ceil_mode, std::nullopt);
}
inline void avg_pool2d_check(const at::Tensor& self, at::IntArrayRef kernel_size, at::IntArrayRef stride,
                             at::IntArrayRef padding, bool ceil_mode, bool, std::optional<int64_t> divisor_override) {
  pool_window(self, 2, false, kernel_size, stride, padding, {}, ceil_mode, divisor_override);
}
inline void avg_pool3d_check(const at::Tensor& self, at::IntArrayRef kernel_size, at::IntArrayRef stride,
                             at::IntArrayRef padding, bool ceil_mode, bool, std::optional<int64_t> divisor_override) {
  pool_window(self, 3, false, kernel_size, stride, padding, {}, ceil_mode, divisor_override);
}
inline void _adaptive_avg_pool2d_check(const at::Tensor& self, c10::SymIntArrayRef output_size) {
  adaptive_avg_pool<2>(self, output_size, "adaptive_avg_pool2d");
}
inline void _adaptive_avg_pool3d_check(const at::Tensor& self, c10::SymIntArrayRef output_size) {
  adaptive_avg_pool<3>(self, output_size, "adaptive_avg_pool3d");
}
inline void adaptive_max_pool2d_check(const at::Tensor& self, at::IntArrayRef output_size) {
  adaptive_max_pool<2>(self, output_size, "adaptive_max_pool2d");
}
inline void adaptive_max_pool3d_check(const at::Tensor& self, at::IntArrayRef output_size) {
  adaptive_max_pool<3>(self, output_size, "adaptive_max_pool3d");
}

}  // namespace rbln::checks
