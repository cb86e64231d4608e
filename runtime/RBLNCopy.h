// The one kernel the glue calls: copies between two tensors of one device.
// kernels/ defines device_copy (a vendor's kernels define theirs), so the glue
// depends on no kernel header; docs/porting.md.
#pragma once

#include <ATen/core/Tensor.h>

namespace rbln {

// dst <- src on one device: dtype conversion, broadcasting, any strides.
void device_copy(const at::Tensor& dst, const at::Tensor& src);
// The tensor itself when it is contiguous, else a contiguous device copy.
at::Tensor contiguous(const at::Tensor& t);

}  // namespace rbln
