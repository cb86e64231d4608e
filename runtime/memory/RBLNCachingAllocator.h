// The caching allocator's controls that c10::DeviceAllocator has no virtual
// for: the per-process memory fraction, and memory history and snapshots in
// the shape of CUDA's (torch.cuda.memory._record_memory_history / _snapshot),
// so that torch.cuda._memory_viz and the pytorch.org memory viewer read them.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Device.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace rbln::driver {
struct Stream;
}

namespace rbln {

// torch.cuda.set_per_process_memory_fraction: reserving past fraction * capacity of
// `device` raises OutOfMemoryError (after the cache is returned to the driver).
void set_memory_fraction(double fraction, c10::DeviceIndex device);
double memory_fraction(c10::DeviceIndex device);
// torch.cuda.memory.caching_allocator_enable: disabled, a freed block's segment goes back to the
// driver as soon as it is wholly free (stream-ordered, as a cache miss returns segments).
void set_caching_enabled(bool enabled);
bool caching_enabled();

// torch.cuda.MemPool: allocations of a thread inside use_mem_pool(pool) reuse only the pool's
// freed blocks, and others never reuse them; a released pool's memory goes back to the driver
// (its free segments now, the rest as its tensors are freed).
uint64_t create_mem_pool();  // never 0, the default pool's id
void begin_mem_pool(c10::DeviceIndex device, uint64_t mem_pool);  // this thread's allocations on `device`
void end_mem_pool(c10::DeviceIndex device, uint64_t mem_pool);
void release_mem_pool(uint64_t mem_pool);

// Graph capture (runtime/graphs), as CUDA's beginAllocateToPool: while `stream` captures, allocations on it (from
// any thread), and on the streams that join its capture, come from `mem_pool`; its freed blocks go back there.
void begin_capture_pool(driver::Stream* stream, uint64_t mem_pool);
void end_capture_pool(driver::Stream* stream);

namespace memory {

struct HistoryConfig {
  enum Record { kOff, kState, kAll };                  // `enabled`: None, "state", "all"
  enum Context { kNoContext, kStateContext, kAlloc, kAllContext };  // `context`: which actions keep stacks
  Record record = kOff;
  Context context = kNoContext;
  bool cpp_frames = false;  // `stacks="all"`: C++ frames as well as Python's
  size_t max_entries = SIZE_MAX;
  bool clear = false;       // drop the history recorded so far
};
void record_history(const HistoryConfig& config);

using Context = std::shared_ptr<c10::GatheredContext>;

struct BlockInfo {
  enum State { kActiveAllocated, kActivePendingFree, kInactive };
  uintptr_t address;
  size_t size, requested;
  State state;
  Context context;  // where it was allocated (recording with a context)
};

struct SegmentInfo {
  int device;
  uintptr_t address;
  size_t total, allocated, active, requested;
  int64_t stream;
  bool large;
  uint64_t mem_pool;  // 0: the default pool
  std::vector<BlockInfo> blocks;  // in address order
};

struct TraceEntry {
  enum Action { kAlloc, kFreeRequested, kFreeCompleted, kSegmentAlloc, kSegmentFree, kOOM };
  Action action;
  uintptr_t address;
  size_t size;
  int64_t stream;
  int64_t time_us;  // system_clock microseconds since the epoch
  size_t device_free;  // kOOM only
  Context context;
};

struct Snapshot {
  std::vector<SegmentInfo> segments;
  std::vector<std::vector<TraceEntry>> device_traces;  // one per device
};
Snapshot snapshot();

}  // namespace memory
}  // namespace rbln
