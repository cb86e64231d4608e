// PrivateUse1 hooks: what ATen asks the backend about availability, devices,
// generators, pinned memory and storage resizing.
#include <ATen/Config.h>
#include <ATen/Parallel.h>
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <omp.h>

#include <algorithm>

#include "runtime/RBLNFunctions.h"
#include "runtime/RBLNGenerator.h"
#include "runtime/RBLNOps.h"
#include "runtime/RBLNParallel.h"

namespace rbln {
namespace {

struct RBLNHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count() > 0; }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex device) const override {
    return default_generator(device);
  }
  at::Generator getNewGenerator(c10::DeviceIndex device) const override {
    return at::make_generator<RBLNGeneratorImpl>(resolve_device(device));
  }
  at::Device getDeviceFromPtr(void* data) const override {
    auto device = driver::device_of(data);
    TORCH_CHECK(device >= 0, "Pointer ", data, " is not RBLN device memory");
    return at::Device(kRBLN, static_cast<c10::DeviceIndex>(device));
  }
  bool isPinnedPtr(const void* data) const override { return driver::is_pinned(data); }
  at::Allocator* getPinnedMemoryAllocator() const override { return at::getHostAllocator(kRBLN); }
  bool hasPrimaryContext(c10::DeviceIndex device) const override { return device < device_count(); }
  c10::DeviceIndex deviceCount() const override { return device_count(); }
  void setCurrentDevice(c10::DeviceIndex device) const override { set_device(device); }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    auto old = current_device();
    set_device(device);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override { return exchangeDevice(device); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    resize_storage_bytes(storage, newsize);
  }
};

// Large driver copies split across ATen's intra-op thread pool, as CPU's
// copy_ does, with threads claiming the pieces.
void parallel_pieces(size_t pieces, void* ctx, void (*body)(void*, size_t, size_t)) {
  const auto n = static_cast<int64_t>(pieces);
  parallel_claim(n, std::min<int64_t>(at::get_num_threads(), n),
                 [&](int64_t piece, int64_t) { body(ctx, piece, piece + 1); });
}

#if AT_MKL_ENABLED()
extern "C" int MKL_Set_Num_Threads_Local(int threads);  // mkl_service.h's C entry (the lowercase one is Fortran's)
#endif

// A stream worker's intra-op team (OpenMP and MKL, this thread only): one
// thread fewer than ATen gave it while a host thread is dispatching, so the
// two do not take turns on a core (2 OpenMP threads and the dispatching thread
// on 2 cores stall each parallel region for a time slice); all of them otherwise.
void size_worker_team(bool host_dispatching) {
  thread_local const int all = at::get_num_threads();
  thread_local int current = all;
  const int want = host_dispatching ? std::max(1, all - 1) : all;
  if (want == current) return;
  omp_set_num_threads(want);
#if AT_MKL_ENABLED()
  MKL_Set_Num_Threads_Local(want);
#endif
  current = want;
}

const bool registered = [] {
  c10::register_privateuse1_backend("rbln");
  at::RegisterPrivateUse1HooksInterface(new RBLNHooks());
  driver::set_parallel_for(parallel_pieces);
  driver::set_size_worker_team(size_worker_team);
  return true;
}();

}  // namespace
}  // namespace rbln
