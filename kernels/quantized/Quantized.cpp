// Quantized matmuls: int8 x int8 -> int32 (_int_mm), int8 weight-only (_weight_int8pack_mm) and float8
// with scales (_scaled_mm). The int8 weight-only GEMV is the device's own kernel; _int_mm and _scaled_mm run
// on the op library (kernels/library/Library.h: libtorch's CPU kernels in stream order over device memory,
// as CUDA calls cuBLASLt for them). The int8 and float8 operands stay in device memory in their own dtype
// and are read as such. CPU's argument checks run first, on the host, with CPU's words.
#include <ATen/ops/_int_mm.h>
#include <ATen/ops/_scaled_mm.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>

#include <algorithm>
#include <array>
#include <vector>

#include "generated/RBLNNativeFunctions.h"
#include "kernels/common/Common.h"
#include "kernels/library/Library.h"

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
  launch_on(y, "aten::_weight_int8pack_mm", [=] {
    // Blocks of four output channels (the last one's missing rows repeat its last channel, not stored).
    const int64_t blocks = (N + 3) / 4, grain = std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, 4 * K * M));
    at::parallel_for(0, blocks, grain, [&](int64_t b, int64_t e) {
      float sums[4];
      for (int64_t n = 4 * b; n < std::min(N, 4 * e); n += 4) {
        std::array<const int8_t*, 4> rows;
        for (int64_t c = 0; c < 4; ++c) rows[c] = wp + std::min(n + c, N - 1) * K;
        for (int64_t r = 0; r < M; ++r) {
          int8_dots4(xp + r * ldx, rows, K, sums);
          for (int64_t c = 0; c < std::min<int64_t>(4, N - n); ++c) yp[r * N + n + c] = sums[c] * sp[n + c];
        }
      }
    });
  });
  if (!y.is_same(C)) device_copy(C, y);
  return C;
}

// Float8 (or float4) operands with tensorwise or rowwise scales, an optional bias, into out_dtype. The
// meta function sizes the result and raises the argument errors CUDA's kernel raises, before the launch.
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
  launch_library("aten::_scaled_mm", {self, mat2, scale_a, scale_b, b, s, out}, {},
                 [out_dtype, use_fast_accum](const Tensors& in) {
                   auto result = in[6];
                   at::_scaled_mm_out(result, in[0], in[1], in[2], in[3], optional(in[4]), optional(in[5]),
                                      out_dtype, use_fast_accum);
                   return Tensors{};
                 });
  return out;
}

}  // namespace rbln::kernels
