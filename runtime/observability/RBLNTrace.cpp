#include "runtime/observability/RBLNTrace.h"

#include <mutex>
#include <utility>

namespace rbln::trace {
namespace {
std::mutex g_mutex;
std::vector<Record> g_records;
}  // namespace

std::atomic<bool> g_enabled{false};

void set_enabled(bool on) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_records.clear();
  g_enabled.store(on, std::memory_order_relaxed);
}

std::vector<Record> drain() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return std::exchange(g_records, {});
}

void append(Kind kind, uintptr_t handle, int device, const driver::Stream* stream) {
  int64_t id = -1;
  if (stream) {
    device = driver::stream_device(stream);
    id = driver::stream_id(stream);
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  // Re-checked under the lock: a record racing with set_enabled(false) is dropped.
  if (g_enabled.load(std::memory_order_relaxed)) g_records.push_back({kind, handle, device, id});
}

}  // namespace rbln::trace
