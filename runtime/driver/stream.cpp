// Streams, their worker threads, events, copies and fork handling.
#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/driver/activity.h"
#include "runtime/driver/internal.h"
#include "runtime/driver/rbln_driver.h"

namespace rbln::driver {
namespace {

using Clock = std::chrono::steady_clock;

// Hand-off tuning. A condition-variable wake-up costs ~100us, a yield ~1us and
// a spin check ~0.1us, so waiters spin, then yield for a while, and only then
// park. The spin is kept short (~1.5us here): when the waiter and the thread it
// waits for share a core, every spin delays that thread (2000 spins made an
// empty round trip ~55us on one core, 128 make it ~3us).
constexpr int kSpinIterations = 128;
// A worker between launches yields this long before it parks.
constexpr auto kYieldWindow = std::chrono::microseconds(400);
// A host thread waiting for the device yields longer: work of a few hundred
// microseconds (a replayed decode step) is common, and a parked host wakes late
// (a compiled decode step replayed in 0.24 ms median with 150us, 0.15 ms with this).
constexpr auto kHostYieldWindow = std::chrono::microseconds(1000);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Returns once ready() holds; park() must block until it does.
template <class Ready, class Park>
void wait_until(Ready ready, Park park, Clock::duration yield_window = kYieldWindow) {
  for (int i = 0; i < kSpinIterations; ++i) {
    if (ready()) return;
    cpu_relax();
  }
  Clock::time_point deadline = Clock::now() + yield_window;
  do {
    if (ready()) return;
    sched_yield();
  } while (Clock::now() < deadline);
  park();
}

// The launch/park handshake is a Dekker pair: the host stores a slot's `seq`
// and then loads `worker_parked`, a parking worker stores `worker_parked` and
// then re-checks `seq`; each side needs a store-load fence. The host launches
// all the time and the worker parks rarely, so when the kernel offers
// membarrier the fence is asymmetric: the host's side is a compiler barrier
// (a full fence cost a chain of 1-element ops about 5%), the parking worker
// pays a membarrier, which runs a full barrier on every thread of the process.
std::atomic<bool> g_asymmetric_fence{false};
// Set for good once a membarrier failed (e.g. unregistered in a forked child):
// a host may have skipped its fence just before, so parks poll from then on.
std::atomic<bool> g_fence_failed{false};

void register_asymmetric_fence() {
  g_asymmetric_fence.store(syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0);
}

// Whether a parking worker may block until notified: true when every host
// fences (no membarrier) or the worker's membarrier ran; false when a host
// may have published without its fence and the worker must poll.
bool may_block_for_notify() {
  if (g_fence_failed.load()) return false;
  if (!g_asymmetric_fence.load()) return true;
  if (syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0) return true;
  g_fence_failed.store(true);
  g_asymmetric_fence.store(false);
  return false;
}

// A task is moved into its ring slot's storage, so a launch allocates
// nothing, unless it is larger or more aligned than that: then it is boxed.
constexpr size_t kTaskInlineBytes = 480;
constexpr size_t kTaskAlign = 16;

// An activity record on its way: filled in as the work is queued and run,
// kept only if the recording it began in is still on when the work ends.
struct PendingActivity {
  Activity record;
  uint64_t recording;  // g_recording_id when it began
};

// One slot of a stream's launch ring. `seq` is Vyukov's sequence number: a
// slot at ring position p is free for the producer holding ticket p + 1 when
// seq == p, published when seq == p + 1, and handed back to the producers of
// the next lap (seq = p + kRingSize) once the worker has run it.
struct alignas(64) Slot {
  std::atomic<uint64_t> seq{0};
  const char* name = nullptr;
  const TaskType* type = nullptr;  // nullptr: nothing to run (the task's move threw)
  bool boxed = false;              // storage holds a pointer to the task
  bool touches_memory = false;     // launches and copies, which strict mode must unprotect for
  bool in_burst = false;           // queued within kBurstNs of the stream's previous task
  PendingActivity* activity = nullptr;  // set while activities are recorded
  alignas(kTaskAlign) unsigned char storage[kTaskInlineBytes];
};
// Slots per stream. A producer that finds the ring full waits for the worker;
// the ring is allocated when the stream first gets work.
constexpr uint64_t kRingSize = 2048;
// Tasks queued closer together than this come from a host that is dispatching
// (a model's forward queues an op every few to tens of microseconds).
constexpr int64_t kBurstNs = 200'000;

}  // namespace

struct Capture;

struct Stream {
  Stream(int device, int64_t id) : device(device), id(id) {}
  const int device;
  const int64_t id;

  // Launchers -> worker: a lock-free ring. `enqueued` is the number of tickets
  // handed out (a ticket is a slot's position + 1); the worker runs them in order.
  std::unique_ptr<Slot[]> ring;          // set once, under queue_mu, before worker_started
  std::atomic<bool> worker_started{false};
  std::mutex queue_mu;                   // worker start-up and parking only
  std::condition_variable queue_cv;
  std::atomic<bool> worker_parked{false};
  alignas(64) std::atomic<uint64_t> enqueued{0};
  std::atomic<int64_t> last_enqueue_ns{0};

  // Worker -> host waiters. Separate cache line: the worker writes it per task.
  alignas(64) std::atomic<uint64_t> completed{0};
  std::atomic<int> parked_waiters{0};
  std::mutex done_mu;
  std::condition_variable done_cv;

  // The first failure since the last synchronizing call.
  std::atomic<bool> failed{false};
  std::mutex error_mu;
  std::string error;  // guarded by error_mu
  Error::Kind error_kind = Error::kKernel;  // guarded by error_mu

  // Graph capture, guarded by g_capture_mu; launches read `capturing` without it.
  std::atomic<bool> capturing{false};
  std::shared_ptr<Capture> capture;
  uint64_t captured = 0;  // work this stream recorded in `capture`
  uint64_t rejoined = 0;  // of which another stream of the capture waited on
};

struct Event {
  std::mutex mu;
  // The latest record: its stream (nullptr if never recorded), its position in
  // that stream and the time its marker ran. The marker shares `stamp`, so a
  // re-record or event_destroy never races with an older marker.
  Stream* stream = nullptr;
  uint64_t ticket = 0;
  std::shared_ptr<std::atomic<int64_t>> stamp;
  // Or, recorded on a capturing stream: its capture, stream and work count then.
  std::shared_ptr<Capture> capture;
  Stream* capture_stream = nullptr;
  uint64_t capture_count = 0;
};

namespace {

struct DeviceStreams {
  explicit DeviceStreams(int device) : default_stream(new Stream(device, 0)) {
    streams.emplace_back(default_stream);
  }
  Stream* const default_stream;
  std::mutex mu;
  std::vector<std::unique_ptr<Stream>> streams;  // index == id; guarded by mu
  std::atomic<bool> has_workers{false};
  std::atomic<bool> forked_away{false};  // workers ran in a parent process
};

using AllDevices = std::vector<std::unique_ptr<DeviceStreams>>;

// Leaked on purpose: detached workers may use streams while statics die at exit.
std::atomic<AllDevices*> g_devices{nullptr};

DeviceStreams& device_streams(int device) {
  static AllDevices* const devices = [] {
    auto* all = new AllDevices;
    for (int d = 0; d < device_count(); ++d) all->emplace_back(new DeviceStreams(d));
    g_devices.store(all);
    return all;
  }();
  return *(*devices)[device];
}

// Runs in the child right after fork(): only atomics, no locks.
void on_fork_child() {
  AllDevices* devices = g_devices.load();
  if (!devices) return;
  for (auto& device : *devices) {
    if (device->has_workers.load()) device->forked_away.store(true);
  }
}

void check_not_forked(const Stream* stream) {
  if (device_streams(stream->device).forked_away.load(std::memory_order_relaxed)) {
    throw Error(Error::kInvalid,
                "RBLN driver cannot be used in a forked child after it was initialized in the parent; "
                "use the 'spawn' start method");
  }
}

void record_error(Stream* stream, const char* name, const char* what, Error::Kind kind = Error::kKernel) {
  std::lock_guard<std::mutex> lock(stream->error_mu);
  if (stream->failed.load(std::memory_order_relaxed)) return;
  stream->error = std::string(name) + ": " + what;
  stream->error_kind = kind;
  stream->failed.store(true, std::memory_order_release);
}

void throw_pending_error(Stream* stream) {
  if (!stream->failed.load(std::memory_order_acquire)) return;
  std::string message;
  Error::Kind kind;
  {
    std::lock_guard<std::mutex> lock(stream->error_mu);
    if (!stream->failed.load(std::memory_order_relaxed)) return;  // another thread took it
    message = std::move(stream->error);
    kind = stream->error_kind;
    stream->error.clear();
    stream->failed.store(false, std::memory_order_relaxed);
  }
  throw Error(kind, message);
}

// ---- activity records ---------------------------------------------------------
std::atomic<bool> g_recording{false};
std::atomic<uint64_t> g_recording_id{0};  // one per set_activity_recording(true)
std::atomic<uint64_t> g_next_activity_id{1};
std::mutex g_activities_mu;
std::vector<Activity> g_activities;  // guarded by g_activities_mu
thread_local uint64_t t_correlation = 0;

int64_t wall_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

int32_t system_thread_id() {
  thread_local const auto tid = static_cast<int32_t>(syscall(SYS_gettid));
  return tid;
}

// nullptr unless recording; the caller owns the result until finish_activity.
PendingActivity* start_activity(Activity::Kind kind, const char* name, const Stream* stream, size_t bytes) {
  if (!g_recording.load(std::memory_order_relaxed)) return nullptr;
  int64_t now = wall_ns();
  return new PendingActivity{{kind, name, stream->device, stream->id, g_next_activity_id.fetch_add(1), t_correlation,
                              system_thread_id(), now, now, now, now, bytes},
                             g_recording_id.load()};
}

void finish_activity(PendingActivity* pending) {
  std::unique_ptr<PendingActivity> owned(pending);
  std::lock_guard<std::mutex> lock(g_activities_mu);
  if (g_recording.load() && g_recording_id.load() == pending->recording) g_activities.push_back(pending->record);
}

const char* copy_name(void* dst, const void* src) {
  bool from_device = device_of(src) >= 0, to_device = device_of(dst) >= 0;
  if (from_device) return to_device ? "Memcpy DtoD" : "Memcpy DtoH";
  return to_device ? "Memcpy HtoD" : "Memcpy HtoH";
}

struct MemoryTaskScope {
  MemoryTaskScope() { internal::begin_memory_task(); }
  ~MemoryTaskScope() { internal::end_memory_task(); }
};

// Runs the task at `task` and destroys it, also when it throws.
void run_and_destroy(const TaskType& type, void* task) {
  struct Destroy {
    const TaskType& type;
    void* task;
    ~Destroy() { type.destroy(task); }
  } destroy{type, task};
  type.call(task);
}

// Runs and destroys a slot's task (and frees its box).
void run_in_slot(Slot& slot) {
  if (!slot.type) return;
  if (!slot.boxed) return run_and_destroy(*slot.type, slot.storage);
  struct Free {
    void* box;
    std::align_val_t align;
    ~Free() { ::operator delete(box, align); }
  } box{*reinterpret_cast<void**>(slot.storage), std::align_val_t(slot.type->align)};
  run_and_destroy(*slot.type, box.box);
}

void run_task(Stream* stream, Slot& slot) {
  PendingActivity* activity = std::exchange(slot.activity, nullptr);
  if (activity) activity->record.begin_ns = wall_ns();
  try {
    if (slot.touches_memory && strict_mode()) {
      MemoryTaskScope scope;
      run_in_slot(slot);
    } else {
      run_in_slot(slot);
    }
  } catch (const std::out_of_range& e) {
    record_error(stream, slot.name, e.what(), Error::kIndex);
  } catch (const std::exception& e) {
    record_error(stream, slot.name, e.what());
  } catch (...) {
    record_error(stream, slot.name, "unknown exception");
  }
  if (activity) {
    activity->record.end_ns = wall_ns();
    finish_activity(activity);
  }
}

void mark_completed(Stream* stream) {
  // seq_cst on both sides (here and in wait_completed) so either the worker
  // sees a parked waiter or the waiter sees the new count.
  stream->completed.fetch_add(1);
  if (stream->parked_waiters.load() > 0) {
    { std::lock_guard<std::mutex> lock(stream->done_mu); }
    stream->done_cv.notify_all();
  }
}

// A slot's seq while its task runs (on the worker, or on a host that took it).
constexpr uint64_t kClaimed = uint64_t(1) << 63;

// Called by a host thread waiting for `ticket`: if the stream's next task is
// published but the worker has not claimed it yet (it may be descheduled on a
// busy machine), the waiting thread runs it itself. Only the head task can be
// taken (completed == its position, so everything before it has run), and the
// worker skips a taken slot, so stream order holds. Returns true if it ran one.
bool run_next_here(Stream* stream, uint64_t ticket) {
  if (!stream->worker_started.load(std::memory_order_acquire)) return false;
  uint64_t pos = stream->completed.load();
  if (pos >= ticket) return false;
  Slot& slot = stream->ring[pos % kRingSize];
  uint64_t expected = pos + 1;
  if (slot.seq.load() != expected || !slot.seq.compare_exchange_strong(expected, (pos + 1) | kClaimed)) return false;
  run_task(stream, slot);
  slot.seq.store(pos + kRingSize);  // seq_cst: either a parking worker sees it or we see worker_parked
  mark_completed(stream);
  if (stream->worker_parked.load()) {  // a parked worker waits on this slot
    { std::lock_guard<std::mutex> lock(stream->queue_mu); }
    stream->queue_cv.notify_one();
  }
  return true;
}

// Whether this thread is a stream worker: only a worker's team is sized (a
// waiting host may run a task, a graph's replay too, on its own thread).
thread_local bool t_is_worker = false;

// Host threads blocked in a synchronizing call, for the workers' team size.
std::atomic<int> g_host_waiters{0};
std::atomic<SizeWorkerTeam> g_size_worker_team{nullptr};

// help: the caller is a host thread that may run the stream's head task itself.
void wait_completed(Stream* stream, uint64_t ticket, bool help = false) {
  auto done = [&] { return stream->completed.load() >= ticket; };
  if (help && done()) return;
  struct HostWaiting {
    bool host;
    explicit HostWaiting(bool h) : host(h) { if (host) g_host_waiters.fetch_add(1, std::memory_order_relaxed); }
    ~HostWaiting() { if (host) g_host_waiters.fetch_sub(1, std::memory_order_relaxed); }
  } waiting(help);
  auto ready = [&] {
    if (done()) return true;
    if (help) run_next_here(stream, ticket);
    return done();
  };
  wait_until(ready, [&] {
    for (;;) {  // park, waking to help whenever the worker may have left work
      std::unique_lock<std::mutex> lock(stream->done_mu);
      stream->parked_waiters.fetch_add(1);
      bool finished = stream->done_cv.wait_for(lock, std::chrono::milliseconds(help ? 1 : 1000), done);
      stream->parked_waiters.fetch_sub(1);
      if (finished) return;
      lock.unlock();
      if (ready()) return;
    }
  }, help ? kHostYieldWindow : kYieldWindow);
}

// Runs the ring's tasks in order. Between back-to-back launches the worker
// spins and yields (wait_until); it parks only after kYieldWindow idle.
void run_worker(Stream* stream) {
  pthread_setname_np(pthread_self(), "rbln worker");  // for top, gdb, py-spy; inherited by its OpenMP team
  t_is_worker = true;
  Slot* ring = stream->ring.get();
  for (uint64_t pos = 0;; ++pos) {
    Slot& slot = ring[pos % kRingSize];
    // Published (pos + 1), or already run by a waiting host: then the slot is
    // at pos + kRingSize or later (a producer of the next lap may already have
    // reused it, and a host may even be running that next task).
    auto ran_elsewhere = [&](uint64_t seq) { return (seq & ~kClaimed) >= pos + kRingSize; };
    auto ready = [&] {
      uint64_t seq = slot.seq.load();  // seq_cst: see commit_slot
      return seq == pos + 1 || ran_elsewhere(seq);
    };
    for (;;) {
      wait_until(ready, [&] {
        std::unique_lock<std::mutex> lock(stream->queue_mu);
        stream->worker_parked.store(true);  // seq_cst: pairs with commit_slot's store and load
        if (may_block_for_notify()) {
          stream->queue_cv.wait(lock, ready);
        } else {  // a host may have launched without its fence: poll until it is seen
          while (!stream->queue_cv.wait_for(lock, std::chrono::milliseconds(1), ready)) {}
        }
        stream->worker_parked.store(false, std::memory_order_relaxed);
      });
      uint64_t expected = pos + 1;
      if (slot.seq.compare_exchange_strong(expected, (pos + 1) | kClaimed)) {
        if (auto size = g_size_worker_team.load(std::memory_order_acquire))
          size(slot.in_burst && g_host_waiters.load(std::memory_order_relaxed) == 0);
        run_task(stream, slot);
        slot.seq.store(pos + kRingSize, std::memory_order_release);
        mark_completed(stream);
        break;
      }
      if (ran_elsewhere(expected)) break;  // a host ran it; else it is running there: wait
    }
  }
}

void start_worker(Stream* stream) {
  std::lock_guard<std::mutex> lock(stream->queue_mu);
  if (stream->worker_started.load(std::memory_order_relaxed)) return;
  static std::once_flag atfork_registered;
  std::call_once(atfork_registered, [] {
    pthread_atfork(nullptr, nullptr, on_fork_child);
    register_asymmetric_fence();
  });
  stream->ring.reset(new Slot[kRingSize]);
  for (uint64_t i = 0; i < kRingSize; ++i) stream->ring[i].seq.store(i, std::memory_order_relaxed);
  // Detached: a worker parked at exit must not keep the process alive.
  std::thread(run_worker, stream).detach();
  device_streams(stream->device).has_workers.store(true);
  stream->worker_started.store(true, std::memory_order_release);
}

void synchronize(Stream* stream) {
  check_not_forked(stream);
  wait_completed(stream, stream->enqueued.load(std::memory_order_acquire), /*help=*/true);
}

struct RecordSnapshot {
  Stream* stream;
  uint64_t ticket;
  std::shared_ptr<std::atomic<int64_t>> stamp;
  std::shared_ptr<Capture> capture;
  Stream* capture_stream;
  uint64_t capture_count;
};

RecordSnapshot latest_record(Event* event) {
  std::lock_guard<std::mutex> lock(event->mu);
  return {event->stream, event->ticket, event->stamp, event->capture, event->capture_stream, event->capture_count};
}

bool reached(const RecordSnapshot& record) {
  return !record.stream || record.stream->completed.load() >= record.ticket;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

}  // namespace

// ---- streams -----------------------------------------------------------------

Stream* default_stream(int device) {
  check_device(device);
  return device_streams(device).default_stream;
}

// Priorities are accepted for API compatibility; the emulator treats all streams alike.
Stream* create_stream(int device, int /*priority*/) {
  check_device(device);
  DeviceStreams& streams = device_streams(device);
  std::lock_guard<std::mutex> lock(streams.mu);
  int64_t id = static_cast<int64_t>(streams.streams.size());
  streams.streams.emplace_back(new Stream(device, id));
  return streams.streams.back().get();
}

int stream_device(const Stream* stream) { return stream->device; }

int64_t stream_id(const Stream* stream) { return stream->id; }

Stream* stream_from_id(int device, int64_t id) {
  check_device(device);
  DeviceStreams& streams = device_streams(device);
  std::lock_guard<std::mutex> lock(streams.mu);
  if (id < 0 || id >= static_cast<int64_t>(streams.streams.size())) {
    throw Error(Error::kInvalid, "Unknown stream id " + std::to_string(id) + " on rbln:" + std::to_string(device));
  }
  return streams.streams[id].get();
}

// ---- graph capture -------------------------------------------------------------

// Recorded work: a task moved into storage of its own, run on every replay
// and destroyed with the graph.
struct Node {
  const char* name;
  const TaskType* type;
  void* task;
  int64_t stream;
  size_t bytes;
  Node(const char* name, const TaskType* type, void* task, int64_t stream, size_t bytes)
      : name(name), type(type), task(task), stream(stream), bytes(bytes) {}
  Node(Node&& other) noexcept
      : name(other.name), type(other.type), task(std::exchange(other.task, nullptr)), stream(other.stream),
        bytes(other.bytes) {}
  Node& operator=(Node&&) = delete;
  ~Node() {
    if (!task) return;
    type->destroy(task);
    ::operator delete(task, std::align_val_t(type->align));
  }
};
using Nodes = std::vector<Node>;

struct Capture {
  CaptureMode mode;
  std::thread::id thread;  // the thread that began it
  Stream* origin;
  std::vector<Stream*> streams;  // the origin and the streams that joined
  Nodes nodes;                   // in issue order, which respects every event dependency
  bool invalidated = false;      // by an error during capture
  bool active = true;
};

// The worker team a graph's replays run with. A replay runs its kernels back
// to back, and the whole team can lose to one thread fewer (a small kernel's
// parallel region wakes a parked helper: on 2 cores an 8-layer decode step
// replayed in 2.0 ms with 2 threads, 0.68 ms with 1) or win (large kernels),
// so the first replays time both sizes, alternating, and the rest take the
// faster one.
class TeamChoice {
 public:
  // The size for the next replay (true: one thread fewer) and its trial
  // number, -1 once chosen.
  std::pair<bool, int> next() {
    int chosen = chosen_.load(std::memory_order_relaxed);
    if (chosen >= 0) return {chosen == 1, -1};
    int trial = trials_.fetch_add(1, std::memory_order_relaxed);
    return {trial % 2 == 1, trial};
  }
  void record(bool smaller, int trial, int64_t ns) {
    auto& best = best_ns_[smaller];
    for (int64_t seen = best.load(); ns < seen && !best.compare_exchange_weak(seen, ns);) {}
    if (trial + 1 >= kTrials) chosen_.store(best_ns_[1].load() < best_ns_[0].load() ? 1 : 0);
  }

 private:
  static constexpr int kTrials = 6;
  std::atomic<int> trials_{0};
  std::atomic<int> chosen_{-1};  // 1: one thread fewer, 0: the whole team
  std::atomic<int64_t> best_ns_[2] = {INT64_MAX, INT64_MAX};  // fastest replay per size
};

struct Graph {
  std::shared_ptr<const Nodes> nodes;  // shared with replays still queued
  std::shared_ptr<TeamChoice> team = std::make_shared<TeamChoice>();
};

namespace {

// CUDA's messages for its stream-capture errors.
constexpr const char* kCaptureUnsupported = "operation not permitted when stream is capturing";
constexpr const char* kCaptureInvalidated = "operation failed due to a previous error during capture";
constexpr const char* kCaptureUnjoined = "capturing stream has unjoined work";
constexpr const char* kCaptureIsolation = "dependency created on uncaptured work in another stream";
constexpr const char* kCaptureMerge = "operation would result in a merge of separate capture sequences";
constexpr const char* kCaptureUnmatched = "capture was not initiated in this stream";
constexpr const char* kCaptureWrongThread = "attempt to terminate a thread-local capture sequence from another thread";

std::mutex g_capture_mu;
std::vector<Capture*> g_captures;        // active ones; guarded by g_capture_mu
std::atomic<int> g_active_captures{0};   // g_captures.size(), read without the lock

[[noreturn]] void fail_capture(Capture* capture, const char* what) {
  if (capture) capture->invalidated = true;
  throw Error(Error::kInvalid, what);
}

// A synchronizing call: throws, invalidating the captures concerned, when it
// conflicts with a capture (it waits on a capturing stream `target`, or on a
// device with a capture) or a running capture's mode forbids it (`unsafe`).
void check_sync_permitted(const Stream* target, int device = -1, bool unsafe = true) {
  if (g_active_captures.load(std::memory_order_acquire) == 0) return;
  std::lock_guard<std::mutex> lock(g_capture_mu);
  const auto me = std::this_thread::get_id();
  Capture* conflict = nullptr;
  for (Capture* capture : g_captures) {
    bool on_it = (target && target->capture.get() == capture) || capture->origin->device == device;
    bool forbidden = unsafe && (capture->mode == CaptureMode::kGlobal ||
                                (capture->mode == CaptureMode::kThreadLocal && capture->thread == me));
    if (!on_it && !forbidden) continue;
    capture->invalidated = true;
    conflict = capture;
  }
  if (conflict) throw Error(Error::kInvalid, kCaptureUnsupported);
}

// Records the callable as the next work of the capture `stream` belongs to;
// false if the stream stopped capturing meanwhile.
bool record_node(Stream* stream, const char* name, void* callable, const TaskType& type, size_t bytes) {
  std::lock_guard<std::mutex> lock(g_capture_mu);
  Capture* capture = stream->capture.get();
  if (!capture) return false;
  if (capture->invalidated) throw Error(Error::kInvalid, kCaptureInvalidated);
  void* task = ::operator new(type.size, std::align_val_t(type.align));
  try {
    type.move(callable, task);
  } catch (...) {
    ::operator delete(task, std::align_val_t(type.align));
    throw;
  }
  capture->nodes.emplace_back(name, &type, task, stream->id, bytes);
  ++stream->captured;
  return true;
}

// A replay: the graph's work in order, each node named in its errors.
void run_nodes(const Nodes& nodes, const Stream* stream, uint64_t correlation, int32_t thread, int64_t launched_ns) {
  for (const Node& node : nodes) {
    std::unique_ptr<PendingActivity> activity;
    if (g_recording.load(std::memory_order_relaxed)) {
      activity.reset(new PendingActivity{{node.bytes ? Activity::kMemcpy : Activity::kKernel, node.name, stream->device,
                                          stream->id, g_next_activity_id.fetch_add(1), correlation, thread, launched_ns,
                                          launched_ns, wall_ns(), 0, node.bytes},
                                         g_recording_id.load()});
    }
    try {
      node.type->call(node.task);
    } catch (const std::out_of_range& e) {
      throw std::out_of_range(std::string(node.name) + ": " + e.what());
    } catch (const std::exception& e) {
      throw std::runtime_error(std::string(node.name) + ": " + e.what());
    }
    if (activity) {
      activity->record.end_ns = wall_ns();
      finish_activity(activity.release());
    }
  }
}

}  // namespace

void stream_begin_capture(Stream* stream, CaptureMode mode) {
  check_not_forked(stream);
  std::lock_guard<std::mutex> lock(g_capture_mu);
  if (stream->capture) fail_capture(stream->capture.get(), kCaptureUnsupported);
  auto capture = std::make_shared<Capture>();
  capture->mode = mode;
  capture->thread = std::this_thread::get_id();
  capture->origin = stream;
  capture->streams.push_back(stream);
  stream->capture = capture;
  stream->captured = stream->rejoined = 0;
  stream->capturing.store(true, std::memory_order_release);
  g_captures.push_back(capture.get());
  g_active_captures.fetch_add(1, std::memory_order_release);
}

Graph* stream_end_capture(Stream* stream) {
  Nodes nodes;  // destroyed after the lock is released: tasks may free memory
  std::string error;
  {
    std::lock_guard<std::mutex> lock(g_capture_mu);
    std::shared_ptr<Capture> capture = stream->capture;
    if (!capture || capture->origin != stream) throw Error(Error::kInvalid, kCaptureUnmatched);
    if (capture->mode == CaptureMode::kThreadLocal && capture->thread != std::this_thread::get_id())
      throw Error(Error::kInvalid, kCaptureWrongThread);
    if (capture->invalidated) error = kCaptureInvalidated;
    for (Stream* s : capture->streams) {
      if (error.empty() && s->captured > s->rejoined && s != stream) error = kCaptureUnjoined;
      s->capture.reset();
      s->capturing.store(false, std::memory_order_release);
    }
    capture->active = false;
    nodes = std::move(capture->nodes);
    g_captures.erase(std::find(g_captures.begin(), g_captures.end(), capture.get()));
    g_active_captures.fetch_sub(1, std::memory_order_release);
  }
  if (!error.empty()) throw Error(Error::kInvalid, error);
  return new Graph{std::make_shared<const Nodes>(std::move(nodes))};
}

bool stream_is_capturing(const Stream* stream) { return stream->capturing.load(std::memory_order_acquire); }

void graph_destroy(Graph* graph) { delete graph; }

std::vector<GraphNode> graph_nodes(const Graph* graph) {
  std::vector<GraphNode> result;
  for (const Node& node : *graph->nodes) result.push_back({node.name, node.stream, node.bytes});
  return result;
}

namespace {

// Reserves the next slot of the stream's ring, waiting while the ring is full;
// *ticket is its position + 1.
Slot& reserve_slot(Stream* stream, uint64_t* ticket) {
  check_not_forked(stream);
  if (!stream->worker_started.load(std::memory_order_acquire)) start_worker(stream);
  uint64_t pos = stream->enqueued.fetch_add(1, std::memory_order_acq_rel);
  Slot& slot = stream->ring[pos % kRingSize];
  // Full ring: wait for the worker to hand this slot back (it never waits on us).
  wait_until([&] { return slot.seq.load(std::memory_order_acquire) == pos; },
             [&] {
               while (slot.seq.load(std::memory_order_acquire) != pos) std::this_thread::sleep_for(std::chrono::microseconds(50));
             });
  *ticket = pos + 1;
  return slot;
}

void commit_slot(Stream* stream, Slot& slot, uint64_t ticket) {
  // Either the worker sees `seq` or we see worker_parked (see may_block_for_notify).
  if (g_asymmetric_fence.load(std::memory_order_relaxed)) {
    slot.seq.store(ticket, std::memory_order_release);
    std::atomic_signal_fence(std::memory_order_seq_cst);
  } else {
    slot.seq.store(ticket);
  }
  if (stream->worker_parked.load()) {
    { std::lock_guard<std::mutex> lock(stream->queue_mu); }
    stream->queue_cv.notify_one();
  }
}

// Moves the callable into the next slot (or a box) and publishes it; returns its ticket.
uint64_t enqueue(Stream* stream, const char* name, void* callable, const TaskType& type, bool touches_memory,
                 PendingActivity* activity = nullptr) {
  uint64_t ticket;
  Slot& slot = reserve_slot(stream, &ticket);
  slot.name = name;
  slot.activity = nullptr;
  slot.boxed = type.size > kTaskInlineBytes || type.align > kTaskAlign;
  slot.touches_memory = touches_memory;
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
  slot.in_burst = now - stream->last_enqueue_ns.exchange(now, std::memory_order_relaxed) < kBurstNs;
  void* box = nullptr;
  try {
    if (slot.boxed) *reinterpret_cast<void**>(slot.storage) = box = ::operator new(type.size, std::align_val_t(type.align));
    type.move(callable, slot.boxed ? box : slot.storage);
  } catch (...) {
    if (box) ::operator delete(box, std::align_val_t(type.align));
    delete activity;
    slot.type = nullptr;
    commit_slot(stream, slot, ticket);  // the slot must still be published
    throw;
  }
  slot.type = &type;
  if (activity) {
    activity->record.host_end_ns = wall_ns();
    slot.activity = activity;
  }
  commit_slot(stream, slot, ticket);
  return ticket;
}

// Driver work queued with the same ordering as a launched task.
template <class F>
uint64_t enqueue(Stream* stream, const char* name, F&& fn, bool touches_memory) {
  return enqueue(stream, name, std::addressof(fn), TaskOf<F>::type, touches_memory);
}

// Queues (or, on a capturing stream, records) a launch or copy; `bytes` for copies.
void launch_recorded(Stream* stream, const char* name, void* callable, const TaskType& type, PendingActivity* activity,
                     size_t bytes = 0) {
  if (stream->capturing.load(std::memory_order_acquire)) {
    std::unique_ptr<PendingActivity> dropped(activity);  // captured work runs (and is recorded) at replay
    if (record_node(stream, name, callable, type, bytes)) return;
    activity = dropped.release();
  }
  uint64_t ticket = enqueue(stream, name, callable, type, /*touches_memory=*/true, activity);
  if (launch_blocking()) {  // wait and rethrow
    wait_completed(stream, ticket, /*help=*/true);
    throw_pending_error(stream);
  }
}

}  // namespace

void launch(Stream* stream, const char* name, void* callable, const TaskType& type) {
  launch_recorded(stream, name, callable, type, start_activity(Activity::kKernel, name, stream, 0));
}

void graph_launch(Graph* graph, Stream* stream) {
  auto replay = [nodes = graph->nodes, team = graph->team, stream, correlation = t_correlation,
                 thread = system_thread_id(), launched = wall_ns()] {
    auto size = t_is_worker ? g_size_worker_team.load(std::memory_order_acquire) : nullptr;
    if (!size) return run_nodes(*nodes, stream, correlation, thread, launched);
    auto [smaller, trial] = team->next();
    size(smaller);
    const auto start = Clock::now();
    run_nodes(*nodes, stream, correlation, thread, launched);
    if (trial >= 0) team->record(smaller, trial, std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count());
  };
  launch_recorded(stream, "graph replay", &replay, TaskOf<decltype(replay)>::type, nullptr);
}

void stream_synchronize(Stream* stream) {
  check_sync_permitted(stream);
  synchronize(stream);
  throw_pending_error(stream);
}

bool stream_query(Stream* stream) {
  if (stream->capturing.load(std::memory_order_acquire)) check_sync_permitted(stream, -1, /*unsafe=*/false);
  uint64_t enqueued = stream->enqueued.load(std::memory_order_acquire);
  return stream->completed.load() >= enqueued;
}

void device_synchronize(int device) {
  check_device(device);
  check_sync_permitted(nullptr, device);
  std::vector<Stream*> streams;
  {
    DeviceStreams& all = device_streams(device);
    std::lock_guard<std::mutex> lock(all.mu);
    for (const auto& stream : all.streams) streams.push_back(stream.get());
  }
  for (Stream* stream : streams) synchronize(stream);
  for (Stream* stream : streams) throw_pending_error(stream);
}

// ---- events ------------------------------------------------------------------

Event* event_create() { return new Event; }

void event_destroy(Event* event) { delete event; }

void event_record(Event* event, Stream* stream) {
  if (stream->capturing.load(std::memory_order_acquire)) {  // a dependency inside the capture, no work
    std::lock_guard<std::mutex> lock(g_capture_mu);
    if (std::shared_ptr<Capture> capture = stream->capture) {
      if (capture->invalidated) throw Error(Error::kInvalid, kCaptureInvalidated);
      std::lock_guard<std::mutex> event_lock(event->mu);
      event->stream = nullptr;
      event->stamp.reset();
      event->capture = std::move(capture);
      event->capture_stream = stream;
      event->capture_count = stream->captured;
      return;
    }
  }
  auto stamp = std::make_shared<std::atomic<int64_t>>(0);
  uint64_t ticket = enqueue(stream, "event_record", [stamp] { stamp->store(now_ns()); }, false);
  std::lock_guard<std::mutex> lock(event->mu);
  event->stream = stream;
  event->ticket = ticket;
  event->stamp = std::move(stamp);
  event->capture.reset();
}

namespace {

// A wait that involves a capture: on an event recorded in one, the waiting
// stream joins it (or, already in it, marks the recording stream rejoined up
// to that point); a capturing stream may not wait on unfinished outside work.
void capture_wait_event(Stream* stream, const RecordSnapshot& record) {
  std::lock_guard<std::mutex> lock(g_capture_mu);
  Capture* capture = record.capture && record.capture->active ? record.capture.get() : nullptr;
  if (!capture) {
    if (stream->capture && !reached(record)) fail_capture(stream->capture.get(), kCaptureIsolation);
    return;
  }
  if (capture->invalidated) throw Error(Error::kInvalid, kCaptureInvalidated);
  if (!stream->capture) {
    stream->capture = record.capture;
    stream->captured = stream->rejoined = 0;
    stream->capturing.store(true, std::memory_order_release);
    capture->streams.push_back(stream);
    return;
  }
  if (stream->capture.get() != capture) {
    stream->capture->invalidated = true;
    fail_capture(capture, kCaptureMerge);
  }
  Stream* recorder = record.capture_stream;
  if (recorder != stream) recorder->rejoined = std::max(recorder->rejoined, record.capture_count);
}

}  // namespace

void stream_wait_event(Stream* stream, Event* event) {
  RecordSnapshot record = latest_record(event);
  if (record.capture || stream->capturing.load(std::memory_order_acquire)) return capture_wait_event(stream, record);
  if (!record.stream || record.stream == stream) return;  // a stream already runs in order
  enqueue(stream, "stream_wait_event", [record] { wait_completed(record.stream, record.ticket); }, false);
}

namespace {

// Querying or waiting on an event recorded in a capture that is still running
// conflicts with it.
void check_not_captured(const RecordSnapshot& record) {
  if (!record.capture) return;
  std::lock_guard<std::mutex> lock(g_capture_mu);
  if (record.capture->active) fail_capture(record.capture.get(), kCaptureUnsupported);
}

}  // namespace

bool event_query(Event* event) {
  RecordSnapshot record = latest_record(event);
  check_not_captured(record);
  return reached(record);
}

void event_synchronize(Event* event) {
  RecordSnapshot record = latest_record(event);
  check_not_captured(record);
  check_sync_permitted(nullptr);
  if (!record.stream) return;
  check_not_forked(record.stream);
  wait_completed(record.stream, record.ticket, /*help=*/true);
  throw_pending_error(record.stream);
}

float event_elapsed_ms(Event* start, Event* end) {
  RecordSnapshot records[] = {latest_record(start), latest_record(end)};
  for (const RecordSnapshot& record : records) {
    if (!record.stream) throw Error(Error::kInvalid, "event_elapsed_ms: an event was never recorded");
    if (!reached(record)) throw Error(Error::kInvalid, "event_elapsed_ms: an event has not completed yet");
  }
  return static_cast<float>((records[1].stamp->load() - records[0].stamp->load()) / 1e6);
}

// ---- copies ----------------------------------------------------------------

namespace {

std::atomic<ParallelFor> g_parallel_for{nullptr};
constexpr size_t kCopyChunk = 1 << 20;          // bytes per parallel piece
constexpr size_t kParallelCopyBytes = 4 << 20;  // below this one memcpy is faster than a fork-join

void copy_bytes(void* dst, const void* src, size_t bytes) {
  ParallelFor parallel_for = g_parallel_for.load(std::memory_order_acquire);
  if (!parallel_for || bytes < kParallelCopyBytes) {
    std::memcpy(dst, src, bytes);
    return;
  }
  struct Copy {
    char* dst;
    const char* src;
    size_t bytes;
  } copy{static_cast<char*>(dst), static_cast<const char*>(src), bytes};
  parallel_for((bytes + kCopyChunk - 1) / kCopyChunk, &copy, [](void* ctx, size_t begin, size_t end) {
    auto* c = static_cast<Copy*>(ctx);
    size_t lo = begin * kCopyChunk, hi = std::min(end * kCopyChunk, c->bytes);
    std::memcpy(c->dst + lo, c->src + lo, hi - lo);
  });
}

// A copy run by a host thread rather than a stream worker (strict mode
// unprotects device memory for it as it does for a task), recorded as work of `stream`.
void copy_on_this_thread(void* dst, const void* src, size_t bytes, const Stream* stream) {
  PendingActivity* activity = start_activity(Activity::kMemcpy, copy_name(dst, src), stream, bytes);
  if (strict_mode()) {
    MemoryTaskScope scope;
    copy_bytes(dst, src, bytes);
  } else {
    copy_bytes(dst, src, bytes);
  }
  if (activity) {
    activity->record.end_ns = activity->record.host_end_ns = wall_ns();
    finish_activity(activity);
  }
}

}  // namespace

void set_parallel_for(ParallelFor parallel_for) { g_parallel_for.store(parallel_for, std::memory_order_release); }
void set_size_worker_team(SizeWorkerTeam size) { g_size_worker_team.store(size, std::memory_order_release); }

// A small copy onto an idle stream runs on the calling thread at once. That
// is the order a queued copy would have (nothing is ahead of it), completed
// as a device's copy engine completes it: within microseconds of the call.
// Queued instead, it waits for a worker that may be parked (~100 us to wake)
// or descheduled for milliseconds on a loaded host, and a client that forgets
// to order another stream after it (Hugging Face's continuous batching writes
// its inputs on the default stream and reads them on its compute stream)
// reads stale data here though it never does on silicon.
constexpr size_t kInlineCopyBytes = 64 << 10;

void memcpy_async(void* dst, const void* src, size_t bytes, Stream* stream) {
  if (bytes == 0) return;
  const bool capturing = stream->capturing.load(std::memory_order_acquire);
  if (bytes <= kInlineCopyBytes && !capturing && !launch_blocking() && stream_query(stream)) {
    check_not_forked(stream);
    copy_on_this_thread(dst, src, bytes, stream);
    return;
  }
  auto copy = [dst, src, bytes] { copy_bytes(dst, src, bytes); };
  const char* name = copy_name(dst, src);
  launch_recorded(stream, name, &copy, TaskOf<decltype(copy)>::type, start_activity(Activity::kMemcpy, name, stream, bytes),
                  bytes);
}

// Waits for the stream's earlier work, then copies on the calling thread: the
// same ordering as a queued copy followed by a synchronize, without the
// second round trip to the worker (this is what makes .item() cheap).
void memcpy_sync(void* dst, const void* src, size_t bytes, Stream* stream) {
  check_not_forked(stream);
  check_sync_permitted(stream);
  synchronize(stream);
  if (bytes > 0) copy_on_this_thread(dst, src, bytes, stream);  // even after a failed task, as a queued copy would
  throw_pending_error(stream);
}

// ---- activity records -----------------------------------------------------------

void set_activity_recording(bool on) {
  std::lock_guard<std::mutex> lock(g_activities_mu);
  if (on && !g_recording.load()) {
    g_activities.clear();
    g_recording_id.fetch_add(1);
  }
  g_recording.store(on);
}

bool activity_recording() { return g_recording.load(std::memory_order_relaxed); }

void set_correlation_id(uint64_t id) { t_correlation = id; }

std::vector<Activity> take_activities() {
  std::lock_guard<std::mutex> lock(g_activities_mu);
  return std::exchange(g_activities, {});
}

void wait_all_streams() {
  for (int device = 0; device < device_count(); ++device) {
    std::vector<Stream*> streams;
    {
      DeviceStreams& all = device_streams(device);
      std::lock_guard<std::mutex> lock(all.mu);
      for (const auto& stream : all.streams) streams.push_back(stream.get());
    }
    for (Stream* stream : streams) synchronize(stream);
  }
}

}  // namespace rbln::driver
