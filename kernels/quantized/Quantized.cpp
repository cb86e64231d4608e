// Quantized matmuls: int8 x int8 -> int32 (_int_mm), int8 weight-only (_weight_int8pack_mm) and float8
// with scales (_scaled_mm). The int8 weight-only GEMV is the device's own kernel; _int_mm and _scaled_mm run
// on the op library (kernels/library/Library.h: libtorch's CPU kernels in stream order over device memory,
// as CUDA calls cuBLASLt for them). The int8 and float8 operands stay in device memory in their own dtype
// and are read as such. CPU's argument checks run first, on the host, with CPU's words.
#include <ATen/ops/_int_mm.h>
#include <ATen/ops/_scaled_mm.h>
#include <ATen/ops/_scaled_mm_v2.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/mul.h>

#include <algorithm>
#include <array>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <vector>

#include "generated/RBLNNativeFunctions.h"
#include "kernels/common/Common.h"
#include "kernels/library/Library.h"
#include "kernels/vec/VecKernels.h"

namespace rbln::kernels {
namespace {
using Tensors = std::vector<at::Tensor>;

at::Tensor on_meta(const at::Tensor& t) {
  return t.defined() ? at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kMeta)) : t;
}

// sums[i] = x . w_i for a float row x and four int8 weight rows w_i of length k: the int8 bytes are widened in
// registers and summed in float vector lanes (the CPU's widest ISA's), four independent sums per load of x.
__attribute__((target_clones("avx512f", "avx2", "default"))) void int8_dots4(
    const float* x, std::array<const int8_t*, 4> w, int64_t k, float* sums) {
  const int8_t *w0 = w[0], *w1 = w[1], *w2 = w[2], *w3 = w[3];
  float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
  for (int64_t j = 0; j < k; ++j) {
    const float v = x[j];
    s0 += v * static_cast<float>(w0[j]);
    s1 += v * static_cast<float>(w1[j]);
    s2 += v * static_cast<float>(w2[j]);
    s3 += v * static_cast<float>(w3[j]);
  }
  sums[0] = s0, sums[1] = s1, sums[2] = s2, sums[3] = s3;
}

using Int8Dots4 = void (*)(const float*, std::array<const int8_t*, 4>, int64_t, float*);

#if defined(__x86_64__)
// int8_dots4 in 512-bit lanes: the compiler's vectorization of the loop above kept 128-bit registers and
// separate multiplies and adds (1.3 ms for a 4096 x 4096 GEMV, CPU's float32 one 1.36 ms). Each byte is
// sign-extended and converted in one register, two accumulators a row cover the multiply-add's latency.
__attribute__((target("avx512f"))) inline __m512 widen(const int8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

__attribute__((target("avx512f"))) void int8_dots4_avx512(const float* x, std::array<const int8_t*, 4> w, int64_t k,
                                                          float* sums) {
  __m512 acc[4][2];
  for (auto& row : acc) row[0] = row[1] = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + 32 <= k; j += 32) {
    const __m512 x0 = _mm512_loadu_ps(x + j), x1 = _mm512_loadu_ps(x + j + 16);
    for (int c = 0; c < 4; ++c) {
      acc[c][0] = _mm512_fmadd_ps(x0, widen(w[c] + j), acc[c][0]);
      acc[c][1] = _mm512_fmadd_ps(x1, widen(w[c] + j + 16), acc[c][1]);
    }
  }
  for (int c = 0; c < 4; ++c) {
    float sum = _mm512_reduce_add_ps(_mm512_add_ps(acc[c][0], acc[c][1]));
    for (int64_t t = j; t < k; ++t) sum += x[t] * static_cast<float>(w[c][t]);
    sums[c] = sum;
  }
}

// The AVX-512 form where the vectorized kernels chose that capability (kernels/vec: the CPU's, lowered by
// ATEN_CPU_CAPABILITY), else the compiler's clones.
Int8Dots4 pick_int8_dots4() {
  static const Int8Dots4 dots = vec::avx512() ? int8_dots4_avx512 : int8_dots4;
  return dots;
}
#else
Int8Dots4 pick_int8_dots4() { return int8_dots4; }
#endif
}  // namespace

// CPU's _int_mm_cpu sizes the result from self.size(0) and mat2.size(1), then _int_mm_out_cpu checks.
at::Tensor& int_mm_out(const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out) {
  if (!out.defined()) out = at::empty({self.size(0), mat2.size(1)}, self.options().dtype(at::kInt));
  constexpr const char* f = "int_mm_out_cpu";
  TORCH_CHECK(self.dim() == 2, f, ": Expected self to be of dimension 2 but got ", self.dim());
  TORCH_CHECK(mat2.dim() == 2, f, ": Expected mat2 to be of dimension 2 but got ", mat2.dim());
  TORCH_CHECK(self.size(1) == mat2.size(0), f, ": self.size(1) needs to match mat2.size(0) but got ", self.size(1),
              " and ", mat2.size(0));
  TORCH_CHECK(self.scalar_type() == at::kChar || self.scalar_type() == at::kByte, f,
              ": Expected self dtype to be int8 or uint8 but got ", self.dtype());
  TORCH_CHECK(mat2.scalar_type() == at::kChar, f, ": Expected mat2 dtype to be of type int8 but got ", mat2.dtype());
  TORCH_CHECK(out.scalar_type() == at::kInt, f, ": Expected result dtype to be of type kInt but got ", out.dtype());
  TORCH_CHECK(out.dim() == 2, f, ": Expected result to be of dimension 2 but got ", out.dim());
  TORCH_CHECK(out.size(0) == self.size(0), f, ": Expected result.size(0) to be ", self.size(0), " but got ",
              out.size(0));
  TORCH_CHECK(out.size(1) == mat2.size(1), f, ": Expected result.size(1) to be ", mat2.size(1), " but got ",
              out.size(1));
  TORCH_CHECK(out.is_contiguous(), f, ": Expected result to be contiguous.");
  check_same_device({&self, &mat2, &out});
  if (out.numel() == 0) return out;
  launch_library("aten::_int_mm", {self, mat2, out}, {}, [](const Tensors& in) {
    auto result = in[2];
    at::_int_mm_out(result, in[0], in[1]);
    return Tensors{};
  });
  return out;
}

// C[m, n] = (A[m] . B[n]) * scales[n], A float32/float16/bfloat16 [M, K], B int8 [N, K]: the int8 weights
// are read as int8 (a quarter of float32's bytes), by the device's own GEMV below.
at::Tensor _weight_int8pack_mm(const at::Tensor& A, const at::Tensor& B, const at::Tensor& scales) {
  constexpr const char* f = "_weight_int8pack_mm_cpu";  // CPU's checks, in CPU's order
  const int64_t M = A.size(0), N = B.size(0), K = A.size(1);
  const auto type = A.scalar_type();
  TORCH_CHECK(type == at::kBFloat16 || type == at::kHalf || type == at::kFloat, f,
              " : expect A to be either 32-bit or 16-bit float tensor.");
  TORCH_CHECK(A.dim() == 2, f, " : expect A to be 2D tensor.");
  TORCH_CHECK(A.stride(1) == 1, f, " : A must be contiguous on the last dimension.");
  TORCH_CHECK(B.scalar_type() == at::kChar, f, " : expect B to be int8 tensor.");
  TORCH_CHECK(B.is_contiguous(), f, " : expect B to be contiguous.");
  TORCH_CHECK(B.size(1) == K, f, " : expect B.size(1) == ", K);
  TORCH_CHECK(scales.dim() == 1 && scales.size(0) == N, f, " : expect scales to be 1d tensor with size ", N);
  TORCH_CHECK(scales.scalar_type() == type, "expected scalar type ", type, " but found ", scales.scalar_type());
  auto C = at::empty({M, N}, A.options());
  if (C.numel() == 0) return C;
  // The device's int8 GEMV: each weight row is read once, as int8, for all M activation rows (float copies of
  // the activations and scales: small next to the weights), summed in float and rounded once, as CPU's kernel.
  const auto x = A.to(at::kFloat), s = scales.to(at::kFloat).contiguous();
  auto y = type == at::kFloat ? C : at::empty({M, N}, A.options().dtype(at::kFloat));
  const float *xp = x.const_data_ptr<float>(), *sp = s.const_data_ptr<float>();
  const int8_t* wp = B.const_data_ptr<int8_t>();
  float* yp = y.data_ptr<float>();
  const int64_t ldx = x.stride(0);
  const Int8Dots4 dots4 = pick_int8_dots4();
  launch_on(y, "aten::_weight_int8pack_mm", [=] {
    // Blocks of four output channels (the last one's missing rows repeat its last channel, not stored).
    const int64_t blocks = (N + 3) / 4, grain = std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, 4 * K * M));
    at::parallel_for(0, blocks, grain, [&](int64_t b, int64_t e) {
      float sums[4];
      for (int64_t n = 4 * b; n < std::min(N, 4 * e); n += 4) {
        std::array<const int8_t*, 4> rows;
        for (int64_t c = 0; c < 4; ++c) rows[c] = wp + std::min(n + c, N - 1) * K;
        for (int64_t r = 0; r < M; ++r) {
          dots4(xp + r * ldx, rows, K, sums);
          for (int64_t c = 0; c < std::min<int64_t>(4, N - n); ++c) yp[r * N + n + c] = sums[c] * sp[n + c];
        }
      }
    });
  });
  if (!y.is_same(C)) device_copy(C, y);
  return C;
}

namespace {
// A [rows, cols] float32 tensor of block scales: scale[i / row_block][j / col_block].
at::Tensor block_scales(const at::Tensor& scale, int64_t rows, int64_t cols, int64_t row_block, int64_t col_block) {
  return scale.to(at::kFloat).repeat_interleave(row_block, 0).narrow(0, 0, rows)
      .repeat_interleave(col_block, 1).narrow(1, 0, cols);
}

// CUDA's blocks of 128 (DeepSeek-style FP8; CPU has none) on the device: each operand dequantized with its
// expanded block scales in float32, then one float32 matmul, as CUDA accumulates in float32.
at::Tensor& block_scaled_mm(const at::Tensor& self, const at::Tensor& mat2, const at::Tensor& full_scale_a,
                            const at::Tensor& full_scale_b, const at::Tensor& bias, at::Tensor& out) {
  auto result = at::mm(at::mul(self.to(at::kFloat), full_scale_a), at::mul(mat2.to(at::kFloat), full_scale_b));
  if (bias.defined()) result.add_(bias.to(at::kFloat));
  out.copy_(result);
  return out;
}
}  // namespace

// Float8 (or float4) operands with tensorwise or rowwise scales (CPU's kernel on the op library), or CUDA's
// blocks of 128 told apart by the scales' shapes as CUDA does ([m, K/128] and [K/128, n] for 1x128,
// [m/128, K/128] and [K/128, n/128] for 128x128), an optional bias, into out_dtype. The meta function sizes the
// result and raises the argument errors CUDA's kernel raises, before the launch.
at::Tensor& scaled_mm_out(const at::Tensor& self, const at::Tensor& mat2, const at::Tensor& scale_a,
                          const at::Tensor& scale_b, const std::optional<at::Tensor>& bias,
                          const std::optional<at::Tensor>& scale_result, std::optional<at::ScalarType> out_dtype,
                          bool use_fast_accum, at::Tensor& out) {
  const auto b = bias.value_or(at::Tensor()), s = scale_result.value_or(at::Tensor());
  const auto sized = at::_scaled_mm(on_meta(self), on_meta(mat2), on_meta(scale_a), on_meta(scale_b),
                                    optional(on_meta(b)), optional(on_meta(s)), out_dtype, use_fast_accum);
  prepare_out(out, sized.sizes(), sized.scalar_type(), self, "_scaled_mm", false);
  check_same_device({&self, &mat2, &scale_a, &scale_b, &out});
  if (out.numel() == 0) return out;
  const int64_t m = self.size(0), k = self.size(1), n = mat2.size(1);
  const bool tensorwise = scale_a.numel() == 1 && scale_b.numel() == 1;
  const bool rowwise = scale_a.dim() == 2 && scale_a.size(0) == m && scale_a.size(1) == 1 && scale_b.dim() == 2 &&
                       scale_b.size(0) == 1 && scale_b.size(1) == n;
  if (!tensorwise && !rowwise && scale_a.scalar_type() == at::kFloat) {  // the meta function let only blocks through
    // Where m (n) is 1, both readings of a's (b's) scale shape give the same values.
    const auto sa = block_scales(scale_a, m, k, scale_a.size(0) == m ? 1 : 128, 128);
    const auto sb = block_scales(scale_b, k, n, 128, scale_b.size(1) == n ? 1 : 128);
    return block_scaled_mm(self, mat2, sa, sb, b, out);
  }
  launch_library("aten::_scaled_mm", {self, mat2, scale_a, scale_b, b, s, out}, {},
                 [out_dtype, use_fast_accum](const Tensors& in) {
                   auto result = in[6];
                   at::_scaled_mm_out(result, in[0], in[1], in[2], in[3], optional(in[4]), optional(in[5]),
                                      out_dtype, use_fast_accum);
                   return Tensors{};
                 });
  return out;
}

namespace {
// torch.nn.functional.ScalingType and SwizzleType's values.
constexpr int64_t kTensorWise = 0, kRowWise = 1, kBlockWise1x128 = 4, kBlockWise128x128 = 5;

}  // namespace

// torch.nn.functional.scaled_mm (_scaled_mm_v2): one scale per operand, unswizzled. Tensorwise and rowwise are
// CPU's kernel on the op library, as _scaled_mm; CUDA's blocks of 128 (DeepSeek-style FP8; CPU has none) are the
// device's: each operand dequantized with its block scales in float32 (the scales' layouts are CUDA's, as the meta
// function checks them), then one float32 matmul, as CUDA accumulates in float32.
at::Tensor& scaled_mm_v2_out(const at::Tensor& self, const at::Tensor& mat2, at::TensorList scale_a,
                             at::IntArrayRef recipe_a, at::IntArrayRef swizzle_a, at::TensorList scale_b,
                             at::IntArrayRef recipe_b, at::IntArrayRef swizzle_b, const std::optional<at::Tensor>& bias,
                             std::optional<at::ScalarType> out_dtype, at::IntArrayRef contraction_dim,
                             bool use_fast_accum, at::Tensor& out) {
  const auto b = bias.value_or(at::Tensor());
  Tensors meta_a, meta_b;
  for (const auto& t : scale_a) meta_a.push_back(on_meta(t));
  for (const auto& t : scale_b) meta_b.push_back(on_meta(t));
  const auto sized = at::_scaled_mm_v2(on_meta(self), on_meta(mat2), meta_a, recipe_a, swizzle_a, meta_b, recipe_b,
                                       swizzle_b, optional(on_meta(b)), out_dtype, contraction_dim, use_fast_accum);
  prepare_out(out, sized.sizes(), sized.scalar_type(), self, "_scaled_mm_v2", false);
  check_same_device({&self, &mat2, &b, &out});
  for (const auto& t : scale_a) check_same_device({&self, &t});
  for (const auto& t : scale_b) check_same_device({&self, &t});
  const bool swizzled = std::any_of(swizzle_a.begin(), swizzle_a.end(), [](int64_t s) { return s != 0; }) ||
                        std::any_of(swizzle_b.begin(), swizzle_b.end(), [](int64_t s) { return s != 0; });
  const int64_t ra = recipe_a.size() == 1 ? recipe_a[0] : -1, rb = recipe_b.size() == 1 ? recipe_b[0] : -1;
  const bool per_tensor_or_row = ra == rb && (ra == kTensorWise || ra == kRowWise);
  const bool blocks = (ra == kBlockWise1x128 || ra == kBlockWise128x128) &&
                      (rb == kBlockWise1x128 || rb == kBlockWise128x128) && !(ra == kBlockWise128x128 && ra == rb);
  TORCH_CHECK_NOT_IMPLEMENTED(contraction_dim.empty() && !swizzled && (per_tensor_or_row || blocks),
                              "_scaled_mm_v2 on ", self.device(), " takes tensorwise, rowwise and 128-blocks "
                              "(1x128, 128x128) scales, one per operand, unswizzled; got recipes ", recipe_a, " and ",
                              recipe_b);
  if (out.numel() == 0) return out;
  if (per_tensor_or_row) {
    std::vector<int64_t> recipes_a(recipe_a.begin(), recipe_a.end()), recipes_b(recipe_b.begin(), recipe_b.end());
    launch_library("aten::_scaled_mm_v2", {self, mat2, scale_a[0], scale_b[0], b, out}, {},
                   [=](const Tensors& in) {
                     auto result = in[5];
                     at::_scaled_mm_v2_out(result, in[0], in[1], {in[2]}, recipes_a, {}, {in[3]}, recipes_b, {},
                                           optional(in[4]), out_dtype, {}, use_fast_accum);
                     return Tensors{};
                   });
    return out;
  }
  const int64_t m = self.size(0), k = self.size(1), n = mat2.size(1), k_blocks = k / 128;
  // CUDA's layouts: 1x128 scales [rows, K/128]; 128x128 scales [round_up(K/128, 4), blocks of the other dim].
  const auto sa = ra == kBlockWise1x128 ? block_scales(scale_a[0], m, k, 1, 128)
                                         : block_scales(scale_a[0].narrow(0, 0, k_blocks).t(), m, k, 128, 128);
  const auto sb = rb == kBlockWise1x128 ? block_scales(scale_b[0].t(), k, n, 128, 1)
                                         : block_scales(scale_b[0].narrow(0, 0, k_blocks), k, n, 128, 128);
  return block_scaled_mm(self, mat2, sa, sb, b, out);
}

}  // namespace rbln::kernels
