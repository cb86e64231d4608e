// A sliding window over 1 to 3 spatial dims, padded to 3 (leading dims of
// size 1), shared by the convolution and pooling kernels.
#pragma once

#include <c10/util/ArrayRef.h>

#include <cstdint>

namespace rbln::kernels {

struct Window {
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1};
  int64_t k[3] = {1, 1, 1}, stride[3] = {1, 1, 1}, pad[3] = {0, 0, 0}, dil[3] = {1, 1, 1};

  static int64_t numel(const int64_t (&v)[3]) { return v[0] * v[1] * v[2]; }
  int64_t in_numel() const { return numel(in); }
  int64_t out_numel() const { return numel(out); }
  int64_t k_numel() const { return numel(k); }
};

// Writes `values` (one per spatial dim, or one for all `dims`) into the last `dims` slots of `slots`.
inline void set_trailing(int64_t (&slots)[3], c10::IntArrayRef values, int64_t dims) {
  for (int64_t d = 0; d < dims; ++d) slots[3 - dims + d] = values.size() == 1 ? values[0] : values[d];
}

}  // namespace rbln::kernels
