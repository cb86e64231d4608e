// Hand-written memory, view and copy ops: the tensor plumbing every backend
// needs before any kernel can run. Signatures are the dispatcher's.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>
#include <c10/core/Storage.h>

#include <array>
#include <optional>
#include <tuple>

namespace rbln {

at::Tensor empty_memory_format(c10::SymIntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<at::Device> device,
                               std::optional<bool> pin_memory, std::optional<at::MemoryFormat> memory_format);
at::Tensor _efficientzerotensor(c10::SymIntArrayRef size, std::optional<at::ScalarType> dtype,
                                std::optional<at::Layout> layout, std::optional<at::Device> device,
                                std::optional<bool> pin_memory);
at::Tensor empty_strided(c10::SymIntArrayRef size, c10::SymIntArrayRef stride, std::optional<at::ScalarType> dtype,
                         std::optional<at::Layout> layout, std::optional<at::Device> device,
                         std::optional<bool> pin_memory);
at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                      std::optional<c10::SymInt> storage_offset);
at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size);
at::Tensor _reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride);
at::Tensor unfold(const at::Tensor& self, int64_t dimension, int64_t size, int64_t step);
at::Tensor view_as_real(const at::Tensor& self);
at::Tensor view_as_complex(const at::Tensor& self);
// Complex conjugation on the device: negate the imaginary parts through a real view.
at::Tensor& conj_physical_(at::Tensor& self);
at::Tensor _conj_physical(const at::Tensor& self);
const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size,
                          std::optional<at::MemoryFormat> memory_format);
at::Tensor& set_(at::Tensor& self);
at::Tensor& set_source_Storage(at::Tensor& self, at::Storage source);
at::Tensor& set_source_Storage_storage_offset(at::Tensor& self, at::Storage source, c10::SymInt storage_offset,
                                              c10::SymIntArrayRef size, c10::SymIntArrayRef stride);
at::Tensor& set_source_Tensor(at::Tensor& self, const at::Tensor& source);
at::Tensor& copy_(at::Tensor& self, const at::Tensor& src, bool non_blocking);
at::Tensor _copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking);
at::Tensor _copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst);
at::Scalar _local_scalar_dense(const at::Tensor& self);
void record_stream(at::Tensor& self, at::Stream s);
bool _has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from);

// Grows or shrinks a device storage, keeping its contents (stream-ordered).
void resize_storage_bytes(const c10::Storage& storage, size_t new_bytes);

}  // namespace rbln
