#include "kernels/nn/AttentionMath.h"

namespace rbln::kernels {

// Four rows at a time: four independent sums keep the vector unit busy where one sum would wait on its own
// previous add.
__attribute__((target_clones("avx512f", "avx2", "default"))) void head_dots(const float* q, const float* rows,
                                                                      int64_t stride, int64_t count,
                                                                      float* scores, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= count; i += 4) {
    const float *r0 = rows + i * stride, *r1 = r0 + stride, *r2 = r1 + stride, *r3 = r2 + stride;
    float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
    for (int64_t d = 0; d < n; ++d) {
      s0 += q[d] * r0[d];
      s1 += q[d] * r1[d];
      s2 += q[d] * r2[d];
      s3 += q[d] * r3[d];
    }
    scores[i] = s0, scores[i + 1] = s1, scores[i + 2] = s2, scores[i + 3] = s3;
  }
  for (; i < count; ++i) {
    const float* r = rows + i * stride;
    float s = 0.f;
#pragma omp simd reduction(+ : s)
    for (int64_t d = 0; d < n; ++d) s += q[d] * r[d];
    scores[i] = s;
  }
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void head_axpys(const float* p, const float* rows,
                                                                       int64_t stride, int64_t count, float* acc,
                                                                       int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= count; i += 4) {
    const float *r0 = rows + i * stride, *r1 = r0 + stride, *r2 = r1 + stride, *r3 = r2 + stride;
    const float p0 = p[i], p1 = p[i + 1], p2 = p[i + 2], p3 = p[i + 3];
#pragma omp simd
    for (int64_t d = 0; d < n; ++d) acc[d] += p0 * r0[d] + p1 * r1[d] + p2 * r2[d] + p3 * r3[d];
  }
  for (; i < count; ++i) {
    const float* r = rows + i * stride;
#pragma omp simd
    for (int64_t d = 0; d < n; ++d) acc[d] += p[i] * r[d];
  }
}

}  // namespace rbln::kernels
