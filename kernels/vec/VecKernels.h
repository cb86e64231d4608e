// Vectorized float32 loops for the kernels where scalar code cannot keep up
// with CPU eager (exp, softmax, layer_norm, large sums, max pooling). VecKernels.cpp is
// compiled once per CPU capability (DEFAULT, AVX2, AVX512) with that ISA's
// compiler flags, using ATen's header-only at::vec::Vectorized; table() picks
// the best one the running CPU supports, once, at first use (ATEN_CPU_CAPABILITY
// = default|avx2|avx512 lowers the choice, as it does for ATen's own kernels).
// Nothing here is built with -march=native.
#pragma once

#include <c10/util/BFloat16.h>

#include <cmath>
#include <cstdint>
#include <limits>

namespace rbln::kernels::vec {

// The mean of `count` values from their sum, as the norms' statistics take it: CPU's Welford moments make a row
// holding an Inf NaN (mean and variance), as CUDA's do; no values have mean 0.
template <class S>
S moments_mean(S sum, int64_t count) {
  if (!std::isfinite(sum)) return std::numeric_limits<S>::quiet_NaN();
  return count ? sum / static_cast<S>(count) : S(0);
}

// Elementwise float32 ops with a vector loop (ATen's Vectorized<float>
// formulas, as CPU eager's kernels use them).
enum class Unary {
  kNeg, kAbs, kRelu, kSigmoid, kSilu, kGelu, kExp, kTanh, kSin, kCos, kTan, kAsin, kAcos, kAtan, kSinh, kCosh,
  kLog, kLog2, kLog10, kLog1p, kExp2, kExpm1, kErf, kSqrt, kRsqrt, kReciprocal,
};
enum class Binary { kAdd, kSub, kMul, kDiv, kMaximum, kMinimum, kPow };
enum class Conversion { kToBFloat16, kFromBFloat16, kToHalf, kFromHalf };  // from and to float32

struct Table {
  const char* capability;
  // Whether CPU eager's kernels of this capability were compiled with FMA,
  // which the compiler contracts a * b + c into (scalar recurrences round so).
  bool contracts_fma;
  // y[i] = op(x[i]), i < n.
  void (*unary_f32)(Unary op, const float* x, float* y, int64_t n);
  // y[i] = op(a[i], b[i]), i < n; add and sub scale b by alpha (fused, as
  // CPU's fmadd), pow takes CPU's special exponents of a scalar b. Bit 0 of
  // `scalar` (bit 1) makes a (b) one value read at a[0] (b[0]).
  void (*binary_f32)(Binary op, const float* a, const float* b, float* y, int64_t n, float alpha, int scalar);
  // y[i] = cond[i] ? a[i] : b[i], i < n; bit 0 (bit 1) of `scalar` makes a (b) one value.
  void (*select_f32)(const bool* cond, const float* a, const float* b, float* y, int64_t n, int scalar);
  // y[i] = x[i] converted between float32 and bfloat16 or float16, i < n.
  void (*convert_f32)(const void* x, void* y, int64_t n, Conversion kind);
  // sum of x[0..n): float vector partials over blocks, blocks added in double.
  double (*sum_f32)(const float* x, int64_t n);
  // sum of x[0..n) in CPU eager's order (its serial inner sum): equal to CPU's bit for bit.
  float (*row_sum_f32)(const float* x, int64_t n);
  // sum of |x[i]| (p 1) or x[i]^2 (p 2), i < n, accumulated as sum_f32.
  double (*sum_pow_f32)(const float* x, int64_t n, int p);
  // max (or min) of x[0..n), n > 0, NaN if any element is NaN.
  float (*extremum_f32)(const float* x, int64_t n, bool max);
  // out[c] = sum over r < rows of x[r * stride + c], c < cols, in CPU's order
  // (its outer sum: columns before cascade_cols in its cascade groups).
  void (*sum_cols_f32)(const float* x, int64_t rows, int64_t cols, int64_t stride, int64_t cascade_cols,
                       float* out);
  // out[c] = max (or min, NaN-propagating) over r < rows of x[r * stride + c], c < cols.
  void (*extremum_cols_f32)(const float* x, int64_t rows, int64_t cols, int64_t stride, bool max, float* out);
  // softmax (or log_softmax) of each contiguous row of `size` elements.
  void (*softmax_rows_f32)(const float* x, float* y, int64_t rows, int64_t size, bool log);
  // softmax (or log_softmax) down each of `cols` columns of `size` rows `stride` apart.
  void (*softmax_cols_f32)(const float* x, float* y, int64_t size, int64_t stride, int64_t cols, bool log);
  // layer norm of each contiguous row of n elements; w and b may be null.
  void (*layer_norm_rows_f32)(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd,
                              int64_t rows, int64_t n, float eps);
  // y = fmod(a, b) (remainder: Python's sign rule) over n contiguous bfloat16s,
  // split as CPU's vectorized loop splits them: Sleef's fmod, whose a / b
  // overflows to NaN for divisors near 1e-38, on whole vectors, the exact
  // std::fmod on the tail.
  void (*fmod_bf16)(const c10::BFloat16* a, const c10::BFloat16* b, c10::BFloat16* y, int64_t n, bool remainder);
  // One tap of max pooling over a row of n outputs: v = src[x * stride]; where
  // tap[x] < 0, v > best[x] or v is NaN (CPU's rule), best[x] = v and tap[x] = id.
  void (*max_tap_f32)(const float* src, int64_t stride, int64_t n, float* best, int32_t* tap, int32_t id);
};

const Table& table();
// Whether table() chose AVX512: the hand-written AVX-512 kernels run where CPU eager's vectorized ones do
// (ATEN_CPU_CAPABILITY lowers both).
bool avx512();

// y[i] = op(x[i]), i < n, through the MKL VML routine CPU eager uses for op
// (bit-identical to CPU); false where CPU uses none (then use unary_f32).
bool vml_f32(Unary op, const float* x, float* y, int64_t n);

#define RBLN_VEC_DECLARE(cap) \
  namespace cap {             \
  const Table* make_table();  \
  }
RBLN_VEC_DECLARE(DEFAULT)
RBLN_VEC_DECLARE(AVX2)
RBLN_VEC_DECLARE(AVX512)
#undef RBLN_VEC_DECLARE

}  // namespace rbln::kernels::vec
