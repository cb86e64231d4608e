// Sparse COO tensors on rbln: a SparseTensorImpl whose indices and values are dense rbln tensors.
// Construction, the structure queries and copies are ATen's own sparse functions, which only move
// indices and values with the dense ops (device-agnostic, as CUDA registers them too); every other op
// with a sparse operand computes through the counted CPU fallback (fallback_sparse): no device kernel
// works on the sparse layout yet.
#include <ATen/ops/_coalesced_native.h>
#include <ATen/ops/_indices_native.h>
#include <ATen/ops/_nnz_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_and_tensors_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_native.h>
#include <ATen/ops/_values_native.h>
#include <ATen/ops/clone_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/copy_sparse_to_sparse_native.h>
#include <ATen/ops/dense_dim_native.h>
#include <ATen/ops/empty_native.h>
#include <ATen/ops/indices_native.h>
#include <ATen/ops/is_coalesced_native.h>
#include <ATen/ops/sparse_dim_native.h>
#include <ATen/ops/values_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "runtime/fallback/RBLNFallback.h"

namespace rbln {
namespace {

// The constructors make their empty indices and values on the current device, as torchgen's wrappers of
// CUDA's make them inside a guard of the `device` argument: without it a tensor for rbln:1 made while rbln:0
// is current fails SparseTensorImpl's device check.
at::Tensor sparse_with_dims(int64_t sparse_dim, int64_t dense_dim, at::IntArrayRef size,
                            std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                            std::optional<at::Device> device, std::optional<bool> pin_memory) {
  const c10::OptionalDeviceGuard guard(device);
  return at::native::new_with_dims_sparse(sparse_dim, dense_dim, size, dtype, layout, device, pin_memory);
}

at::Tensor sparse_with_dims_and_tensors(int64_t sparse_dim, int64_t dense_dim, c10::SymIntArrayRef size,
                                        const at::Tensor& indices, const at::Tensor& values,
                                        std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                                        std::optional<at::Device> device, std::optional<bool> pin_memory,
                                        std::optional<bool> is_coalesced) {
  const c10::OptionalDeviceGuard guard(device);
  return at::native::new_with_dims_and_tensor_sparse_symint(sparse_dim, dense_dim, size, indices, values, dtype,
                                                            layout, device, pin_memory, is_coalesced);
}

at::Tensor empty_sparse(at::IntArrayRef size, std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                        std::optional<at::Device> device, std::optional<bool> pin_memory,
                        std::optional<at::MemoryFormat> memory_format) {
  const c10::OptionalDeviceGuard guard(device);
  return at::native::empty_sparse(size, dtype, layout, device, pin_memory, memory_format);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1, m) {
  m.impl("_sparse_coo_tensor_with_dims", TORCH_FN(sparse_with_dims));
  m.impl("_sparse_coo_tensor_with_dims_and_tensors", TORCH_FN(sparse_with_dims_and_tensors));
  m.impl("empty.memory_format", TORCH_FN(empty_sparse));
  m.impl("sparse_dim", at::native::sparse_dim_sparse);
  m.impl("dense_dim", at::native::dense_dim_sparse);
  m.impl("_nnz", at::native::_nnz_sparse);
  m.impl("is_coalesced", at::native::is_coalesced_sparse);
  m.impl("_coalesced_", at::native::_coalesced_sparse_);
  m.impl("_indices", at::native::_indices_sparse);
  m.impl("_values", at::native::_values_sparse);
  m.impl("indices", at::native::indices_sparse);
  m.impl("values", at::native::values_sparse);
  m.impl("clone", at::native::clone_sparse);
  m.impl("copy_", at::native::copy_sparse_wrapper_);
  m.impl("copy_sparse_to_sparse_", at::native::copy_sparse_);
}

TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback_sparse>());
}

}  // namespace rbln
