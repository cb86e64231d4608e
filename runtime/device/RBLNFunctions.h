// Device and stream state of the calling thread, and the one place where
// driver errors become PyTorch errors. Everything above the driver uses these.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Stream.h>
#include <c10/util/Exception.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

#include "runtime/driver/rbln_driver.h"

namespace rbln {

constexpr c10::DeviceType kRBLN = c10::DeviceType::PrivateUse1;

c10::DeviceIndex device_count() noexcept;
std::string device_count_error();  // why device_count() is 0, or empty
size_t device_capacity(c10::DeviceIndex device);  // bytes of device memory
bool launch_blocking();  // RBLN_LAUNCH_BLOCKING=1
bool strict_mode();      // RBLN_STRICT=1
c10::DeviceIndex current_device();
void set_device(c10::DeviceIndex device);
// -1 means the current device; anything else is range-checked.
c10::DeviceIndex resolve_device(c10::DeviceIndex device);

driver::Stream* current_stream(c10::DeviceIndex device = -1);
void set_current_stream(const c10::Stream& stream);
driver::Stream* to_driver(const c10::Stream& stream);
c10::Stream to_c10(driver::Stream* stream);

// Maps a driver error to the matching PyTorch error (OutOfMemoryError,
// IndexError-free RuntimeError, ...).
[[noreturn]] void rethrow(const driver::Error& error);

template <class F>
auto driver_call(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const driver::Error& e) {
    rethrow(e);
  }
}

// Queues a copy of `bytes` contiguous bytes between device (or pinned host)
// addresses on the current stream of `device`.
void memcpy_async(void* dst, const void* src, size_t bytes, c10::DeviceIndex device);

// Queues `task` (a callable, constructed in place in the stream's launch
// ring: no allocation) on the current stream of `device`. `name` must be static.
// A c10::Error the task throws surfaces as "<name>: <message>", without the
// C++ backtrace c10 appends to what().
template <class F>
void launch(c10::DeviceIndex device, const char* name, F&& task) {
  auto* stream = current_stream(device);
  driver_call([&] {
    driver::launch(stream, name, [task = std::forward<F>(task)]() mutable {
      try {
        task();
      } catch (const c10::IndexError& e) {  // reported as an index error, IndexError as CPU's
        throw std::out_of_range(e.what_without_backtrace());
      } catch (const c10::Error& e) {
        throw std::runtime_error(e.what_without_backtrace());
      }
    });
  });
}

// Runs a meta function to size a result. Where one written in Python raises AssertionError (torch's
// decompositions and meta registrations do where CPU's kernel has a TORCH_CHECK), CPU's RuntimeError with the
// message; every other error (IndexError, ...) passes as it is.
template <class F>
decltype(auto) run_meta(F&& meta) {
  try {
    return meta();
  } catch (const c10::Error&) {
    throw;
  } catch (const std::exception& e) {
    const std::string text = e.what(), prefix = "AssertionError: ";  // Python's error: "Type: message\n\nAt: ..."
    if (text.rfind(prefix, 0) != 0) throw;
    TORCH_CHECK(false, text.substr(prefix.size(), text.find("\n\nAt:") - prefix.size()));
  }
}

}  // namespace rbln
