// PrivateUse1 hooks: what ATen asks the backend about availability, devices,
// generators, pinned memory and storage resizing.
#include <ATen/Config.h>
#include <ATen/Parallel.h>
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <vector>

#include "runtime/device/RBLNFunctions.h"
#include "runtime/device/RBLNGenerator.h"
#include "runtime/device/RBLNOps.h"
#include "runtime/device/RBLNParallel.h"

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

// The CPUs this process may run on (the importing thread's), in order; none
// when the user binds OpenMP threads (then the user places them).
const std::vector<int>& bindable_cpus() {
  static const std::vector<int> cpus = [] {
    std::vector<int> list;
    for (const char* var : {"OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY", "KMP_AFFINITY"}) {
      if (std::getenv(var)) return list;
    }
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return list;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &allowed)) list.push_back(cpu);
    }
    return list;
  }();
  return cpus;
}

// Parts a stream worker's team (this thread and its OpenMP pool) when it
// finds two of its threads on one CPU: Linux wakes a thread near its waker, so
// after the host's own parallel work the team often woke stacked on one core,
// each matmul 2-3x slower for dozens of forwards until the load balancer
// parted it (compiled CPU and rbln forwards interleaved, docs/design.md). A
// stacked thread moves to a CPU none of the team is on and is free again at
// once: binding the team for good kept other busy threads (a serving client)
// from getting out of its way, and serving lost a fifth.
void part_worker_team(int threads) {
  const auto& cpus = bindable_cpus();
  if (cpus.size() < 2) return;
  std::vector<int> where(threads, -1);
#pragma omp parallel num_threads(threads)
  {
    const int me = omp_get_thread_num();
    where[me] = sched_getcpu();
#pragma omp barrier
    auto seen_before = [&](int t) { return std::find(where.begin(), where.begin() + t, where[t]) != where.begin() + t; };
    std::vector<int> unused;
    for (int cpu : cpus) {
      if (std::find(where.begin(), where.end(), cpu) == where.end()) unused.push_back(cpu);
    }
    if (seen_before(me) && !unused.empty()) {
      int rank = 0;  // the k-th stacked thread takes the k-th unused CPU
      for (int t = 0; t < me; ++t) rank += seen_before(t);
      cpu_set_t one, all;
      CPU_ZERO(&one);
      CPU_SET(unused[rank % unused.size()], &one);
      CPU_ZERO(&all);
      for (int cpu : cpus) CPU_SET(cpu, &all);
      sched_setaffinity(0, sizeof(one), &one);  // moves this thread now (best effort)
      sched_setaffinity(0, sizeof(all), &all);
    }
  }
}

// The device's threads: ATen's intra-op count when the library loads (OMP_NUM_THREADS sets it). A later
// torch.set_num_threads tunes the host's CPU ops and leaves the device as it is, as it leaves a GPU: vLLM sets
// one thread for serving, which had halved the device's matmuls.
int device_threads() {
  static const int threads = at::get_num_threads();
  return threads;
}

// A stream worker's intra-op team (OpenMP and MKL, this thread only): one
// thread fewer than the device's when the driver asks (while a host thread is
// dispatching, so the two do not take turns on a core: 2 OpenMP threads and
// the dispatching thread on 2 cores stall each parallel region for a time
// slice; or for a graph that replays faster so); all of them otherwise.
void size_worker_team(bool smaller) {
  thread_local const int all = device_threads();
  thread_local int current = 0;  // the first task sizes (and parts) the team
  const int want = smaller ? std::max(1, all - 1) : all;
  if (want == current) return;
  omp_set_num_threads(want);
#if AT_MKL_ENABLED()
  MKL_Set_Num_Threads_Local(want);
#endif
  if (want >= 2) part_worker_team(want);
  current = want;
}

const bool registered = [] {
  c10::register_privateuse1_backend("rbln");
  at::RegisterPrivateUse1HooksInterface(new RBLNHooks());
  driver::set_parallel_for(parallel_pieces);
  bindable_cpus();  // the importing thread's CPUs and threads, before any worker runs
  device_threads();
  driver::set_size_worker_team(size_worker_team);
  return true;
}();

}  // namespace
}  // namespace rbln
