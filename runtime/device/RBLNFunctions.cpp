#include "runtime/device/RBLNFunctions.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <vector>

namespace rbln {
namespace {
thread_local c10::DeviceIndex tl_device = 0;
// Per device: the thread's current stream; nullptr means the default stream.
thread_local std::vector<driver::Stream*> tl_streams;
constexpr size_t kMaxCachedDevices = 64;
}  // namespace

[[noreturn]] void rethrow(const driver::Error& error) {
  if (error.kind == driver::Error::kOutOfMemory) {
    TORCH_CHECK_WITH(OutOfMemoryError, false, error.what());
  }
  TORCH_CHECK_INDEX(error.kind != driver::Error::kIndex, error.what());
  TORCH_CHECK(false, error.what());
}

c10::DeviceIndex device_count() noexcept {
  return static_cast<c10::DeviceIndex>(driver::device_count());
}

std::string device_count_error() { return driver::device_count_error(); }

size_t device_capacity(c10::DeviceIndex device) {
  return driver_call([&] { return driver::device_capacity(resolve_device(device)); });
}

bool launch_blocking() { return driver::launch_blocking(); }

bool strict_mode() { return driver::strict_mode(); }

c10::DeviceIndex resolve_device(c10::DeviceIndex device) {
  if (device < 0) return tl_device;
  driver_call([&] { driver::check_device(device); });
  return device;
}

c10::DeviceIndex current_device() { return tl_device; }

void set_device(c10::DeviceIndex device) { tl_device = resolve_device(device); }

driver::Stream* current_stream(c10::DeviceIndex device) {
  if (device < 0) device = tl_device;
  // Per-op fast path: a stream set on this thread, or the device's default
  // stream, cached once checked (device indices are range-checked there).
  if (static_cast<size_t>(device) < tl_streams.size() && tl_streams[device]) return tl_streams[device];
  static std::atomic<driver::Stream*> defaults[kMaxCachedDevices];
  if (static_cast<size_t>(device) < kMaxCachedDevices) {
    if (auto* s = defaults[device].load(std::memory_order_acquire)) return s;
  }
  auto* s = driver_call([&] { return driver::default_stream(resolve_device(device)); });
  if (static_cast<size_t>(device) < kMaxCachedDevices) defaults[device].store(s, std::memory_order_release);
  return s;
}

void set_current_stream(const c10::Stream& stream) {
  auto device = resolve_device(stream.device_index());
  if (tl_streams.size() <= static_cast<size_t>(device)) tl_streams.resize(device + 1, nullptr);
  tl_streams[device] = to_driver(stream);
}

driver::Stream* to_driver(const c10::Stream& stream) {
  TORCH_CHECK(stream.device_type() == kRBLN, "Expected an rbln stream, got ", stream);
  return driver_call([&] { return driver::stream_from_id(resolve_device(stream.device_index()), stream.id()); });
}

void memcpy_async(void* dst, const void* src, size_t bytes, c10::DeviceIndex device) {
  auto* stream = current_stream(device);
  driver_call([&] { driver::memcpy_async(dst, src, bytes, stream); });
}

c10::Stream to_c10(driver::Stream* stream) {
  return c10::Stream(c10::Stream::UNSAFE,
                     c10::Device(kRBLN, static_cast<c10::DeviceIndex>(driver::stream_device(stream))),
                     driver::stream_id(stream));
}

}  // namespace rbln
