// Tests of the rbln runtime and kernels through libtorch's C++ API. Every
// device result is compared with the same computation on the CPU, and the op
// counters show that the device kernels ran rather than the CPU fallback.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "runtime/fallback/RBLNFallback.h"
#include "runtime/device/RBLNFunctions.h"
#include "runtime/observability/RBLNTrace.h"

namespace {

const at::Device kRbln0(at::kPrivateUse1, 0);
const at::Device kRbln1(at::kPrivateUse1, 1);
constexpr auto kRBLN = c10::DeviceType::PrivateUse1;

// The driver reads its variables once, on first use; pin the defaults these
// tests rely on (two devices of 8 GiB, asynchronous launches). Death tests
// re-execute the binary: a forked child would have no driver worker threads.
class RblnEnvironment : public testing::Environment {
 public:
  void SetUp() override {
    unsetenv("RBLN_DEVICE_COUNT");
    unsetenv("RBLN_DEVICE_MEMORY");
    unsetenv("RBLN_LAUNCH_BLOCKING");
    GTEST_FLAG_SET(death_test_style, "threadsafe");
  }
};
testing::Environment* const kEnvironment = testing::AddGlobalTestEnvironment(new RblnEnvironment);

at::Generator& generator() {
  static at::Generator gen = at::detail::createCPUGenerator(/*seed_val=*/1234);
  return gen;
}

// Standard-normal values (floating dtypes) or small integers, on the CPU.
at::Tensor random(at::IntArrayRef sizes, at::ScalarType dtype = at::kFloat) {
  if (at::isFloatingType(dtype)) return at::randn(sizes, generator()).to(dtype);
  if (dtype == at::kBool) return at::randint(2, sizes, generator()).to(dtype);
  return at::randint(-9, 10, sizes, generator()).to(dtype);
}

// Small integers in any dtype: sums and products of them are exact even in
// float16/bfloat16, so results compare exactly whatever the summation order.
at::Tensor random_ints(at::IntArrayRef sizes, at::ScalarType dtype) {
  return at::randint(-4, 5, sizes, generator()).to(dtype);
}

at::Tensor to_rbln(const at::Tensor& t) { return t.to(kRbln0); }

// The device result must be an rbln tensor with the CPU result's dtype, shape
// and values (within torch.testing's default tolerances for floating dtypes).
testing::AssertionResult MatchesCpu(const at::Tensor& actual, const at::Tensor& expected) {
  if (actual.device().type() != kRBLN) {
    return testing::AssertionFailure() << "result is on " << actual.device() << ", not on an rbln device";
  }
  if (actual.scalar_type() != expected.scalar_type()) {
    return testing::AssertionFailure() << "dtype " << actual.scalar_type() << ", CPU gives " << expected.scalar_type();
  }
  if (actual.sizes() != expected.sizes()) {
    return testing::AssertionFailure() << "shape " << actual.sizes() << ", CPU gives " << expected.sizes();
  }
  auto host = actual.cpu();
  bool same;
  switch (expected.scalar_type()) {
    case at::kHalf: same = at::allclose(host, expected, 1e-3, 1e-5, /*equal_nan=*/true); break;
    case at::kBFloat16: same = at::allclose(host, expected, 1.6e-2, 1e-5, true); break;
    case at::kFloat: same = at::allclose(host, expected, 1.3e-6, 1e-5, true); break;
    default: same = at::equal(host, expected);
  }
  if (!same) return testing::AssertionFailure() << "device gives\n" << host << "\nCPU gives\n" << expected;
  return testing::AssertionSuccess();
}

// Applies f to device copies of the CPU inputs, then to the inputs
// themselves (f may modify them in place); the results must match.
template <class F, class... Tensors>
testing::AssertionResult SameAsCpu(F&& f, const Tensors&... inputs) {
  auto actual = f(to_rbln(inputs)...);
  return MatchesCpu(actual, f(inputs...));
}

// A snapshot of the op counters. Ran() checks that every named op went
// through its device kernel since the snapshot and that no op fell back.
class OpCounts {
 public:
  OpCounts() : device_(rbln::device_op_counts()), fallbacks_(rbln::fallback_counts()) {}

  testing::AssertionResult Ran(std::initializer_list<std::string> ops) const {
    auto now = rbln::device_op_counts();
    for (const auto& op : ops) {
      if (now[op] <= count(device_, op)) return testing::AssertionFailure() << op << " did not run on the device";
    }
    std::ostringstream fell_back;
    for (const auto& [op, reasons] : rbln::fallback_counts()) {
      for (const auto& [reason, calls] : reasons) {
        auto it = fallbacks_.find(op);
        uint64_t before = it == fallbacks_.end() ? 0 : count(it->second, reason);
        if (calls > before) fell_back << " " << op << " (" << reason << ")";
      }
    }
    if (!fell_back.str().empty()) return testing::AssertionFailure() << "fell back to the CPU:" << fell_back.str();
    return testing::AssertionSuccess();
  }

 private:
  static uint64_t count(const std::map<std::string, uint64_t>& counts, const std::string& key) {
    auto it = counts.find(key);
    return it == counts.end() ? 0 : it->second;
  }
  std::map<std::string, uint64_t> device_;
  std::map<std::string, std::map<std::string, uint64_t>> fallbacks_;
};

// The message (without backtrace) of the E that f() throws.
template <class E = c10::Error, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what_without_backtrace();
  }
  ADD_FAILURE() << "nothing was thrown";
  return "";
}

testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return testing::AssertionSuccess();
  return testing::AssertionFailure() << "\"" << text << "\" does not contain \"" << part << "\"";
}

c10::DeviceAllocator* allocator() { return c10::getDeviceAllocator(kRBLN); }

// Queues a sleep on the current stream of device 0: work queued after it on
// that stream cannot have run before it ends.
void occupy_current_stream(std::chrono::milliseconds duration) {
  rbln::launch(0, "test_sleep", [duration] { std::this_thread::sleep_for(duration); });
}

const at::ScalarType kNumericDtypes[] = {at::kFloat, at::kHalf, at::kBFloat16, at::kLong};

// ---- runtime ---------------------------------------------------------------

TEST(Runtime, TensorsLiveInDeviceMemoryOfTheirDevice) {
  EXPECT_EQ(c10::get_privateuse1_backend(), "rbln");
  EXPECT_EQ(c10::impl::VirtualGuardImpl(kRBLN).deviceCount(), 2);
  auto t = at::empty({4}, at::TensorOptions().device(kRbln0));
  EXPECT_EQ(t.device().str(), "rbln:0");
  EXPECT_EQ(rbln::driver::device_of(t.data_ptr()), 0);
  auto u = at::empty({4}, at::TensorOptions().device(kRbln1));
  EXPECT_EQ(rbln::driver::device_of(u.data_ptr()), 1);
}

TEST(Allocator, FreedMemoryStaysReservedUntilEmptyCache) {
  allocator()->emptyCache();
  const auto base = allocator()->getDeviceStats(0);
  const int64_t bytes = 4 << 20;
  {
    auto t = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).device(kRbln0));
    auto stats = allocator()->getDeviceStats(0);
    EXPECT_EQ(stats.allocated_bytes[0].current, base.allocated_bytes[0].current + bytes);
    EXPECT_EQ(stats.reserved_bytes[0].current, base.reserved_bytes[0].current + bytes);
  }
  auto freed = allocator()->getDeviceStats(0);
  EXPECT_EQ(freed.allocated_bytes[0].current, base.allocated_bytes[0].current);
  EXPECT_EQ(freed.reserved_bytes[0].current, base.reserved_bytes[0].current + bytes);

  // The same size again reuses the cached block without asking the driver.
  {
    auto t = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).device(kRbln0));
    auto stats = allocator()->getDeviceStats(0);
    EXPECT_EQ(stats.reserved_bytes[0].current, freed.reserved_bytes[0].current);
    EXPECT_EQ(stats.num_device_alloc, freed.num_device_alloc);
  }
  allocator()->emptyCache();
  EXPECT_EQ(allocator()->getDeviceStats(0).reserved_bytes[0].current, base.reserved_bytes[0].current);
}

// x is read by a kernel queued behind a sleep on a side stream, then freed.
// `record` tells the allocator about that use; without it the next
// allocation would take x's block and zero it before the kernel reads it.
void expect_recorded_use_delays_reuse(const std::function<void(const at::Tensor&, c10::Stream)>& record) {
  c10::impl::VirtualGuardImpl impl(kRBLN);
  auto side = impl.getNewStream(kRbln0);
  auto x = at::ones({1 << 16}, at::TensorOptions().device(kRbln0));
  at::Tensor y;
  {
    c10::StreamGuard guard(side);
    occupy_current_stream(std::chrono::milliseconds(50));
    y = x * 2;
  }
  record(x, side);
  x.reset();
  auto z = at::zeros({1 << 16}, at::TensorOptions().device(kRbln0));
  impl.synchronizeStream(side);
  EXPECT_TRUE(at::equal(y.cpu(), at::full({1 << 16}, 2.0)));
}

TEST(Allocator, RecordedStreamDelaysReuseOfAFreedBlock) {
  expect_recorded_use_delays_reuse([](const at::Tensor& x, c10::Stream stream) {
    c10::impl::VirtualGuardImpl(kRBLN).recordDataPtrOnStream(x.storage().data_ptr(), stream);
  });
}

TEST(Allocator, TensorRecordStreamDelaysReuseOfAFreedBlock) {
  expect_recorded_use_delays_reuse([](const at::Tensor& x, c10::Stream stream) { x.record_stream(stream); });
}

TEST(Allocator, CacheIsReleasedBeforeRunningOutOfMemory) {
  allocator()->emptyCache();
  const int64_t bytes = 5ll << 30;  // the arena is lazy: this touches no memory
  auto options = at::TensorOptions().dtype(at::kByte).device(kRbln0);
  at::empty({bytes}, options);  // freed at once, but stays cached for its stream
  const auto before = allocator()->getDeviceStats(0);
  c10::impl::VirtualGuardImpl impl(kRBLN);
  c10::StreamGuard guard(impl.getNewStream(kRbln0));
  EXPECT_NO_THROW(at::empty({bytes}, options));  // needs the other stream's cached 5 GiB
  EXPECT_EQ(allocator()->getDeviceStats(0).num_alloc_retries, before.num_alloc_retries + 1);
  allocator()->emptyCache();
}

TEST(Allocator, OutOfMemoryNamesDeviceAndSizeAndLeavesDeviceUsable) {
  const size_t capacity = rbln::driver::device_capacity(0);
  ASSERT_EQ(capacity, size_t{8} << 30);
  const auto ooms = allocator()->getDeviceStats(0).num_ooms;
  auto message = message_of<c10::OutOfMemoryError>([&] {
    at::empty({static_cast<int64_t>(capacity) + 1}, at::TensorOptions().dtype(at::kByte).device(kRbln0));
  });
  EXPECT_TRUE(Contains(message, "rbln:0"));
  EXPECT_TRUE(Contains(message, "Tried to allocate 8.00 GiB"));
  EXPECT_EQ(allocator()->getDeviceStats(0).num_ooms, ooms + 1);

  auto small = at::full({16}, 2.0, at::TensorOptions().device(kRbln0));
  EXPECT_EQ(small.sum().item<float>(), 32.0f);
}

// ---- copies ------------------------------------------------------------------

TEST(Copy, HostDeviceRoundTripKeepsValues) {
  OpCounts ops;
  for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16, at::kLong, at::kInt, at::kBool, at::kDouble}) {
    SCOPED_TRACE(dtype);
    auto cpu = random({3, 5}, dtype);
    auto device = to_rbln(cpu);
    EXPECT_EQ(rbln::driver::device_of(device.data_ptr()), 0);
    EXPECT_TRUE(MatchesCpu(device, cpu));
  }
  EXPECT_TRUE(ops.Ran({"aten::copy_"}));
}

TEST(Copy, DeviceToDeviceMakesAnIndependentCopy) {
  auto cpu = random({4, 4});
  auto device = to_rbln(cpu);
  auto copy = at::empty_like(device);
  OpCounts ops;
  copy.copy_(device);
  auto cloned = device.clone();
  device.zero_();
  EXPECT_TRUE(MatchesCpu(copy, cpu));
  EXPECT_TRUE(MatchesCpu(cloned, cpu));
  EXPECT_TRUE(MatchesCpu(device, at::zeros_like(cpu)));
  EXPECT_TRUE(ops.Ran({"aten::copy_", "aten::zero_"}));
}

TEST(Copy, ConvertsDtype) {
  auto cpu = random({3, 4}) * 10;
  auto device = to_rbln(cpu);
  // device -> device, float to int64 (truncation) and to float16
  EXPECT_TRUE(MatchesCpu(at::empty({3, 4}, device.options().dtype(at::kLong)).copy_(device), cpu.to(at::kLong)));
  EXPECT_TRUE(MatchesCpu(device.to(at::kHalf), cpu.to(at::kHalf)));
  // host float -> device bfloat16
  EXPECT_TRUE(MatchesCpu(at::empty({3, 4}, device.options().dtype(at::kBFloat16)).copy_(cpu), cpu.to(at::kBFloat16)));
  // device float -> host double
  auto host = at::empty({3, 4}, at::kDouble).copy_(device);
  EXPECT_TRUE(at::equal(host, cpu.to(at::kDouble)));
}

TEST(Copy, NonContiguousAndOffsetSourcesAndDestinations) {
  auto src = random({4, 6});
  // transposed and sliced sources: host -> device and device -> device
  EXPECT_TRUE(SameAsCpu([](const at::Tensor& s) { return s.t().contiguous(); }, src));
  EXPECT_TRUE(MatchesCpu(to_rbln(src.t()), src.t()));
  EXPECT_TRUE(MatchesCpu(to_rbln(src.slice(1, 2, 5)), src.slice(1, 2, 5)));
  // device -> host from a transposed view at a storage offset
  auto view = to_rbln(src).narrow(0, 1, 2).t();
  EXPECT_TRUE(at::equal(view.cpu(), src.narrow(0, 1, 2).t()));
  // transposed and offset destinations, from host and from device
  auto write = [](at::Tensor dst, const at::Tensor& values) {
    dst.t().copy_(values.t());
    dst.slice(0, 1, 3).copy_(values.slice(0, 0, 2));
    return dst;
  };
  auto values = random({4, 6});
  EXPECT_TRUE(MatchesCpu(write(to_rbln(src), values), write(src.clone(), values)));
  EXPECT_TRUE(MatchesCpu(write(to_rbln(src), to_rbln(values)), write(src.clone(), values)));
  // device -> host into a transposed host view
  auto host = at::zeros({6, 4});
  host.t().copy_(to_rbln(values));
  EXPECT_TRUE(at::equal(host, values.t()));
}

TEST(Copy, BroadcastsSource) {
  auto row = random({4});
  auto column = random({3, 1});
  auto cpu = at::empty({3, 4});
  auto device = to_rbln(cpu);
  EXPECT_TRUE(MatchesCpu(device.copy_(row), cpu.copy_(row)));                    // host -> device
  EXPECT_TRUE(MatchesCpu(device.copy_(to_rbln(column)), cpu.copy_(column)));  // device -> device
  EXPECT_TRUE(at::equal(at::empty({2, 4}).copy_(to_rbln(row)), row.expand({2, 4})));  // device -> host
}

TEST(Copy, NonBlockingUploadFromPageableMemoryIsSynchronous) {
  auto values = random({1 << 16});
  auto host = values.clone();
  auto device = at::empty({1 << 16}, at::TensorOptions().device(kRbln0));
  device.copy_(host, /*non_blocking=*/true);
  host.zero_();  // the caller may reuse unpinned memory as soon as copy_ returns
  EXPECT_TRUE(MatchesCpu(device, values));
}

TEST(Copy, PinnedMemoryNonBlockingRoundTrip) {
  auto values = random({1 << 16});
  auto pinned = at::empty_like(values, at::TensorOptions().pinned_memory(true));
  ASSERT_TRUE(pinned.is_pinned());
  pinned.copy_(values);
  auto device = at::empty({1 << 16}, at::TensorOptions().device(kRbln0));
  device.copy_(pinned, /*non_blocking=*/true);
  auto back = at::empty_like(pinned, at::TensorOptions().pinned_memory(true));
  ASSERT_TRUE(back.is_pinned());
  back.copy_(device.mul(2), /*non_blocking=*/true);
  c10::impl::VirtualGuardImpl(kRBLN).synchronizeDevice(0);
  EXPECT_TRUE(at::equal(back, values * 2));
}

// ---- streams and events ------------------------------------------------------

TEST(Stream, StreamGuardSwitchesTheCurrentStream) {
  c10::impl::VirtualGuardImpl impl(kRBLN);
  auto default_stream = impl.getDefaultStream(kRbln0);
  auto stream = impl.getNewStream(kRbln0);
  EXPECT_NE(stream, default_stream);
  EXPECT_EQ(impl.getStream(kRbln0), default_stream);
  {
    c10::StreamGuard guard(stream);
    EXPECT_EQ(impl.getStream(kRbln0), stream);
  }
  EXPECT_EQ(impl.getStream(kRbln0), default_stream);
}

TEST(Stream, EventsQuerySynchronizeAndTime) {
  c10::impl::VirtualGuardImpl impl(kRBLN);
  auto stream = impl.getStreamFromGlobalPool(kRbln0);
  c10::Event start(kRBLN, c10::EventFlag::BACKEND_DEFAULT);  // BACKEND_DEFAULT: timing enabled
  c10::Event end(kRBLN, c10::EventFlag::BACKEND_DEFAULT);
  EXPECT_TRUE(end.query());  // never recorded
  const auto sleep = std::chrono::milliseconds(50);
  auto x = to_rbln(random({64, 64}));
  at::Tensor y;
  {
    c10::StreamGuard guard(stream);
    start.record(stream);
    occupy_current_stream(sleep);
    y = x.mm(x);
    end.record(stream);
  }
  EXPECT_FALSE(end.query());
  EXPECT_FALSE(impl.queryStream(stream));
  end.synchronize();
  EXPECT_TRUE(end.query());
  EXPECT_TRUE(impl.queryStream(stream));
  EXPECT_GE(start.elapsedTime(end), 0.9 * sleep.count());
  auto cpu = x.cpu();
  EXPECT_TRUE(MatchesCpu(y, cpu.mm(cpu)));
}

TEST(Stream, BlockedStreamWaitsForTheRecordedWork) {
  c10::impl::VirtualGuardImpl impl(kRBLN);
  auto producer = impl.getNewStream(kRbln0);
  auto consumer = impl.getNewStream(kRbln0);
  auto values = random({256});
  auto source = to_rbln(values);
  auto x = to_rbln(at::zeros({256}));  // uploads complete before returning
  c10::Event ready(kRBLN);
  {
    c10::StreamGuard guard(producer);
    occupy_current_stream(std::chrono::milliseconds(50));
    x.copy_(source);  // a device copy: queued behind the sleep
    ready.record(producer);
  }
  ready.block(consumer);
  c10::StreamGuard guard(consumer);
  auto y = x + 1;
  EXPECT_TRUE(at::equal(y.cpu(), values + 1));  // .cpu() runs on the consumer stream
}

TEST(Trace, ReportsStreamEventAndMemoryEventsOnlyWhileEnabled) {
  using rbln::trace::Kind;
  c10::impl::VirtualGuardImpl impl(kRBLN);
  auto x = to_rbln(at::ones({1024}));
  rbln::trace::set_enabled(true);
  auto stream = impl.getNewStream(kRbln0);
  at::Tensor y;
  const void* event = nullptr;
  {
    c10::Event ready(kRBLN);
    {
      c10::StreamGuard guard(stream);
      y = x + 1;
      ready.record(stream);
      event = ready.eventId();
    }
    ready.block(impl.getDefaultStream(kRbln0));
    ready.synchronize();
    impl.synchronizeStream(stream);
    impl.synchronizeDevice(0);
    y.reset();  // frees y's block
  }
  auto records = rbln::trace::drain();
  rbln::trace::set_enabled(false);
  auto id = stream.id();
  auto e = reinterpret_cast<uintptr_t>(event);
  std::vector<std::tuple<Kind, uintptr_t, int, int64_t>> expected = {
      {Kind::kStreamCreation, 0, 0, id},    {Kind::kMemoryAllocation, 0, 0, -1},
      {Kind::kEventCreation, e, -1, -1},    {Kind::kEventRecord, e, 0, id},
      {Kind::kEventWait, e, 0, 0},          {Kind::kEventSynchronization, e, -1, -1},
      {Kind::kStreamSynchronization, 0, 0, id}, {Kind::kDeviceSynchronization, 0, 0, -1},
      {Kind::kMemoryDeallocation, 0, 0, -1}, {Kind::kEventDeletion, e, -1, -1}};
  ASSERT_EQ(records.size(), expected.size());
  for (size_t i = 0; i < records.size(); ++i) {
    auto [kind, handle, device, stream_id] = expected[i];
    EXPECT_EQ(records[i].kind, kind) << i;
    if (handle) EXPECT_EQ(records[i].handle, handle) << i;
    EXPECT_EQ(records[i].device, device) << i;
    EXPECT_EQ(records[i].stream, stream_id) << i;
  }
  EXPECT_NE(records[1].handle, 0u);
  EXPECT_EQ(records[1].handle, records[8].handle);  // y's block, allocated then freed
  auto z = x * 2;  // disabled: nothing recorded
  impl.synchronizeDevice(0);
  EXPECT_TRUE(rbln::trace::drain().empty());
}

// ---- multiple devices ----------------------------------------------------------

TEST(MultiDevice, KernelsRunOnTheInputsDevice) {
  auto a = random({3, 4}), b = random({4});
  OpCounts ops;
  auto sum = a.to(kRbln1) + b.to(kRbln1);
  EXPECT_EQ(sum.device(), kRbln1);
  EXPECT_EQ(rbln::driver::device_of(sum.data_ptr()), 1);
  EXPECT_TRUE(MatchesCpu(sum, a + b));
  EXPECT_TRUE(ops.Ran({"aten::add.Tensor"}));
  EXPECT_EQ(rbln::current_device(), 0);  // the kernel's device guard restored it
}

TEST(MultiDevice, CopiesBetweenDevices) {
  auto cpu = random({3, 5});
  auto on0 = to_rbln(cpu);
  auto on1 = on0.to(kRbln1);
  EXPECT_EQ(on1.device(), kRbln1);
  EXPECT_TRUE(MatchesCpu(on1, cpu));
  EXPECT_TRUE(MatchesCpu(on1.to(kRbln0, at::kHalf), cpu.to(at::kHalf)));
  // transposed source into a sliced destination on the other device
  auto dst = at::zeros({6, 3}, at::TensorOptions().device(kRbln1));
  dst.slice(0, 1, 6).copy_(on0.t());
  auto expected = at::zeros({6, 3});
  expected.slice(0, 1, 6).copy_(cpu.t());
  EXPECT_TRUE(MatchesCpu(dst, expected));
}

// ---- elementwise kernels -----------------------------------------------------------

TEST(Binary, ArithmeticBroadcastsInEachDtype) {
  OpCounts ops;
  for (auto dtype : kNumericDtypes) {
    SCOPED_TRACE(dtype);
    auto a = random({2, 3, 4}, dtype), b = random({3, 1}, dtype);
    auto divisor = b.abs() + 1;  // nonzero, also for integers
    EXPECT_TRUE(SameAsCpu([](const at::Tensor& x, const at::Tensor& y) { return x + y; }, a, b));
    EXPECT_TRUE(SameAsCpu([](const at::Tensor& x, const at::Tensor& y) { return x - y; }, a, b));
    EXPECT_TRUE(SameAsCpu([](const at::Tensor& x, const at::Tensor& y) { return y * x; }, a, b));
    EXPECT_TRUE(SameAsCpu([](const at::Tensor& x, const at::Tensor& y) { return x / y; }, a, divisor));
  }
  EXPECT_TRUE(ops.Ran({"aten::add.Tensor", "aten::sub.Tensor", "aten::mul.Tensor", "aten::div.Tensor"}));
}

TEST(Binary, ScalarOperandsAndAlpha) {
  auto f = random({5}), g = random({5});
  auto i = random({5}, at::kLong), j = random({5}, at::kLong);
  auto h = random({5}, at::kHalf);
  OpCounts ops;
  EXPECT_TRUE(SameAsCpu([](const at::Tensor& x) { return at::add(x, 2.5); }, f));
  EXPECT_TRUE(SameAsCpu([](const at::Tensor& x) { return at::sub(x, 1, /*alpha=*/3); }, f));
  EXPECT_TRUE(SameAsCpu([](const at::Tensor& x) { return at::mul(x, -3); }, f));
  EXPECT_TRUE(SameAsCpu([](const at::Tensor& x) { return at::div(x, 4); }, f));
  EXPECT_TRUE(SameAsCpu([](const at::Tensor& x, const at::Tensor& y) { return at::add(x, y, 0.5); }, f, g));
  EXPECT_TRUE(SameAsCpu([](const at::Tensor& x, const at::Tensor& y) { return at::sub(x, y, 2); }, f, g));
  // integer tensors: an integer scalar keeps int64, a floating one promotes
  EXPECT_TRUE(SameAsCpu([](const at::Tensor& x) { return at::add(x, 3); }, i));
  EXPECT_TRUE(SameAsCpu([](const at::Tensor& x) { return at::add(x, 2.5); }, i));
  EXPECT_TRUE(SameAsCpu([](const at::Tensor& x) { return at::mul(x, 7); }, i));
  EXPECT_TRUE(SameAsCpu([](const at::Tensor& x, const at::Tensor& y) { return at::add(x, y, 3); }, i, j));
  EXPECT_TRUE(SameAsCpu([](const at::Tensor& x) { return at::add(x, 1e-3); }, h));  // 1e-3 rounds to float16
  EXPECT_TRUE(ops.Ran({"aten::add.Tensor", "aten::sub.Tensor", "aten::mul.Tensor", "aten::div.Tensor"}));
}

// CPU rounds an add/sub scalar to float16 but multiplies and divides by the
// scalar in float: 1e5 does not fit float16 (max 65504), x * 1e5 does for |x| <= 0.5.
TEST(Binary, MulAndDivScalarKeepFloatPrecisionWithHalfTensors) {
  auto h = at::arange(-4, 5, at::kHalf) / 8;
  EXPECT_TRUE(SameAsCpu([](const at::Tensor& x) { return at::mul(x, 1e5); }, h));
  EXPECT_TRUE(SameAsCpu([](const at::Tensor& x) { return at::div(x, 1e5); }, h));
}

TEST(Binary, PromotesMixedDtypes) {
  OpCounts ops;
  auto add = [](const at::Tensor& x, const at::Tensor& y) { return x + y; };
  auto f = random({2, 3}), l = random({2, 3}, at::kLong), i = random({3}, at::kInt);
  auto h = random({3}, at::kHalf), b = random({2, 3}, at::kBool);
  EXPECT_TRUE(SameAsCpu(add, l, f));  // int64 + float32 -> float32
  EXPECT_TRUE(SameAsCpu(add, i, l));  // int32 + int64 -> int64
  EXPECT_TRUE(SameAsCpu(add, h, f));  // float16 + float32 -> float32
  EXPECT_TRUE(SameAsCpu(add, b, l));  // bool + int64 -> int64
  // a 0-dim float tensor lifts an int64 tensor to float32
  EXPECT_TRUE(SameAsCpu([](const at::Tensor& x, const at::Tensor& s) { return x * s; }, l, at::scalar_tensor(0.5)));
  EXPECT_TRUE(ops.Ran({"aten::add.Tensor", "aten::mul.Tensor"}));
}

TEST(Binary, InPlaceAndOut) {
  OpCounts ops;
  for (auto dtype : kNumericDtypes) {
    SCOPED_TRACE(dtype);
    auto a = random({3, 4}, dtype), b = random({4}, dtype);
    EXPECT_TRUE(SameAsCpu([](at::Tensor x, const at::Tensor& y) { return x.add_(y, 2); }, a.clone(), b));
    EXPECT_TRUE(SameAsCpu([](at::Tensor x, const at::Tensor& y) { return x.mul_(y); }, a.clone(), b));
    // out= into a preallocated tensor and into one that must be resized
    auto add_out = [](at::Tensor out, const at::Tensor& x, const at::Tensor& y) { return at::add_out(out, x, y); };
    EXPECT_TRUE(SameAsCpu(add_out, at::empty({3, 4}, dtype), a, b));
    EXPECT_TRUE(SameAsCpu(add_out, at::empty({0}, dtype), a, b));
  }
  EXPECT_TRUE(ops.Ran({"aten::add_.Tensor", "aten::mul_.Tensor", "aten::add.out"}));
}

TEST(Binary, TransposedAndSlicedOperands) {
  OpCounts ops;
  auto a = random({5, 4}), b = random({4, 5});
  EXPECT_TRUE(SameAsCpu([](const at::Tensor& x, const at::Tensor& y) { return x.t() + y; }, a, b));
  EXPECT_TRUE(SameAsCpu([](const auto& x, const auto& y) { return x.slice(0, 1, 4) * y.t().slice(0, 0, 3); }, a, b));
  // in place through views writes the base tensor's storage
  EXPECT_TRUE(SameAsCpu([](at::Tensor x) { x.slice(1, 1, 3).add_(1); return x; }, a.clone()));
  EXPECT_TRUE(SameAsCpu([](at::Tensor x, const at::Tensor& y) { x.t().sub_(y); return x; }, a.clone(), b));
  EXPECT_TRUE(ops.Ran({"aten::add.Tensor", "aten::mul.Tensor", "aten::add_.Tensor", "aten::sub_.Tensor"}));
}

TEST(Binary, ZeroDimAndEmptyTensors) {
  OpCounts ops;
  auto s = at::scalar_tensor(2.5), t = at::scalar_tensor(-1.5), v = random({3});
  auto add = [](const at::Tensor& x, const at::Tensor& y) { return x + y; };
  EXPECT_TRUE(SameAsCpu(add, s, v));
  EXPECT_TRUE(SameAsCpu(add, s, t));  // 0-dim result
  EXPECT_TRUE(MatchesCpu(to_rbln(v) + s, v + s));  // a 0-dim CPU tensor is a scalar operand
  EXPECT_TRUE(SameAsCpu(add, at::empty({0, 3}), v));
  EXPECT_TRUE(SameAsCpu([](at::Tensor x, const at::Tensor& y) { return x.mul_(y); }, at::empty({0}), s));
  EXPECT_TRUE(ops.Ran({"aten::add.Tensor", "aten::mul_.Tensor"}));
}

TEST(Compare, EqAndLtProduceBool) {
  OpCounts ops;
  for (auto dtype : kNumericDtypes) {
    SCOPED_TRACE(dtype);
    auto a = random_ints({4, 5}, dtype), b = random_ints({5}, dtype);  // small ints: many ties
    EXPECT_TRUE(SameAsCpu([](const at::Tensor& x, const at::Tensor& y) { return at::eq(x, y); }, a, b));
    EXPECT_TRUE(SameAsCpu([](const at::Tensor& x, const at::Tensor& y) { return at::lt(x, y); }, a, b));
    EXPECT_TRUE(SameAsCpu([](const at::Tensor& x) { return at::eq(x, 2); }, a));
    EXPECT_TRUE(SameAsCpu([](const at::Tensor& x) { return at::lt(x, 0.5); }, a));
  }
  EXPECT_TRUE(ops.Ran({"aten::eq.Tensor", "aten::lt.Tensor", "aten::eq.Scalar", "aten::lt.Scalar"}));
}

// ---- selection and clamping ------------------------------------------------------

TEST(Select, WhereBroadcastsAndPromotes) {
  OpCounts ops;
  auto cond = random({3, 1}, at::kBool);
  for (auto dtype : kNumericDtypes) {
    SCOPED_TRACE(dtype);
    auto a = random({3, 4}, dtype), b = random({4}, dtype);
    EXPECT_TRUE(SameAsCpu([](const auto& c, const auto& x, const auto& y) { return at::where(c, x, y); }, cond, a, b));
    EXPECT_TRUE(SameAsCpu([](const auto& c, const auto& x) { return at::where(c, x, 0); }, cond, a));
  }
  auto f = random({3, 4}), l = random({4}, at::kLong);
  EXPECT_TRUE(SameAsCpu([](const auto& c, const auto& x, const auto& y) { return at::where(c, x, y); }, cond, l, f));
  EXPECT_TRUE(ops.Ran({"aten::where.self"}));
}

TEST(Select, MaskedFillWithBroadcastMask) {
  OpCounts ops;
  auto mask = random({1, 4}, at::kBool);
  for (auto dtype : {at::kFloat, at::kHalf, at::kLong, at::kBool}) {
    SCOPED_TRACE(dtype);
    auto x = random({3, 4}, dtype);
    EXPECT_TRUE(SameAsCpu([](at::Tensor t, const at::Tensor& m) { return t.masked_fill_(m, 1); }, x.clone(), mask));
    EXPECT_TRUE(SameAsCpu([](const at::Tensor& t, const at::Tensor& m) { return t.masked_fill(m, 0); }, x, mask));
    auto value = at::scalar_tensor(1, dtype);  // 0-dim value tensor
    EXPECT_TRUE(SameAsCpu([](at::Tensor t, const at::Tensor& m, const at::Tensor& v) { return t.masked_fill_(m, v); },
                          x.clone(), mask, value));
  }
  EXPECT_TRUE(ops.Ran({"aten::masked_fill_.Scalar", "aten::masked_fill_.Tensor"}));
}

TEST(Select, Clamp) {
  OpCounts ops;
  for (auto dtype : kNumericDtypes) {
    SCOPED_TRACE(dtype);
    auto x = random({4, 5}, dtype) * 3;
    EXPECT_TRUE(SameAsCpu([](const at::Tensor& t) { return at::clamp(t, -2, 3); }, x));
    EXPECT_TRUE(SameAsCpu([](const at::Tensor& t) { return at::clamp(t, std::nullopt, 1); }, x));
    EXPECT_TRUE(SameAsCpu([](at::Tensor t) { return t.clamp_(0); }, x.clone()));
    auto lo = random({5}, dtype) - 1, hi = lo + 2;  // tensor bounds, broadcast
    EXPECT_TRUE(SameAsCpu([](const auto& t, const auto& l, const auto& h) { return at::clamp(t, l, h); }, x, lo, hi));
  }
  EXPECT_TRUE(ops.Ran({"aten::clamp", "aten::clamp_", "aten::clamp.Tensor"}));
}

TEST(Select, ClampPromotesIntegerInputWithFloatBounds) {
  auto x = random({4, 5}, at::kLong);
  EXPECT_TRUE(SameAsCpu([](const at::Tensor& t) { return at::clamp(t, -2.5, 3.5); }, x));  // float32 result
}

// ---- reductions ------------------------------------------------------------------

TEST(Reduce, SumAndMeanOverDimsWithKeepdim) {
  OpCounts ops;
  for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16, at::kLong, at::kBool}) {
    SCOPED_TRACE(dtype);
    auto x = random_ints({3, 4, 5}, dtype);
    for (bool keepdim : {false, true}) {
      EXPECT_TRUE(SameAsCpu([&](const at::Tensor& t) { return at::sum(t, {0, 2}, keepdim); }, x));
      EXPECT_TRUE(SameAsCpu([&](const at::Tensor& t) { return at::sum(t, {-1}, keepdim); }, x));
    }
    EXPECT_TRUE(SameAsCpu([](const at::Tensor& t) { return at::sum(t); }, x));
    EXPECT_TRUE(SameAsCpu([](const at::Tensor& t) { return at::sum(t.transpose(0, 2), {1}); }, x));
  }
  for (auto dtype : {at::kFloat, at::kHalf}) {
    SCOPED_TRACE(dtype);
    auto x = random({3, 4, 5}, dtype);
    for (bool keepdim : {false, true}) {
      EXPECT_TRUE(SameAsCpu([&](const at::Tensor& t) { return at::mean(t, {1}, keepdim); }, x));
      EXPECT_TRUE(SameAsCpu([&](const at::Tensor& t) { return at::mean(t, {0, -1}, keepdim); }, x));
    }
  }
  EXPECT_TRUE(ops.Ran({"aten::sum.dim_IntList", "aten::mean.dim"}));
}

TEST(Reduce, MaxDimGivesValuesAndIndices) {
  OpCounts ops;
  for (auto dtype : {at::kFloat, at::kHalf, at::kLong}) {
    SCOPED_TRACE(dtype);
    auto x = at::randperm(60, generator()).reshape({3, 4, 5}).to(dtype);  // distinct: indices are unique
    for (int64_t dim : {0, 1, -1}) {
      for (bool keepdim : {false, true}) {
        auto [values, indices] = at::max(to_rbln(x), dim, keepdim);
        auto [cpu_values, cpu_indices] = at::max(x, dim, keepdim);
        EXPECT_TRUE(MatchesCpu(values, cpu_values));
        EXPECT_TRUE(MatchesCpu(indices, cpu_indices));
      }
    }
  }
  EXPECT_TRUE(ops.Ran({"aten::max.dim"}));
}

TEST(Reduce, SoftmaxAndLogSoftmax) {
  OpCounts ops;
  for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
    SCOPED_TRACE(dtype);
    auto x = random({3, 4, 5}, dtype);
    // CPU's own float16/bfloat16 log_softmax over the last dim errs by up to
    // 2 ulps, so the reference is CPU's float32 result, rounded.
    auto matches_cpu = [&](auto f) { return MatchesCpu(f(to_rbln(x)), f(x.to(at::kFloat)).to(dtype)); };
    for (int64_t dim : {0, 1, -1}) {
      EXPECT_TRUE(matches_cpu([&](const at::Tensor& t) { return at::softmax(t, dim); }));
      EXPECT_TRUE(matches_cpu([&](const at::Tensor& t) { return at::log_softmax(t, dim); }));
      EXPECT_TRUE(matches_cpu([&](const at::Tensor& t) { return at::softmax(t.transpose(0, 2), dim); }));
    }
  }
  EXPECT_TRUE(ops.Ran({"aten::_softmax", "aten::_log_softmax"}));
}

// ---- matrix multiply ----------------------------------------------------------------

TEST(Matmul, MmWithTransposedOperands) {
  OpCounts ops;
  for (auto dtype : kNumericDtypes) {
    SCOPED_TRACE(dtype);
    auto a = random_ints({3, 4}, dtype), b = random_ints({4, 5}, dtype);
    auto a_t = random_ints({4, 3}, dtype), b_t = random_ints({5, 4}, dtype);  // used transposed
    EXPECT_TRUE(SameAsCpu([](const auto& x, const auto& y) { return at::mm(x, y); }, a, b));
    EXPECT_TRUE(SameAsCpu([](const auto& x, const auto& y) { return at::mm(x.t(), y); }, a_t, b));
    EXPECT_TRUE(SameAsCpu([](const auto& x, const auto& y) { return at::mm(x, y.t()); }, a, b_t));
    EXPECT_TRUE(SameAsCpu([](const auto& x, const auto& y) { return at::mm(x.t(), y.t()); }, a_t, b_t));
  }
  EXPECT_TRUE(ops.Ran({"aten::mm"}));
}

TEST(Matmul, BmmWithTransposedOperands) {
  OpCounts ops;
  for (auto dtype : kNumericDtypes) {
    SCOPED_TRACE(dtype);
    auto a = random_ints({2, 3, 4}, dtype), b = random_ints({2, 4, 5}, dtype);
    auto bt = random_ints({2, 5, 4}, dtype);
    EXPECT_TRUE(SameAsCpu([](const auto& x, const auto& y) { return at::bmm(x, y); }, a, b));
    EXPECT_TRUE(SameAsCpu([](const auto& x, const auto& y) { return at::bmm(x, y.transpose(1, 2)); }, a, bt));
    EXPECT_TRUE(SameAsCpu([](const auto& x, const auto& y) { return at::bmm(y, x.transpose(1, 2)); }, a, bt));
  }
  EXPECT_TRUE(ops.Ran({"aten::bmm"}));
}

TEST(Matmul, AddmmWithBroadcastBiasAndScaling) {
  OpCounts ops;
  for (auto dtype : kNumericDtypes) {
    SCOPED_TRACE(dtype);
    auto bias = random_ints({5}, dtype), a = random_ints({3, 4}, dtype), b = random_ints({4, 5}, dtype);
    auto a_t = random_ints({4, 3}, dtype);
    EXPECT_TRUE(SameAsCpu([](const auto& c, const auto& x, const auto& y) { return at::addmm(c, x, y); }, bias, a, b));
    EXPECT_TRUE(SameAsCpu([](const auto& c, const auto& x, const auto& y) { return at::addmm(c, x.t(), y, 2, 3); },
                          bias, a_t, b));
  }
  auto bias = random({3, 5}), a = random({3, 4}), b = random({4, 5});
  EXPECT_TRUE(SameAsCpu([](const auto& c, const auto& x, const auto& y) { return at::addmm(c, x, y, 0.5, -2); },
                        bias, a, b));
  EXPECT_TRUE(ops.Ran({"aten::addmm"}));
}

// ---- indexing and data movement ------------------------------------------------------

TEST(Index, IndexSelect) {
  OpCounts ops;
  auto rows = at::tensor({3, 0, 3, 1}, at::kLong), cols = at::tensor({4, 0}, at::kInt);
  for (auto dtype : {at::kFloat, at::kHalf, at::kLong, at::kBool}) {
    SCOPED_TRACE(dtype);
    auto x = random({4, 5}, dtype);
    auto select = [](int64_t dim) {
      return [dim](const at::Tensor& t, const at::Tensor& i) { return at::index_select(t, dim, i); };
    };
    EXPECT_TRUE(SameAsCpu(select(0), x, rows));
    EXPECT_TRUE(SameAsCpu(select(1), x, cols));
    EXPECT_TRUE(SameAsCpu(select(0), x.t(), cols));  // non-contiguous input
    EXPECT_TRUE(SameAsCpu(select(0), x, at::empty({0}, at::kLong)));
  }
  EXPECT_TRUE(ops.Ran({"aten::index_select"}));
}

TEST(Index, IndexCopyInPlace) {
  OpCounts ops;
  auto index = at::tensor({4, 0, 2}, at::kLong);
  for (auto dtype : {at::kFloat, at::kBFloat16, at::kLong}) {
    SCOPED_TRACE(dtype);
    auto self = random({5, 3}, dtype), source = random({3, 3}, dtype);
    auto copy = [](int64_t dim) {
      return [dim](at::Tensor t, const at::Tensor& i, const at::Tensor& s) { return t.index_copy_(dim, i, s); };
    };
    EXPECT_TRUE(SameAsCpu(copy(0), self.clone(), index, source));
    EXPECT_TRUE(SameAsCpu(copy(1), self.t().clone(), index, source));
    // into a transposed view: the base tensor changes along its dim 0
    EXPECT_TRUE(SameAsCpu([](at::Tensor t, const at::Tensor& i, const at::Tensor& s) {
      t.t().index_copy_(1, i, s);
      return t;
    }, self.clone(), index, source));
  }
  EXPECT_TRUE(ops.Ran({"aten::index_copy_"}));
}

TEST(Index, Cat) {
  OpCounts ops;
  for (auto dtype : kNumericDtypes) {
    SCOPED_TRACE(dtype);
    auto a = random({2, 3}, dtype), b = random({1, 3}, dtype), c = random({2, 2}, dtype);
    EXPECT_TRUE(SameAsCpu([](const auto& x, const auto& y) { return at::cat({x, y}, 0); }, a, b));
    EXPECT_TRUE(SameAsCpu([](const auto& x, const auto& y) { return at::cat({x, y.t()}, 1); }, a, c));  // transposed
    // legacy: 1-d empty tensors are skipped
    auto empty = at::empty({0}, dtype);
    EXPECT_TRUE(SameAsCpu([](const auto& x, const auto& e) { return at::cat({e, x, e}, 0); }, a, empty));
  }
  EXPECT_TRUE(SameAsCpu([](const auto& x, const auto& y) { return at::cat({x, y}, 0); }, random({2, 3}, at::kLong),
                        random({1, 3})));  // int64 and float32 -> float32
  EXPECT_TRUE(ops.Ran({"aten::cat"}));
}

TEST(Index, RepeatInterleave) {
  OpCounts ops;
  auto repeats = at::tensor({1, 0, 3}, at::kLong);
  EXPECT_TRUE(SameAsCpu([](const at::Tensor& r) { return at::repeat_interleave(r); }, repeats));
  EXPECT_TRUE(SameAsCpu([](const at::Tensor& r) { return at::repeat_interleave(r); }, repeats.to(at::kInt)));
  for (auto dtype : {at::kFloat, at::kHalf, at::kLong}) {
    SCOPED_TRACE(dtype);
    auto x = random({2, 3}, dtype);
    EXPECT_TRUE(SameAsCpu([](const at::Tensor& t) { return at::repeat_interleave(t, 2, 0); }, x));
    EXPECT_TRUE(SameAsCpu([](const auto& t, const auto& r) { return at::repeat_interleave(t, r, 1); }, x, repeats));
  }
  EXPECT_TRUE(ops.Ran({"aten::repeat_interleave.Tensor", "aten::index_select"}));
}

// ---- creation and fills ------------------------------------------------------------

TEST(Create, Arange) {
  OpCounts ops;
  auto check = [](const at::Scalar& start, const at::Scalar& end, const at::Scalar& step, at::ScalarType dtype) {
    SCOPED_TRACE(testing::Message() << start << ".." << end << " by " << step << " " << dtype);
    EXPECT_TRUE(MatchesCpu(at::arange(start, end, step, at::TensorOptions().dtype(dtype).device(kRbln0)),
                           at::arange(start, end, step, dtype)));
  };
  check(0, 10, 1, at::kLong);
  check(10, -3, -2, at::kLong);
  check(-1.0, 1.0, 0.25, at::kFloat);
  check(0, 1, 0.1, at::kFloat);
  check(0, 8, 0.5, at::kHalf);
  EXPECT_TRUE(ops.Ran({"aten::arange.start_out"}));
}

TEST(Create, FillAndZeroOnViews) {
  OpCounts ops;
  for (auto dtype : {at::kFloat, at::kHalf, at::kLong, at::kBool}) {
    SCOPED_TRACE(dtype);
    auto x = random({4, 5}, dtype);
    EXPECT_TRUE(SameAsCpu([](at::Tensor t) { return t.fill_(3); }, x.clone()));
    EXPECT_TRUE(SameAsCpu([](at::Tensor t) { t.slice(1, 1, 4).fill_(-2); return t; }, x.clone()));
    EXPECT_TRUE(SameAsCpu([](at::Tensor t) { t.t().slice(0, 2).zero_(); return t; }, x.clone()));
    EXPECT_TRUE(SameAsCpu([](at::Tensor t, const at::Tensor& v) { return t.fill_(v); }, x.clone(),
                          at::scalar_tensor(7, dtype)));
  }
  EXPECT_TRUE(ops.Ran({"aten::fill_.Scalar", "aten::zero_", "aten::fill_.Tensor"}));
}

// A CPU tensor filled from a 0-dim device tensor dispatches to the rbln kernel
// (as with CUDA, whose fill_ then fills on the host). Checked in a child
// process: a device-stream write into host memory can corrupt the heap.
TEST(Create, FillCpuTensorFromDeviceScalar) {
  EXPECT_EXIT(
      {
        // value.item() syncs device 1; a write queued on device 0 comes too late
        auto value = at::scalar_tensor(2.5).to(kRbln1);
        occupy_current_stream(std::chrono::milliseconds(50));
        auto host = at::zeros({3});
        host.fill_(value);
        bool filled = at::equal(host, at::full({3}, 2.5));
        std::cerr << host;
        std::_Exit(filled ? 0 : 1);
      },
      testing::ExitedWithCode(0), "");
}

// ---- asynchronous kernel errors ---------------------------------------------------------

TEST(AsyncError, BadIndexSurfacesAtTheNextSynchronizingCall) {
  auto x = to_rbln(random({3, 4}));
  auto bad = to_rbln(at::tensor({0, 5}, at::kLong));
  c10::impl::VirtualGuardImpl impl(kRBLN);

  at::Tensor out;
  EXPECT_NO_THROW(out = at::index_select(x, 0, bad));
  EXPECT_TRUE(Contains(message_of([&] { out.cpu(); }), "index_select"));
  EXPECT_TRUE(MatchesCpu(x + 1, x.cpu() + 1));  // the device recovered

  EXPECT_NO_THROW(at::index_select(x, 1, bad));
  EXPECT_TRUE(Contains(message_of([&] { impl.synchronizeDevice(0); }), "index_select"));
  EXPECT_TRUE(MatchesCpu(at::index_select(x, 1, at::zeros({1}, bad.options())), x.cpu().slice(1, 0, 1)));
}

// ---- wrong input ----------------------------------------------------------------------

TEST(WrongInput, MixingCpuAndDeviceTensorsThrows) {
  auto host = random({3}), device = to_rbln(random({3}));
  EXPECT_TRUE(Contains(message_of([&] { at::add(host, device); }), "Expected all tensors to be on the same device"));
  EXPECT_TRUE(Contains(message_of([&] { at::add(device, host); }), "Expected all tensors to be on the same device"));
  EXPECT_TRUE(Contains(message_of([&] { at::add(device, device.to(kRbln1)); }),
                       "Expected all tensors to be on the same device"));
}

TEST(WrongInput, FloatAlphaWithIntegerTensorsThrows) {
  auto x = random({3}, at::kLong);
  const std::string expected = "For integral input tensors, argument alpha must not be a floating point number.";
  EXPECT_TRUE(Contains(message_of([&] { at::add(x, x, 1.5); }), expected));
  EXPECT_TRUE(Contains(message_of([&] { at::add(to_rbln(x), to_rbln(x), 1.5); }), expected));
}

TEST(WrongInput, PartiallyOverlappingCopyThrows) {
  auto overlap = [](const at::Tensor& t) { t.slice(0, 1, 6).copy_(t.slice(0, 0, 5)); };
  const std::string expected = "some elements of the input tensor and the written-to tensor refer to a single memory";
  EXPECT_TRUE(Contains(message_of([&] { overlap(at::arange(6.0)); }), expected));
  EXPECT_TRUE(Contains(message_of([&] { overlap(to_rbln(at::arange(6.0))); }), expected));
}

TEST(WrongInput, MmShapeMismatchUsesCpuWording) {
  auto a = random({2, 3}), b = random({4, 5});
  const std::string expected = "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)";
  EXPECT_TRUE(Contains(message_of([&] { at::mm(a, b); }), expected));
  EXPECT_TRUE(Contains(message_of([&] { at::mm(to_rbln(a), to_rbln(b)); }), expected));
}

}  // namespace
