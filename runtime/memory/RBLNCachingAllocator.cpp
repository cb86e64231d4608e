// Caching device allocator, shaped like CUDA's: freed blocks stay reserved and
// are reused by later allocations on the same stream (stream order makes that
// safe without a sync), record_stream defers reuse until other streams are
// done, and running out of memory first returns the cache to the driver.
// With memory history on, it records its actions and where they came from.
#include "runtime/memory/RBLNCachingAllocator.h"

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/Exception.h>
#include <torch/csrc/profiler/combined_traceback.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "runtime/memory/RBLNCachingAllocator.h"
#include "runtime/device/RBLNFunctions.h"
#include "runtime/observability/RBLNTrace.h"

namespace rbln {
namespace {

using c10::CachingDeviceAllocator::DeviceStats;
using c10::CachingAllocator::StatType;

constexpr size_t kSmallSize = 1 << 20;  // blocks below this round to 512 B
constexpr size_t kSmallRound = 512;
constexpr size_t kLargeRound = 1 << 20;

size_t round_size(size_t n) {
  if (n < kSmallSize) return std::max<size_t>(kSmallRound, (n + kSmallRound - 1) / kSmallRound * kSmallRound);
  return (n + kLargeRound - 1) / kLargeRound * kLargeRound;
}

// A block is a whole segment (one driver allocation) or a piece of one: a
// cached block serves a smaller request of its pool (small or large) by
// splitting, and freed neighbours in a segment merge again (as CUDA's
// allocator does), so shifting tensor sizes reuse the cache instead of
// reserving more.
struct Block {
  void* ptr;
  size_t size;       // rounded size (of the segment, or of this piece of it)
  size_t requested;  // what the caller asked for
  c10::DeviceIndex device;
  driver::Stream* stream;               // allocation stream
  std::set<driver::Stream*> used_by;   // other streams, from record_stream
  Block* prev = nullptr;  // neighbours in the same segment
  Block* next = nullptr;
  bool cached = false;  // in free_blocks
  memory::Context context;  // where it was allocated, with memory history on
  uint64_t mem_pool = 0;    // a MemPool's id; 0: the default pool
};

// Free blocks by stream, then memory pool, then size (best fit), then address.
struct BlockOrder {
  bool operator()(const Block* a, const Block* b) const {
    if (a->stream != b->stream) return std::less<driver::Stream*>()(a->stream, b->stream);
    if (a->mem_pool != b->mem_pool) return a->mem_pool < b->mem_pool;
    if (a->size != b->size) return a->size < b->size;
    return std::less<void*>()(a->ptr, b->ptr);
  }
};

std::string format_bytes(size_t n) {
  std::ostringstream out;
  out.precision(2);
  out << std::fixed;
  if (n >= (1ull << 30)) out << n / double(1ull << 30) << " GiB";
  else if (n >= (1ull << 20)) out << n / double(1ull << 20) << " MiB";
  else if (n >= (1ull << 10)) out << n / double(1ull << 10) << " KiB";
  else out << n << " bytes";
  return out.str();
}

void update(c10::CachingAllocator::StatArray& stat, size_t size, int64_t delta) {
  auto pool = size < kSmallSize ? StatType::SMALL_POOL : StatType::LARGE_POOL;
  for (auto type : {StatType::AGGREGATE, pool}) {
    auto& s = stat[static_cast<size_t>(type)];
    s.current += delta;
    s.peak = std::max(s.peak, s.current);
    if (delta > 0) s.allocated += delta; else s.freed += -delta;
  }
}

template <class F>
void for_each_stat(DeviceStats& s, F f) {
  for (auto* array : {&s.allocation, &s.segment, &s.active, &s.allocated_bytes, &s.reserved_bytes, &s.active_bytes,
                      &s.requested_bytes}) {
    for (auto& stat : *array) f(stat);
  }
}

struct DevicePool {
  std::mutex mutex;
  // Free blocks: a block is only reused on its own stream.
  std::set<Block*, BlockOrder> free_blocks;
  // Freed blocks still in use by other streams, with the events to wait for.
  std::deque<std::pair<Block*, std::vector<driver::Event*>>> pending;
  // Freed while one of those streams captures a graph: their events are
  // recorded once it no longer does (an event recorded in a capture marks no
  // point of the stream's real work), as CUDA's allocator defers them.
  std::vector<Block*> deferred;
  // Per stream, recorded after its last stream-ordered release (see reserve).
  std::map<driver::Stream*, driver::Event*> fences;
  // The first block of each segment: it stays the first while the segment lives.
  std::set<Block*> segments;
  std::deque<memory::TraceEntry> history;
  DeviceStats stats;
  double fraction = 1.0;  // of the device's capacity this process may reserve
};

// torch.cuda.memory.caching_allocator_enable(False): freed segments go back to the driver at once.
std::atomic<bool> g_caching_enabled{true};

// ---- memory pools (torch.cuda.MemPool) -----------------------------------------
std::atomic<uint64_t> g_next_mem_pool{1};
// The pools use_mem_pool routes this thread's allocations to, innermost last, per device.
thread_local std::map<c10::DeviceIndex, std::vector<uint64_t>> t_mem_pools;
thread_local int t_routed = 0;  // entries of t_mem_pools: most allocations read only this
std::mutex g_released_mu;
std::set<uint64_t> g_released_pools;  // deleted MemPools: their blocks go back to the driver when freed

// Capturing streams' pools (begin_capture_pool), with their devices.
std::mutex g_capture_pools_mu;
std::map<driver::Stream*, std::pair<c10::DeviceIndex, uint64_t>> g_capture_pools;  // guarded by g_capture_pools_mu
std::atomic<int> g_capturing{0};  // g_capture_pools.size(), read on every allocation

// The pool of a capture `stream` takes part in: its own, or, for a stream that joined a capture, the one capture
// of its device (0 when that is ambiguous).
uint64_t capture_pool(c10::DeviceIndex device, driver::Stream* stream) {
  if (g_capturing.load(std::memory_order_acquire) == 0 || !driver::stream_is_capturing(stream)) return 0;
  std::lock_guard<std::mutex> lock(g_capture_pools_mu);
  if (auto it = g_capture_pools.find(stream); it != g_capture_pools.end()) return it->second.second;
  uint64_t found = 0;
  int on_device = 0;
  for (const auto& [origin, entry] : g_capture_pools) {
    if (entry.first != device) continue;
    found = entry.second;
    ++on_device;
  }
  return on_device == 1 ? found : 0;
}

uint64_t current_mem_pool(c10::DeviceIndex device, driver::Stream* stream) {
  if (uint64_t pool = capture_pool(device, stream)) return pool;
  if (t_routed == 0) return 0;
  auto it = t_mem_pools.find(device);
  return it == t_mem_pools.end() || it->second.empty() ? 0 : it->second.back();
}

bool keeps_cache(uint64_t mem_pool) {
  if (!g_caching_enabled.load(std::memory_order_relaxed)) return false;
  if (mem_pool == 0) return true;
  std::lock_guard<std::mutex> lock(g_released_mu);
  return !g_released_pools.count(mem_pool);
}

// ---- memory history ------------------------------------------------------------
std::atomic<bool> g_history_on{false};  // read on every allocation and free
std::mutex g_history_mu;                // guards g_history (taken after a pool's mutex)
memory::HistoryConfig g_history;

memory::HistoryConfig history_config() {
  std::lock_guard<std::mutex> lock(g_history_mu);
  return g_history;
}

// Gathered before taking a pool's mutex: gathering Python frames takes the GIL.
memory::Context gather_context(memory::HistoryConfig::Context needed) {
  if (!g_history_on.load(std::memory_order_relaxed)) return nullptr;
  auto config = history_config();
  if (config.context < needed) return nullptr;
  return torch::CapturedTraceback::gather(/*python=*/true, /*script=*/false, config.cpp_frames);
}

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Caller holds the pool's mutex.
void record_action(DevicePool& pool, memory::TraceEntry::Action action, const void* ptr, size_t size,
                   driver::Stream* stream, memory::Context context, size_t device_free = 0) {
  if (!g_history_on.load(std::memory_order_relaxed)) return;
  auto config = history_config();
  if (config.record != memory::HistoryConfig::kAll) return;
  pool.history.push_back({action, reinterpret_cast<uintptr_t>(ptr), size, stream ? driver::stream_id(stream) : 0,
                          now_us(), device_free, std::move(context)});
  while (pool.history.size() > config.max_entries) pool.history.pop_front();
}

void report_to_profiler(void* ptr, int64_t delta, const DeviceStats& stats, c10::DeviceIndex device) {
  c10::reportMemoryUsageToProfiler(ptr, delta, stats.allocated_bytes[0].current, stats.reserved_bytes[0].current,
                                   c10::Device(kRBLN, device));
}

void free_block(void* ctx);

class RBLNCachingAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    auto device = current_device();
    auto* stream = current_stream(device);
    if (n == 0) return {nullptr, nullptr, &free_block, c10::Device(kRBLN, device)};
    auto& pool = get_pool(device);
    auto size = round_size(n);
    auto context = gather_context(memory::HistoryConfig::kStateContext);
    auto mem_pool = current_mem_pool(device, stream);
    std::unique_lock<std::mutex> lock(pool.mutex);
    process_pending(pool);
    Block* block = take_cached(pool, stream, mem_pool, size);
    if (!block) block = reserve(pool, device, stream, mem_pool, size, n, context);
    size = block->size;  // a reused block may be a little larger than asked
    block->requested = n;
    update(pool.stats.allocation, size, 1);
    update(pool.stats.active, size, 1);
    update(pool.stats.allocated_bytes, size, static_cast<int64_t>(size));
    update(pool.stats.active_bytes, size, static_cast<int64_t>(size));
    update(pool.stats.requested_bytes, size, static_cast<int64_t>(n));
    block->context = context;
    record_action(pool, memory::TraceEntry::kAlloc, block->ptr, n, stream,
                  context && history_config().context >= memory::HistoryConfig::kAlloc ? context : nullptr);
    trace::report(trace::Kind::kMemoryAllocation, block->ptr, device);
    if (c10::memoryProfilingEnabled()) {
      auto stats = pool.stats;
      lock.unlock();
      report_to_profiler(block->ptr, static_cast<int64_t>(size), stats, device);
    }
    return {block->ptr, block, &free_block, c10::Device(kRBLN, device)};
  }

  void release(Block* block) {
    trace::report(trace::Kind::kMemoryDeallocation, block->ptr, block->device);
    auto& pool = get_pool(block->device);
    auto context = gather_context(memory::HistoryConfig::kAllContext);
    if (c10::memoryProfilingEnabled()) {
      void* ptr = block->ptr;  // the block may merge into a neighbour
      auto size = static_cast<int64_t>(block->size);
      auto device = block->device;
      DeviceStats stats;
      {
        std::lock_guard<std::mutex> lock(pool.mutex);
        release_locked(pool, block, std::move(context));
        stats = pool.stats;
      }
      report_to_profiler(ptr, -size, stats, device);
      return;
    }
    std::lock_guard<std::mutex> lock(pool.mutex);
    release_locked(pool, block, std::move(context));
  }

  void release_locked(DevicePool& pool, Block* block, memory::Context context) {
    update(pool.stats.allocation, block->size, -1);
    update(pool.stats.active, block->size, -1);
    update(pool.stats.allocated_bytes, block->size, -static_cast<int64_t>(block->size));
    update(pool.stats.active_bytes, block->size, -static_cast<int64_t>(block->size));
    update(pool.stats.requested_bytes, block->size, -static_cast<int64_t>(block->requested));
    record_action(pool, memory::TraceEntry::kFreeRequested, block->ptr, block->requested, block->stream, context);
    block->context.reset();
    if (block->used_by.empty()) {
      record_action(pool, memory::TraceEntry::kFreeCompleted, block->ptr, block->requested, block->stream, context);
      cache(pool, block);
      return;
    }
    if (!record_free_events(pool, block)) pool.deferred.push_back(block);
  }

  // Queues the events a freed block waits for; false while one of its streams captures.
  static bool record_free_events(DevicePool& pool, Block* block) {
    for (auto* stream : block->used_by)
      if (driver::stream_is_capturing(stream)) return false;
    std::vector<driver::Event*> events;
    for (auto* stream : block->used_by) {
      auto* event = driver::event_create();
      driver::event_record(event, stream);
      events.push_back(event);
    }
    block->used_by.clear();
    pool.pending.emplace_back(block, std::move(events));
    return true;
  }

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    driver_call([&] { driver::memcpy_sync(dest, src, count, current_stream()); });
  }

  bool initialized() override { return true; }

  void emptyCache(c10::MempoolId_t /*mempool_id*/) override {
    for (c10::DeviceIndex d = 0; d < static_cast<c10::DeviceIndex>(pools_.size()); ++d) {
      if (!pools_[d]) continue;
      auto& pool = *pools_[d];
      std::lock_guard<std::mutex> lock(pool.mutex);
      release_cached(pool, d);
    }
  }

  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override {
    auto* block = static_cast<Block*>(ptr.get_context());
    if (!block) return;
    auto* s = to_driver(stream);
    if (s == block->stream) return;
    std::lock_guard<std::mutex> lock(get_pool(block->device).mutex);
    block->used_by.insert(s);
  }

  DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    auto& pool = get_pool(resolve_device(device));
    std::lock_guard<std::mutex> lock(pool.mutex);
    return pool.stats;
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    auto& pool = get_pool(resolve_device(device));
    std::lock_guard<std::mutex> lock(pool.mutex);
    for_each_stat(pool.stats, [](c10::CachingAllocator::Stat& stat) { stat.reset_accumulated(); });
    auto& s = pool.stats;
    s.num_alloc_retries = s.num_ooms = s.num_device_alloc = s.num_device_free = 0;
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    auto& pool = get_pool(resolve_device(device));
    std::lock_guard<std::mutex> lock(pool.mutex);
    for_each_stat(pool.stats, [](c10::CachingAllocator::Stat& stat) { stat.reset_peak(); });
  }

  void setMemoryFraction(double fraction, c10::DeviceIndex device) {
    auto& pool = get_pool(resolve_device(device));
    std::lock_guard<std::mutex> lock(pool.mutex);
    pool.fraction = fraction;
  }

  double getMemoryFraction(c10::DeviceIndex device) {
    auto& pool = get_pool(resolve_device(device));
    std::lock_guard<std::mutex> lock(pool.mutex);
    return pool.fraction;
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    device = resolve_device(device);
    return driver_call([&] {
      auto total = driver::device_capacity(device);
      return std::make_pair(total - driver::device_bytes_used(device), total);
    });
  }

  memory::Snapshot snapshot() {
    memory::Snapshot result;
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
      auto& pool = get_pool(d);
      std::lock_guard<std::mutex> lock(pool.mutex);
      std::set<const Block*> pending;
      for (const auto& entry : pool.pending) pending.insert(entry.first);
      pending.insert(pool.deferred.begin(), pool.deferred.end());
      for (const Block* head : pool.segments) {
        memory::SegmentInfo segment{d, reinterpret_cast<uintptr_t>(head->ptr), 0, 0, 0, 0,
                                    driver::stream_id(head->stream), false, head->mem_pool, {}};
        for (const Block* b = head; b; b = b->next) {
          auto state = b->cached          ? memory::BlockInfo::kInactive
                       : pending.count(b) ? memory::BlockInfo::kActivePendingFree
                                          : memory::BlockInfo::kActiveAllocated;
          size_t requested = b->cached ? 0 : b->requested;
          segment.blocks.push_back({reinterpret_cast<uintptr_t>(b->ptr), b->size, requested, state, b->context});
          segment.total += b->size;
          segment.requested += requested;
          if (state == memory::BlockInfo::kActiveAllocated) segment.allocated += b->size;
          if (state != memory::BlockInfo::kInactive) segment.active += b->size;
        }
        segment.large = segment.total >= kSmallSize;
        result.segments.push_back(std::move(segment));
      }
      result.device_traces.emplace_back(pool.history.begin(), pool.history.end());
    }
    std::sort(result.segments.begin(), result.segments.end(),
              [](const auto& a, const auto& b) { return std::tie(a.device, a.address) < std::tie(b.device, b.address); });
    return result;
  }

  // A deleted pool's free segments go back to the driver now; its live blocks when they are freed.
  void release_free_segments(uint64_t mem_pool) {
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
      auto& pool = get_pool(d);
      std::lock_guard<std::mutex> lock(pool.mutex);
      process_pending(pool);
      std::set<driver::Stream*> streams;
      for (const Block* b : pool.free_blocks)
        if (b->mem_pool == mem_pool && is_segment(b)) streams.insert(b->stream);
      for (driver::Stream* stream : streams) release_stream_cached(pool, stream, mem_pool);
    }
  }

  void clear_history() {
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
      auto& pool = get_pool(d);
      std::lock_guard<std::mutex> lock(pool.mutex);
      pool.history.clear();
    }
  }

 private:
  DevicePool& get_pool(c10::DeviceIndex device) {
    std::call_once(init_, [this] {
      pools_.resize(device_count());
      for (auto& p : pools_) p = std::make_unique<DevicePool>();
    });
    TORCH_CHECK(device >= 0 && device < static_cast<c10::DeviceIndex>(pools_.size()),
                "Invalid device index rbln:", int(device));
    return *pools_[device];
  }

  static Block* take_cached(DevicePool& pool, driver::Stream* stream, uint64_t mem_pool, size_t size) {
    Block key{nullptr, size, 0, 0, stream, {}};
    key.mem_pool = mem_pool;
    auto it = pool.free_blocks.lower_bound(&key);
    if (it == pool.free_blocks.end() || (*it)->stream != stream || (*it)->mem_pool != mem_pool) return nullptr;
    Block* block = *it;
    // Split large blocks for large requests and small for small ones (the pools stay apart).
    const bool split = size >= kSmallSize ? block->size - size >= kLargeRound
                                          : block->size < kSmallSize && block->size - size >= kSmallRound;
    // Otherwise accept a larger cached block only while the waste stays small.
    if (!split && block->size > size + size / 8) return nullptr;
    pool.free_blocks.erase(it);
    block->cached = false;
    if (split) {
      auto* rest = new Block{static_cast<char*>(block->ptr) + size, block->size - size, 0, block->device, stream, {}};
      rest->mem_pool = mem_pool;
      rest->prev = block;
      rest->next = block->next;
      if (block->next) block->next->prev = rest;
      block->next = rest;
      block->size = size;
      rest->cached = true;
      pool.free_blocks.insert(rest);
    }
    return block;
  }

  // Returns a free block to the cache, merged with free neighbours of its
  // segment (into the earlier one, so a segment's first block stays first).
  static void cache(DevicePool& pool, Block* block) {
    if (Block* prev = block->prev; prev && prev->cached) {
      pool.free_blocks.erase(prev);
      absorb_next(prev);
      block = prev;
    }
    if (Block* next = block->next; next && next->cached) {
      pool.free_blocks.erase(next);
      absorb_next(block);
    }
    block->cached = true;
    pool.free_blocks.insert(block);
    if (!keeps_cache(block->mem_pool)) release_stream_cached(pool, block->stream, block->mem_pool);
  }

  static void absorb_next(Block* block) {
    Block* next = block->next;
    block->size += next->size;
    block->next = next->next;
    if (next->next) next->next->prev = block;
    delete next;
  }

  // A cache miss first hands this stream's free segments back to the
  // driver, whose arena merges them with their free neighbours, so shifting
  // sizes reuse that memory instead of reserving more (peak reserved stays
  // near peak allocated). Work queued on the stream may still use them:
  // stream order makes that safe for this stream's own allocations, and a
  // later reserve for another stream first waits for that work (the fence),
  // on its stream, without blocking the host.
  // While `stream` captures a graph nothing goes back to the driver (that
  // needs a record or a sync on it), and the fences are waited for on the host:
  // a capturing stream may not wait on outside work.
  Block* reserve(DevicePool& pool, c10::DeviceIndex device, driver::Stream* stream, uint64_t mem_pool, size_t size,
                 size_t n, const memory::Context& context) {
    const bool capturing = driver::stream_is_capturing(stream);
    release_stream_cached(pool, stream, mem_pool);
    for (auto& [other, fence] : pool.fences) {
      if (other == stream || driver::event_query(fence)) continue;
      if (capturing) {
        while (!driver::event_query(fence)) std::this_thread::yield();
      } else {
        driver_call([&] { driver::stream_wait_event(stream, fence); });
      }
    }
    const auto capacity = driver::device_capacity(device);
    const auto allowed = static_cast<size_t>(pool.fraction * static_cast<double>(capacity));
    auto within_fraction = [&] { return static_cast<size_t>(pool.stats.reserved_bytes[0].current) + size <= allowed; };
    auto device_malloc = [&]() -> void* {
      return within_fraction() ? driver_call([&] { return driver::device_malloc(device, size); }) : nullptr;
    };
    void* ptr = device_malloc();
    if (!ptr && !capturing) {
      // Out of room: hand the whole cache back to the driver and try once more.
      ++pool.stats.num_alloc_retries;
      release_cached(pool, device);
      ptr = device_malloc();
    }
    if (!ptr) {
      ++pool.stats.num_ooms;
      auto used = driver::device_bytes_used(device);
      auto allocated = pool.stats.allocated_bytes[0].current;
      std::string limit;
      if (!within_fraction()) {
        limit = " This process may reserve " + format_bytes(allowed) + " (per-process memory fraction " +
                std::to_string(pool.fraction) + ").";
      }
      record_action(pool, memory::TraceEntry::kOOM, nullptr, n, stream, context, capacity - used);
      TORCH_CHECK_WITH(OutOfMemoryError, false, "RBLN out of memory on device rbln:", int(device),
                       ". Tried to allocate ", format_bytes(n), "; ", format_bytes(allocated),
                       " in use by tensors, ", format_bytes(used), " reserved, ", format_bytes(capacity - used),
                       " free of ", format_bytes(capacity), " capacity.", limit);
    }
    ++pool.stats.num_device_alloc;
    update(pool.stats.segment, size, 1);
    update(pool.stats.reserved_bytes, size, static_cast<int64_t>(size));
    record_action(pool, memory::TraceEntry::kSegmentAlloc, ptr, size, stream, context);
    auto* block = new Block{ptr, size, n, device, stream, {}};
    block->mem_pool = mem_pool;
    pool.segments.insert(block);
    return block;
  }

  static void process_pending(DevicePool& pool) {
    if (!pool.deferred.empty()) {
      std::vector<Block*> deferred = std::move(pool.deferred);
      pool.deferred.clear();
      for (Block* block : deferred)
        if (!record_free_events(pool, block)) pool.deferred.push_back(block);
    }
    while (!pool.pending.empty()) {
      auto& [block, events] = pool.pending.front();
      for (auto* event : events) {
        if (!driver::event_query(event)) return;
      }
      for (auto* event : events) driver::event_destroy(event);
      Block* freed = block;
      pool.pending.pop_front();
      record_action(pool, memory::TraceEntry::kFreeCompleted, freed->ptr, freed->requested, freed->stream, nullptr);
      cache(pool, freed);
    }
  }

  static void release_cached(DevicePool& pool, c10::DeviceIndex device) {
    // Kernels queued before the blocks were freed may still touch them.
    driver_call([&] { driver::device_synchronize(device); });
    process_pending(pool);
    // Only whole free segments go back: a piece of a segment still in use stays cached.
    for (auto it = pool.free_blocks.begin(); it != pool.free_blocks.end();)
      it = is_segment(*it) ? release_segment(pool, it, false) : std::next(it);
  }

  // Without a sync: pages stay mapped for work still queued on `stream`, and
  // the fence marks where that work ends.
  // Only `mem_pool`'s segments: a MemPool keeps its memory while it lives.
  static void release_stream_cached(DevicePool& pool, driver::Stream* stream, uint64_t mem_pool) {
    if (driver::stream_is_capturing(stream)) return;  // see reserve
    Block key{nullptr, 0, 0, 0, stream, {}};
    key.mem_pool = mem_pool;
    bool released = false;
    for (auto it = pool.free_blocks.lower_bound(&key);
         it != pool.free_blocks.end() && (*it)->stream == stream && (*it)->mem_pool == mem_pool;) {
      if (!is_segment(*it)) {
        ++it;
        continue;
      }
      it = release_segment(pool, it, true);
      released = true;
    }
    if (!released) return;
    auto& fence = pool.fences[stream];
    if (!fence) fence = driver::event_create();
    driver_call([&] { driver::event_record(fence, stream); });
  }

  static bool is_segment(const Block* block) { return !block->prev && !block->next; }

  // Returns the free segment at `it` to the driver; the iterator past it.
  static std::set<Block*, BlockOrder>::iterator release_segment(DevicePool& pool,
                                                               std::set<Block*, BlockOrder>::iterator it,
                                                               bool keep_pages) {
    Block* block = *it;
    driver::device_free(block->ptr, keep_pages);
    record_action(pool, memory::TraceEntry::kSegmentFree, block->ptr, block->size, block->stream, nullptr);
    pool.segments.erase(block);
    ++pool.stats.num_device_free;
    update(pool.stats.segment, block->size, -1);
    update(pool.stats.reserved_bytes, block->size, -static_cast<int64_t>(block->size));
    delete block;
    return pool.free_blocks.erase(it);
  }

  std::once_flag init_;
  std::vector<std::unique_ptr<DevicePool>> pools_;
};

RBLNCachingAllocator g_allocator;

void free_block(void* ctx) {
  if (ctx) g_allocator.release(static_cast<Block*>(ctx));
}

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

}  // namespace

void set_memory_fraction(double fraction, c10::DeviceIndex device) {
  TORCH_CHECK_VALUE(fraction >= 0 && fraction <= 1, "Invalid fraction value: ", fraction, ". Allowed range: 0~1");
  g_allocator.setMemoryFraction(fraction, device);
}
double memory_fraction(c10::DeviceIndex device) { return g_allocator.getMemoryFraction(device); }

void memory::record_history(const HistoryConfig& config) {
  {
    std::lock_guard<std::mutex> lock(g_history_mu);
    g_history = config;
    g_history_on.store(config.record != HistoryConfig::kOff);
  }
  if (config.clear || config.record == HistoryConfig::kOff) g_allocator.clear_history();  // as CUDA's
}

memory::Snapshot memory::snapshot() { return g_allocator.snapshot(); }

void set_caching_enabled(bool enabled) { g_caching_enabled.store(enabled); }

uint64_t create_mem_pool() { return g_next_mem_pool.fetch_add(1); }

void begin_mem_pool(c10::DeviceIndex device, uint64_t mem_pool) {
  t_mem_pools[device].push_back(mem_pool);
  ++t_routed;
}

void end_mem_pool(c10::DeviceIndex device, uint64_t mem_pool) {
  auto& pools = t_mem_pools[device];
  TORCH_CHECK(!pools.empty() && pools.back() == mem_pool, "use_mem_pool: pools must be left in the order entered");
  pools.pop_back();
  --t_routed;
}

void begin_capture_pool(driver::Stream* stream, uint64_t mem_pool) {
  std::lock_guard<std::mutex> lock(g_capture_pools_mu);
  g_capture_pools[stream] = {static_cast<c10::DeviceIndex>(driver::stream_device(stream)), mem_pool};
  g_capturing.store(static_cast<int>(g_capture_pools.size()), std::memory_order_release);
}

void end_capture_pool(driver::Stream* stream) {
  std::lock_guard<std::mutex> lock(g_capture_pools_mu);
  g_capture_pools.erase(stream);
  g_capturing.store(static_cast<int>(g_capture_pools.size()), std::memory_order_release);
}

void release_mem_pool(uint64_t mem_pool) {
  {
    std::lock_guard<std::mutex> lock(g_released_mu);
    g_released_pools.insert(mem_pool);
  }
  g_allocator.release_free_segments(mem_pool);
}
bool caching_enabled() { return g_caching_enabled.load(); }

}  // namespace rbln
