// The reduction family's plan, shared by every reduction kernel: the reduced
// dims are moved innermost and made contiguous, so each output element
// reduces one contiguous row of `inner` values.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace rbln::kernels {

struct Plan {
  at::Tensor rows;  // contiguous [outer, inner] view of the input, in the compute dtype
  std::vector<int64_t> out_sizes;
  int64_t outer, inner;
};

// dims: the dims to reduce (none or empty: all); compute: the dtype rows are converted to.
Plan plan(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim, at::ScalarType compute);

}  // namespace rbln::kernels
