// c10's device guard for rbln: current device, streams and events. torch.Stream,
// torch.Event, torch.accelerator and DeviceGuard all come through here.
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/CachingDeviceAllocator.h>

#include <array>
#include <atomic>
#include <mutex>
#include <vector>

#include "runtime/device/RBLNFunctions.h"
#include "runtime/observability/RBLNObserve.h"
#include "runtime/observability/RBLNTrace.h"

namespace rbln {
namespace {

constexpr int kPoolSize = 32;  // streams per device handed out round-robin

driver::Event* as_event(void* event) { return static_cast<driver::Event*>(event); }

struct RBLNGuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kRBLN; }

  c10::Device exchangeDevice(c10::Device device) const override {
    auto old = getDevice();
    if (device.index() != old.index()) setDevice(device);
    return old;
  }
  c10::Device getDevice() const override { return c10::Device(kRBLN, current_device()); }
  void setDevice(c10::Device device) const override {
    TORCH_CHECK(device.type() == kRBLN, "Expected an rbln device, got ", device);
    set_device(device.index());
  }
  void uncheckedSetDevice(c10::Device device) const noexcept override {
    try {
      set_device(device.index());
    } catch (...) {
    }
  }
  c10::DeviceIndex deviceCount() const noexcept override { return device_count(); }

  c10::Stream getStream(c10::Device device) const override {
    return to_c10(current_stream(device.index()));
  }
  c10::Stream getDefaultStream(c10::Device device) const override {
    return to_c10(driver_call([&] { return driver::default_stream(resolve_device(device.index())); }));
  }
  c10::Stream getNewStream(c10::Device device, int priority) const override {
    auto* stream = driver_call([&] { return driver::create_stream(resolve_device(device.index()), priority); });
    trace::report_stream(trace::Kind::kStreamCreation, stream);
    return to_c10(stream);
  }
  c10::Stream getStreamFromGlobalPool(c10::Device device, bool /*high_priority*/) const override {
    static std::mutex mutex;
    static std::vector<std::vector<driver::Stream*>> pools(device_count());
    static std::vector<int> next(device_count(), 0);
    auto index = resolve_device(device.index());
    std::lock_guard<std::mutex> lock(mutex);
    auto& pool = pools[index];
    auto slot = next[index]++ % kPoolSize;
    if (pool.size() <= static_cast<size_t>(slot)) {
      pool.push_back(driver_call([&] { return driver::create_stream(index); }));
      trace::report_stream(trace::Kind::kStreamCreation, pool.back());
    }
    return to_c10(pool[slot]);
  }
  c10::Stream exchangeStream(c10::Stream stream) const override {
    auto old = getStream(stream.device());
    set_current_stream(stream);
    return old;
  }
  bool queryStream(const c10::Stream& stream) const override {
    return driver_call([&] { return driver::stream_query(to_driver(stream)); });
  }
  void synchronizeStream(const c10::Stream& stream) const override {
    auto* s = to_driver(stream);
    const HostSync sync(SyncKind::kSynchronize);
    driver_call([&] { driver::stream_synchronize(s); });
    trace::report_stream(trace::Kind::kStreamSynchronization, s);
  }
  void synchronizeDevice(c10::DeviceIndex device) const override {
    auto index = resolve_device(device);
    const HostSync sync(SyncKind::kSynchronize, /*debug_mode=*/false);  // CUDA's device sync does not warn
    driver_call([&] { driver::device_synchronize(index); });
    trace::report(trace::Kind::kDeviceSynchronization, nullptr, index);
  }

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device,
              const c10::EventFlag /*flag*/) const override {
    TORCH_CHECK(device == -1 || device == stream.device_index(), "Event device index ", device,
                " does not match recording stream's device index ", stream.device_index(), ".");
    if (!*event) {
      *event = driver::event_create();
      trace::report(trace::Kind::kEventCreation, *event);
    }
    auto* s = to_driver(stream);
    driver_call([&] { driver::event_record(as_event(*event), s); });
    trace::report_stream(trace::Kind::kEventRecord, s, *event);
  }
  void block(void* event, const c10::Stream& stream) const override {
    if (!event) return;
    auto* s = to_driver(stream);
    driver_call([&] { driver::stream_wait_event(s, as_event(event)); });
    trace::report_stream(trace::Kind::kEventWait, s, event);
  }
  bool queryEvent(void* event) const override {
    return !event || driver_call([&] { return driver::event_query(as_event(event)); });
  }
  void synchronizeEvent(void* event) const override {
    if (!event) return;
    const HostSync sync(SyncKind::kSynchronize, /*debug_mode=*/false);  // nor does its event sync
    driver_call([&] { driver::event_synchronize(as_event(event)); });
    trace::report(trace::Kind::kEventSynchronization, event);
  }
  void destroyEvent(void* event, const c10::DeviceIndex /*device*/) const noexcept override {
    if (!event) return;
    trace::report(trace::Kind::kEventDeletion, event);  // first: the address may be reused at once
    driver::event_destroy(as_event(event));
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex /*device*/) const override {
    TORCH_CHECK(start && end, "Both events must be recorded before calculating elapsed time.");
    return driver_call([&] { return driver::event_elapsed_ms(as_event(start), as_event(end)); });
  }
  void recordDataPtrOnStream(const c10::DataPtr& data_ptr, const c10::Stream& stream) const override {
    c10::getDeviceAllocator(kRBLN)->recordStream(data_ptr, stream);
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, RBLNGuardImpl);

}  // namespace
}  // namespace rbln
