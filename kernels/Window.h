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
  // Offset in the input plane of output position o and kernel tap t (per dim), or -1 in the padding.
  int64_t tap(const int64_t (&o)[3], const int64_t (&t)[3]) const {
    int64_t offset = 0;
    for (int d = 0; d < 3; ++d) {
      int64_t i = o[d] * stride[d] - pad[d] + t[d] * dil[d];
      if (i < 0 || i >= in[d]) return -1;
      offset = offset * in[d] + i;
    }
    return offset;
  }
};

// Writes `values` (one per spatial dim, or one for all `dims`) into the last `dims` slots of `slots`.
inline void set_trailing(int64_t (&slots)[3], c10::IntArrayRef values, int64_t dims) {
  for (int64_t d = 0; d < dims; ++d) slots[3 - dims + d] = values.size() == 1 ? values[0] : values[d];
}

// Calls f(out_index, tap_index, in_offset) for each output position and kernel
// tap, output positions in row-major order; in_offset is -1 in the padding.
template <class F>
void for_each_tap(const Window& w, F&& f) {
  int64_t o[3], t[3], out_index = 0;
  for (o[0] = 0; o[0] < w.out[0]; ++o[0])
    for (o[1] = 0; o[1] < w.out[1]; ++o[1])
      for (o[2] = 0; o[2] < w.out[2]; ++o[2], ++out_index) {
        int64_t tap_index = 0;
        for (t[0] = 0; t[0] < w.k[0]; ++t[0])
          for (t[1] = 0; t[1] < w.k[1]; ++t[1])
            for (t[2] = 0; t[2] < w.k[2]; ++t[2], ++tap_index) f(out_index, tap_index, w.tap(o, t));
      }
}

}  // namespace rbln::kernels
