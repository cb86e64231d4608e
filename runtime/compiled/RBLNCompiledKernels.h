// Kernels that torch.compile generates (python/torch_rbln/_inductor/): host
// loops compiled by Inductor's C++ backend. They run on the device, queued on
// the current stream of their buffers' device like every eager kernel, so they
// are ordered after earlier eager work and their errors surface at the next
// synchronizing call as "<graph>:<kernel>: <message>".
#pragma once

#include <cstdint>

namespace rbln {

struct CompiledKernel;

// A kernel's identity for launches: its name (errors, explain()) and its
// device-op counter. Interned: one per name, valid for the process.
CompiledKernel* compiled_kernel(const char* name);
// The same for a kernel of a compiled op's plan (runtime/compiled/RBLNCompiledOps.h), which
// counts as a call of its op, not as a device op of its own.
CompiledKernel* plan_kernel(const char* name);

// The launch entry of generated kernels (a C ABI, called from code built
// without PyTorch headers). Takes ownership of `args`: `run(args)` runs on the
// stream worker, then `destroy(args)`; `buffer` is any of the kernel's device
// pointers, whose device it runs on (the current device if none is).
extern "C" void rbln_launch_compiled_kernel(CompiledKernel* kernel, const void* buffer,
                                            void (*run)(void* args), void* args, void (*destroy)(void* args));

}  // namespace rbln
