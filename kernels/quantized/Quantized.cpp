// Quantized matmuls: int8 x int8 -> int32 (_int_mm), int8 weight-only (_weight_int8pack_mm) and float8
// with scales (_scaled_mm). They run on the device's matrix engine for low-precision operands: here the op
// library (kernels/library/Library.h: libtorch's CPU kernels in stream order over device memory, as CUDA
// calls cuBLASLt for _int_mm and _scaled_mm), so the int8 and float8 operands stay in device memory in
// their own dtype and are read as such. CPU's argument checks run first, on the host, with CPU's words.
#include <ATen/ops/_int_mm.h>
#include <ATen/ops/_scaled_mm.h>
#include <ATen/ops/_weight_int8pack_mm.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>

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
// are read as int8 (a quarter of float32's bytes).
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
  launch_library("aten::_weight_int8pack_mm", {A, B, scales}, {C},
                 [](const Tensors& in) { return Tensors{at::_weight_int8pack_mm(in[0], in[1], in[2])}; });
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
