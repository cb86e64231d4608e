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

// Four independent vector accumulators (latency hiding), partial tail by masked load.
float block_sum(const float* x, int64_t n) {
  Vec a0(0.f), a1(0.f), a2(0.f), a3(0.f);
  int64_t i = 0;
  for (; i + 4 * kW <= n; i += 4 * kW) {
    a0 += Vec::loadu(x + i);
    a1 += Vec::loadu(x + i + kW);
    a2 += Vec::loadu(x + i + 2 * kW);
    a3 += Vec::loadu(x + i + 3 * kW);
  }
  for (; i + kW <= n; i += kW) a0 += Vec::loadu(x + i);
  if (i < n) a1 += Vec::loadu(x + i, n - i);  // loadu(ptr, count) zero-fills the rest
  Vec a = (a0 + a1) + (a2 + a3);
  return at::vec::vec_reduce_all<float>([](Vec p, Vec q) { return p + q; }, a);
}

double sum_f32(const float* x, int64_t n) {
  constexpr int64_t kBlock = 4096;  // float error stays within a block; blocks add in double
  double total = 0;
  for (int64_t i = 0; i < n; i += kBlock) total += block_sum(x + i, std::min(kBlock, n - i));
  return total;
}

float row_max(const float* x, int64_t n) {
  Vec m(-std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + kW <= n; i += kW) m = at::vec::maximum(m, Vec::loadu(x + i));  // propagates NaN
  float r = at::vec::vec_reduce_all<float>([](Vec p, Vec q) { return at::vec::maximum(p, q); }, m);
  for (; i < n; ++i) r = (std::isnan(x[i]) || x[i] > r) ? x[i] : r;
  return r;
}

void softmax_rows_f32(const float* x, float* y, int64_t rows, int64_t size, bool log) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * size;
    float* yr = y + r * size;
    const float mx = row_max(xr, size);
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
  static const Table t{RBLN_STR(CPU_CAPABILITY), contracts_fma, exp_f32, gelu_f32, sum_f32, softmax_rows_f32,
                       layer_norm_rows_f32, fmod_bf16};
  return &t;
}

}  // namespace rbln::kernels::vec::CPU_CAPABILITY
