// torch.profiler on rbln: a Kineto plugin that turns the driver's activity
// records into a device timeline (one track per stream, kernels and copies
// linked to the CPU ops that queued them), and the legacy profiler's stubs
// (torch.autograd.profiler.profile(use_device="rbln")) on driver events.
#include <c10/util/ApproximateClock.h>
#include <libkineto.h>
#include <output_base.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>
#include <torch/csrc/profiler/stubs/base.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "runtime/observability/RBLNProfiler.h"

#include "runtime/device/RBLNFunctions.h"

namespace rbln {
namespace activity {
namespace {

std::mutex g_mu;
std::map<int, std::vector<driver::Activity>> g_subscribers;  // guarded by g_mu
int g_next_subscriber = 0;

// Caller holds g_mu.
void distribute() {
  std::vector<driver::Activity> records = driver::take_activities();
  if (records.empty()) return;
  for (auto& [id, pending] : g_subscribers) pending.insert(pending.end(), records.begin(), records.end());
}

}  // namespace

int subscribe() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_subscribers.empty()) {
    driver::set_activity_recording(true);
  } else {
    distribute();  // what earlier subscribers saw is not the new one's
  }
  int id = g_next_subscriber++;
  g_subscribers[id];
  return id;
}

void unsubscribe(int subscriber) {
  std::lock_guard<std::mutex> lock(g_mu);
  distribute();
  g_subscribers.erase(subscriber);
  if (g_subscribers.empty()) driver::set_activity_recording(false);
}

std::vector<driver::Activity> take(int subscriber) {
  driver::wait_all_streams();
  std::lock_guard<std::mutex> lock(g_mu);
  distribute();
  return std::exchange(g_subscribers.at(subscriber), {});
}

}  // namespace activity

namespace {

using libkineto::ActivityType;

// A launch shows as a host "runtime" call (like cudaLaunchKernel) inside the
// op that made it, with a flow arrow to the work on its stream's track.
const char* runtime_name(const driver::Activity& a) {
  return a.kind == driver::Activity::kKernel ? "rblnLaunchKernel" : "rblnMemcpyAsync";
}

// Kineto's correlation stack for the dispatching thread; the innermost op tags launches.
thread_local std::vector<uint64_t> t_correlations;

class Session final : public libkineto::IActivityProfilerSession {
 public:
  ~Session() override {
    if (subscriber_ >= 0) activity::unsubscribe(subscriber_);
  }

  void start() override {
    subscriber_ = activity::subscribe();
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    records_ = activity::take(subscriber_);  // with the work queued inside the profile
    activity::unsubscribe(std::exchange(subscriber_, -1));
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override { return {}; }

  void processTrace(libkineto::ActivityLogger& logger) override { processTrace(logger, nullptr, 0, INT64_MAX); }

  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked_op,
                    int64_t start_ns, int64_t end_ns) override {
    buffer_->span = libkineto::TraceSpan(start_ns, end_ns, "rbln");
    std::map<int, std::set<int64_t>> streams;  // device -> stream ids seen
    for (const driver::Activity& a : records_) {
      if (a.end_ns < start_ns || a.host_begin_ns > end_ns) continue;
      const libkineto::ITraceActivity* op = linked_op && a.correlation ? linked_op(static_cast<int32_t>(a.correlation)) : nullptr;
      auto flow_id = static_cast<uint32_t>(a.id);

      auto& call = add(ActivityType::PRIVATEUSE1_RUNTIME, runtime_name(a), a.host_begin_ns, a.host_end_ns, a, op);
      call.device = static_cast<int32_t>(getpid());
      call.resource = call.threadId = a.host_thread;
      call.flow.id = flow_id;
      call.flow.type = libkineto::kLinkAsyncCpuGpu;
      call.flow.start = true;

      auto type = a.kind == driver::Activity::kKernel ? ActivityType::CONCURRENT_KERNEL : ActivityType::GPU_MEMCPY;
      auto& work = add(type, a.name, a.begin_ns, a.end_ns, a, op);
      work.device = a.device;
      work.resource = static_cast<int32_t>(a.stream);
      work.threadId = static_cast<int32_t>(a.stream);
      work.flow.id = flow_id;
      work.flow.type = libkineto::kLinkAsyncCpuGpu;
      work.flow.start = false;
      work.addMetadata("device", a.device);
      work.addMetadata("stream", a.stream);
      if (a.kind == driver::Activity::kMemcpy) work.addMetadata("bytes", a.bytes);
      streams[a.device].insert(a.stream);
    }
    for (const auto& [device, ids] : streams) {
      if (device != 0) logger.handleDeviceInfo(device_info(device), start_ns);  // 0: getDeviceInfo
      for (int64_t id : ids) {
        logger.handleResourceInfo({id, id, device, "stream " + std::to_string(id)}, start_ns);
      }
    }
    for (const auto& activity : buffer_->activities) logger.handleGenericActivity(*activity);
  }

  // Also keeps Kineto from labelling device tracks "GPU n".
  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(device_info(0));
  }
  std::vector<libkineto::ResourceInfo> getResourceInfos() override { return {}; }

  // Called after processTrace: Kineto keeps the buffer as long as the trace, which points into it.
  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return std::move(buffer_); }

  void pushCorrelationId(uint64_t id) override {
    t_correlations.push_back(id);
    driver::set_correlation_id(id);
  }

  void popCorrelationId() override {
    if (!t_correlations.empty()) t_correlations.pop_back();
    driver::set_correlation_id(t_correlations.empty() ? 0 : t_correlations.back());
  }

 private:
  static libkineto::DeviceInfo device_info(int device) {
    constexpr int64_t kBelowProcesses = int64_t{1} << 24;  // device tracks sort after the host's
    return {device, kBelowProcesses + device, "rbln:" + std::to_string(device), "RBLN " + std::to_string(device)};
  }

  libkineto::GenericTraceActivity& add(ActivityType type, const std::string& name, int64_t begin_ns, int64_t end_ns,
                                       const driver::Activity& a, const libkineto::ITraceActivity* op) {
    buffer_->emplace_activity(buffer_->span, type, name);
    auto& activity = *buffer_->activities.back();
    activity.startTime = begin_ns;
    activity.endTime = end_ns;
    activity.id = static_cast<int32_t>(a.correlation);
    activity.linked = op;
    return activity;
  }

  int subscriber_ = -1;
  std::vector<driver::Activity> records_;
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
};

class RBLNActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }

  const std::set<ActivityType>& availableActivities() const override { return activities_; }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(const std::set<ActivityType>& types,
                                                                 const libkineto::Config& /*config*/) override {
    for (ActivityType type : types) {
      if (activities_.count(type)) return std::make_unique<Session>();
    }
    return nullptr;
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(int64_t /*ts_ms*/, int64_t /*duration_ms*/,
                                                                 const std::set<ActivityType>& types,
                                                                 const libkineto::Config& config) override {
    return configure(types, config);
  }

 private:
  std::string name_{"rbln"};
  std::set<ActivityType> activities_{ActivityType::CONCURRENT_KERNEL, ActivityType::GPU_MEMCPY,
                                     ActivityType::PRIVATEUSE1_RUNTIME};
};

REGISTER_PRIVATEUSE1_PROFILER(RBLNActivityProfiler);

// ---- the legacy profiler -------------------------------------------------------
using torch::profiler::impl::ProfilerVoidEventStub;

driver::Event* as_event(const ProfilerVoidEventStub* stub) { return static_cast<driver::Event*>(stub->get()); }

struct RBLNProfilerStubs final : torch::profiler::impl::ProfilerStubs {
  void record(c10::DeviceIndex* device, ProfilerVoidEventStub* event, int64_t* cpu_ns) const override {
    c10::DeviceIndex d = current_device();
    if (device) *device = d;
    driver::Event* e = driver::event_create();
    *event = std::shared_ptr<void>(e, [](void* p) { driver::event_destroy(static_cast<driver::Event*>(p)); });
    if (cpu_ns) *cpu_ns = c10::getTime();
    driver_call([&] { driver::event_record(e, current_stream(d)); });
  }

  float elapsed(const ProfilerVoidEventStub* start, const ProfilerVoidEventStub* end) const override {
    return driver_call([&] {
      driver::event_synchronize(as_event(start));
      driver::event_synchronize(as_event(end));
      return driver::event_elapsed_ms(as_event(start), as_event(end)) * 1000.0f;  // microseconds, as CUDA's
    });
  }

  void mark(const char* /*name*/) const override {}
  void rangePush(const char* /*name*/) const override {}
  void rangePop() const override {}
  bool enabled() const override { return true; }

  void onEachDevice(std::function<void(int)> op) const override {
    c10::DeviceIndex previous = current_device();
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
      set_device(d);
      op(d);
    }
    set_device(previous);
  }

  void synchronize() const override {
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) driver_call([&] { driver::device_synchronize(d); });
  }
};

struct RegisterProfilerStubs {
  RegisterProfilerStubs() {
    static RBLNProfilerStubs stubs;
    torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  }
} register_profiler_stubs;

}  // namespace
}  // namespace rbln
