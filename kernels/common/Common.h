// Helpers shared by the hand-written kernels: device checks, layout fix-ups
// and the dtype dispatch every kernel uses.
#pragma once

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>

#include <initializer_list>
#include <stdexcept>
#include <string>

#include "generated/RBLNNativeFunctions.h"
#include "runtime/device/RBLNOps.h"
#include "runtime/device/RBLNFunctions.h"

// Every dtype a device kernel may see: what ops.yaml can declare.
#define RBLN_DISPATCH_ALL(TYPE, NAME, ...) \
  AT_DISPATCH_ALL_TYPES_AND3(at::kHalf, at::kBFloat16, at::kBool, TYPE, NAME, __VA_ARGS__)
#define RBLN_DISPATCH_ALL_AND_COMPLEX(TYPE, NAME, ...) \
  AT_DISPATCH_ALL_TYPES_AND_COMPLEX_AND3(at::kHalf, at::kBFloat16, at::kBool, TYPE, NAME, __VA_ARGS__)
#define RBLN_DISPATCH_ALL_AND_COMPLEX32(TYPE, NAME, ...) \
  AT_DISPATCH_ALL_TYPES_AND_COMPLEX_AND4(at::kHalf, at::kBFloat16, at::kBool, at::kComplexHalf, TYPE, NAME, __VA_ARGS__)
#define RBLN_DISPATCH_NUMERIC(TYPE, NAME, ...) \
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, TYPE, NAME, __VA_ARGS__)
#define RBLN_DISPATCH_FLOATING(TYPE, NAME, ...) \
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, TYPE, NAME, __VA_ARGS__)

namespace rbln::kernels {

constexpr int64_t kGrainSize = 32768;  // elements per thread before splitting

// CPU's message for an index out of range. Checks on the stream throw it as std::out_of_range, which the
// driver reports as an index error (IndexError, as CPU raises).
inline std::string index_out_of_bounds(int64_t index, int64_t dim, int64_t size) {
  return "index " + std::to_string(index) + " is out of bounds for dimension " + std::to_string(dim) +
         " with size " + std::to_string(size);
}

// CUDA's wording, so code written for cuda reads the same error.
inline void check_same_device(std::initializer_list<const at::Tensor*> tensors) {
  const at::Tensor* first = nullptr;
  for (const auto* t : tensors) {
    if (!t->defined()) continue;
    if (!first) {
      first = t;
    } else if (t->device() != first->device()) {
      TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, ",
                  first->device(), " and ", t->device(), "!");
    }
  }
}

// CPU's parameter dtype rule for batch and group norm (checkMixedDataTypes):
// the parameters share the input's dtype, or are all float32 for a
// float16/bfloat16 input.
inline void check_norm_param_dtypes(const at::Tensor& input, std::initializer_list<const at::Tensor*> params) {
  const at::Tensor* first = nullptr;
  for (const auto* p : params) {
    if (p->defined() && !first) first = p;
  }
  if (!first) return;
  if (first->scalar_type() == input.scalar_type()) {
    for (const auto* p : params) {
      TORCH_CHECK(!p->defined() || p->scalar_type() == input.scalar_type(), "expected scalar type ",
                  input.scalar_type(), " but found ", p->scalar_type());
    }
    return;
  }
  for (const auto* p : params) {
    TORCH_CHECK(!p->defined() || p->scalar_type() == at::kFloat,
                "mixed dtype (CPU): expect parameter to have scalar type of Float");
  }
  TORCH_CHECK(input.scalar_type() == at::kHalf || input.scalar_type() == at::kBFloat16,
              "mixed dtype (CPU): all inputs must share same datatype.");
}

// Resizes `out` like CPU's out= ops and checks its dtype and device; an
// undefined `out` becomes a new tensor of that size and dtype. With `castable`
// (ops whose CPU kernels cast the result into out, the caller having checked
// at::canCast) out may have another dtype: write it through write_as.
void prepare_out(at::Tensor& out, at::IntArrayRef sizes, at::ScalarType dtype, const at::Tensor& like,
                 const char* op, bool castable = false);

// CPU's check that an out= result shares no memory with itself or with the
// op's inputs (ATen/MemoryOverlap.h), before it is resized.
void check_no_overlap(const at::Tensor& out, std::initializer_list<const at::Tensor*> inputs);

// Runs `fill(target)` into `out`, through a contiguous temporary of `dtype`
// when `out` is not contiguous (kernels that write rows assume contiguity) or
// has another dtype (a castable out=).
template <class F>
void write_as(const at::Tensor& out, at::ScalarType dtype, const F& fill) {
  if (out.is_contiguous() && out.scalar_type() == dtype) {
    fill(out);
    return;
  }
  auto tmp = at::empty(out.sizes(), out.options().dtype(dtype));
  fill(tmp);
  device_copy(out, tmp);
}
template <class F>
void write_contiguous(const at::Tensor& out, const F& fill) {
  write_as(out, out.scalar_type(), fill);
}

template <class F>
void launch_on(const at::Tensor& t, const char* name, F&& task) {
  launch(t.device().index(), name, std::forward<F>(task));
}

}  // namespace rbln::kernels
