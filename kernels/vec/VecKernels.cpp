// Compiled once per CPU capability (see CMakeLists.txt: -DCPU_CAPABILITY=...
// and that ISA's flags). Keep this file free of anything ISA-independent that
// could be merged across copies: every symbol lives in the capability's namespace.
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/vec/VecKernels.h"

namespace rbln::kernels::vec::CPU_CAPABILITY {
namespace {

using Vec = at::vec::Vectorized<float>;
constexpr int64_t kW = Vec::size();

void exp_f32(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + kW <= n; i += kW) Vec::loadu(x + i).exp().store(y + i);
  if (i < n) Vec::loadu(x + i, n - i).exp().store(y + i, n - i);
}

Vec gelu(Vec x) { return x * Vec(0.5f) * (Vec(1.f) + (x * Vec(0.7071067811865476f)).erf()); }

void gelu_f32(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + kW <= n; i += kW) gelu(Vec::loadu(x + i)).store(y + i);
  if (i < n) gelu(Vec::loadu(x + i, n - i)).store(y + i, n - i);
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
// Eight vectors of columns are folded at a time, row after row, in registers;
// sums run in float over blocks of kBlock rows (each lane adds one column, so
// blocks are short, as CPU's cascade keeps its float sums short) and add the
// blocks in double.
enum ColumnOp { kColumnSum, kColumnMax, kColumnMin };
template <ColumnOp op>
Vec fold(Vec a, Vec x) {
  if constexpr (op == kColumnSum) return a + x;
  if constexpr (op == kColumnMax) return at::vec::maximum(a, x);  // propagate NaN
  return at::vec::minimum(a, x);
}
template <ColumnOp op>
void fold_cols(const float* x, int64_t rows, int64_t cols, int64_t stride, double* out) {
  constexpr int64_t kVecs = 8, kBlock = 64;
  const float init = op == kColumnSum ? 0.f : op == kColumnMax ? -std::numeric_limits<float>::infinity()
                                                                : std::numeric_limits<float>::infinity();
  for (int64_t c = 0; c < cols; c += kVecs * kW) {
    const int64_t w = std::min(kVecs * kW, cols - c);
    double total[kVecs * kW];
    std::fill_n(total, w, static_cast<double>(init));
    for (int64_t r0 = 0; r0 < rows; r0 += kBlock) {
      const int64_t r1 = std::min(rows, r0 + kBlock);
      Vec a[kVecs];
      std::fill_n(a, kVecs, Vec(init));
      if (w == kVecs * kW) {
        for (int64_t r = r0; r < r1; ++r) {
          const float* p = x + r * stride + c;
          for (int64_t v = 0; v < kVecs; ++v) a[v] = fold<op>(a[v], Vec::loadu(p + v * kW));
        }
      } else {
        for (int64_t r = r0; r < r1; ++r) {
          const float* p = x + r * stride + c;
          for (int64_t v = 0; v * kW < w; ++v) a[v] = fold<op>(a[v], Vec::loadu(p + v * kW, std::min(kW, w - v * kW)));
        }
      }
      float part[kVecs * kW];
      for (int64_t v = 0; v < kVecs; ++v) a[v].store(part + v * kW);
      for (int64_t j = 0; j < w; ++j) {
        if constexpr (op == kColumnSum) total[j] += part[j];
        else if (std::isnan(total[j]) || std::isnan(part[j])) total[j] = std::numeric_limits<double>::quiet_NaN();
        else total[j] = op == kColumnMax ? std::max<double>(total[j], part[j]) : std::min<double>(total[j], part[j]);
      }
    }
    std::copy_n(total, w, out + c);
  }
}

void fold_cols_f32(const float* x, int64_t rows, int64_t cols, int64_t stride, double* out, int op) {
  if (op == kColumnSum) fold_cols<kColumnSum>(x, rows, cols, stride, out);
  else if (op == kColumnMax) fold_cols<kColumnMax>(x, rows, cols, stride, out);
  else fold_cols<kColumnMin>(x, rows, cols, stride, out);
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

void layer_norm_rows_f32(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd,
                         int64_t rows, int64_t n, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    const float mu = static_cast<float>(sum_f32(xr, n) / n);
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

#define RBLN_STR2(x) #x
#define RBLN_STR(x) RBLN_STR2(x)

}  // namespace

const Table* make_table() {
#ifdef CPU_CAPABILITY_DEFAULT
  constexpr bool contracts_fma = false;
#else
  constexpr bool contracts_fma = true;
#endif
  static const Table t{RBLN_STR(CPU_CAPABILITY), contracts_fma, exp_f32, gelu_f32, sum_f32, sum_pow_f32, extremum_f32,
                       fold_cols_f32,
                       softmax_rows_f32,
                       layer_norm_rows_f32, fmod_bf16};
  return &t;
}

}  // namespace rbln::kernels::vec::CPU_CAPABILITY
