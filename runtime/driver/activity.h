// Activity records of the emulated driver, for profilers: what each launch
// and copy ran, where and when. Apart from rbln_driver.h so that kernels,
// which never read them, do not depend on them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace rbln::driver {

// ---- activity records (profilers) ---------------------------------------------
// While recording is on, every launch and copy leaves a record of what ran,
// where and when, for a profiler to turn into a device timeline. Times are
// system_clock nanoseconds since the epoch (a profiler's clock). Off, a launch
// pays one relaxed atomic load.
struct Activity {
  enum Kind { kKernel, kMemcpy };
  Kind kind;
  const char* name;      // the launch's name; copies: "Memcpy HtoD" and the like
  int device;
  int64_t stream;        // stream id on `device`
  uint64_t id;           // unique among the records of a process
  uint64_t correlation;  // the launching thread's set_correlation_id, 0 if none
  int32_t host_thread;   // the launching thread's system thread id
  int64_t host_begin_ns, host_end_ns;  // the launch or copy call on the host
  int64_t begin_ns, end_ns;            // the work itself
  size_t bytes;                        // copies: bytes moved; kernels: 0
};
// Turning recording on drops the records of an earlier recording.
void set_activity_recording(bool on);
bool activity_recording();
// Tags this thread's later launches and copies (a profiler's id of the op
// that queues them); 0 clears it.
void set_correlation_id(uint64_t id);
// The records of finished work so far (work still queued is recorded when it runs).
std::vector<Activity> take_activities();
// Waits until every stream of every device has run the work queued so far, so
// that its records can be taken. A failed task's error stays for the
// program's own next synchronizing call.
void wait_all_streams();

}  // namespace rbln::driver
