// c10d's "rbln-ccl" backend. A collective on rbln tensors is queued like a
// device kernel: its communication stream waits for the caller's stream and
// runs a host task that waits for the host backend (Gloo) to finish;
// Work::wait() makes the caller's stream wait for that, as NCCL's does.
// Device memory is host-addressable inside a task (as for every kernel here), so
// Gloo works on the device tensors themselves while that task runs; tensors it
// cannot take as they are go through pinned host buffers copied in before the
// task and back after it.
// One posting thread per backend calls the host backend in program order, so
// Gloo's per-collective tags agree across ranks whatever the device's timing;
// it posts without waiting for completion, so a send and the matching
// receive never wait on each other. CPU tensors go to the host backend as they
// are, after the rbln collectives issued before them.
#include "runtime/distributed/RBLNProcessGroup.h"

#include <ATen/ThreadLocalState.h>
#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>

#include "runtime/device/RBLNFunctions.h"

namespace rbln {
namespace {

using c10d::OpType;
using c10d::ReduceOp;
using Tensors = std::vector<at::Tensor>;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;
using HostCall = std::function<std::vector<WorkPtr>(c10d::Backend& host)>;
// A collective's call into the host backend on the host copies of its tensors.
using HostOp = std::function<std::vector<WorkPtr>(c10d::Backend&, Tensors&)>;

// One call into the host backend, made by the posting thread once its tensors are ready:
// `staged` (the inputs' host copies) has completed, or, for tensors used in place, the
// lane's task that waits for the call has started. The works it returns finish later.
struct Posting {
  std::unique_ptr<c10::Event> staged;
  bool in_place = false;
  HostCall call;
  std::mutex mutex;
  std::condition_variable cv;
  bool lane_started = false;
  bool posted = false;
  std::vector<WorkPtr> works;
  std::exception_ptr error;
  Tensors host;  // what the host backend works on: the device tensors' host views or staging copies
  std::vector<std::shared_ptr<void>> buffers;  // StagingPool's, owned by its collective's posting alone
  // The caller's thread-local state (grad and inference mode, ...), made when the caller posts: the host
  // backend's works capture the posting thread's, as Gloo's capture their caller's, and the lane's task applies
  // it too, so a collective on inference tensors called in inference mode may update them in place (vLLM).
  at::ThreadLocalState tls;

  void post(c10d::Backend& host) {
    at::ThreadLocalStateGuard caller(tls);
    std::vector<WorkPtr> result;
    std::exception_ptr failure;
    try {
      if (staged) staged->synchronize();
      if (in_place) {
        std::unique_lock<std::mutex> lock(mutex);
        cv.wait(lock, [&] { return lane_started; });
      }
      result = call(host);
    } catch (...) {
      failure = std::current_exception();
    }
    call = nullptr;  // drops the call's views here; the posting owns the buffers
    std::lock_guard<std::mutex> lock(mutex);
    works = std::move(result);
    error = failure;
    posted = true;
    cv.notify_all();
  }
  // Called by the lane's task: stream order has reached the collective and, until the task
  // returns, device memory is host-addressable.
  void start_on_lane() {
    std::lock_guard<std::mutex> lock(mutex);
    lane_started = true;
    cv.notify_all();
  }
  // Waits until posted; rethrows a failure to post.
  std::vector<WorkPtr> wait_posted() {
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return posted; });
    if (error) std::rethrow_exception(error);
    return works;
  }
  // Waits until posted, then for every work; rethrows the first failure.
  void complete() {
    for (auto& work : wait_posted()) work->wait();
  }
};

// Pinned staging memory from the driver, kept for reuse by size. A buffer is owned by
// its posting alone (Gloo and the tasks hold views) and comes back when the posting is
// dropped on the release thread, after the lane's last task for it has run. Not the
// caching host allocator: its free records events on the lane, which may be full of
// collectives waiting for whichever thread frees (a Gloo worker, the posting thread).
class StagingPool : public std::enable_shared_from_this<StagingPool> {
 public:
  ~StagingPool() {
    for (auto& [bytes, list] : free_)
      for (void* p : list) driver::host_free(p);
  }
  std::shared_ptr<void> take(size_t bytes) {
    void* p = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto& list = free_[bytes];
      if (!list.empty()) {
        p = list.back();
        list.pop_back();
      }
    }
    if (!p) p = driver_call([&] { return driver::host_malloc(bytes); });
    return std::shared_ptr<void>(p, [pool = shared_from_this(), bytes](void* q) { pool->give_back(q, bytes); });
  }

 private:
  void give_back(void* p, size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_[bytes].push_back(p);
  }
  std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;
};

// A thread running the functions pushed to it, in order. A backend has two: one
// calls the host backend in the order collectives were issued; one drops finished
// postings, so that no lane task and no Gloo thread does.
class TaskThread {
 public:
  TaskThread() : thread_([this] { run(); }) {}
  ~TaskThread() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void push(std::function<void()> task) {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(task));
    cv_.notify_all();
  }

 private:
  void run() {
    for (;;) {
      std::function<void()> next;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        next = std::move(queue_.front());
        queue_.pop_front();
      }
      next();
    }
  }
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts once the members it uses exist
};

// What the device's host task learned: set once, read by Work and by later collectives.
struct Outcome {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  int source_rank = -1;

  void finish(std::exception_ptr failure, int source) {
    std::lock_guard<std::mutex> lock(mutex);
    error = failure;
    source_rank = source;
    done = true;
    cv.notify_all();
  }
  std::exception_ptr failure() {
    std::lock_guard<std::mutex> lock(mutex);
    return error;
  }
  bool wait_for(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex);
    return cv.wait_for(lock, timeout, [&] { return done; });
  }
};

c10::Stream caller_stream(c10::DeviceIndex device) { return to_c10(current_stream(device)); }

[[noreturn]] void rethrow_as_dist_error(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const c10::DistError&) {
    throw;
  } catch (const std::exception& e) {
    C10_THROW_ERROR(DistBackendError, std::string("rbln-ccl: ") + e.what());
  }
}

class WorkRBLN final : public c10d::Work {
 public:
  WorkRBLN(int rank, OpType type, c10::Stream comm, std::shared_ptr<Outcome> outcome,
           std::unique_ptr<c10::Event> done, Tensors outputs, bool host_blocking)
      : Work(rank, type),
        device_(comm.device()),
        outcome_(std::move(outcome)),
        done_(std::move(done)),
        outputs_(std::move(outputs)),
        host_blocking_(host_blocking) {
    // Completed from the device's point of view: waiting on it orders the
    // waiter's streams after the copies back (CUDA futures work the same way).
    future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                      std::vector<c10::Device>{device_});
    c10::StreamGuard guard(comm);
    future_->markCompleted(c10::IValue(outputs_));
  }

  bool isCompleted() override {
    std::lock_guard<std::mutex> lock(outcome_->mutex);
    return outcome_->done && (outcome_->error || done_->query());
  }
  bool isSuccess() const override { return !outcome_->failure(); }
  std::exception_ptr exception() const override { return outcome_->failure(); }
  int sourceRank() const override {
    std::unique_lock<std::mutex> lock(outcome_->mutex);
    outcome_->cv.wait(lock, [&] { return outcome_->done; });
    return outcome_->source_rank;
  }
  std::vector<at::Tensor> result() override { return outputs_; }
  void synchronize() override { done_->block(caller_stream(device_.index())); }

  bool wait(std::chrono::milliseconds timeout) override {
    if (auto failure = outcome_->failure()) rethrow_as_dist_error(failure);
    if (timeout != kNoTimeout && !outcome_->wait_for(timeout)) {
      C10_THROW_ERROR(DistBackendError, "rbln-ccl: " + c10d::opTypeToString(opType_) + " timed out after " +
                                            std::to_string(timeout.count()) + " ms");
    }
    synchronize();
    // A collective that fails after this returns fails the caller's stream,
    // so the next synchronizing call raises it, as an asynchronous kernel error does.
    launch(device_.index(), "rbln-ccl collective", [outcome = outcome_] {
      if (auto failure = outcome->failure()) std::rethrow_exception(failure);
    });
    if (host_blocking_) done_->synchronize();
    return true;
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  c10::Device device_;
  std::shared_ptr<Outcome> outcome_;
  std::unique_ptr<c10::Event> done_;
  Tensors outputs_;
  bool host_blocking_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// The collectives issued between startCoalescing and endCoalescing, as one work.
class CoalescedWork final : public c10d::Work {
 public:
  CoalescedWork(int rank, std::vector<WorkPtr> works) : Work(rank, OpType::COALESCED), works_(std::move(works)) {}
  bool isCompleted() override {
    return std::all_of(works_.begin(), works_.end(), [](auto& w) { return w->isCompleted(); });
  }
  void synchronize() override {
    for (auto& w : works_) w->synchronize();
  }
  bool wait(std::chrono::milliseconds timeout) override {
    for (auto& w : works_) w->wait(timeout);
    return true;
  }

 private:
  std::vector<WorkPtr> works_;
};

// Which stream of a device a collective runs on: sends and receives have their
// own, so a receive posted after a send to the same peer is not queued behind it.
enum class Lane { kCollective, kSend, kRecv };

Lane lane_of(OpType type) {
  switch (type) {
    case OpType::SEND: return Lane::kSend;
    case OpType::RECV:
    case OpType::RECVANYSOURCE: return Lane::kRecv;
    default: return Lane::kCollective;
  }
}

// A device tensor and the pinned host buffer standing in for it.
struct Staged {
  at::Tensor device, host;
  bool copy_in, copy_out;
  bool scratch = false;  // the host backend writes it though it is no result (Gloo's reduce, off the root)
};

std::vector<Staged> operator+(std::vector<Staged> a, const std::vector<Staged>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class ProcessGroupRBLN final : public c10d::Backend {
 public:
  explicit ProcessGroupRBLN(c10::intrusive_ptr<c10d::Backend> host)
      : Backend(host->getRank(), host->getSize()), host_(std::move(host)) {}
  // The lanes' host tasks hand their postings to the release thread: let them finish first.
  ~ProcessGroupRBLN() override {
    c10::impl::VirtualGuardImpl impl(kRBLN);
    for (auto& [key, stream] : streams_) {
      try {
        impl.synchronizeStream(stream);
      } catch (const std::exception&) {
        // a failed collective: already reported to its caller's stream
      }
    }
  }

  const std::string getBackendName() const override { return "rbln-ccl"; }
  // Collectives run as they are issued either way; coalescing gives their works one handle.
  void startCoalescing() override {
    std::lock_guard<std::mutex> lock(coalesced_mutex_);
    coalescing_ = true;
    coalesced_.clear();
  }
  WorkPtr endCoalescing() override {
    std::lock_guard<std::mutex> lock(coalesced_mutex_);
    coalescing_ = false;
    return c10::make_intrusive<CoalescedWork>(getRank(), std::move(coalesced_));
  }
  void setTimeout(std::chrono::milliseconds timeout) override { host_->setTimeout(timeout); }
  void setSequenceNumberForGroup() override { host_->setSequenceNumberForGroup(); }
  uint64_t getSequenceNumberForGroup() override { return host_->getSequenceNumberForGroup(); }
  void shutdown() override { host_->shutdown(); }
  void abort() override { host_->abort(); }

  WorkPtr broadcast(Tensors& tensors, const c10d::BroadcastOptions& opts) override {
    bool root = opts.rootRank == getRank();
    return run(OpType::BROADCAST, "rbln-ccl broadcast", stage(tensors, root, !root), {},
               [opts](c10d::Backend& h, Tensors& t) { return one(h.broadcast(t, opts)); });
  }

  WorkPtr allreduce(Tensors& tensors, const c10d::AllreduceOptions& opts) override {
    auto host_opts = opts;
    auto fix = reduction(host_opts.reduceOp, tensors);
    HostOp call = [host_opts](c10d::Backend& h, Tensors& t) mutable { return one(h.allreduce(t, host_opts)); };
    return run(OpType::ALLREDUCE, "rbln-ccl allreduce", stage(tensors, true, true), fix, call);
  }

  WorkPtr allreduce_coalesced(Tensors& tensors, const c10d::AllreduceCoalescedOptions& opts) override {
    auto host_opts = opts;
    auto fix = reduction(host_opts.reduceOp, tensors);
    return run(OpType::COALESCED, "rbln-ccl allreduce_coalesced", stage(tensors, true, true), fix,
               [host_opts](c10d::Backend& h, Tensors& t) mutable { return one(h.allreduce_coalesced(t, host_opts)); });
  }

  WorkPtr reduce(Tensors& tensors, const c10d::ReduceOptions& opts) override {
    auto host_opts = opts;
    auto fix = reduction(host_opts.reduceOp, tensors);
    bool root = opts.rootRank == getRank();
    if (!root) fix.after = nullptr;
    auto staged = stage(tensors, true, root);
    for (auto& s : staged) s.scratch = !root;
    return run(OpType::REDUCE, "rbln-ccl reduce", std::move(staged), fix,
               [host_opts](c10d::Backend& h, Tensors& t) mutable { return one(h.reduce(t, host_opts)); });
  }

  WorkPtr allgather(std::vector<Tensors>& outputs, Tensors& inputs, const c10d::AllgatherOptions& opts) override {
    auto shape = list_shape(outputs);
    return run(OpType::ALLGATHER, "rbln-ccl allgather", stage(inputs, true, false) + stage(flatten(outputs), false, true),
               {}, [opts, shape, n = inputs.size()](c10d::Backend& h, Tensors& t) {
                 auto [in, out] = split(t, n, shape);
                 return one(h.allgather(out, in, opts));
               });
  }

  WorkPtr _allgather_base(at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) override {
    return run(OpType::_ALLGATHER_BASE, "rbln-ccl allgather_into_tensor",
               stage({input}, true, false) + stage({output}, false, true), {},
               [opts](c10d::Backend& h, Tensors& t) { return one(h._allgather_base(t[1], t[0], opts)); });
  }

  WorkPtr allgather_coalesced(std::vector<Tensors>& outputs, Tensors& inputs, const c10d::AllgatherOptions& opts) override {
    auto shape = list_shape(outputs);
    return run(OpType::ALLGATHER_COALESCED, "rbln-ccl allgather_coalesced",
               stage(inputs, true, false) + stage(flatten(outputs), false, true), {},
               [opts, shape, n = inputs.size()](c10d::Backend& h, Tensors& t) {
                 auto [in, out] = split(t, n, shape);
                 return one(h.allgather_coalesced(out, in, opts));
               });
  }

  WorkPtr allgather_into_tensor_coalesced(Tensors& outputs, Tensors& inputs, const c10d::AllgatherOptions& opts) override {
    return run(OpType::COALESCED, "rbln-ccl allgather_into_tensor_coalesced",
               stage(inputs, true, false) + stage(outputs, false, true), {},
               [opts, n = inputs.size()](c10d::Backend& h, Tensors& t) {
                 std::vector<WorkPtr> works;
                 for (size_t i = 0; i < n; ++i) works.push_back(h._allgather_base(t[n + i], t[i], opts));
                 return works;
               });
  }

  WorkPtr gather(std::vector<Tensors>& outputs, Tensors& inputs, const c10d::GatherOptions& opts) override {
    auto shape = list_shape(outputs);
    return run(OpType::GATHER, "rbln-ccl gather", stage(inputs, true, false) + stage(flatten(outputs), false, true),
               {}, [opts, shape, n = inputs.size()](c10d::Backend& h, Tensors& t) {
                 auto [in, out] = split(t, n, shape);
                 return one(h.gather(out, in, opts));
               });
  }

  WorkPtr scatter(Tensors& outputs, std::vector<Tensors>& inputs, const c10d::ScatterOptions& opts) override {
    auto shape = list_shape(inputs);
    return run(OpType::SCATTER, "rbln-ccl scatter", stage(outputs, false, true) + stage(flatten(inputs), true, false),
               {}, [opts, shape, n = outputs.size()](c10d::Backend& h, Tensors& t) {
                 auto [out, in] = split(t, n, shape);
                 return one(h.scatter(out, in, opts));
               });
  }

  WorkPtr reduce_scatter(Tensors& outputs, std::vector<Tensors>& inputs, const c10d::ReduceScatterOptions& opts) override {
    auto host_opts = opts;
    auto fix = reduction(host_opts.reduceOp, outputs);
    auto shape = list_shape(inputs);
    return run(OpType::REDUCE_SCATTER, "rbln-ccl reduce_scatter",
               stage(outputs, false, true) + stage(flatten(inputs), true, false), fix.on_inputs_of(outputs.size()),
               [host_opts, shape, n = outputs.size()](c10d::Backend& h, Tensors& t) mutable {
                 auto [out, in] = split(t, n, shape);
                 return one(h.reduce_scatter(out, in, host_opts));
               });
  }

  WorkPtr _reduce_scatter_base(at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override {
    auto host_opts = opts;
    auto fix = reduction(host_opts.reduceOp, {output});
    return run(OpType::_REDUCE_SCATTER_BASE, "rbln-ccl reduce_scatter_tensor",
               stage({output}, false, true) + stage({input}, true, false), fix.on_inputs_of(1),
               [host_opts](c10d::Backend& h, Tensors& t) mutable { return one(h._reduce_scatter_base(t[0], t[1], host_opts)); });
  }

  WorkPtr reduce_scatter_tensor_coalesced(Tensors& outputs, Tensors& inputs, const c10d::ReduceScatterOptions& opts) override {
    auto host_opts = opts;
    auto fix = reduction(host_opts.reduceOp, outputs);
    return run(OpType::COALESCED, "rbln-ccl reduce_scatter_tensor_coalesced",
               stage(outputs, false, true) + stage(inputs, true, false), fix.on_inputs_of(outputs.size()),
               [host_opts, n = outputs.size()](c10d::Backend& h, Tensors& t) mutable {
                 std::vector<WorkPtr> works;
                 for (size_t i = 0; i < n; ++i) works.push_back(h._reduce_scatter_base(t[i], t[n + i], host_opts));
                 return works;
               });
  }

  WorkPtr alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
                        std::vector<int64_t>& input_splits, const c10d::AllToAllOptions& opts) override {
    return run(OpType::ALLTOALL_BASE, "rbln-ccl all_to_all_single",
               stage({output}, false, true) + stage({input}, true, false), {},
               [opts, output_splits, input_splits](c10d::Backend& h, Tensors& t) mutable {
                 return one(h.alltoall_base(t[0], t[1], output_splits, input_splits, opts));
               });
  }

  WorkPtr alltoall(Tensors& outputs, Tensors& inputs, const c10d::AllToAllOptions& opts) override {
    // Gloo's list form wants equal sizes, NCCL's does not: one all_to_all_single over packed
    // buffers, then the pieces copied out in stream order (host order for CPU tensors).
    TORCH_CHECK(!inputs.empty() && outputs.size() == inputs.size(), "rbln-ccl: all_to_all needs one tensor per rank");
    std::vector<int64_t> output_splits, input_splits;
    Tensors flat_inputs;
    for (auto& t : inputs) {
      flat_inputs.push_back(t.reshape(-1));
      input_splits.push_back(t.numel());
    }
    for (auto& t : outputs) output_splits.push_back(t.numel());
    auto input = at::cat(flat_inputs);
    auto output = at::empty({std::accumulate(output_splits.begin(), output_splits.end(), int64_t{0})},
                            outputs[0].options());
    auto work = alltoall_base(output, input, output_splits, input_splits, opts);
    work->wait();
    int64_t offset = 0;
    for (auto& t : outputs) {
      t.copy_(output.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
    return work;
  }

  WorkPtr send(Tensors& tensors, int dst, int tag) override {
    return run(OpType::SEND, "rbln-ccl send", stage(tensors, true, false), {},
               [dst, tag](c10d::Backend& h, Tensors& t) { return one(h.send(t, dst, tag)); });
  }

  WorkPtr recv(Tensors& tensors, int src, int tag) override {
    return run(OpType::RECV, "rbln-ccl recv", stage(tensors, false, true), {},
               [src, tag](c10d::Backend& h, Tensors& t) { return one(h.recv(t, src, tag)); });
  }

  WorkPtr recvAnysource(Tensors& tensors, int tag) override {
    return run(OpType::RECVANYSOURCE, "rbln-ccl recv", stage(tensors, false, true), {},
               [tag](c10d::Backend& h, Tensors& t) { return one(h.recvAnysource(t, tag)); });
  }

  WorkPtr barrier(const c10d::BarrierOptions& opts) override {
    auto host_opts = opts;
    host_opts.device.reset();  // the host backend's barrier needs no device tensor
    if (opts.device && opts.device->type() == kRBLN) {
      return run(OpType::BARRIER, "rbln-ccl barrier", {}, {},
                 [host_opts](c10d::Backend& h, Tensors&) { return one(h.barrier(host_opts)); },
                 opts.device->index());
    }
    return run(OpType::BARRIER, "rbln-ccl barrier", {}, {},
               [host_opts](c10d::Backend& h, Tensors&) { return one(h.barrier(host_opts)); });
  }

  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override {
    // Blocking by contract; posted in order so it also waits for earlier collectives to start.
    auto posting = std::make_shared<Posting>();
    posting->call = [opts, wait_all_ranks](c10d::Backend& h) {
      h.monitoredBarrier(opts, wait_all_ranks);
      return std::vector<WorkPtr>{};
    };
    post(posting);
    posting->complete();
  }

 private:
  // How a reduction the host backend lacks is made from SUM: PREMUL_SUM scales
  // the inputs first (Gloo refuses it; FSDP2 uses it), integer AVG divides after.
  struct Fix {
    std::function<void(at::Tensor&)> before, after;  // on the inputs, on the results
    // Staged tensors [0, results_end) receive the result, [inputs_begin, end) are read.
    size_t results_end = SIZE_MAX, inputs_begin = 0;
    Fix on_inputs_of(size_t results) const {
      Fix f = *this;
      f.results_end = f.inputs_begin = results;
      return f;
    }
    void apply_before(Tensors& staged) const {
      if (before) for (size_t i = inputs_begin; i < staged.size(); ++i) before(staged[i]);
    }
    void apply_after(Tensors& staged) const {
      if (after) for (size_t i = 0; i < std::min(results_end, staged.size()); ++i) after(staged[i]);
    }
  };

  Fix reduction(ReduceOp& op, const Tensors& tensors) {
    Fix fix;
    if (op.op_ == ReduceOp::PREMUL_SUM) {
      auto* factor = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
      TORCH_CHECK(factor, "rbln-ccl: PREMUL_SUM without a factor");
      if (factor->tensor_factor.defined()) {
        auto scale = factor->tensor_factor.to(at::kCPU);
        fix.before = [scale](at::Tensor& t) { t.mul_(scale); };
      } else {
        fix.before = [f = factor->double_factor](at::Tensor& t) { t.mul_(f); };
      }
      op = ReduceOp(ReduceOp::SUM);
    } else if (op.op_ == ReduceOp::AVG &&
               std::any_of(tensors.begin(), tensors.end(), [](auto& t) { return at::isIntegralType(t.scalar_type(), true); })) {
      // Gloo averages floating types itself; integers sum, then divide as NCCL does.
      fix.after = [size = getSize()](at::Tensor& t) { t.div_(size, "trunc"); };
      op = ReduceOp(ReduceOp::SUM);
    }
    return fix;
  }

  static std::vector<WorkPtr> one(WorkPtr work) { return {std::move(work)}; }

  static std::vector<size_t> list_shape(const std::vector<Tensors>& lists) {
    std::vector<size_t> shape;
    for (auto& l : lists) shape.push_back(l.size());
    return shape;
  }
  static Tensors flatten(const std::vector<Tensors>& lists) {
    Tensors flat;
    for (auto& l : lists) flat.insert(flat.end(), l.begin(), l.end());
    return flat;
  }
  static std::vector<Tensors> unflatten(const Tensors& flat, const std::vector<size_t>& shape) {
    std::vector<Tensors> lists;
    size_t i = 0;
    for (auto n : shape) {
      lists.emplace_back(flat.begin() + i, flat.begin() + i + n);
      i += n;
    }
    return lists;
  }

  // The staged tensors of a collective with a list of lists (n plain tensors first): both parts.
  static std::pair<Tensors, std::vector<Tensors>> split(const Tensors& t, size_t n, const std::vector<size_t>& shape) {
    return {Tensors(t.begin(), t.begin() + n), unflatten(Tensors(t.begin() + n, t.end()), shape)};
  }

  static std::vector<Staged> stage(const Tensors& tensors, bool copy_in, bool copy_out) {
    std::vector<Staged> staged;
    for (auto& t : tensors) staged.push_back({t, at::Tensor(), copy_in, copy_out});
    return staged;
  }

  void post(const std::shared_ptr<Posting>& posting) {
    if (auto failure = first_failure_->failure()) {
      C10_THROW_ERROR(DistBackendError, std::string("rbln-ccl: an earlier collective failed: ") + what(failure));
    }
    // Neither this thread nor a lane's host task may drop the last reference (TaskThread says why).
    posting_thread_.push([posting, host = host_, releaser = &release_thread_]() mutable {
      posting->post(*host);
      releaser->push([finished = std::move(posting)] {});
    });
  }

  static std::string what(const std::exception_ptr& error) {
    try {
      std::rethrow_exception(error);
    } catch (const c10::Error& e) {
      return e.what_without_backtrace();
    } catch (const std::exception& e) {
      return e.what();
    }
  }

  // init_process_group() with no backend named gives its group Gloo's type as the default
  // (torch 2.13 knows only NCCL among accelerator backends), which the group does not have:
  // this backend, registered as CUSTOM, is its default.
  void adopt_as_default() {
    c10::intrusive_ptr<c10d::ProcessGroup> group;
    try {
      group = c10d::resolve_process_group(getGroupUid());
    } catch (const c10::Error&) {
      return;  // not registered under its name (a group built by hand): nothing to adopt
    }
    try {
      group->getBackend(group->getBackendType());
    } catch (const c10::Error&) {
      group->setDefaultBackend(c10d::ProcessGroup::BackendType::CUSTOM);
    }
  }

  // The device all of a collective's tensors are on: -1 for CPU tensors.
  static c10::DeviceIndex device_of(const std::vector<Staged>& staged) {
    std::optional<c10::Device> device;
    for (auto& s : staged) {
      auto d = s.device.device();
      TORCH_CHECK(d.is_cpu() || d.type() == kRBLN, "rbln-ccl: tensors must be on rbln or cpu, got ", d);
      TORCH_CHECK(!device || *device == d, "rbln-ccl: all tensors of a collective must be on one device, got ",
                  *device, " and ", d);
      device = d;
    }
    return device && !device->is_cpu() ? device->index() : -1;
  }

  c10::Stream lane_stream(c10::DeviceIndex device, Lane lane) {
    std::lock_guard<std::mutex> lock(streams_mutex_);
    auto key = std::make_pair(device, static_cast<int>(lane));
    auto it = streams_.find(key);
    if (it == streams_.end()) {
      c10::impl::VirtualGuardImpl impl(kRBLN);
      it = streams_.emplace(key, impl.getNewStream(c10::Device(kRBLN, device))).first;
    }
    return it->second;
  }

  WorkPtr run(OpType type, const char* name, std::vector<Staged> staged, Fix fix, HostOp call,
              c10::DeviceIndex device = -2) {
    std::call_once(adopted_, [this] { adopt_as_default(); });
    if (device == -2) device = device_of(staged);
    auto work = device < 0 ? run_on_host(std::move(staged), fix, std::move(call))
                           : issue(type, name, std::move(staged), std::move(fix), std::move(call), device);
    std::lock_guard<std::mutex> lock(coalesced_mutex_);
    if (coalescing_) coalesced_.push_back(work);
    return work;
  }

  // Whether the host backend can work on a collective's device tensors themselves: each is
  // contiguous with no conjugate or negative bit (Gloo reads the bytes as they are), only
  // results are written (by Gloo or by a scaling before the reduction), and no written tensor
  // overlaps another.
  static bool usable_in_place(const std::vector<Staged>& staged, const Fix& fix) {
    std::vector<std::pair<uintptr_t, uintptr_t>> spans;
    bool writes = false;
    for (size_t i = 0; i < staged.size(); ++i) {
      auto& s = staged[i];
      auto& t = s.device;
      if (t.layout() != at::kStrided || !t.is_contiguous() || t.is_conj() || t.is_neg()) return false;
      bool scaled = fix.before && i >= fix.inputs_begin;
      if ((s.scratch || scaled) && !s.copy_out) return false;
      writes |= s.copy_out;
      if (t.nbytes() == 0) continue;
      auto begin = reinterpret_cast<uintptr_t>(t.const_data_ptr());
      spans.emplace_back(begin, begin + t.nbytes());
    }
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; writes && i < spans.size(); ++i) {
      if (spans[i].first < spans[i - 1].second) return false;
    }
    return true;
  }

  // The device path: the lane waits for the caller's stream, then a host task on the lane lets
  // the posting thread call the host backend and waits for it. Tensors usable in place are the
  // host backend's as they are while that task runs; otherwise the inputs are copied into pinned
  // buffers before it and the results back after it.
  WorkPtr issue(OpType type, const char* name, std::vector<Staged> staged, Fix fix, HostOp call,
                c10::DeviceIndex device) {
    auto comm = lane_stream(device, lane_of(type));
    auto caller = caller_stream(device);
    c10::Event ready(kRBLN);
    ready.record(caller);
    ready.block(comm);
    c10::StreamGuard guard(comm);
    auto posting = std::make_shared<Posting>();
    posting->in_place = usable_in_place(staged, fix);
    for (auto& s : staged) {
      auto options = s.device.options().device(at::kCPU);
      if (posting->in_place) {
        s.host = s.device.numel() == 0 ? at::empty(s.device.sizes(), options)
                                       : at::from_blob(s.device.data_ptr(), s.device.sizes(), options);
      } else {
        posting->buffers.push_back(staging_->take(std::max<size_t>(1, s.device.nbytes())));
        s.host = at::from_blob(posting->buffers.back().get(), s.device.sizes(), options);
        if (s.copy_in) s.host.copy_(s.device, /*non_blocking=*/true);
      }
      posting->host.push_back(s.host);
    }
    if (!posting->in_place) {
      posting->staged = std::make_unique<c10::Event>(kRBLN);
      posting->staged->record(comm);
    }
    posting->call = [host = posting->host, call = std::move(call), fix](c10d::Backend& h) mutable {
      fix.apply_before(host);
      return call(h, host);
    };
    post(posting);

    auto outcome = std::make_shared<Outcome>();
    launch(device, name, [posting, outcome, first_failure = first_failure_, fix]() {
      at::ThreadLocalStateGuard caller(posting->tls);
      std::exception_ptr failure;
      int source = -1;
      try {
        posting->start_on_lane();
        posting->complete();
        if (!posting->works.empty()) {
          auto& final_work = posting->works.back();
          if (final_work->retrieveOpType() == OpType::RECVANYSOURCE) source = final_work->sourceRank();
        }
        fix.apply_after(posting->host);
      } catch (...) {
        failure = std::current_exception();
        first_failure->finish(failure, -1);
      }
      outcome->finish(failure, source);
    });
    Tensors results;
    auto* allocator = c10::getDeviceAllocator(kRBLN);
    for (auto& s : staged) {
      if (s.copy_out) {
        if (!posting->in_place) s.device.copy_(s.host, /*non_blocking=*/true);
        results.push_back(s.device);
      }
      allocator->recordStream(s.device.storage().data_ptr(), comm);
    }
    // After the copies back nothing uses the staging buffers.
    launch(device, "rbln-ccl release", [posting = std::move(posting), releaser = &release_thread_]() mutable {
      releaser->push([finished = std::move(posting)] {});
    });
    auto done = std::make_unique<c10::Event>(kRBLN);
    done->record(comm);
    bool host_blocking = type == OpType::BARRIER;
    return c10::make_intrusive<WorkRBLN>(getRank(), type, comm, outcome, std::move(done), std::move(results),
                                         host_blocking);
  }

  // CPU tensors: the host backend's own work, once every earlier collective is posted.
  WorkPtr run_on_host(std::vector<Staged> staged, const Fix& fix, HostOp call) {
    auto posting = std::make_shared<Posting>();
    Tensors tensors;
    for (auto& s : staged) {
      // Scaling inputs must not write a caller's tensor that is not also an output.
      tensors.push_back(fix.before && !s.copy_out ? s.device.clone() : s.device);
    }
    fix.apply_before(tensors);
    posting->call = [call, tensors](c10d::Backend& h) mutable { return call(h, tensors); };
    post(posting);
    auto works = posting->wait_posted();
    if (!fix.after && works.size() == 1) return works[0];
    posting->complete();
    fix.apply_after(tensors);
    return completed_work(tensors);
  }

  static WorkPtr completed_work(const Tensors& tensors) {
    auto future = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
    future->markCompleted(c10::IValue(tensors));
    return c10d::Work::create_from_future(future);
  }

  c10::intrusive_ptr<c10d::Backend> host_;
  TaskThread release_thread_, posting_thread_;  // the posting thread hands postings to the release thread: stops first
  std::shared_ptr<StagingPool> staging_ = std::make_shared<StagingPool>();
  std::shared_ptr<Outcome> first_failure_ = std::make_shared<Outcome>();  // sticky, as a failed NCCL communicator
  std::once_flag adopted_;
  std::mutex coalesced_mutex_;
  bool coalescing_ = false;
  std::vector<WorkPtr> coalesced_;
  std::mutex streams_mutex_;
  std::map<std::pair<c10::DeviceIndex, int>, c10::Stream> streams_;
};

}  // namespace

c10::intrusive_ptr<c10d::Backend> make_ccl_backend(c10::intrusive_ptr<c10d::Backend> host) {
  return c10::make_intrusive<ProcessGroupRBLN>(std::move(host));
}

}  // namespace rbln
