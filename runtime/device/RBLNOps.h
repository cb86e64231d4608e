// Runtime helpers next to the hand-written memory, view and copy ops (runtime/device/RBLNOps.cpp), whose
// declarations are generated with the other kernels' (generated/RBLNNativeFunctions.h).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Storage.h>

#include <cstddef>

namespace rbln {

// The tensor itself when it is contiguous, else a contiguous device copy.
at::Tensor contiguous(const at::Tensor& t);
// Grows or shrinks a device storage, keeping its contents (stream-ordered).
void resize_storage_bytes(const c10::Storage& storage, size_t new_bytes);

}  // namespace rbln
