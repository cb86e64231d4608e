// The emulated RBLN NPU driver: devices, device memory, streams, events and
// copies. It has no PyTorch dependency; a vendor with silicon replaces this
// directory and keeps everything above it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace rbln::driver {

// Thrown by every driver call that fails. `kind` lets the torch glue map it to
// the right Python exception.
struct Error : std::runtime_error {
  // kIndex: a task threw std::out_of_range (an index out of range: Python's IndexError on CPU).
  enum Kind { kInvalid, kOutOfMemory, kKernel, kIndex };
  Kind kind;
  Error(Kind k, const std::string& what) : std::runtime_error(what), kind(k) {}
};

// ---- devices ---------------------------------------------------------------
// RBLN_DEVICE_COUNT (default 2). Never throws: a bad value counts as 0 devices
// and the reason is reported by device_count_error().
int device_count() noexcept;
std::string device_count_error();
void check_device(int device);  // throws kInvalid naming the device and count
// RBLN_DEVICE_MEMORY, bytes with optional K/M/G suffix (default 8G).
size_t device_capacity(int device);
// RBLN_LAUNCH_BLOCKING=1: every launch and copy completes before returning.
bool launch_blocking();
// RBLN_STRICT=1: device memory is PROT_NONE outside launches and copies.
bool strict_mode();

// ---- device memory ---------------------------------------------------------
// Device memory is a per-device mmap'ed arena of device_capacity() bytes,
// reserved lazily; pointers are arena addresses, never host heap pointers.
// Returns nullptr when the arena has no room (the caller decides about OOM).
void* device_malloc(int device, size_t bytes);
// keep_pages: work queued before the free may still use the range (a
// stream-ordered release), so large free ranges are not handed back to the OS.
void device_free(void* ptr, bool keep_pages = false);
size_t device_bytes_used(int device);  // bytes handed out by device_malloc
int device_of(const void* ptr);        // -1 when ptr is not device memory

// ---- pinned host memory ----------------------------------------------------
void* host_malloc(size_t bytes);  // throws kOutOfMemory when the host has no room
void host_free(void* ptr);
bool is_pinned(const void* ptr);  // true for any address inside a pinned block

// ---- streams -----------------------------------------------------------------
// Work queued on a stream runs in order on that stream's worker thread.
struct Stream;
Stream* default_stream(int device);
Stream* create_stream(int device, int priority = 0);  // lives for the process
int stream_device(const Stream* stream);
int64_t stream_id(const Stream* stream);  // 0 for the default stream
Stream* stream_from_id(int device, int64_t id);  // throws kInvalid if unknown

// How launch() moves, runs and destroys a callable it is handed: `move`
// constructs it at `to` (size bytes aligned to align) from the caller's object
// at `from`; `call(task)` runs it there (once, or once per replay of a graph
// that captured it: a task must not consume its own state); `destroy(task)`
// ends its life. TaskOf<F>::type describes a callable passed as F&&.
struct TaskType {
  size_t size, align;
  void (*move)(void* from, void* to);
  void (*call)(void* task);
  void (*destroy)(void* task);
};

// Queue the callable at `callable` (void(), of type `type`) on `stream`. The
// driver moves it into storage of its own before returning. `name` (a string
// literal or otherwise static string, e.g. "aten::add.Tensor") names the work
// in errors. A task that throws marks the stream failed: the next
// synchronizing call on it throws kKernel (kIndex for std::out_of_range) with "<name>: <what>", then the
// stream is usable again. With launch_blocking(), launch waits for the task
// and throws at once. On a capturing stream the task is recorded, not run.
void launch(Stream* stream, const char* name, void* callable, const TaskType& type);

template <class F>
struct TaskOf {
  using D = std::decay_t<F>;
  static void move(void* from, void* to) { ::new (to) D(std::forward<F>(*static_cast<std::remove_reference_t<F>*>(from))); }
  static void call(void* task) { (*std::launder(static_cast<D*>(task)))(); }
  static void destroy(void* task) { std::launder(static_cast<D*>(task))->~D(); }
  static constexpr TaskType type{sizeof(D), alignof(D), move, call, destroy};
};

// launch() for any callable: moved (an lvalue: copied) into the stream's storage.
template <class F>
void launch(Stream* stream, const char* name, F&& task) {
  launch(stream, name, const_cast<void*>(static_cast<const void*>(std::addressof(task))), TaskOf<F>::type);
}

void stream_synchronize(Stream* stream);
bool stream_query(Stream* stream);  // true when all queued work is done
void device_synchronize(int device);  // every stream of the device

// ---- events ------------------------------------------------------------------
struct Event;
Event* event_create();
void event_destroy(Event* event);
void event_record(Event* event, Stream* stream);
void stream_wait_event(Stream* stream, Event* event);  // queued, host returns
bool event_query(Event* event);  // true if never recorded or reached
void event_synchronize(Event* event);  // also rethrows the stream's error
float event_elapsed_ms(Event* start, Event* end);  // both must have completed

// ---- graph capture -----------------------------------------------------------
// As CUDA's stream capture: while a stream captures, the launches and
// memcpy_async queued on it are recorded (the task, its name, its stream and
// its place in issue order) instead of run. graph_launch queues the recorded
// work on a stream as one task that runs it in order, as often as it is called.
// Another stream joins a capture by waiting on an event recorded on a stream
// of that capture, and must be waited on again by the capture before it ends.
// Errors are kInvalid with CUDA's messages: a synchronizing call on a capturing
// stream (stream_synchronize, stream_query, memcpy_sync, device_synchronize of
// its device, event_synchronize/event_query of an event recorded in a capture)
// throws "operation not permitted when stream is capturing" and invalidates
// the capture; stream_end_capture then throws and ends it.
// Modes (cudaStreamCaptureMode): while a capture of mode kGlobal runs, no thread
// may make a synchronizing call; kThreadLocal forbids only the capturing thread;
// kRelaxed forbids only calls on the capture's own streams and events.
enum class CaptureMode { kGlobal, kThreadLocal, kRelaxed };
struct Graph;
void stream_begin_capture(Stream* stream, CaptureMode mode);
Graph* stream_end_capture(Stream* stream);  // the caller owns the graph
bool stream_is_capturing(const Stream* stream);
void graph_launch(Graph* graph, Stream* stream);
void graph_destroy(Graph* graph);  // replays already queued still run
// The recorded work in replay order, for debug dumps.
struct GraphNode {
  const char* name;  // the launch's name; copies: "Memcpy HtoD" and the like
  int64_t stream;    // the stream id it was queued on during capture
  size_t bytes;      // copies: bytes moved; kernels: 0
};
std::vector<GraphNode> graph_nodes(const Graph* graph);

// ---- copies ----------------------------------------------------------------
// Contiguous byte copies; any pair of host and device addresses. Queued on
// `stream`; memcpy_sync also waits for it (and for earlier work on it).
void memcpy_async(void* dst, const void* src, size_t bytes, Stream* stream);
// memcpy_sync runs the copy on the calling thread once the stream is idle.
void memcpy_sync(void* dst, const void* src, size_t bytes, Stream* stream);

// Large copies (4 MiB and up) are split into 1 MiB pieces run through
// `parallel_for(pieces, ctx, body)`, which must call body(ctx, begin, end) over
// [0, pieces) and return when all are done. The torch glue installs
// at::parallel_for; without one a copy is a single memcpy.
using ParallelFor = void (*)(size_t pieces, void* ctx, void (*body)(void* ctx, size_t begin, size_t end));
void set_parallel_for(ParallelFor parallel_for);

// ---- the workers' share of the cores ------------------------------------------
// Called by a stream worker before each task, so the torch glue can size the
// worker's intra-op team: the emulated device computes on the host's cores.
// `smaller` asks for one thread fewer than the device's: a host thread is
// still dispatching (the task was queued right after the one before it and no
// host thread is waiting for the device) and needs a core, or a graph's
// replays ran faster so (graph_launch times both sizes).
using SizeWorkerTeam = void (*)(bool smaller);
void set_size_worker_team(SizeWorkerTeam size);

}  // namespace rbln::driver
