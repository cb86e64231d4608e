#include "runtime/device/RBLNOps.h"

#include <ATen/EmptyTensor.h>
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/neg.h>
#include <ATen/TensorIterator.h>
#include <ATen/ops/conj_physical.h>
#include <ATen/ops/_neg_view.h>
#include <ATen/ops/_conj.h>
#include <ATen/ops/view_as_real.h>
#include <ATen/Dispatch_v2.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/DeviceGuard.h>

#include <cstring>
#include <optional>

#include "generated/RBLNNativeFunctions.h"
#include "runtime/device/RBLNFunctions.h"
#include "runtime/observability/RBLNObserve.h"
#include "runtime/observability/RBLNTrace.h"

namespace rbln {
namespace {

constexpr auto kKeys = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1);

c10::Device target_device(std::optional<at::Device> device) {
  auto d = device.value_or(c10::Device(kRBLN));
  TORCH_CHECK(d.type() == kRBLN, "Expected an rbln device, got ", d);
  return c10::Device(kRBLN, resolve_device(d.index()));
}

void check_factory(std::optional<at::Layout> layout, std::optional<bool> pin_memory) {
  TORCH_CHECK(layout.value_or(at::kStrided) == at::kStrided, "rbln tensors must be strided, got layout ", *layout);
  TORCH_CHECK(!pin_memory.value_or(false), "Only dense CPU tensors can be pinned");
}

bool is_dense_contiguous(const at::Tensor& t) { return t.is_contiguous() && t.is_non_overlapping_and_dense(); }

void upload(const at::Tensor& dst, const at::Tensor& src, bool non_blocking) {
  // src: CPU, already dst's dtype and shape, contiguous. dst: contiguous on device.
  auto* stream = current_stream(dst.device().index());
  bool async = non_blocking && driver::is_pinned(src.const_data_ptr());
  driver_call([&] {
    if (async) driver::memcpy_async(dst.data_ptr(), src.const_data_ptr(), dst.nbytes(), stream);
    else driver::memcpy_sync(dst.data_ptr(), src.const_data_ptr(), dst.nbytes(), stream);
  });
  if (async) {
    // Keep the pinned block from being reused until the copy has run.
    at::getHostAllocator(kRBLN)->record_event(const_cast<void*>(src.const_data_ptr()),
                                              src.storage().data_ptr().get_context(), to_c10(stream));
  }
}

void download(const at::Tensor& dst, const at::Tensor& src, bool non_blocking) {
  // src: contiguous on device; dst: CPU, contiguous, same dtype and shape.
  auto* stream = current_stream(src.device().index());
  bool async = non_blocking && driver::is_pinned(dst.const_data_ptr());
  std::optional<HostSync> sync;
  if (!async) sync.emplace(SyncKind::kDeviceToHost);
  driver_call([&] {
    if (async) driver::memcpy_async(dst.data_ptr(), src.const_data_ptr(), src.nbytes(), stream);
    else driver::memcpy_sync(dst.data_ptr(), src.const_data_ptr(), src.nbytes(), stream);
  });
  // A blocking download waits for the stream, as CUDA's does: x.cpu() orders the host after x's writers.
  if (!async) trace::report_host_wait(stream, true);
  if (async) {
    at::getHostAllocator(kRBLN)->record_event(dst.data_ptr(), dst.storage().data_ptr().get_context(), to_c10(stream));
  }
}

}  // namespace

at::Tensor empty_memory_format(c10::SymIntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<at::Device> device,
                               std::optional<bool> pin_memory, std::optional<at::MemoryFormat> memory_format) {
  check_factory(layout, pin_memory);
  const c10::DeviceGuard guard(target_device(device));
  return at::detail::empty_generic(C10_AS_INTARRAYREF_SLOW(size), c10::GetAllocator(kRBLN), kKeys,
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::SymIntArrayRef size, c10::SymIntArrayRef stride, std::optional<at::ScalarType> dtype,
                         std::optional<at::Layout> layout, std::optional<at::Device> device,
                         std::optional<bool> pin_memory) {
  check_factory(layout, pin_memory);
  const c10::DeviceGuard guard(target_device(device));
  return at::detail::empty_strided_generic(C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride),
                                           c10::GetAllocator(kRBLN), kKeys, c10::dtype_or_default(dtype));
}

// A zero tensor with no storage (autograd's zero gradients, e.g. sgn's): as on
// CPU, the ZeroTensor key makes ops read it as zeros.
at::Tensor _efficientzerotensor(c10::SymIntArrayRef size, std::optional<at::ScalarType> dtype,
                                std::optional<at::Layout> layout, std::optional<at::Device> device,
                                std::optional<bool> pin_memory) {
  check_factory(layout, pin_memory);
  const auto target = target_device(device);
  at::native::ZeroTensorAllocator allocator(target);
  return at::detail::empty_generic(C10_AS_INTARRAYREF_SLOW(size), &allocator,
                                   kKeys | c10::DispatchKeySet(c10::DispatchKey::ZeroTensor),
                                   c10::dtype_or_default(dtype), std::nullopt);
}

at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                      std::optional<c10::SymInt> storage_offset) {
  return at::native::as_strided_tensorimpl(
      self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride),
      storage_offset ? std::optional<int64_t>(storage_offset->expect_int()) : std::nullopt);
}

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor _reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride));
}

at::Tensor unfold(const at::Tensor& self, int64_t dimension, int64_t size, int64_t step) {
  return at::native::unfold(self, dimension, size, step);
}

at::Tensor view_as_real(const at::Tensor& self) { return at::native::view_as_real(self); }

at::Tensor view_as_complex(const at::Tensor& self) { return at::native::view_as_complex(self); }

at::Tensor& conj_physical_(at::Tensor& self) {
  if (!self.is_complex()) return self;
  TORCH_CHECK(!self.is_conj() && !self.is_neg(), "conj_physical_: expected a tensor without lazy conjugate/negative bits");
  at::view_as_real(self).select(-1, 1).neg_();
  return self;
}

at::Tensor _conj_physical(const at::Tensor& self) {
  auto out = at::empty(self.sizes(), self.options().dtype(self.scalar_type()));
  out.copy_(self);  // resolves self's own bits
  return rbln::conj_physical_(out);
}

at::Tensor& conj_physical_out(const at::Tensor& self, at::Tensor& out) {
  at::TensorIterator::unary_op(out, self);  // CPU's dtype, overlap and resize rules for out
  out.copy_(self);
  return rbln::conj_physical_(out);
}

void resize_storage_bytes(const c10::Storage& storage, size_t new_bytes) {
  auto* impl = storage.unsafeGetStorageImpl();
  TORCH_CHECK(impl->resizable(), "Trying to resize storage that is not resizable");
  auto device = storage.device();
  const c10::DeviceGuard guard(device);
  auto new_data = impl->allocator()->allocate(new_bytes);
  auto copy = std::min(new_bytes, impl->nbytes());
  if (copy > 0) {
    memcpy_async(new_data.get(), impl->data(), copy, device.index());
  }
  // The old block returns to the cache; stream order keeps the copy safe.
  impl->set_data_ptr_noswap(std::move(new_data));
  impl->set_nbytes(new_bytes);
}

const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size,
                          std::optional<at::MemoryFormat> memory_format) {
  auto sizes = C10_AS_INTARRAYREF_SLOW(size);
  auto* impl = self.unsafeGetTensorImpl();
  at::native::resize_impl_cpu_(impl, sizes, std::nullopt, /*resize_storage=*/false);
  if (memory_format) {
    TORCH_CHECK(*memory_format != at::MemoryFormat::Preserve, "Unsupported memory format", *memory_format);
    impl->empty_tensor_restride(*memory_format);
  }
  if (self.numel() > 0) {
    auto needed = at::detail::computeStorageNbytes(self.sizes(), self.strides(), self.element_size(),
                                                   self.storage_offset());
    if (needed > self.storage().nbytes()) resize_storage_bytes(self.storage(), needed);
  }
  return self;
}

at::Tensor& set_source_Storage_storage_offset(at::Tensor& self, at::Storage source, c10::SymInt storage_offset,
                                              c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  auto sizes = C10_AS_INTARRAYREF_SLOW(size);
  auto strides = C10_AS_INTARRAYREF_SLOW(stride);
  auto offset = storage_offset.expect_int();
  at::native::checkSetStorage(self, source, offset, sizes, strides);
  self.unsafeGetTensorImpl()->set_storage_offset(offset);
  at::OptionalIntArrayRef stride_opt = strides.data() ? at::OptionalIntArrayRef(strides) : std::nullopt;
  at::native::resize_impl_cpu_(self.unsafeGetTensorImpl(), sizes, stride_opt, /*resize_storage=*/false);
  if (self.numel() > 0) {
    auto needed = at::detail::computeStorageNbytes(self.sizes(), self.strides(), self.element_size(), offset);
    if (needed > self.storage().nbytes()) resize_storage_bytes(self.storage(), needed);
  }
  return self;
}

at::Tensor& set_source_Storage(at::Tensor& self, at::Storage source) {
  int64_t numel = source.nbytes() / self.dtype().itemsize();
  return set_source_Storage_storage_offset(self, source, 0, {numel}, {});
}

at::Tensor& set_source_Tensor(at::Tensor& self, const at::Tensor& source) {
  if (self.is_same(source)) return self;
  return set_source_Storage_storage_offset(self, source.storage(), source.storage_offset(), source.sym_sizes(),
                                           source.sym_strides());
}

at::Tensor& set_(at::Tensor& self) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, c10::GetAllocator(kRBLN), /*resizable=*/true);
  return set_source_Storage_storage_offset(self, storage, 0, {0}, {});
}

at::Tensor contiguous(const at::Tensor& t) {
  if (t.is_contiguous()) return t;
  auto out = at::empty(t.sizes(), t.options());
  device_copy(out, t);
  return out;
}

namespace {

// The same data without the lazy conjugate/negative bits.
at::Tensor without_math_bits(const at::Tensor& t) {
  auto raw = t.is_conj() ? at::_conj(t) : t;
  return raw.is_neg() ? at::_neg_view(raw) : raw;
}

at::Tensor& copy_values(at::Tensor& self, const at::Tensor& src, bool non_blocking);

}  // namespace

at::Tensor& copy_(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  TORCH_CHECK(self.defined(), "self is undefined");
  TORCH_CHECK(src.defined(), "src is undefined");
  if (self.is_same(src) || self.numel() == 0) return self;
  if (!self.is_conj() && !self.is_neg() && !src.is_conj() && !src.is_neg()) return copy_values(self, src, non_blocking);
  // Copy the stored data, then apply the bits that differ, as ATen's copy_ does.
  auto dst = without_math_bits(self);
  copy_values(dst, without_math_bits(src), non_blocking);
  if (self.is_conj() != src.is_conj()) dst.conj_physical_();
  if (self.is_neg() != src.is_neg()) dst.neg_();
  return self;
}

namespace {

at::Tensor& copy_values(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  auto shape = at::infer_size(self.sizes(), src.sizes());  // CPU's broadcast error on mismatch
  TORCH_CHECK(at::IntArrayRef(shape) == self.sizes(), "output with shape ", self.sizes(),
              " doesn't match the broadcast shape ", at::IntArrayRef(shape));
  auto expanded = src.expand(self.sizes());
  const bool to_device = self.device().type() == kRBLN;
  const bool from_device = src.device().type() == kRBLN;
  TORCH_CHECK(to_device || self.is_cpu(), "rbln copies support cpu and rbln tensors, got ", self.device());
  TORCH_CHECK(from_device || src.is_cpu(), "rbln copies support cpu and rbln tensors, got ", src.device());
  if (to_device && from_device && self.device() == src.device()) {
    at::assert_no_internal_overlap(self);  // CPU's overlap errors
    at::assert_no_partial_overlap(self, src);
    const c10::DeviceGuard guard(self.device());
    device_copy(self, expanded);
    return self;
  }
  if (to_device && from_device) {
    // Across devices: stage through contiguous buffers, ordered on both streams.
    at::Tensor staged;
    {
      const c10::DeviceGuard guard(src.device());
      staged = contiguous(expanded);
      if (staged.scalar_type() != self.scalar_type()) staged = staged.to(self.scalar_type()).contiguous();
    }
    const c10::DeviceGuard guard(self.device());
    auto dst = is_dense_contiguous(self) ? self : at::empty(self.sizes(), self.options());
    driver_call([&] {
      driver::stream_synchronize(current_stream(self.device().index()));
      driver::memcpy_sync(dst.data_ptr(), staged.const_data_ptr(), dst.nbytes(), current_stream(src.device().index()));
    });
    // Both waits precede the copy; self's stream still has work when a device copy into self follows.
    trace::report_host_wait(current_stream(self.device().index()), dst.is_same(self));
    trace::report_host_wait(current_stream(src.device().index()), true);
    if (!dst.is_same(self)) device_copy(self, dst);
    return self;
  }
  if (to_device) {
    const c10::DeviceGuard guard(self.device());
    auto host = expanded;
    if (host.scalar_type() != self.scalar_type()) host = host.to(self.scalar_type());
    host = host.contiguous();
    auto dst = is_dense_contiguous(self) ? self : at::empty(self.sizes(), self.options());
    upload(dst, host, non_blocking);
    if (!dst.is_same(self)) device_copy(self, dst);
    return self;
  }
  const c10::DeviceGuard guard(src.device());
  auto staged = contiguous(expanded);
  bool direct = is_dense_contiguous(self) && self.scalar_type() == src.scalar_type();
  auto host = direct ? self : at::empty(self.sizes(), src.options().device(at::kCPU));
  download(host, staged, non_blocking && direct);
  if (!direct) self.copy_(host);
  return self;
}

}  // namespace

at::Tensor _copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  at::Tensor out = dst;
  copy_(out, self, non_blocking);
  return dst;
}

at::Tensor _copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  at::Tensor out = dst;
  out.resize_(self.sizes());
  copy_(out, self, false);
  return dst;
}

void record_stream(at::Tensor& self, at::Stream s) {
  c10::getDeviceAllocator(kRBLN)->recordStream(self.storage().data_ptr(), s);
}

// Whether `self.data = from` may swap TensorImpl contents. c10 lists CPU and
// CUDA dense tensors as compatible with each other but not PrivateUse1, so
// without this nn.Module._apply wraps every tensor moved to or from rbln in a
// new Parameter: tied weights come apart and optimizers keep the old tensors.
// c10 names this op as the PrivateUse1 extension point (TensorImpl.h). It is
// only dispatched here when one of the tensors is on rbln; dense strided rbln
// and CPU tensors are then compatible, as CPU and CUDA ones are.
bool _has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense = [](const at::Tensor& t) {
    return t.layout() == at::kStrided && !t.is_quantized() && (t.is_cpu() || t.device().type() == kRBLN);
  };
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set()) || (dense(self) && dense(from));
}

// Reads the element straight into a Scalar: no temporary CPU tensor and no second dispatch.
at::Scalar _local_scalar_dense(const at::Tensor& self) {
  alignas(16) char bytes[16];
  TORCH_CHECK(self.element_size() <= static_cast<int64_t>(sizeof bytes), "_local_scalar_dense: unsupported dtype ",
              self.scalar_type());
  const c10::DeviceGuard guard(self.device());
  const HostSync sync(SyncKind::kItem);
  driver_call([&] {
    driver::memcpy_sync(bytes, self.const_data_ptr(), self.element_size(), current_stream(self.device().index()));
  });
  trace::report_host_wait(current_stream(self.device().index()), true);
  at::Scalar result;
  AT_DISPATCH_V2(self.scalar_type(), "_local_scalar_dense_rbln", AT_WRAP([&] {
    scalar_t value;
    std::memcpy(&value, bytes, sizeof value);
    result = at::Scalar(value);
  }), AT_EXPAND(AT_ALL_TYPES_AND_COMPLEX), at::kComplexHalf, at::kHalf, at::kBool, at::kBFloat16,
      AT_EXPAND(AT_FLOAT8_TYPES), AT_EXPAND(AT_BAREBONES_UNSIGNED_TYPES));
  return result;
}

}  // namespace rbln
