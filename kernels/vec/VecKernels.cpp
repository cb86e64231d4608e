// Compiled once per CPU capability (see CMakeLists.txt: -DCPU_CAPABILITY=...
// and that ISA's flags). Keep this file free of anything ISA-independent that
// could be merged across copies: every symbol lives in the capability's namespace.
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "kernels/vec/VecKernels.h"

namespace rbln::kernels::vec::CPU_CAPABILITY {
namespace {

using Vec = at::vec::Vectorized<float>;
constexpr int64_t kW = Vec::size();

// ---- elementwise ------------------------------------------------------------

template <class F>
void map(const float* x, float* y, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 2 * kW <= n; i += 2 * kW) {  // two vectors per step, as CPU's vectorized loop
    const Vec a = f(Vec::loadu(x + i)), b = f(Vec::loadu(x + i + kW));
    a.store(y + i);
    b.store(y + i + kW);
  }
  for (; i + kW <= n; i += kW) f(Vec::loadu(x + i)).store(y + i);
  if (i < n) f(Vec::loadu(x + i, n - i)).store(y + i, n - i);
}

void unary_f32(Unary op, const float* x, float* y, int64_t n) {
  const Vec zero(0.f), one(1.f);
  switch (op) {
    case Unary::kNeg: return map(x, y, n, [](Vec v) { return v.neg(); });
    case Unary::kAbs: return map(x, y, n, [](Vec v) { return v.abs(); });
    case Unary::kRelu: return map(x, y, n, [zero](Vec v) { return at::vec::clamp_min(v, zero); });  // NaN stays
    case Unary::kSigmoid: return map(x, y, n, [one](Vec v) { return (one + v.neg().exp()).reciprocal(); });
    case Unary::kSilu: return map(x, y, n, [one](Vec v) { return v / (one + v.neg().exp()); });
    case Unary::kGelu:  // the erf form, ATen's vector formula
      return map(x, y, n, [one](Vec v) { return v * Vec(0.5f) * (one + (v * Vec(0.7071067811865476f)).erf()); });
    case Unary::kExp: return map(x, y, n, [](Vec v) { return v.exp(); });
    case Unary::kTanh: return map(x, y, n, [](Vec v) { return v.tanh(); });
    case Unary::kSin: return map(x, y, n, [](Vec v) { return v.sin(); });
    case Unary::kCos: return map(x, y, n, [](Vec v) { return v.cos(); });
    case Unary::kTan: return map(x, y, n, [](Vec v) { return v.tan(); });
    case Unary::kAsin: return map(x, y, n, [](Vec v) { return v.asin(); });
    case Unary::kAcos: return map(x, y, n, [](Vec v) { return v.acos(); });
    case Unary::kAtan: return map(x, y, n, [](Vec v) { return v.atan(); });
    case Unary::kSinh: return map(x, y, n, [](Vec v) { return v.sinh(); });
    case Unary::kCosh: return map(x, y, n, [](Vec v) { return v.cosh(); });
    case Unary::kLog: return map(x, y, n, [](Vec v) { return v.log(); });
    case Unary::kLog2: return map(x, y, n, [](Vec v) { return v.log2(); });
    case Unary::kLog10: return map(x, y, n, [](Vec v) { return v.log10(); });
    case Unary::kLog1p: return map(x, y, n, [](Vec v) { return v.log1p(); });
    case Unary::kExp2: return map(x, y, n, [](Vec v) { return v.exp2(); });
    case Unary::kExpm1: return map(x, y, n, [](Vec v) { return v.expm1(); });
    case Unary::kErf: return map(x, y, n, [](Vec v) { return v.erf(); });
    case Unary::kSqrt: return map(x, y, n, [](Vec v) { return v.sqrt(); });
    case Unary::kRsqrt: return map(x, y, n, [](Vec v) { return v.rsqrt(); });
    case Unary::kReciprocal: return map(x, y, n, [](Vec v) { return v.reciprocal(); });
  }
}

void convert_f32(const void* x, void* y, int64_t n, Conversion kind) {
  switch (kind) {  // at::vec::convert: round to nearest even, as c10's scalar conversions
    case Conversion::kToBFloat16:
      return at::vec::convert(static_cast<const float*>(x), static_cast<c10::BFloat16*>(y), n);
    case Conversion::kFromBFloat16:
      return at::vec::convert(static_cast<const c10::BFloat16*>(x), static_cast<float*>(y), n);
    case Conversion::kToHalf: return at::vec::convert(static_cast<const float*>(x), static_cast<c10::Half*>(y), n);
    case Conversion::kFromHalf: return at::vec::convert(static_cast<const c10::Half*>(x), static_cast<float*>(y), n);
  }
}

// y = cond ? a : b; bit 0 (bit 1) of kScalar: a (b) is one value. Plain
// loops that the ISA's flags vectorize (a blend under a mask of the bytes).
template <int kScalar>
void select(const bool* cond, const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = cond[i] ? a[kScalar & 1 ? 0 : i] : b[kScalar & 2 ? 0 : i];
}
void select_f32(const bool* cond, const float* a, const float* b, float* y, int64_t n, int scalar) {
  if (scalar == 1) return select<1>(cond, a, b, y, n);
  if (scalar == 2) return select<2>(cond, a, b, y, n);
  if (scalar == 3) return select<3>(cond, a, b, y, n);
  select<0>(cond, a, b, y, n);
}

// a and b are arrays, or (kScalar bits) one value each.
template <int kScalar, class F>
void map2(const float* a, const float* b, float* y, int64_t n, F f) {
  const Vec sa(a[0]), sb(b[0]);
  int64_t i = 0;
  for (; i + kW <= n; i += kW)
    f(kScalar & 1 ? sa : Vec::loadu(a + i), kScalar & 2 ? sb : Vec::loadu(b + i)).store(y + i);
  if (i < n) {
    f(kScalar & 1 ? sa : Vec::loadu(a + i, n - i), kScalar & 2 ? sb : Vec::loadu(b + i, n - i)).store(y + i, n - i);
  }
}
template <class F>
void map2(const float* a, const float* b, float* y, int64_t n, int scalar, F f) {
  if (scalar == 1) return map2<1>(a, b, y, n, f);
  if (scalar == 2) return map2<2>(a, b, y, n, f);
  if (scalar == 3) return map2<3>(a, b, y, n, f);
  map2<0>(a, b, y, n, f);
}

void binary_f32(Binary op, const float* a, const float* b, float* y, int64_t n, float alpha, int scalar) {
  const Vec va(alpha);
  switch (op) {
    case Binary::kAdd:
      if (alpha == 1.f) return map2(a, b, y, n, scalar, [](Vec p, Vec q) { return p + q; });
      return map2(a, b, y, n, scalar, [va](Vec p, Vec q) { return at::vec::fmadd(q, va, p); });
    case Binary::kSub:
      if (alpha == 1.f) return map2(a, b, y, n, scalar, [](Vec p, Vec q) { return p - q; });
      return map2(a, b, y, n, scalar, [va](Vec p, Vec q) { return at::vec::fmadd(q, va.neg(), p); });
    case Binary::kMul: return map2(a, b, y, n, scalar, [](Vec p, Vec q) { return p * q; });
    case Binary::kDiv: return map2(a, b, y, n, scalar, [](Vec p, Vec q) { return p / q; });
    case Binary::kMaximum: return map2(a, b, y, n, scalar, [](Vec p, Vec q) { return at::vec::maximum(p, q); });
    case Binary::kMinimum: return map2(a, b, y, n, scalar, [](Vec p, Vec q) { return at::vec::minimum(p, q); });
    case Binary::kPow:
      if (scalar == 2) {  // CPU's pow_tensor_scalar special cases
        const float e = b[0];
        if (e == 2.f) return map(a, y, n, [](Vec v) { return v * v; });
        if (e == 3.f) return map(a, y, n, [](Vec v) { return v * v * v; });
        if (e == -2.f) return map(a, y, n, [](Vec v) { return (v * v).reciprocal(); });
        if (e == 0.5f) return map(a, y, n, [](Vec v) { return v.sqrt(); });
        if (e == -0.5f) return map(a, y, n, [](Vec v) { return v.rsqrt(); });
        if (e == -1.f) return map(a, y, n, [](Vec v) { return v.reciprocal(); });
      }
      return map2(a, b, y, n, scalar, [](Vec p, Vec q) { return p.pow(q); });
  }
}

// Four independent vector accumulators (latency hiding), partial tail by
// masked load (zero-filled, which every term maps to 0). Term: x, |x| or x*x.
enum Term { kValue, kAbs, kSquare };
template <Term term>
Vec of(Vec x) {
  if constexpr (term == kAbs) return x.abs();
  if constexpr (term == kSquare) return x * x;
  return x;
}
template <Term term>
float block_sum(const float* x, int64_t n) {
  Vec a0(0.f), a1(0.f), a2(0.f), a3(0.f);
  int64_t i = 0;
  for (; i + 4 * kW <= n; i += 4 * kW) {
    a0 += of<term>(Vec::loadu(x + i));
    a1 += of<term>(Vec::loadu(x + i + kW));
    a2 += of<term>(Vec::loadu(x + i + 2 * kW));
    a3 += of<term>(Vec::loadu(x + i + 3 * kW));
  }
  for (; i + kW <= n; i += kW) a0 += of<term>(Vec::loadu(x + i));
  if (i < n) a1 += of<term>(Vec::loadu(x + i, n - i));
  Vec a = (a0 + a1) + (a2 + a3);
  return at::vec::vec_reduce_all<float>([](Vec p, Vec q) { return p + q; }, a);
}

template <Term term>
double block_sums(const float* x, int64_t n) {
  constexpr int64_t kBlock = 4096;  // float error stays within a block; blocks add in double
  double total = 0;
  for (int64_t i = 0; i < n; i += kBlock) total += block_sum<term>(x + i, std::min(kBlock, n - i));
  return total;
}

double sum_f32(const float* x, int64_t n) { return block_sums<kValue>(x, n); }

double sum_pow_f32(const float* x, int64_t n, int p) {
  return p == 1 ? block_sums<kAbs>(x, n) : block_sums<kSquare>(x, n);
}

// Column folds: out[c] = fold over r < rows of x[r * stride + c], c < cols.
//
// Sums follow CPU eager's outer sum (SumKernel.cpp, whose float vectors are 8
// wide on every x86 capability) so that they equal it bit for bit: columns in
// its groups of 4 vectors run multi_row_sum's cascade (float partials of 2^p
// rows flushed up four levels, p = max(4, ceil(log2(rows)) / 4)); the others
// run row_sum (rows split four ways, r % 4, each cascaded, added in order).
// The caller says how many leading columns are in the cascade groups.
template <class A, int64_t N, class Load>
std::array<A, N> cascade(int64_t rows, Load load) {
  constexpr int64_t kLevels = 4;
  const int64_t ceil_log2 = rows <= 2 ? 1 : 64 - __builtin_clzll(static_cast<uint64_t>(rows) - 1);
  const int64_t power = std::max<int64_t>(4, ceil_log2 / kLevels), step = int64_t(1) << power;
  A acc[kLevels][N];
  for (auto& level : acc) std::fill_n(level, N, A(0.f));
  int64_t i = 0;
  while (i + step <= rows) {
    for (int64_t j = 0; j < step; ++j, ++i)
      for (int64_t k = 0; k < N; ++k) acc[0][k] = acc[0][k] + load(i, k);
    for (int64_t level = 1; level < kLevels; ++level) {
      for (int64_t k = 0; k < N; ++k) {
        acc[level][k] = acc[level][k] + acc[level - 1][k];
        acc[level - 1][k] = A(0.f);
      }
      if ((i & ((step - 1) << (level * power))) != 0) break;
    }
  }
  for (; i < rows; ++i)
    for (int64_t k = 0; k < N; ++k) acc[0][k] = acc[0][k] + load(i, k);
  std::array<A, N> out;
  for (int64_t k = 0; k < N; ++k) {
    out[k] = acc[0][k];
    for (int64_t level = 1; level < kLevels; ++level) out[k] = out[k] + acc[level][k];
  }
  return out;
}
// row_sum: rows as [rows / 4, 4], the four cascaded side by side, leftover rows into the first.
template <class A, class Load>
A ilp_sum(int64_t rows, Load load) {
  auto part = cascade<A, 4>(rows / 4, [&](int64_t r, int64_t k) { return load(4 * r + k); });
  for (int64_t r = rows / 4 * 4; r < rows; ++r) part[0] = part[0] + load(r);
  return ((part[0] + part[1]) + part[2]) + part[3];
}

// CPU's inner sum of a contiguous row (vectorized_inner_sum, whose float
// vectors are 8 wide): row_sum over the 8-float vectors (four accumulators
// p0..p3 taking vectors 4r..4r+3, cascaded; leftover vectors into p0; then
// ((p0 + p1) + p2) + p3), the leftover elements summed, then the 8 lanes
// added to them in order; below 8 elements row_sum over the elements. With
// 16-wide vectors one vector holds [p0 | p1] or [p2 | p3].
static_assert(kW == 8 || kW == 16, "CPU's sum order is written for 8 or 16 float lanes");
float row_sum_f32(const float* x, int64_t n) {
  if (n < 8) return ilp_sum<float>(n, [&](int64_t r) { return x[r]; });
  const int64_t vecs = n / 8, groups = vecs / 4;
  float p[4][8];
  if constexpr (kW == 16) {
    auto acc = cascade<Vec, 2>(groups, [&](int64_t r, int64_t k) { return Vec::loadu(x + 32 * r + 16 * k); });
    acc[0].store(p[0]);
    acc[1].store(p[2]);
  } else {
    auto acc = cascade<Vec, 4>(groups, [&](int64_t r, int64_t k) { return Vec::loadu(x + 32 * r + 8 * k); });
    for (int k = 0; k < 4; ++k) acc[k].store(p[k]);
  }
  for (int64_t v = groups * 4; v < vecs; ++v)
    for (int j = 0; j < 8; ++j) p[0][j] += x[8 * v + j];
  float acc = 0.f;
  for (int64_t i = vecs * 8; i < n; ++i) acc += x[i];
  for (int j = 0; j < 8; ++j) acc += ((p[0][j] + p[1][j]) + p[2][j]) + p[3][j];
  return acc;
}

void sum_cols_f32(const float* x, int64_t rows, int64_t cols, int64_t stride, int64_t cascade_cols, float* out) {
  int64_t c = 0;
  for (; c + 4 * kW <= cascade_cols; c += 4 * kW) {
    auto sums = cascade<Vec, 4>(rows, [&](int64_t r, int64_t k) { return Vec::loadu(x + r * stride + c + k * kW); });
    for (int64_t k = 0; k < 4; ++k) sums[k].store(out + c + k * kW);
  }
  for (; c + kW <= cols && (c >= cascade_cols || c + kW <= cascade_cols); c += kW) {
    (c < cascade_cols ? cascade<Vec, 1>(rows, [&](int64_t r, int64_t) { return Vec::loadu(x + r * stride + c); })[0]
                      : ilp_sum<Vec>(rows, [&](int64_t r) { return Vec::loadu(x + r * stride + c); }))
        .store(out + c);
  }
  for (; c < cols; ++c) {
    out[c] = c < cascade_cols ? cascade<float, 1>(rows, [&](int64_t r, int64_t) { return x[r * stride + c]; })[0]
                              : ilp_sum<float>(rows, [&](int64_t r) { return x[r * stride + c]; });
  }
}

// max or min, NaN-propagating: eight vectors of columns in registers, row after row.
template <bool max>
void extremum_cols(const float* x, int64_t rows, int64_t cols, int64_t stride, float* out) {
  constexpr int64_t kVecs = 8;
  auto pick = [](Vec p, Vec q) { return max ? at::vec::maximum(p, q) : at::vec::minimum(p, q); };
  for (int64_t c = 0; c < cols; c += kVecs * kW) {
    const int64_t w = std::min(kVecs * kW, cols - c), nv = (w + kW - 1) / kW;
    Vec acc[kVecs];
    const float inf = std::numeric_limits<float>::infinity();
    std::fill_n(acc, kVecs, Vec(max ? -inf : inf));
    for (int64_t r = 0; r < rows; ++r) {
      const float* p = x + r * stride + c;
      if (w == kVecs * kW) {
        for (int64_t v = 0; v < kVecs; ++v) acc[v] = pick(acc[v], Vec::loadu(p + v * kW));
      } else {
        for (int64_t v = 0; v < nv; ++v) acc[v] = pick(acc[v], Vec::loadu(p + v * kW, std::min(kW, w - v * kW)));
      }
    }
    for (int64_t v = 0; v < nv; ++v) acc[v].store(out + c + v * kW, std::min(kW, w - v * kW));
  }
}

void extremum_cols_f32(const float* x, int64_t rows, int64_t cols, int64_t stride, bool max, float* out) {
  max ? extremum_cols<true>(x, rows, cols, stride, out) : extremum_cols<false>(x, rows, cols, stride, out);
}

// max (or min) of x[0..n), n > 0; a NaN anywhere gives NaN. Four
// accumulators: the NaN-propagating maximum is a chain of several instructions.
template <bool max>
float extremum(const float* x, int64_t n) {
  auto pick = [](Vec p, Vec q) { return max ? at::vec::maximum(p, q) : at::vec::minimum(p, q); };
  const Vec init(max ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity());
  Vec m0 = init, m1 = init, m2 = init, m3 = init;
  int64_t i = 0;
  for (; i + 4 * kW <= n; i += 4 * kW) {
    m0 = pick(m0, Vec::loadu(x + i));
    m1 = pick(m1, Vec::loadu(x + i + kW));
    m2 = pick(m2, Vec::loadu(x + i + 2 * kW));
    m3 = pick(m3, Vec::loadu(x + i + 3 * kW));
  }
  for (; i + kW <= n; i += kW) m0 = pick(m0, Vec::loadu(x + i));
  float r = at::vec::vec_reduce_all<float>(pick, pick(pick(m0, m1), pick(m2, m3)));
  for (; i < n; ++i) r = (std::isnan(x[i]) || (max ? x[i] > r : x[i] < r)) ? x[i] : r;
  return r;
}

float extremum_f32(const float* x, int64_t n, bool max) { return max ? extremum<true>(x, n) : extremum<false>(x, n); }

void softmax_rows_f32(const float* x, float* y, int64_t rows, int64_t size, bool log) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * size;
    float* yr = y + r * size;
    const float mx = extremum<true>(xr, size);
    const Vec vmx(mx);
    Vec acc(0.f);
    int64_t i = 0;
    if (log) {
      for (; i + kW <= size; i += kW) acc += (Vec::loadu(xr + i) - vmx).exp();
      if (i < size) acc += Vec::set(Vec(0.f), (Vec::loadu(xr + i, size - i) - vmx).exp(), size - i);
      float sum = at::vec::vec_reduce_all<float>([](Vec p, Vec q) { return p + q; }, acc);
      const Vec log_sum(std::log(sum));  // CPU's order: (x - max) - log(sum)
      for (i = 0; i + kW <= size; i += kW) ((Vec::loadu(xr + i) - vmx) - log_sum).store(yr + i);
      if (i < size) ((Vec::loadu(xr + i, size - i) - vmx) - log_sum).store(yr + i, size - i);
      continue;
    }
    for (; i + kW <= size; i += kW) {
      Vec e = (Vec::loadu(xr + i) - vmx).exp();
      e.store(yr + i);
      acc += e;
    }
    if (i < size) {
      Vec e = (Vec::loadu(xr + i, size - i) - vmx).exp();
      e.store(yr + i, size - i);
      acc += Vec::set(Vec(0.f), e, size - i);
    }
    float sum = at::vec::vec_reduce_all<float>([](Vec p, Vec q) { return p + q; }, acc);
    const Vec inv(1.f / sum);
    for (i = 0; i + kW <= size; i += kW) (Vec::loadu(yr + i) * inv).store(yr + i);
    if (i < size) (Vec::loadu(yr + i, size - i) * inv).store(yr + i, size - i);
  }
}

// softmax (or log_softmax) down `cols` columns of `size` rows, `stride` apart:
// a vector of columns at a time, in CPU's order (running float sum, y = e / sum).
void softmax_cols_f32(const float* x, float* y, int64_t size, int64_t stride, int64_t cols, bool log) {
  for (int64_t c = 0; c < cols; c += kW) {
    const int64_t w = std::min(kW, cols - c);
    auto load = [w](const float* p) { return w == kW ? Vec::loadu(p) : Vec::loadu(p, w); };
    auto store = [w](Vec v, float* p) { w == kW ? v.store(p) : v.store(p, w); };
    const float* xc = x + c;
    float* yc = y + c;
    Vec mx(-std::numeric_limits<float>::infinity()), sum(0.f);
    for (int64_t j = 0; j < size; ++j) mx = at::vec::maximum(mx, load(xc + j * stride));
    for (int64_t j = 0; j < size; ++j) {
      const Vec e = (load(xc + j * stride) - mx).exp();
      if (!log) store(e, yc + j * stride);
      sum += e;
    }
    if (log) {
      const Vec log_sum = sum.log();
      for (int64_t j = 0; j < size; ++j) store((load(xc + j * stride) - mx) - log_sum, yc + j * stride);
    } else {
      for (int64_t j = 0; j < size; ++j) store(load(yc + j * stride) / sum, yc + j * stride);
    }
  }
}

void layer_norm_rows_f32(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd,
                         int64_t rows, int64_t n, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    const float mu = static_cast<float>(moments_mean(sum_f32(xr, n), n));
    const Vec vmu(mu);
    Vec sq0(0.f), sq1(0.f);
    int64_t i = 0;
    for (; i + 2 * kW <= n; i += 2 * kW) {
      Vec d0 = Vec::loadu(xr + i) - vmu, d1 = Vec::loadu(xr + i + kW) - vmu;
      sq0 = at::vec::fmadd(d0, d0, sq0);
      sq1 = at::vec::fmadd(d1, d1, sq1);
    }
    float sq = at::vec::vec_reduce_all<float>([](Vec p, Vec q) { return p + q; }, sq0 + sq1);
    for (; i < n; ++i) sq += (xr[i] - mu) * (xr[i] - mu);
    const float inv = 1.f / std::sqrt(sq / n + eps);
    const Vec vinv(inv);
    i = 0;
    for (; i + kW <= n; i += kW) {
      Vec v = (Vec::loadu(xr + i) - vmu) * vinv;
      if (w) v = v * Vec::loadu(w + i);
      if (b) v = v + Vec::loadu(b + i);
      v.store(yr + i);
    }
    for (; i < n; ++i) {
      float v = (xr[i] - mu) * inv;
      if (w) v *= w[i];
      if (b) v += b[i];
      yr[i] = v;
    }
    mean[r] = mu;
    rstd[r] = inv;
  }
}

void fmod_bf16(const c10::BFloat16* a, const c10::BFloat16* b, c10::BFloat16* y, int64_t n, bool remainder) {
  using V = at::vec::Vectorized<c10::BFloat16>;
  constexpr int64_t w = V::size();
  const V zero(0);
  int64_t i = 0;
  for (; i + w <= n; i += w) {  // CPU's loop: whole vectors, then the scalar tail
    const V d = V::loadu(b + i);
    V mod = V::loadu(a + i).fmod(d);
    if (remainder) mod = V::blendv(mod, mod + d, (mod != zero) & ((d < zero) ^ (mod < zero)));
    mod.store(y + i);
  }
  for (; i < n; ++i) {
    const float d = b[i];
    float mod = std::fmod(static_cast<float>(a[i]), d);
    if (remainder && mod != 0.f && (d < 0.f) != (mod < 0.f)) mod += d;
    y[i] = mod;
  }
}

// ---- pooling ----------------------------------------------------------------

void max_tap_f32(const float* src, int64_t stride, int64_t n, float* best, int32_t* tap, int32_t id) {
  using IVec = at::vec::Vectorized<int32_t>;
  static_assert(IVec::size() == kW);
  const IVec ids(id), none(0);
  int64_t x = 0;
  auto step = [&](Vec v) {
    const Vec b = Vec::loadu(best + x);
    const IVec t = IVec::loadu(tap + x);
    const Vec take = (v > b) | v.isnan() | at::vec::cast<float>(t < none);
    Vec::blendv(b, v, take).store(best + x);
    IVec::blendv(t, ids, at::vec::cast<int32_t>(take)).store(tap + x);
  };
  if (stride == 1) {
    for (; x + kW <= n; x += kW) step(Vec::loadu(src + x));
  } else if (stride == 2) {  // the last element read, 2 (x + kW) - 1, stays below the row's last one, 2 (n - 1)
    for (; x + kW < n; x += kW) step(std::get<0>(at::vec::deinterleave2(Vec::loadu(src + 2 * x),
                                                                     Vec::loadu(src + 2 * x + kW))));
  }
  for (; x < n; ++x) {
    const float v = src[x * stride];
    if (tap[x] < 0 || v > best[x] || std::isnan(v)) {
      best[x] = v;
      tap[x] = id;
    }
  }
}

#define RBLN_STR2(x) #x
#define RBLN_STR(x) RBLN_STR2(x)

}  // namespace

const Table* make_table() {
#ifdef CPU_CAPABILITY_DEFAULT
  constexpr bool contracts_fma = false;
#else
  constexpr bool contracts_fma = true;
#endif
  static const Table t{RBLN_STR(CPU_CAPABILITY), contracts_fma,     unary_f32,        binary_f32,
                       select_f32,          convert_f32,       sum_f32,          row_sum_f32,
                       sum_pow_f32,         extremum_f32,      sum_cols_f32,     extremum_cols_f32,
                       softmax_rows_f32,    softmax_cols_f32,  layer_norm_rows_f32, fmod_bf16,
                       max_tap_f32};
  return &t;
}

}  // namespace rbln::kernels::vec::CPU_CAPABILITY
