// at::GraphImplInterface for rbln, registered with REGISTER_GRAPH_IMPL so that
// torch.accelerator.Graph works as on CUDA: capture records the launches and
// copies of the capturing stream in the driver, replay queues them as one task.
// Memory allocated on the capturing streams comes from the graph's private pool of the
// caching allocator (shared through pool= / graph_pool_handle) and stays
// reserved while a graph uses the pool; the default generator (and those registered with the graph) hands
// captured random ops offsets within the graph, and each replay sets where they start.
#include "runtime/graphs/RBLNGraph.h"

#include <ATen/core/GraphImplInterface.h>
#include <ATen/record_function.h>
#include <c10/util/Exception.h>

#include <array>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "runtime/device/RBLNFunctions.h"
#include "runtime/device/RBLNGenerator.h"
#include "runtime/memory/RBLNCachingAllocator.h"

namespace rbln {
namespace {

// Graphs using each pool: the pool's memory goes back when the last one is reset.
std::mutex g_pool_mu;
std::map<uint64_t, int> g_pool_users;

void use_pool(uint64_t pool) {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  ++g_pool_users[pool];
}

void unuse_pool(uint64_t pool) {
  {
    std::lock_guard<std::mutex> lock(g_pool_mu);
    if (--g_pool_users[pool] > 0) return;
    g_pool_users.erase(pool);
  }
  release_mem_pool(pool);
}

driver::CaptureMode to_driver(at::GraphCaptureMode mode) {
  switch (mode) {
    case at::GraphCaptureMode::ThreadLocal: return driver::CaptureMode::kThreadLocal;
    case at::GraphCaptureMode::Relaxed: return driver::CaptureMode::kRelaxed;
    default: return driver::CaptureMode::kGlobal;  // CUDA's default
  }
}

thread_local std::vector<at::Generator> t_next_capture_generators;

// A generator state a graph records draws from (as CUDA, the state: a generator may swap states later with
// graphsafe_set_state): where each replay's draws start (read by the captured random ops), and how far a
// replay advances it.
struct CapturedGenerator {
  c10::intrusive_ptr<RBLNGeneratorState> state;
  std::shared_ptr<std::array<uint64_t, 2>> replay_start = std::make_shared<std::array<uint64_t, 2>>();
  uint64_t increment = 0;
};

const c10::intrusive_ptr<RBLNGeneratorState>& state_of(const at::Generator& generator) {
  return generator.get<RBLNGeneratorImpl>()->state();
}

struct RBLNGraphImpl final : at::GraphImplInterface {
  explicit RBLNGraphImpl(const at::GraphImplArgs& /*args: a driver graph needs no separate instantiation*/) {}
  ~RBLNGraphImpl() override {
    try {
      reset();
    } catch (...) {  // a destructor must not throw; reset only releases
    }
  }

  void capture_begin(c10::MempoolId_t pool, at::GraphCaptureMode mode) override {
    TORCH_CHECK(!graph_ && !capturing_,
                "This RBLNGraph instance already owns a captured graph. To capture a new graph, create a new "
                "instance or call reset().");
    auto registered = std::exchange(t_next_capture_generators, {});
    device_ = current_device();
    stream_ = current_stream(device_);
    TORCH_CHECK(stream_ != driver_call([&] { return driver::default_stream(device_); }),
                "RBLN graphs must be captured on a non-default stream. (However, after capture, it's ok to replay "
                "them on the default stream.)");
    generators_ = {{state_of(default_generator(device_))}};
    for (auto& g : registered) {
      TORCH_CHECK(g.device() == c10::Device(kRBLN, device_), "RBLNGraph.register_generator_state: the generator is on ",
                  g.device(), ", the capture on ", c10::Device(kRBLN, device_));
      bool seen = false;
      for (const auto& c : generators_) seen = seen || c.state == state_of(g);
      if (!seen) generators_.push_back({state_of(g)});
    }
    pool_ = pool.first || pool.second ? pool : graph_pool_handle();
    use_pool(pool_.second);
    begin_capture_pool(stream_, pool_.second);
    for (auto& c : generators_) c.state->capture_begin(c.replay_start);
    try {
      driver_call([&] { driver::stream_begin_capture(stream_, to_driver(mode)); });
    } catch (...) {
      stop_routing();
      unuse_pool(pool_.second);
      throw;
    }
    capturing_ = true;
  }

  void capture_end() override {
    TORCH_CHECK(capturing_, "Called RBLNGraph::capture_end without a preceding capture_begin.");
    TORCH_CHECK(current_stream(device_) == stream_, "Capture must end on the same stream it began on.");
    capturing_ = false;
    stop_routing();
    try {
      graph_ = driver_call([&] { return driver::stream_end_capture(stream_); });
    } catch (...) {
      unuse_pool(pool_.second);
      throw;
    }
    if (driver::graph_nodes(graph_).empty()) {
      TORCH_WARN("The RBLN Graph is empty. This usually means that the graph was attempted to be captured on "
                 "wrong device or stream.");
    }
  }

  void instantiate() override {
    TORCH_CHECK(graph_, "Called RBLNGraph::instantiate without a preceding successful capture.");
  }

  void replay() override {
    TORCH_CHECK(graph_, "Called RBLNGraph::replay without a preceding successful capture.");
    // A profiler sees the call, and the replayed kernels and copies carry its correlation id.
    RECORD_FUNCTION("rbln::graph_replay", std::vector<c10::IValue>());
    for (auto& c : generators_) {  // where this replay's random ops start, set in stream order before its work
      if (!c.increment) continue;
      launch(device_, "graph rng state", [slot = c.replay_start, start = c.state->replay_state(c.increment)] {
        *slot = start;
      });
    }
    auto* stream = current_stream(device_);
    driver_call([&] { driver::graph_launch(graph_, stream); });
  }

  void reset() override {
    if (capturing_) {  // abandoned mid-capture: end it and drop what it recorded
      capturing_ = false;
      stop_routing();
      try {
        driver::graph_destroy(driver::stream_end_capture(stream_));
      } catch (const driver::Error&) {
      }
      unuse_pool(pool_.second);
      pool_ = {0, 0};
      return;
    }
    if (!graph_) return;
    driver::graph_destroy(std::exchange(graph_, nullptr));
    unuse_pool(pool_.second);
    pool_ = {0, 0};
  }

  c10::MempoolId_t pool() const override {
    TORCH_CHECK(pool_.first || pool_.second,
                "Called RBLNGraph::pool() without a preceding successful capture.");
    return pool_;
  }

  void enable_debug_mode() override { debug_ = true; }

  void debug_dump(const std::string& path) override {
    if (!debug_) {
      TORCH_WARN("RBLN Graphs debug not enabled, set with [graph].enable_debug_mode()");
      return;
    }
    TORCH_CHECK(graph_, "Called RBLNGraph::debug_dump without a preceding successful capture.");
    std::ofstream out(path);
    TORCH_CHECK(out, "RBLNGraph::debug_dump: cannot write ", path);
    auto nodes = driver::graph_nodes(graph_);
    out << "rbln graph on rbln:" << int(device_) << ", captured on stream " << driver::stream_id(stream_) << ": "
        << nodes.size() << " nodes, replayed in this order\n";
    for (size_t i = 0; i < nodes.size(); ++i) {
      out << i << "\t" << (nodes[i].bytes ? "copy" : "kernel") << "\tstream " << nodes[i].stream << "\t"
          << nodes[i].name;
      if (nodes[i].bytes) out << "\t" << nodes[i].bytes << " bytes";
      out << "\n";
    }
    for (size_t i = 0; i < generators_.size(); ++i) {
      if (generators_[i].increment) {
        out << "random: " << generators_[i].increment << " Philox offsets per replay from "
            << (i ? "registered generator " + std::to_string(i) : std::string("the default generator")) << "\n";
      }
    }
  }

 private:
  // Allocations stop going to the graph's pool and random ops to its offsets.
  void stop_routing() {
    end_capture_pool(stream_);
    for (auto& c : generators_) c.increment = c.state->capture_end();
  }

  driver::Graph* graph_ = nullptr;
  bool capturing_ = false;
  bool debug_ = false;
  c10::DeviceIndex device_ = -1;
  driver::Stream* stream_ = nullptr;
  c10::MempoolId_t pool_{0, 0};
  std::vector<CapturedGenerator> generators_;  // the device's default first
};

}  // namespace

bool is_current_stream_capturing() { return driver::stream_is_capturing(current_stream()); }

void set_next_capture_generators(std::vector<at::Generator> generators) {
  t_next_capture_generators = std::move(generators);
}

c10::MempoolId_t graph_pool_handle() { return {0, static_cast<c10::CaptureId_t>(create_mem_pool())}; }

}  // namespace rbln

namespace at {
// The key is c10::DeviceTypeName(PrivateUse1, /*lower_case=*/false) once the backend is renamed to "rbln".
REGISTER_GRAPH_IMPL(RBLN, rbln::RBLNGraphImpl);
}  // namespace at
