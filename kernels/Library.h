// The emulated device's op library. Where an accelerator calls a vendor
// library (FFT, distinct values, embedding bags, CTC), the emulator runs the
// kernel libtorch's CPU build has, inside a launch, in stream order, over CPU
// views of device memory (host-addressable inside a launch): results are
// CPU's bit for bit, and nothing waits but what waits on CUDA too. A vendor
// replaces these calls with its library's (docs/porting.md).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

namespace rbln::kernels {

// The op on plain CPU tensors: inputs (an undefined one stays undefined) to results.
using LibraryOp = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>& inputs)>;

// Queues op(CPU views of inputs) on the stream of the first defined input's
// device and copies each result into the matching output, a device tensor the
// caller sized. (An op may also write into one of its inputs' views.)
void launch_library(const char* name, const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs,
                    LibraryOp op);

// The op's results as new device tensors, sized by running op on meta tensors
// (its meta function, which also raises CPU's shape errors now), computed on the stream.
std::vector<at::Tensor> library_call(const char* name, const std::vector<at::Tensor>& inputs, LibraryOp op);

// For results whose sizes depend on the values (unique, bincount): the host
// waits for the computation, as CUDA syncs there, then sizes the results.
std::vector<at::Tensor> library_call_synced(const char* name, const std::vector<at::Tensor>& inputs, LibraryOp op);

}  // namespace rbln::kernels
