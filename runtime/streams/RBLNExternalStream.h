// Raw stream handles, as CUDA's cudaStream_t values: torch.rbln.Stream.rbln_stream
// gives one to another library, torch.rbln.ExternalStream wraps one it hands back.
#pragma once

#include <c10/core/Stream.h>

#include <cstdint>

namespace rbln {

uintptr_t stream_handle(const c10::Stream& stream);
// The stream a handle names; a value that names no rbln stream raises.
c10::Stream stream_from_handle(uintptr_t handle);

}  // namespace rbln
