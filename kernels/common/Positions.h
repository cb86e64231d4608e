// Walking every position of a shape, for kernels that map positions of one
// tensor to offsets in another (indexing, flips).
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace rbln::kernels {

// Sizes and element strides, with a 0-dim tensor seen as [1].
struct Geometry {
  std::vector<int64_t> sizes, strides;
  explicit Geometry(const at::Tensor& t)
      : sizes(t.dim() ? t.sizes().vec() : std::vector<int64_t>{1}),
        strides(t.dim() ? t.strides().vec() : std::vector<int64_t>{1}) {}
  int64_t numel() const {
    int64_t n = 1;
    for (auto s : sizes) n *= s;
    return n;
  }
};

// Calls f(position) for every position over `sizes`, row-major.
template <class F>
void for_each_position(const std::vector<int64_t>& sizes, F&& f) {
  int64_t total = 1;
  for (auto s : sizes) total *= s;
  if (total == 0) return;
  std::vector<int64_t> m(sizes.size(), 0);
  for (int64_t n = 0; n < total; ++n) {
    f(m);
    for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
      if (++m[d] < sizes[d]) break;
      m[d] = 0;
    }
  }
}

}  // namespace rbln::kernels
