#include "kernels/nn/AttentionMath.h"

namespace rbln::kernels {

__attribute__((target_clones("avx512f", "avx2", "default"))) float head_dot(const float* q, const float* k, int64_t n) {
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int64_t d = 0; d < n; ++d) sum += q[d] * k[d];
  return sum;
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void head_axpy(float p, const float* v, float* acc,
                                                                      int64_t n) {
#pragma omp simd
  for (int64_t d = 0; d < n; ++d) acc[d] += p * v[d];
}

}  // namespace rbln::kernels
