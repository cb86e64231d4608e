// The caching allocator's controls that c10::DeviceAllocator has no virtual for.
#pragma once

#include <c10/core/Device.h>

namespace rbln {

// torch.cuda.set_per_process_memory_fraction: reserving past fraction * capacity of
// `device` raises OutOfMemoryError (after the cache is returned to the driver).
void set_memory_fraction(double fraction, c10::DeviceIndex device);
double memory_fraction(c10::DeviceIndex device);

}  // namespace rbln
