// The inner loops of the device's attention kernels (decode attention in Attention.cpp, paged attention in
// PagedAttention.cpp): a head's dot products and weighted sums in float vector lanes.
#pragma once

#include <cstdint>
#include <type_traits>

namespace rbln::kernels {

// q . k over a head, in float vector lanes of the CPU's widest ISA.
float head_dot(const float* q, const float* k, int64_t n);
// acc += p * v over a head.
void head_axpy(float p, const float* v, float* acc, int64_t n);

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
