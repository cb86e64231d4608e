// CUDA's int4 weight-only pair in CUDA's ("tinygemm") layout, which CPU does not have: torchao's
// `tile_packed_to_4d` tensors and gpt-fast checkpoints hold weights packed this way.
//
// _convert_weight_to_int4pack packs [n][k / 2] uint8 (two int4 values a byte, the even k in the high nibble)
// into int32 words [n / 8][k / (innerKTiles * 16)][32][innerKTiles / 2], eight values a word, in the order of
// CUDA's m16n8k16 tensor-core B fragments (aten/src/ATen/native/cuda/int4mm.cu). _weight_int4pack_mm reads
// that layout in place: w = (q - 8) * scale + zero per group of k, rounded to bfloat16 as CUDA's hfma2, sums in
// float, the result rounded to bfloat16. The weights stay packed in device memory.
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>

#include <numeric>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <vector>

#include "generated/RBLNNativeFunctions.h"
#include "kernels/common/Common.h"
#include "kernels/vec/VecKernels.h"

namespace rbln::kernels {
namespace {
constexpr int64_t kNTile = 8, kKTile = 16, kLanes = 32;

// A pair of k-tiles (one packed word per lane per pair) spans 32 k. The k (within the pair) of its packed value
// j: word j / 8 of the lane's four (the byte offset q), nibble j % 8 (byte i = j % 4 of the word, its high value
// for j % 8 < 4, else its low value).
constexpr int64_t kPairK = 2 * kKTile;
constexpr int64_t pair_k(int64_t j) { return 8 * (j % 4) + 2 * (j / 8) + (j % 8) / 4; }

// The first packed word of row n: a lane of an 8-row tile holds row lane / 4, four lanes a row. The row's four
// words of pair p of outer k-tile o follow at o * kLanes * pairs + p, `pairs` apart.
constexpr int64_t first_word(int64_t n, int64_t k_outer, int64_t pairs) {
  return ((n / kNTile) * k_outer * kLanes + (n % kNTile) * 4) * pairs;
}

// A float rounded to bfloat16 (to nearest, ties to even; NaN stays NaN), as a float: CUDA's hfma2 rounds so.
inline float to_bfloat16(float f) {
  const auto u = __builtin_bit_cast(uint32_t, f);
  const float rounded = __builtin_bit_cast(float, (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000u);
  return f != f ? f : rounded;
}

// sums[r * 32 + j] += x[r] . w over lane j of the pairs of k-tiles, for one output channel: its int4 weights (the
// words of its lane, `words` at its first; a pair of k-tiles' four words `pairs` apart, the next outer tile's 32
// lanes on), its scales and zeros (`sz` at its first group, groups `group_stride` apart, 2^group_shift pairs a
// group), dequantized per pair and summed in float vector lanes (the CPU's widest ISA's): the order of the sums
// is the device's, as CUDA's tensor cores have theirs.
__attribute__((target_clones("avx512f", "avx2", "default"))) void int4_channel(
    const uint32_t* words, int64_t k_outer, int64_t pairs, const at::BFloat16* sz, int64_t group_stride,
    int group_shift, const float* x, int64_t m, int64_t k, float* sums) {
  for (int64_t outer = 0; outer < k_outer; ++outer)
    for (int64_t pair = 0; pair < pairs; ++pair) {
      const int64_t index = outer * pairs + pair;  // a pair's 32 k lie in one group
      const at::BFloat16* g = sz + (index >> group_shift) * group_stride;
      const float scale = g[0], zero = g[1];
      const uint32_t* w = words + outer * kLanes * pairs + pair;
      float d[kPairK];
      for (int64_t half = 0; half < 2; ++half) {  // two words, 16 values, a vector at a time
        const uint32_t low = w[2 * half * pairs], high = w[(2 * half + 1) * pairs];
#pragma omp simd
        for (int j = 0; j < 16; ++j) {
          const uint32_t bits = j < 8 ? low : high;
          const auto q = static_cast<int32_t>((bits >> (4 * (j % 8))) & 0xF) - 8;
          // q * scale is exact in float (4 bits times bfloat16's 8), so this rounds once, as a fused multiply-add
          d[half * 16 + j] = to_bfloat16(static_cast<float>(q) * scale + zero);
        }
      }
      for (int64_t r = 0; r < m; ++r) {
        const float* xr = x + r * k + index * kPairK;
        float* sr = sums + r * kPairK;
#pragma omp simd
        for (int64_t j = 0; j < kPairK; ++j) sr[j] += xr[j] * d[j];
      }
    }
}
#if defined(__x86_64__)
// One output channel of a batch-1 product with innerKTiles 8 (torchao's default), AVX-512: an outer k-tile of a
// row is 16 consecutive words (word L: pair L % 4, its word L / 4), so one load brings its 128 values; nibble i
// of every word is one vector of indices into the group's 16 dequantized values (rounded as int4_channel's), held
// in one register, and one permute (it reads the low 4 bits of each index) dequantizes 16 weights. `xt` holds
// the activations in that order (tile o, nibble i, word L at o * 128 + i * 16 + L). Its sums per lane run in
// another order than int4_channel's.
// A group's 16 dequantized values to_bfloat16((q - 8) * scale + zero), q = 0..15, as floats in 16 lanes: q * scale
// is exact, so the fused multiply-add rounds once; NaN stays NaN.
__attribute__((target("avx512f"))) inline __m512 group_table(const at::BFloat16* g) {
  const __m512 levels = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
  const __m512 value = _mm512_fmadd_ps(levels, _mm512_set1_ps(g[0]), _mm512_set1_ps(g[1]));
  const __m512i bits = _mm512_castps_si512(value);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_and_si512(_mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7FFF)), odd),
                                           _mm512_set1_epi32(static_cast<int>(0xFFFF0000u)));
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(value, value, _CMP_UNORD_Q), _mm512_castsi512_ps(rounded), value);
}

__attribute__((target("avx512f"))) float int4_row_avx512(const uint32_t* words, int64_t k_outer,
                                                        const at::BFloat16* sz, int64_t group_stride,
                                                        int group_shift, const float* xt) {
  __m512 sums[8], table = _mm512_setzero_ps();
  for (auto& v : sums) v = _mm512_setzero_ps();
  int64_t table_group = -1;
  for (int64_t outer = 0; outer < k_outer; ++outer) {
    if (((outer * 4) >> group_shift) != table_group) {  // a group holds whole tiles (checked by the caller)
      table_group = (outer * 4) >> group_shift;
      table = group_table(sz + table_group * group_stride);
    }
    const __m512i packed = _mm512_loadu_si512(words + outer * kLanes * 4);
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      const __m512i q = _mm512_srl_epi32(packed, _mm_cvtsi32_si128(4 * i));  // the permute reads its low 4 bits
      sums[i] = _mm512_fmadd_ps(_mm512_loadu_ps(xt + outer * 128 + i * 16), _mm512_permutexvar_ps(q, table), sums[i]);
    }
  }
  for (int i = 1; i < 8; ++i) sums[0] = _mm512_add_ps(sums[0], sums[i]);
  return _mm512_reduce_add_ps(sums[0]);
}

// The eight output channels of a tile (batch 1, innerKTiles 8) with AVX512-BF16 dot products. A tile's outer
// k-tile is 512 consecutive bytes, 64 a channel, so the tile is read in storage order (channel by channel, each
// 64-byte line was a separate miss 512 bytes from the last). Per channel, its group's table as 16 bfloat16 values
// (twice, so a 16-bit lane's index may carry the next nibble's bit; rounded to nearest even by the conversion
// instruction, which reads float denormals as zero, as the dot product does): one 16-bit permute dequantizes 32 weights
// (nibble i of each 16-bit lane) and one dot product multiplies them by 32 bfloat16 activations (exact products:
// bfloat16 times bfloat16 is exact in float) and adds pairs into 16 float lanes. `xb` holds the activations in
// that order (tile o, nibble i, 16-bit lane l at o * 128 + i * 32 + l). The instruction reads denormal bfloat16
// inputs as zero (|x| < 1.2e-38).
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void int4_tile_avx512_bf16(
    const uint32_t* words, int64_t k_outer, const at::BFloat16* sz, int64_t group_stride, int group_shift,
    const at::BFloat16* xb, float* out) {
  __m512 sums[kNTile];
  __m512i tables[kNTile];
  for (auto& v : sums) v = _mm512_setzero_ps();
  int64_t table_group = -1;
  for (int64_t outer = 0; outer < k_outer; ++outer) {
    if (((outer * 4) >> group_shift) != table_group) {
      table_group = (outer * 4) >> group_shift;
      const __m512 levels = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
      for (int64_t c = 0; c < kNTile; ++c) {  // group_table's values, rounded by the conversion instruction
        const at::BFloat16* g = sz + 2 * c + table_group * group_stride;
        const __m512 value = _mm512_fmadd_ps(levels, _mm512_set1_ps(g[0]), _mm512_set1_ps(g[1]));
        tables[c] = (__m512i)_mm512_cvtne2ps_pbh(value, value);
      }
    }
    __m512i x[4];
    for (int i = 0; i < 4; ++i) x[i] = _mm512_loadu_si512(xb + outer * 128 + i * 32);
    const uint32_t* tile = words + outer * kLanes * 4;
#pragma GCC unroll 8
    for (int64_t c = 0; c < kNTile; ++c) {
      const __m512i packed = _mm512_loadu_si512(tile + c * 16);
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        const __m512i w = _mm512_permutexvar_epi16(_mm512_srli_epi16(packed, 4 * i), tables[c]);
        sums[c] = _mm512_dpbf16_ps(sums[c], (__m512bh)w, (__m512bh)x[i]);
      }
    }
  }
  for (int64_t c = 0; c < kNTile; ++c) out[c] = _mm512_reduce_add_ps(sums[c]);
}

// Whether the CPU has AVX512-BF16's dot products (checked once).
bool has_bf16_dots() {
  static const bool has = __builtin_cpu_supports("avx512bf16");
  return has;
}

// Whether int4_row_avx512 computes this product: batch 1, innerKTiles 8, groups of whole outer tiles, and the
// AVX-512 capability the vectorized kernels chose (kernels/vec: the CPU's, lowered by ATEN_CPU_CAPABILITY).
bool row_kernel_applies(int64_t m, int64_t pairs, int group_shift) {
  return vec::avx512() && m == 1 && pairs == 4 && group_shift >= 2;
}
#else
bool row_kernel_applies(int64_t, int64_t, int) { return false; }
bool has_bf16_dots() { return false; }
float int4_row_avx512(const uint32_t*, int64_t, const at::BFloat16*, int64_t, int, const float*) { return 0.f; }
void int4_tile_avx512_bf16(const uint32_t*, int64_t, const at::BFloat16*, int64_t, int, const at::BFloat16*, float*) {}
#endif
}  // namespace

at::Tensor _convert_weight_to_int4pack(const at::Tensor& self, int64_t innerKTiles) {
  // CUDA's checks, in its order and words.
  TORCH_CHECK(self.dim() == 2);
  TORCH_CHECK(self.dtype() == at::kByte);
  TORCH_CHECK(self.is_contiguous());
  TORCH_CHECK(innerKTiles == 2 || innerKTiles == 4 || innerKTiles == 8);
  const int64_t n = self.size(0), half_k = self.size(1);
  TORCH_CHECK(half_k * 2 % (innerKTiles * kKTile) == 0 && half_k * 2 / (innerKTiles * kKTile) >= 1,
              "_convert_weight_to_int4pack: k (", half_k * 2, ") must be a nonzero multiple of innerKTiles * 16 (",
              innerKTiles * kKTile, ")");
  const int64_t n_tiles = (n + kNTile - 1) / kNTile, k_outer = half_k * 2 / (innerKTiles * kKTile);
  auto out = at::empty({n_tiles, k_outer, kLanes, innerKTiles / 2}, self.options().dtype(at::kInt));
  if (out.numel() == 0) return out;
  const uint8_t* in = self.const_data_ptr<uint8_t>();
  auto* words = reinterpret_cast<uint32_t*>(out.data_ptr<int32_t>());
  const int64_t total = out.numel(), pairs = innerKTiles / 2;
  launch_on(out, "aten::_convert_weight_to_int4pack", [=] {
    std::fill(words, words + total, 0u);  // rows past n (the last tile's padding) stay zero, as CUDA's
    at::parallel_for(0, n, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        uint32_t* row = words + first_word(r, k_outer, pairs);
        for (int64_t index = 0; index < k_outer * pairs; ++index)  // outer * pairs + pair
          for (int64_t j = 0; j < kPairK; ++j) {
            const int64_t kk = index * kPairK + pair_k(j);
            const uint32_t byte = in[r * half_k + kk / 2];
            const uint32_t value = kk % 2 ? byte & 0xF : byte >> 4;  // the even k in the high nibble
            row[(index / pairs) * kLanes * pairs + index % pairs + (j / 8) * pairs] |= value << (4 * (j % 8));
          }
      }
    });
  });
  return out;
}

at::Tensor _weight_int4pack_mm(const at::Tensor& self, const at::Tensor& mat2, int64_t qGroupSize,
                               const at::Tensor& qScaleAndZeros) {
  const auto& A = self;
  const auto& B = mat2;
  TORCH_CHECK(A.device() == B.device() && A.device() == qScaleAndZeros.device());
  // CUDA's checks, in its order and words.
  const int64_t m = A.size(0), n = B.size(0) * kNTile, k = A.size(1);
  const int64_t k_tiles = (k + kKTile - 1) / kKTile;
  const int64_t inner_k_tiles = B.dim() == 4 ? B.size(3) * 2 : 0;
  TORCH_CHECK(inner_k_tiles == 2 || inner_k_tiles == 4 || inner_k_tiles == 8);
  TORCH_CHECK(A.dtype() == at::kBFloat16);
  TORCH_CHECK(A.is_contiguous());
  TORCH_CHECK(A.dim() == 2);
  TORCH_CHECK(B.dtype() == at::kInt);
  TORCH_CHECK(B.is_contiguous());
  TORCH_CHECK(B.dim() == 4);
  TORCH_CHECK(B.size(1) == k / (inner_k_tiles * kKTile));
  TORCH_CHECK(B.size(2) == 32);
  TORCH_CHECK(qGroupSize == 32 || qGroupSize == 64 || qGroupSize == 128 || qGroupSize == 256);
  TORCH_CHECK(qScaleAndZeros.dim() == 3);
  TORCH_CHECK(k_tiles * kKTile >= qGroupSize && (k_tiles * kKTile) % qGroupSize == 0);
  TORCH_CHECK(qScaleAndZeros.size(1) == n);
  TORCH_CHECK(qScaleAndZeros.size(2) == 2);
  // CUDA's kernel reads past the packed words when k is not a multiple of innerKTiles * 16: refused here.
  TORCH_CHECK(k % (inner_k_tiles * kKTile) == 0, "_weight_int4pack_mm: k (", k,
              ") must be a multiple of innerKTiles * 16 (", inner_k_tiles * kKTile, ")");
  TORCH_CHECK(qScaleAndZeros.dtype() == at::kBFloat16 && qScaleAndZeros.is_contiguous(),
              "_weight_int4pack_mm: expected qScaleAndZeros to be a contiguous bfloat16 tensor, got ",
              qScaleAndZeros.dtype());
  TORCH_CHECK(qScaleAndZeros.size(0) >= k / qGroupSize, "_weight_int4pack_mm: expected qScaleAndZeros.size(0) >= ",
              k / qGroupSize, ", got ", qScaleAndZeros.size(0));
  check_same_device({&A, &B, &qScaleAndZeros});
  auto C = at::empty({m, n}, A.options());
  if (C.numel() == 0) return C;
  const auto* a = A.const_data_ptr<at::BFloat16>();
  const auto* words = reinterpret_cast<const uint32_t*>(B.const_data_ptr<int32_t>());
  const auto* sz = qScaleAndZeros.const_data_ptr<at::BFloat16>();
  auto* c = C.data_ptr<at::BFloat16>();
  const int64_t k_outer = B.size(1), pairs = inner_k_tiles / 2;
  const int group_shift = __builtin_ctzll(qGroupSize / kPairK);  // qGroupSize: a power of two, 32 or more
  const bool row_kernel = row_kernel_applies(m, pairs, group_shift);
  const bool bf16_dots = row_kernel && has_bf16_dots();
  launch_on(C, "aten::_weight_int4pack_mm", [=] {
    if (bf16_dots) {  // the activations in the order of int4_tile_avx512_bf16's 16-bit lanes
      std::vector<at::BFloat16> xb(k);
      for (int64_t outer = 0; outer < k_outer; ++outer)
        for (int64_t i = 0; i < 4; ++i)
          for (int64_t l = 0; l < 32; ++l) {
            const int64_t lane = l / 2, nibble = 4 * (l % 2) + i;  // word `lane`'s nibble
            xb[outer * 128 + i * 32 + l] = a[(outer * 4 + lane % 4) * kPairK + pair_k(8 * (lane / 4) + nibble)];
          }
      at::parallel_for(0, n / kNTile, 1, [&](int64_t lo, int64_t hi) {
        float sums[kNTile];
        for (int64_t tile = lo; tile < hi; ++tile) {
          const int64_t col = tile * kNTile;
          int4_tile_avx512_bf16(words + first_word(col, k_outer, pairs), k_outer, sz + 2 * col, 2 * n, group_shift,
                                xb.data(), sums);
          for (int64_t j = 0; j < kNTile; ++j) c[col + j] = static_cast<at::BFloat16>(sums[j]);
        }
      });
      return;
    }
    if (row_kernel) {  // the activations in the order of int4_row_avx512's lanes
      std::vector<float> xt(k);
      for (int64_t outer = 0; outer < k_outer; ++outer)
        for (int64_t i = 0; i < 8; ++i)
          for (int64_t lane = 0; lane < 16; ++lane)
            xt[outer * 128 + i * 16 + lane] =
                static_cast<float>(a[(outer * 4 + lane % 4) * kPairK + pair_k(8 * (lane / 4) + i)]);
      at::parallel_for(0, n, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t col = lo; col < hi; ++col)
          c[col] = static_cast<at::BFloat16>(
              int4_row_avx512(words + first_word(col, k_outer, pairs), k_outer, sz + 2 * col, 2 * n, group_shift,
                              xt.data()));
      });
      return;
    }
    // The activations in float, each 32 k of a pair of k-tiles in the order the packed values are stored, so
    // the weights are read in storage order.
    std::vector<float> x(m * k);
    for (int64_t r = 0; r < m; ++r)
      for (int64_t base = 0; base < k; base += kPairK)
        for (int64_t j = 0; j < kPairK; ++j) x[r * k + base + j] = static_cast<float>(a[r * k + base + pair_k(j)]);
    at::parallel_for(0, n, 1, [&](int64_t lo, int64_t hi) {
      std::vector<float> sums(m * kPairK);
      for (int64_t col = lo; col < hi; ++col) {
        std::fill(sums.begin(), sums.end(), 0.f);
        int4_channel(words + first_word(col, k_outer, pairs), k_outer, pairs, sz + 2 * col, 2 * n, group_shift,
                     x.data(), m, k, sums.data());
        for (int64_t r = 0; r < m; ++r)
          c[r * n + col] = static_cast<at::BFloat16>(std::accumulate(&sums[r * kPairK], &sums[(r + 1) * kPairK], 0.f));
      }
    });
  });
  return C;
}

}  // namespace rbln::kernels
