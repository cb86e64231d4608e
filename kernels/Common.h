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

#include "kernels/Kernels.h"
#include "runtime/RBLNFunctions.h"

// Every dtype a device kernel may see: what ops.yaml can declare.
#define RBLN_DISPATCH_ALL(TYPE, NAME, ...) \
  AT_DISPATCH_ALL_TYPES_AND3(at::kHalf, at::kBFloat16, at::kBool, TYPE, NAME, __VA_ARGS__)
#define RBLN_DISPATCH_NUMERIC(TYPE, NAME, ...) \
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, TYPE, NAME, __VA_ARGS__)
#define RBLN_DISPATCH_FLOATING(TYPE, NAME, ...) \
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, TYPE, NAME, __VA_ARGS__)

namespace rbln::kernels {

constexpr int64_t kGrainSize = 32768;  // elements per thread before splitting

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

// Resizes `out` like CPU's out= ops and checks its dtype and device; an
// undefined `out` becomes a new tensor of that size and dtype.
void prepare_out(at::Tensor& out, at::IntArrayRef sizes, at::ScalarType dtype, const at::Tensor& like,
                 const char* op);

// Runs `fill(target)` into `out`, through a contiguous temporary when `out`
// is not contiguous (kernels that write rows assume contiguity).
template <class F>
void write_contiguous(const at::Tensor& out, const F& fill) {
  if (out.is_contiguous()) {
    fill(out);
    return;
  }
  auto tmp = at::empty(out.sizes(), out.options());
  fill(tmp);
  device_copy(out, tmp);
}

template <class F>
void launch_on(const at::Tensor& t, const char* name, F&& task) {
  launch(t.device().index(), name, std::forward<F>(task));
}

}  // namespace rbln::kernels
