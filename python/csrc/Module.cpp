// torch_rbln._C: the few entry points Python needs that torch does not already
// expose generically (torch.Stream, torch.Event and torch.accelerator go
// through the device guard directly).
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/core/Generator.h>
#include <ATen/ops/ones.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/profiler/combined_traceback.h>
#include <torch/csrc/utils/pybind.h>

#include <cstring>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "generated/RBLNNativeFunctions.h"
#include "runtime/memory/RBLNCachingAllocator.h"
#include "runtime/compiled/RBLNCompiledKernels.h"
#include "runtime/streams/RBLNExternalStream.h"
#include "runtime/fallback/RBLNFallback.h"
#include "runtime/graphs/RBLNGraph.h"
#include "runtime/device/RBLNFunctions.h"
#include "runtime/device/RBLNGenerator.h"
#include "runtime/observability/RBLNObserve.h"
#include "runtime/observability/RBLNProfiler.h"
#include "runtime/observability/RBLNTrace.h"

namespace py = pybind11;

void bind_distributed(py::module_& m);  // Distributed.cpp
void bind_compiled_ops(py::module_& m);  // CompiledOps.cpp

namespace {

template <class F>
auto translate(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const c10::IndexError& e) {  // an index out of range a kernel found (IndexError, as CPU's)
    throw pybind11::index_error(e.what_without_backtrace());
  } catch (const c10::Error& e) {
    throw std::runtime_error(e.what_without_backtrace());
  }
}

rbln::RBLNGeneratorImpl* generator(int device) {
  return rbln::default_generator(static_cast<c10::DeviceIndex>(device)).get<rbln::RBLNGeneratorImpl>();
}

// Autograd runs rbln backwards on its device threads (pt_autograd_<index>),
// which touch Python twice: a first GIL hand-off when they start, and the
// release of Python-owned tensors of a finished backward, which the thread may
// drop only after the caller has already returned. Either one, if it comes
// after the interpreter began to finalize, makes CPython end the thread with
// a forced unwind through a noexcept destructor: std::terminate, exit status
// 134. Called from an atexit handler, before finalization, this runs one
// backward on each device's thread from tensors that Python never saw: when it
// returns, every such thread has finished all earlier work and is idle.
void quiesce_autograd_threads() {
  py::gil_scoped_release no_gil;  // the threads may need the GIL to get here
  at::AutoGradMode grad(true);
  // Not through a Python dispatch mode (the sanitizer's): the tensors must stay Python-free.
  c10::impl::ExcludeDispatchKeyGuard no_python(
      c10::DispatchKeySet({c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot}));
  for (c10::DeviceIndex d = 0; d < rbln::device_count(); ++d) {
    auto x = at::ones({1}, at::TensorOptions().device(rbln::kRBLN, d)).requires_grad_(true);
    torch::autograd::backward({x.sum()});
  }
}

// "<prefix>.current", ".peak", ".allocated", ".freed", as torch.cuda's statistics are keyed.
void add_stat(py::dict& d, const std::string& prefix, const c10::CachingAllocator::Stat& stat) {
  d[py::str(prefix + ".current")] = stat.current;
  d[py::str(prefix + ".peak")] = stat.peak;
  d[py::str(prefix + ".allocated")] = stat.allocated;
  d[py::str(prefix + ".freed")] = stat.freed;
}

py::dict stat_dict(const c10::CachingDeviceAllocator::DeviceStats& s) {
  py::dict d;
  const char* pools[] = {"all", "small_pool", "large_pool"};
  auto add = [&](const char* name, const c10::CachingAllocator::StatArray& array) {
    for (size_t i = 0; i < array.size(); ++i) add_stat(d, std::string(name) + "." + pools[i], array[i]);
  };
  add("allocation", s.allocation);
  add("segment", s.segment);
  add("active", s.active);
  add("allocated_bytes", s.allocated_bytes);
  add("reserved_bytes", s.reserved_bytes);
  add("active_bytes", s.active_bytes);
  add("requested_bytes", s.requested_bytes);
  d["num_alloc_retries"] = s.num_alloc_retries;
  d["num_ooms"] = s.num_ooms;
  d["num_device_alloc"] = s.num_device_alloc;
  d["num_device_free"] = s.num_device_free;
  return d;
}

// torch.cuda.memory._snapshot()'s dict: segments with their blocks, and each
// device's trace, with frames ({filename, line, name}, innermost first).
py::dict snapshot_dict(const rbln::memory::Snapshot& snapshot) {
  std::vector<torch::CapturedTraceback*> tracebacks;
  auto index_of = [&](const rbln::memory::Context& context) -> int64_t {
    auto* traceback = dynamic_cast<torch::CapturedTraceback*>(context.get());
    if (!traceback) return -1;
    tracebacks.push_back(traceback);
    return static_cast<int64_t>(tracebacks.size()) - 1;
  };
  // First pass: which traceback each entry has; then one symbolize call for all.
  std::vector<int64_t> block_frames, trace_frames;
  for (const auto& segment : snapshot.segments)
    for (const auto& block : segment.blocks) block_frames.push_back(index_of(block.context));
  for (const auto& trace : snapshot.device_traces)
    for (const auto& entry : trace) trace_frames.push_back(index_of(entry.context));
  torch::SymbolizedTracebacks symbolized = torch::symbolize(tracebacks);
  std::vector<py::dict> frames;
  for (const auto& frame : symbolized.all_frames) {
    py::dict f;
    f["filename"] = frame.filename;
    f["line"] = frame.lineno;
    f["name"] = frame.funcname;
    frames.push_back(std::move(f));
  }
  auto frame_list = [&](int64_t index) {
    py::list list;
    if (index >= 0)
      for (uint64_t i : symbolized.tracebacks[index]) list.append(frames[i]);
    return list;
  };

  const char* block_states[] = {"active_allocated", "active_pending_free", "inactive"};
  py::list segments;
  size_t next_block = 0;
  for (const auto& segment : snapshot.segments) {
    py::dict seg;
    seg["device"] = segment.device;
    seg["address"] = segment.address;
    seg["total_size"] = segment.total;
    seg["allocated_size"] = segment.allocated;
    seg["active_size"] = segment.active;
    seg["requested_size"] = segment.requested;
    seg["stream"] = segment.stream;
    seg["segment_type"] = segment.large ? "large" : "small";
    seg["segment_pool_id"] = py::make_tuple(0, segment.mem_pool);
    seg["is_expandable"] = false;
    py::list blocks;
    for (const auto& block : segment.blocks) {
      py::dict b;
      b["address"] = block.address;
      b["size"] = block.size;
      b["requested_size"] = block.requested;
      b["state"] = block_states[block.state];
      b["frames"] = frame_list(block_frames[next_block++]);
      blocks.append(std::move(b));
    }
    seg["blocks"] = std::move(blocks);
    segments.append(std::move(seg));
  }

  const char* actions[] = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "oom"};
  py::list device_traces;
  size_t next_entry = 0;
  for (const auto& trace : snapshot.device_traces) {
    py::list entries;
    for (const auto& entry : trace) {
      py::dict e;
      e["action"] = actions[entry.action];
      e["addr"] = entry.address;
      e["size"] = entry.size;
      e["stream"] = entry.stream;
      e["time_us"] = entry.time_us;
      e["frames"] = frame_list(trace_frames[next_entry++]);
      if (entry.action == rbln::memory::TraceEntry::kOOM) e["device_free"] = entry.device_free;
      entries.append(std::move(e));
    }
    device_traces.append(std::move(entries));
  }
  py::dict result;
  result["segments"] = std::move(segments);
  result["device_traces"] = std::move(device_traces);
  return result;
}

std::mutex& raw_blocks_mutex() {
  static std::mutex m;
  return m;
}
std::unordered_map<uintptr_t, c10::DataPtr>& raw_blocks() {
  static auto* blocks = new std::unordered_map<uintptr_t, c10::DataPtr>;  // never destroyed: outlives the allocator's users
  return *blocks;
}

py::dict host_stat_dict(const at::HostStats& s) {
  py::dict d;
  auto add = [&](const char* name, const c10::CachingAllocator::Stat& stat) { add_stat(d, name, stat); };
  add("allocations", s.allocations);
  add("allocated_bytes", s.allocated_bytes);
  add("active_requests", s.active_requests);
  add("active_bytes", s.active_bytes);
  d["num_host_alloc"] = s.num_host_alloc;
  d["num_host_free"] = s.num_host_free;
  auto add_time = [&](const char* name, const c10::CachingAllocator::DurationStat& t) {
    d[py::str(std::string(name) + ".total")] = t.total;
    d[py::str(std::string(name) + ".max")] = t.max;
    d[py::str(std::string(name) + ".min")] = t.min;
    d[py::str(std::string(name) + ".count")] = t.count;
    d[py::str(std::string(name) + ".avg")] = t.count ? t.total / t.count : 0;
  };
  add_time("host_alloc_time", s.host_alloc_time);
  add_time("host_free_time", s.host_free_time);
  return d;
}

// Fallbacks and syncs reach torch_rbln._observe (logging, explain's call sites) on the thread that hit them:
// the dispatching thread, which holds no lock of ours there, so taking the GIL is safe.
py::handle observe_function(const char* name) {
  return py::object(py::module_::import("torch_rbln._observe").attr(name)).release();  // kept for the process
}
void observe_fallback(const std::string& op, const char* kind, const char* reason) {
  if (!Py_IsInitialized()) return;
  py::gil_scoped_acquire gil;
  static py::handle f = observe_function("_on_fallback");
  try {
    f(op, kind, reason);
  } catch (py::error_already_set& e) {
    e.discard_as_unraisable("torch_rbln._observe._on_fallback");
  }
}
void observe_sync(const char* kind) {
  if (!Py_IsInitialized()) return;
  py::gil_scoped_acquire gil;
  static py::handle f = observe_function("_on_sync");
  try {
    f(kind);
  } catch (py::error_already_set& e) {
    e.discard_as_unraisable("torch_rbln._observe._on_sync");
  }
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "torch-rbln native module: emulated RBLN NPU runtime bindings";
  bind_distributed(m);
  bind_compiled_ops(m);
  m.def("_device_count", [] { return static_cast<int>(rbln::device_count()); });
  m.def("_device_count_error", [] { return rbln::device_count_error(); });
  m.def("_current_device", [] { return static_cast<int>(rbln::current_device()); });
  m.def("_set_device", [](int device) { translate([&] { rbln::set_device(static_cast<c10::DeviceIndex>(device)); }); });
  m.def("_quiesce_autograd_threads", [] { translate(quiesce_autograd_threads); });
  m.def("_is_initialized", [] { return at::isPrivateUse1HooksRegistered(); });
  // Through the guard, as torch.accelerator.synchronize() goes, so the sanitizer sees it too.
  // Without the GIL while it waits, as torch.cuda.synchronize: other Python threads run meanwhile.
  m.def("_synchronize", [](int device) {
    pybind11::gil_scoped_release no_gil;
    translate([&] { c10::impl::getDeviceGuardImpl(rbln::kRBLN)->synchronizeDevice(static_cast<c10::DeviceIndex>(device)); });
  });
  m.def("_device_capacity", [](int device) {
    return translate([&] { return rbln::device_capacity(static_cast<c10::DeviceIndex>(device)); });
  });
  // The name of the torch.memory_format an rbln convolution returns for these operands.
  m.def("_convolution_memory_format", [](const at::Tensor& input, const at::Tensor& weight) {
    switch (rbln::kernels::convolution_memory_format(input, weight)) {
      case at::MemoryFormat::ChannelsLast: return "channels_last";
      case at::MemoryFormat::ChannelsLast3d: return "channels_last_3d";
      default: return "contiguous_format";
    }
  });
  m.def("_launch_blocking", [] { return rbln::launch_blocking(); });
  m.def("_strict_mode", [] { return rbln::strict_mode(); });

  m.def("_memory_stats", [](int device) { return translate([&] { return stat_dict(c10::getDeviceAllocator(rbln::kRBLN)->getDeviceStats(device)); }); });
  m.def("_reset_peak_memory_stats", [](int device) { translate([&] { c10::getDeviceAllocator(rbln::kRBLN)->resetPeakStats(device); }); });
  m.def("_reset_accumulated_memory_stats", [](int device) { translate([&] { c10::getDeviceAllocator(rbln::kRBLN)->resetAccumulatedStats(device); }); });
  m.def("_empty_cache", [] { translate([&] { c10::getDeviceAllocator(rbln::kRBLN)->emptyCache(); }); });
  m.def("_record_memory_history", [](int record, int context, bool cpp_frames, size_t max_entries, bool clear) {
    rbln::memory::HistoryConfig config;
    config.record = static_cast<rbln::memory::HistoryConfig::Record>(record);
    config.context = static_cast<rbln::memory::HistoryConfig::Context>(context);
    config.cpp_frames = cpp_frames;
    config.max_entries = max_entries;
    config.clear = clear;
    rbln::memory::record_history(config);
  });
  m.def("_memory_snapshot", [] { return snapshot_dict(translate([] { return rbln::memory::snapshot(); })); });
  m.def("_set_memory_fraction", [](double fraction, int device) {
    translate([&] { rbln::set_memory_fraction(fraction, static_cast<c10::DeviceIndex>(device)); });
  });
  m.def("_get_memory_fraction", [](int device) {
    return translate([&] { return rbln::memory_fraction(static_cast<c10::DeviceIndex>(device)); });
  });
  // caching_allocator_alloc/delete: blocks another framework holds, by address.
  m.def("_raw_alloc", [](size_t size) {
    return translate([&] {
      c10::DataPtr block = c10::GetAllocator(rbln::kRBLN)->allocate(size);
      const auto address = reinterpret_cast<uintptr_t>(block.get());
      if (address) {
        std::lock_guard<std::mutex> lock(raw_blocks_mutex());
        raw_blocks().emplace(address, std::move(block));
      }
      return address;
    });
  });
  m.def("_raw_delete", [](uintptr_t address) {
    translate([&] {
      if (!address) return;
      c10::DataPtr block;  // freed when the lambda returns, outside the lock
      {
        std::lock_guard<std::mutex> lock(raw_blocks_mutex());
        auto it = raw_blocks().find(address);
        TORCH_CHECK(it != raw_blocks().end(), "invalid device pointer: ", reinterpret_cast<void*>(address));
        block = std::move(it->second);
        raw_blocks().erase(it);
      }
    });
  });
  m.def("_host_memory_stats", [] { return host_stat_dict(at::getHostAllocator(rbln::kRBLN)->get_stats()); });
  m.def("_reset_accumulated_host_memory_stats", [] { at::getHostAllocator(rbln::kRBLN)->reset_accumulated_stats(); });
  m.def("_reset_peak_host_memory_stats", [] { at::getHostAllocator(rbln::kRBLN)->reset_peak_stats(); });
  m.def("_mem_get_info", [](int device) { return translate([&] { return c10::getDeviceAllocator(rbln::kRBLN)->getMemoryInfo(device); }); });

  // The sanitizer's trace seam (runtime/observability/RBLNTrace.h): records are (kind, handle, device, stream id).
  m.def("_trace_kinds", [] {
    using K = rbln::trace::Kind;
    static const std::pair<const char*, K> kinds[] = {
        {"event_creation", K::kEventCreation},
        {"event_deletion", K::kEventDeletion},
        {"event_record", K::kEventRecord},
        {"event_wait", K::kEventWait},
        {"event_synchronization", K::kEventSynchronization},
        {"stream_creation", K::kStreamCreation},
        {"stream_synchronization", K::kStreamSynchronization},
        {"device_synchronization", K::kDeviceSynchronization},
        {"memory_allocation", K::kMemoryAllocation},
        {"memory_deallocation", K::kMemoryDeallocation}};
    py::dict d;
    for (const auto& [name, kind] : kinds) d[name] = static_cast<int>(kind);
    return d;
  });
  m.def("_trace_enable", [](bool on) { rbln::trace::set_enabled(on); });
  m.def("_trace_drain", [] {
    auto records = rbln::trace::drain();
    py::list out(records.size());
    for (size_t i = 0; i < records.size(); ++i) {
      const auto& r = records[i];
      out[i] = py::make_tuple(static_cast<int>(r.kind), r.handle, r.device, r.stream);
    }
    return out;
  });

  // torch.compile's kernels (runtime/compiled/RBLNCompiledKernels.h): addresses the generated code calls with.
  m.def("_compiled_kernel", [](const std::string& name) { return reinterpret_cast<uintptr_t>(rbln::compiled_kernel(name.c_str())); });
  m.def("_compiled_kernel_launcher", [] { return reinterpret_cast<uintptr_t>(&rbln::rbln_launch_compiled_kernel); });

  // Device activity for explain(): subscribe, then take (name, device, stream, begin_ns, end_ns)
  // records once the work queued so far has run.
  m.def("_activity_subscribe", [] { return rbln::activity::subscribe(); });
  m.def("_activity_unsubscribe", [](int subscriber) { rbln::activity::unsubscribe(subscriber); });
  m.def("_activity_take", [](int subscriber) {
    decltype(rbln::activity::take(subscriber)) taken;
    {
      py::gil_scoped_release no_gil;  // queued work may need the GIL (a Python-owned tensor's release)
      taken = rbln::activity::take(subscriber);
    }
    py::list records;
    for (const auto& a : taken)
      records.append(py::make_tuple(a.name, a.device, a.stream, a.begin_ns, a.end_ns));
    return records;
  });
  m.def("_mem_pool_create", [] { return rbln::create_mem_pool(); });
  m.def("_mem_pool_begin", [](int device, uint64_t pool) { rbln::begin_mem_pool(static_cast<c10::DeviceIndex>(device), pool); });
  m.def("_mem_pool_end", [](int device, uint64_t pool) {
    translate([&] { rbln::end_mem_pool(static_cast<c10::DeviceIndex>(device), pool); });
  });
  m.def("_mem_pool_release", [](uint64_t pool) { translate([&] { rbln::release_mem_pool(pool); }); });
  m.def("_is_current_stream_capturing", [] { return translate([] { return rbln::is_current_stream_capturing(); }); });
  m.def("_graph_pool_handle", [] { return rbln::graph_pool_handle(); });
  m.def("_set_next_capture_generators", [](std::vector<at::Generator> generators) {
    rbln::set_next_capture_generators(std::move(generators));
  });
  m.def("_set_caching_enabled", [](bool enabled) { rbln::set_caching_enabled(enabled); });
  m.def("_caching_enabled", [] { return rbln::caching_enabled(); });
  m.def("_stream_handle", [](int device, int64_t stream_id) {
    return translate([&] {
      return rbln::stream_handle(c10::Stream(c10::Stream::UNSAFE, c10::Device(rbln::kRBLN, device), stream_id));
    });
  });
  m.def("_stream_from_handle", [](uintptr_t handle) {
    return translate([&] {
      c10::Stream stream = rbln::stream_from_handle(handle);
      return std::make_pair(static_cast<int>(stream.device_index()), stream.id());
    });
  });
  m.def("_device_op_counts", [] { return rbln::device_op_counts(); });
  m.def("_fallback_counts", [] { return rbln::fallback_counts(); });
  m.def("_fallback_reason_kinds", [] { return rbln::fallback_reason_kinds(); });
  // Raises on a bad TORCH_RBLN_DISABLE_FALLBACK, so torch_rbln's import does.
  m.def("_disabled_fallbacks", [] {
    return translate([] {
      std::vector<std::string> kinds;
      for (int k = 0; k < rbln::kFallbackKinds; ++k)
        if (rbln::disabled_fallbacks() & (1u << k)) kinds.push_back(rbln::fallback_kind_name(rbln::FallbackKind(k)));
      return kinds;
    });
  });
  m.def("_sync_counts", [] {
    py::dict d;
    const auto counts = rbln::sync_counts();
    for (int k = 0; k < rbln::kSyncKinds; ++k) d[rbln::sync_kind_name(rbln::SyncKind(k))] = counts[k];
    return d;
  });
  m.def("_set_sync_debug_mode", [](int mode) { translate([&] { rbln::set_sync_debug_mode(mode); }); });
  m.def("_get_sync_debug_mode", [] { return rbln::sync_debug_mode(); });
  m.def("_set_log_level", [](int level) { rbln::set_log_level(level); });
  m.def("_set_observing", [](bool fallbacks, bool syncs) { rbln::set_observing(fallbacks, syncs); });
  rbln::set_observer({&observe_fallback, &observe_sync});

  m.def("_default_generators", [] {
    py::tuple out(rbln::device_count());
    for (c10::DeviceIndex d = 0; d < rbln::device_count(); ++d)
      out[d] = py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(rbln::default_generator(d)));
    return out;
  });
  m.def("_manual_seed", [](int device, uint64_t seed) {
    translate([&] {
      auto* g = generator(device);
      std::lock_guard<std::mutex> lock(g->mutex_);
      g->set_current_seed(seed);
    });
  });
  m.def("_seed", [](int device) {
    return translate([&] {
      auto* g = generator(device);
      std::lock_guard<std::mutex> lock(g->mutex_);
      return g->seed();
    });
  });
  m.def("_initial_seed", [](int device) { return translate([&] { return generator(device)->current_seed(); }); });
  m.def("_get_rng_state", [](int device) {
    return translate([&] {
      auto* g = generator(device);
      std::lock_guard<std::mutex> lock(g->mutex_);
      uint64_t words[2] = {g->current_seed(), g->get_offset()};
      return py::bytes(reinterpret_cast<const char*>(words), sizeof(words));
    });
  });
  m.def("_set_rng_state", [](int device, const std::string& state) {
    translate([&] {
      TORCH_CHECK(state.size() == 16, "RNG state must be 16 bytes, got ", state.size());
      uint64_t words[2];
      std::memcpy(words, state.data(), sizeof(words));
      auto* g = generator(device);
      std::lock_guard<std::mutex> lock(g->mutex_);
      g->set_current_seed(words[0]);
      g->set_offset(words[1]);
    });
  });
}
