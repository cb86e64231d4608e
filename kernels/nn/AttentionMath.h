// The inner loops of the device's attention kernels (decode attention in Attention.cpp, paged attention in
// PagedAttention.cpp): a head's dot products and weighted sums in float vector lanes.
#pragma once

#include <cstdint>
#include <type_traits>

namespace rbln::kernels {

// scores[i] = q . rows[i * stride .. + n) for i < count, in float vector lanes of the CPU's widest ISA.
void head_dots(const float* q, const float* rows, int64_t stride, int64_t count, float* scores, int64_t n);
// acc += sum over i < count of p[i] * rows[i * stride .. + n).
void head_axpys(const float* p, const float* rows, int64_t stride, int64_t count, float* acc, int64_t n);

// A head's row in float: in place for float32, else converted into `buffer`.
template <class T>
const float* as_float(const T* row, int64_t n, float* buffer) {
  if constexpr (std::is_same_v<T, float>) {
    return row;
  } else {
    for (int64_t d = 0; d < n; ++d) buffer[d] = static_cast<float>(row[d]);
    return buffer;
  }
}

}  // namespace rbln::kernels
