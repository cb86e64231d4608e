// Quantized tensors on the device (quint8, qint8, qint32; per tensor and per channel), as QuantizedCUDA's:
// PyTorch's quantizers create them (QTensorImpl over the device's allocator) and run CPU's checks; the
// device computes quantize and dequantize behind ATen's dispatch stubs, with CPU's arithmetic bit for bit;
// views and parameters are ATen's generic kernels for quantized tensors. ops.yaml registers the entries
// (`key: QuantizedPrivateUse1` for those that take a quantized tensor).
#include <ATen/native/quantized/AffineQuantizer.h>
#include <ATen/ops/_empty_affine_quantized.h>
#include <ATen/ops/_empty_affine_quantized_native.h>
#include <ATen/ops/_empty_per_channel_affine_quantized.h>
#include <ATen/ops/_empty_per_channel_affine_quantized_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/clone_native.h>
#include <ATen/ops/dequantize_native.h>
#include <ATen/ops/empty_like_native.h>
#include <ATen/ops/empty_native.h>
#include <ATen/ops/empty_quantized_native.h>
#include <ATen/ops/empty_strided_native.h>
#include <ATen/ops/q_per_channel_axis_native.h>
#include <ATen/ops/q_per_channel_scales_native.h>
#include <ATen/ops/q_per_channel_zero_points_native.h>
#include <ATen/ops/q_scale_native.h>
#include <ATen/ops/q_zero_point_native.h>
#include <ATen/ops/qscheme_native.h>
#include <ATen/ops/quantize_per_channel_native.h>
#include <ATen/ops/quantize_per_tensor_native.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/squeeze_native.h>
#include <ATen/ops/unsqueeze_native.h>
#include <ATen/ops/view_native.h>
#include <ATen/quantized/Quantizer.h>

#include <limits>
#include <vector>

#include "generated/RBLNNativeFunctions.h"
#include "kernels/common/Common.h"

namespace rbln::kernels {
namespace {

// The quantized tensor's values as a dense tensor of its underlying integer type, sharing its storage.
at::Tensor int_view(const at::Tensor& q) {
  auto t = at::empty({0}, q.options().dtype(c10::toUnderlying(q.scalar_type())));
  return t.set_(q.storage(), q.storage_offset(), q.sizes(), q.strides());
}

// scale, zero point (per channel: shaped to broadcast along axis) as device tensors of the given dtypes.
at::Tensor along(const at::Tensor& per_channel, const at::Tensor& like, int64_t axis, at::ScalarType dtype) {
  std::vector<int64_t> shape(like.dim(), 1);
  shape[axis] = per_channel.numel();
  return per_channel.to(like.device(), dtype).reshape(shape);
}
at::Tensor scalar(double value, const at::Tensor& like, at::ScalarType dtype) {
  return at::scalar_tensor(value, like.options().dtype(dtype));
}

// CPU's quantization: x * (1/scale) + zero_point in float, rounded half to even, clamped to the type's range
// (NaN to its minimum, as CPU's vector loop converts it). inv_scale and zero_point are float tensors.
void quantize_into(const at::Tensor& x, at::Tensor& q, const at::Tensor& inv_scale, const at::Tensor& zero_point) {
  if (x.numel() == 0) return;
  const auto type = c10::toUnderlying(q.scalar_type());
  double lo = 0, hi = 0;
  AT_DISPATCH_INTEGRAL_TYPES(type, "quantize", [&] {
    lo = static_cast<double>(std::numeric_limits<scalar_t>::min());
    hi = static_cast<double>(std::numeric_limits<scalar_t>::max());
  });
  auto t = at::round(at::add(at::mul(x, inv_scale), zero_point)).to(at::kDouble);
  t = at::where(at::isnan(t), lo, t.clamp(lo, hi));
  int_view(q).copy_(t.to(type));
}

void quantize_per_tensor_kernel(const at::Tensor& x, at::Tensor& q, double scale, int64_t zero_point) {
  const float inv_scale = 1.0f / static_cast<float>(scale);
  quantize_into(x, q, scalar(inv_scale, x, at::kFloat), scalar(static_cast<float>(zero_point), x, at::kFloat));
}

void quantize_per_channel_kernel(const at::Tensor& x, at::Tensor& q, const at::Tensor& scales,
                                 const at::Tensor& zero_points, int64_t axis) {
  const auto inv_scale = at::reciprocal(scales.to(x.device(), at::kFloat));
  quantize_into(x, q, along(inv_scale, x, axis, at::kFloat), along(zero_points, x, axis, at::kFloat));
}

// CPU's dequantization: float(scale) * float(q - zero_point) per tensor, the difference in int32 (wrapping at
// qint32's ends, as CPU's); float((q - zero_point) * scale) in double per channel.
void dequantize_per_tensor_kernel(const at::Tensor& q, at::Tensor& out, double scale, int64_t zero_point) {
  if (q.numel() == 0) return;
  auto centered = at::sub(int_view(q).to(at::kInt), zero_point).to(at::kFloat);
  out.copy_(at::mul(centered, scalar(static_cast<float>(scale), q, at::kFloat)));
}

void dequantize_per_channel_kernel(const at::Tensor& q, at::Tensor& out, const at::Tensor& scales,
                                   const at::Tensor& zero_points, int64_t axis) {
  if (q.numel() == 0) return;
  auto centered = at::sub(int_view(q).to(at::kLong), along(zero_points, q, axis, at::kLong)).to(at::kDouble);
  out.copy_(at::mul(centered, along(scales, q, axis, at::kDouble)));
}

// quint4x2 and quint2x4 pack two or four values a byte: CPU's own layout, which the device does not implement.
[[noreturn]] void sub_byte_not_implemented(const at::Tensor& a, const at::Tensor& b) {
  const auto type = a.is_quantized() ? a.scalar_type() : b.scalar_type();
  TORCH_CHECK_NOT_IMPLEMENTED(false, "quantized tensors of dtype ", type, " are not implemented on ", a.device(),
                              "; quint8, qint8 and qint32 are");
}
void quantize_sub_byte_kernel(const at::Tensor& x, at::Tensor& q, float, float) { sub_byte_not_implemented(x, q); }
void dequantize_sub_byte_kernel(const at::Tensor& q, at::Tensor& out, float, float) {
  sub_byte_not_implemented(q, out);
}

c10::SmallVector<int64_t, 6> ints(c10::SymIntArrayRef s) {
  return c10::SmallVector<int64_t, 6>(C10_AS_INTARRAYREF_SLOW(s).begin(), C10_AS_INTARRAYREF_SLOW(s).end());
}

}  // namespace

at::Tensor quantize_per_tensor(const at::Tensor& self, double scale, int64_t zero_point, at::ScalarType dtype) {
  return at::native::quantize_per_tensor(self, scale, zero_point, dtype);
}
at::Tensor quantize_per_tensor_tensor_qparams(const at::Tensor& self, const at::Tensor& scale,
                                              const at::Tensor& zero_point, at::ScalarType dtype) {
  return at::native::quantize_per_tensor_tensor_qparams(self, scale, zero_point, dtype);
}
at::Tensor quantize_per_channel(const at::Tensor& self, const at::Tensor& scales, const at::Tensor& zero_points,
                                int64_t axis, at::ScalarType dtype) {
  return at::native::quantize_per_channel(self, scales, zero_points, axis, dtype);
}

// CPU's: the integers become the quantized tensor's values.
at::Tensor make_per_tensor_quantized_tensor(const at::Tensor& self, double scale, int64_t zero_point) {
  auto q = at::_empty_affine_quantized(self.sizes(), self.options().dtype(c10::toQIntType(self.scalar_type())), scale,
                                       zero_point, self.suggest_memory_format());
  int_view(q).copy_(self);
  return q;
}
at::Tensor make_per_channel_quantized_tensor(const at::Tensor& self, const at::Tensor& scale,
                                             const at::Tensor& zero_point, int64_t axis) {
  auto q = at::_empty_per_channel_affine_quantized(self.sizes(), scale, zero_point, axis,
                                                   self.options().dtype(c10::toQIntType(self.scalar_type())));
  int_view(q).copy_(self);
  return q;
}

at::Tensor empty_affine_quantized(c10::SymIntArrayRef size, std::optional<at::ScalarType> dtype,
                                  std::optional<at::Layout> layout, std::optional<at::Device> device,
                                  std::optional<bool> pin_memory, double scale, int64_t zero_point,
                                  std::optional<at::MemoryFormat> memory_format) {
  return at::native::empty_affine_quantized(ints(size), dtype, layout, device, pin_memory, scale, zero_point,
                                            memory_format);
}
at::Tensor empty_per_channel_affine_quantized(c10::SymIntArrayRef size, const at::Tensor& scales,
                                              const at::Tensor& zero_points, int64_t axis,
                                              std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                                              std::optional<at::Device> device, std::optional<bool> pin_memory,
                                              std::optional<at::MemoryFormat> memory_format) {
  return at::native::empty_per_channel_affine_quantized(ints(size), scales, zero_points, axis, dtype, layout, device,
                                                        pin_memory, memory_format);
}
at::Tensor empty_quantized(at::IntArrayRef size, const at::Tensor& qtensor, std::optional<at::ScalarType> dtype,
                           std::optional<at::Layout> layout, std::optional<at::Device> device,
                           std::optional<bool> pin_memory, std::optional<at::MemoryFormat> memory_format) {
  return at::native::empty_quantized(size, qtensor, dtype, layout, device, pin_memory, memory_format);
}
at::Tensor empty_unknown_quantized(c10::SymIntArrayRef size, std::optional<at::ScalarType> dtype,
                                   std::optional<at::Layout> layout, std::optional<at::Device> device,
                                   std::optional<bool> pin_memory, std::optional<at::MemoryFormat> memory_format) {
  return at::native::empty_unknown_quantized(ints(size), dtype, layout, device, pin_memory, memory_format);
}
at::Tensor empty_strided_unknown_quantized(c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                                           std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                                           std::optional<at::Device> device, std::optional<bool> pin_memory) {
  return at::native::empty_strided_unknown_quantized(ints(size), ints(stride), dtype, layout, device, pin_memory);
}
at::Tensor empty_like_quantized(const at::Tensor& self, std::optional<at::ScalarType> dtype,
                                std::optional<at::Layout> layout, std::optional<at::Device> device,
                                std::optional<bool> pin_memory, std::optional<at::MemoryFormat> memory_format) {
  return at::native::empty_like_quantized(self, dtype, layout, device, pin_memory, memory_format);
}

at::Tensor as_strided_quantized(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                                std::optional<c10::SymInt> storage_offset) {
  std::optional<int64_t> offset;
  if (storage_offset) offset = storage_offset->expect_int();
  return at::native::as_strided_qtensorimpl(self, ints(size), ints(stride), offset);
}
at::Tensor view_quantized(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, ints(size));
}
at::Tensor reshape_alias_quantized(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, ints(size), ints(stride));
}
at::Tensor squeeze_quantized(const at::Tensor& self) { return at::native::squeeze_quantized(self); }
at::Tensor squeeze_dim_quantized(const at::Tensor& self, int64_t dim) {
  return at::native::squeeze_quantized(self, dim);
}
at::Tensor squeeze_dims_quantized(const at::Tensor& self, at::IntArrayRef dim) {
  return at::native::squeeze_quantized(self, dim);
}
at::Tensor unsqueeze_quantized(const at::Tensor& self, int64_t dim) {
  return at::native::unsqueeze_quantized(self, dim);
}
at::Tensor clone_quantized(const at::Tensor& self, std::optional<at::MemoryFormat> memory_format) {
  return at::native::quantized_clone(self, memory_format);
}
at::Tensor& set_storage_quantized(at::Tensor& self, at::Storage source, c10::SymInt storage_offset,
                                  c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return at::native::set_storage_quantized_(self, std::move(source), storage_offset.expect_int(), ints(size),
                                            ints(stride));
}

// copy_ sends copies that involve the device here: the values with their quantizer, as CPU's copy_ between
// quantized tensors.
at::Tensor copy_from_quantized(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  TORCH_CHECK(self.is_quantized(), "Copying from a non-quantized Tensor to a quantized Tensor is not supported on ",
              dst.device(), ": quantize it with torch.quantize_per_tensor or torch.quantize_per_channel");
  TORCH_CHECK(dst.is_quantized(), "Copying from quantized Tensor to non-quantized Tensor is not allowed, please use "
              "dequantize to get a float Tensor from a quantized Tensor");
  TORCH_CHECK(self.qscheme() == dst.qscheme(), "Quantized Copy only works with same qscheme");
  TORCH_CHECK(self.scalar_type() == dst.scalar_type(), "Quantized Copy only works with the same dtype, got ",
              self.scalar_type(), " and ", dst.scalar_type());
  at::set_quantizer_(dst, self.quantizer());
  int_view(dst).copy_(int_view(self), non_blocking);
  return dst;
}

at::Tensor dequantize_quantized(const at::Tensor& self) { return at::native::dequantize_quantized(self); }
at::Tensor int_repr_quantized(const at::Tensor& self) {
  return int_view(self).clone(self.suggest_memory_format());
}
double q_scale_quantized(const at::Tensor& self) { return at::native::q_scale_quant(self); }
int64_t q_zero_point_quantized(const at::Tensor& self) { return at::native::q_zero_point_quant(self); }
at::Tensor q_per_channel_scales_quantized(const at::Tensor& self) { return at::native::q_per_channel_scales(self); }
at::Tensor q_per_channel_zero_points_quantized(const at::Tensor& self) {
  return at::native::q_per_channel_zero_points(self);
}
int64_t q_per_channel_axis_quantized(const at::Tensor& self) { return at::native::q_per_channel_axis(self); }
at::QScheme qscheme_quantized(const at::Tensor& self) { return at::native::qscheme_quant(self); }

}  // namespace rbln::kernels

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(quantize_tensor_per_tensor_affine_stub, &rbln::kernels::quantize_per_tensor_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(quantize_tensor_per_channel_affine_stub, &rbln::kernels::quantize_per_channel_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(dequantize_tensor_per_tensor_affine_stub, &rbln::kernels::dequantize_per_tensor_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(dequantize_tensor_per_channel_affine_stub,
                              &rbln::kernels::dequantize_per_channel_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(quantize_tensor_per_tensor_affine_sub_byte_stub, &rbln::kernels::quantize_sub_byte_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(dequantize_tensor_per_tensor_affine_sub_byte_stub,
                              &rbln::kernels::dequantize_sub_byte_kernel)
}  // namespace at::native
