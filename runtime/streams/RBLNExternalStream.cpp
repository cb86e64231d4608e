#include "runtime/streams/RBLNExternalStream.h"

#include "runtime/device/RBLNFunctions.h"

namespace rbln {

uintptr_t stream_handle(const c10::Stream& stream) { return reinterpret_cast<uintptr_t>(to_driver(stream)); }

c10::Stream stream_from_handle(uintptr_t handle) {
  // Streams live for the process and ids are dense, so a handle is checked against every stream there is.
  for (c10::DeviceIndex device = 0; device < device_count(); ++device) {
    for (int64_t id = 0;; ++id) {
      driver::Stream* stream = nullptr;
      try {
        stream = driver::stream_from_id(device, id);
      } catch (const driver::Error&) {
        break;  // past the device's last stream
      }
      if (reinterpret_cast<uintptr_t>(stream) == handle) return to_c10(stream);
    }
  }
  TORCH_CHECK(false, "ExternalStream: ", reinterpret_cast<void*>(handle), " is not an rbln stream handle");
}

}  // namespace rbln
