// Pinned host memory: PyTorch's caching host allocator over the driver's
// host_malloc, with driver events guarding blocks that async copies still use.
#include <ATen/core/CachingHostAllocator.h>

#include <memory>

#include "runtime/device/RBLNFunctions.h"

namespace rbln {
namespace {

struct EventDeleter {
  void operator()(driver::Event* event) const { driver::event_destroy(event); }
};
using EventPtr = std::unique_ptr<driver::Event, EventDeleter>;

struct RBLNHostAllocatorImpl final : at::CachingHostAllocatorImpl<c10::Stream, EventPtr> {
 private:
  void allocate_host_memory(size_t size, void** ptr) override {
    *ptr = driver_call([&] { return driver::host_malloc(size); });
  }
  void free_block(at::HostBlock<c10::Stream>* block) override { driver::host_free(block->ptr_); }
  void record_stream(std::optional<std::vector<EventPtr>>& events, c10::Stream stream) override {
    EventPtr event(driver::event_create());
    driver_call([&] { driver::event_record(event.get(), to_driver(stream)); });
    events->push_back(std::move(event));
  }
  bool query_event(EventPtr& event) override { return driver::event_query(event.get()); }
  c10::Stream get_current_stream() const override { return to_c10(current_stream()); }
  bool stream_is_capturing(c10::Stream) const override { return false; }
};

DECLARE_HOST_ALLOCATOR(RBLNHostAllocator, RBLNHostAllocatorImpl, rbln_host_free, g_host_allocator)
REGISTER_HOST_ALLOCATOR(at::kPrivateUse1, &g_host_allocator)

}  // namespace
}  // namespace rbln
