// Trace seam for the stream sanitizer (python/torch_rbln/sanitizer.py), the
// counterpart of CUDA's GPU trace: the guard, the caching allocator and the
// blocking copies report stream, event and memory events here. Disabled, a
// report is one relaxed atomic load and a not-taken branch.
//
// Enabled, records are buffered (a leaf mutex, nothing else) and the Python
// side drains them around every op it sees. They are never delivered by
// calling into Python from the reporting thread, which may be a stream worker
// or hold the allocator's lock: taking the GIL there could deadlock.
#pragma once

#include <c10/macros/Macros.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "runtime/driver/rbln_driver.h"

namespace rbln::trace {

// The values are torch_rbln._C._trace_kinds().
enum class Kind : int {
  kEventCreation,
  kEventDeletion,
  kEventRecord,           // handle: event; stream: the recording stream
  kEventWait,             // handle: event; stream: the waiting stream
  kEventSynchronization,  // handle: event (the host waited for it)
  kStreamCreation,
  kStreamSynchronization,  // the host waited for the stream; handle: report_host_wait's op_done
  kDeviceSynchronization,  // the host waited for every stream of `device`
  kMemoryAllocation,       // handle: block address
  kMemoryDeallocation,
};

struct Record {
  Kind kind;
  uintptr_t handle;  // event, data pointer or op_done; 0 when unused
  int device;        // -1 when unused
  int64_t stream;    // stream id on `device`, -1 when unused
};

extern std::atomic<bool> g_enabled;

inline bool enabled() { return g_enabled.load(std::memory_order_relaxed); }

// Turning tracing on or off drops buffered records.
void set_enabled(bool on);
std::vector<Record> drain();

void append(Kind kind, uintptr_t handle, int device, const driver::Stream* stream);

inline void report(Kind kind, const void* handle, int device = -1) {
  if (C10_UNLIKELY(enabled())) append(kind, reinterpret_cast<uintptr_t>(handle), device, nullptr);
}
inline void report_stream(Kind kind, const driver::Stream* stream, const void* handle = nullptr) {
  if (C10_UNLIKELY(enabled())) append(kind, reinterpret_cast<uintptr_t>(handle), -1, stream);
}
// A host wait for `stream` inside an op (a blocking copy). `op_done`: the op
// queues nothing more on the stream, so the wait also covers the op's own work.
inline void report_host_wait(const driver::Stream* stream, bool op_done) {
  if (C10_UNLIKELY(enabled())) append(Kind::kStreamSynchronization, op_done, -1, stream);
}

}  // namespace rbln::trace
