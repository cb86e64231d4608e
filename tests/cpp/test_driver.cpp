// Tests of the emulated driver (runtime/driver), without PyTorch.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime/driver/internal.h"
#include "runtime/driver/activity.h"
#include "runtime/driver/rbln_driver.h"

using namespace rbln::driver;

namespace {

constexpr size_t kCapacity = size_t{64} << 20;

// The driver reads its variables once per process, so they are pinned here
// before any test runs. Death tests use the threadsafe style: the child is a
// fresh exec of this binary, so it can set variables of its own before first
// use, and it has no driver workers inherited through fork().
class DriverEnvironment : public testing::Environment {
 public:
  void SetUp() override {
    setenv("RBLN_DEVICE_MEMORY", "64M", 1);
    unsetenv("RBLN_DEVICE_COUNT");
    unsetenv("RBLN_LAUNCH_BLOCKING");
    unsetenv("RBLN_STRICT");
    GTEST_FLAG_SET(death_test_style, "threadsafe");
  }
};
testing::Environment* const kEnvironment = testing::AddGlobalTestEnvironment(new DriverEnvironment);

// Returns the message of the Error that f() throws, checking its kind.
template <class F>
std::string error_of(F f, Error::Kind kind) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind, kind) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no rbln::driver::Error was thrown";
  return "";
}

// For code running in a death-test child, where gtest assertions don't report.
void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "requirement failed: %s\n", what);
    std::_Exit(1);
  }
}

void wait_for(const std::atomic<bool>& flag) {
  while (!flag.load()) std::this_thread::yield();
}

size_t resident_bytes() {
  size_t pages = 0, resident = 0;
  std::ifstream("/proc/self/statm") >> pages >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// ---- configuration ---------------------------------------------------------

TEST(Parse, UnsignedIntegers) {
  EXPECT_EQ(internal::parse_uint("0"), 0u);
  EXPECT_EQ(internal::parse_uint("0042"), 42u);
  EXPECT_EQ(internal::parse_uint("18446744073709551615"), UINT64_MAX);
  for (const char* bad : {"", "abc", "-1", "+1", " 1", "1 ", "2x", "18446744073709551616"}) {
    EXPECT_FALSE(internal::parse_uint(bad)) << bad;
  }
}

TEST(Parse, ByteCounts) {
  EXPECT_EQ(internal::parse_bytes("1048576"), size_t{1} << 20);
  EXPECT_EQ(internal::parse_bytes("8G"), size_t{8} << 30);
  EXPECT_EQ(internal::parse_bytes("64M"), size_t{64} << 20);
  EXPECT_EQ(internal::parse_bytes("3K"), size_t{3} << 10);
  EXPECT_EQ(internal::parse_bytes("512KiB"), size_t{512} << 10);
  EXPECT_EQ(internal::parse_bytes("2MiB"), size_t{2} << 20);
  EXPECT_EQ(internal::parse_bytes("1GiB"), size_t{1} << 30);
  for (const char* bad : {"", "0", "0G", "G", "1.5G", "12X", "1g", "1 G", "-1G", "99999999999999999999G"}) {
    EXPECT_FALSE(internal::parse_bytes(bad)) << bad;
  }
}

TEST(Config, Defaults) {
  EXPECT_EQ(device_count(), 2);
  EXPECT_EQ(device_count_error(), "");
  EXPECT_EQ(device_capacity(0), kCapacity);
  EXPECT_FALSE(launch_blocking());
  EXPECT_FALSE(strict_mode());
}

TEST(Config, CheckDevice) {
  EXPECT_NO_THROW(check_device(0));
  EXPECT_NO_THROW(check_device(1));
  EXPECT_EQ(error_of([] { check_device(5); }, Error::kInvalid),
            "Invalid device index rbln:5: there are 2 RBLN devices");
  EXPECT_EQ(error_of([] { check_device(-1); }, Error::kInvalid),
            "Invalid device index rbln:-1: there are 2 RBLN devices");
  EXPECT_EQ(error_of([] { device_malloc(2, 1); }, Error::kInvalid),
            "Invalid device index rbln:2: there are 2 RBLN devices");
}

TEST(ConfigDeathTest, InvalidDeviceCountMeansNoDevices) {
  EXPECT_EXIT(
      {
        setenv("RBLN_DEVICE_COUNT", "abc", 1);
        require(device_count() == 0, "no devices");
        std::fprintf(stderr, "[%s] [%s]\n", device_count_error().c_str(),
                     error_of([] { check_device(0); }, Error::kInvalid).c_str());
        std::_Exit(0);
      },
      testing::ExitedWithCode(0),
      "\\[RBLN_DEVICE_COUNT='abc' is not a non-negative integer\\] "
      "\\[Invalid device index rbln:0: there are 0 RBLN devices \\(RBLN_DEVICE_COUNT='abc'");
}

TEST(ConfigDeathTest, ValidVariables) {
  EXPECT_EXIT(
      {
        setenv("RBLN_DEVICE_COUNT", "3", 1);
        setenv("RBLN_DEVICE_MEMORY", "2MiB", 1);
        setenv("RBLN_LAUNCH_BLOCKING", "1", 1);
        setenv("RBLN_STRICT", "1", 1);
        require(device_count() == 3 && device_count_error().empty(), "3 devices");
        require(device_capacity(2) == (size_t{2} << 20), "2 MiB per device");
        require(launch_blocking() && strict_mode(), "flags");
        require(device_malloc(2, size_t{2} << 20) != nullptr, "a full-size allocation");
        std::_Exit(0);
      },
      testing::ExitedWithCode(0), "");
}

TEST(ConfigDeathTest, InvalidDeviceMemoryThrowsOnUse) {
  EXPECT_EXIT(
      {
        setenv("RBLN_DEVICE_MEMORY", "lots", 1);
        require(device_count() == 2, "device count unaffected");
        std::fprintf(stderr, "[%s]\n", error_of([] { device_malloc(0, 1); }, Error::kInvalid).c_str());
        std::_Exit(0);
      },
      testing::ExitedWithCode(0), "\\[RBLN_DEVICE_MEMORY='lots' is not a positive byte count");
}

// ---- device memory ---------------------------------------------------------

TEST(DeviceMemory, AllocationsAreAlignedAndCounted) {
  size_t before = device_bytes_used(0);
  char* a = static_cast<char*>(device_malloc(0, 100));
  char* b = static_cast<char*>(device_malloc(0, 1000));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a, b);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 512, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 512, 0u);
  EXPECT_EQ(device_bytes_used(0), before + 512 + 1024);
  std::memset(a, 1, 100);
  std::memset(b, 2, 1000);
  EXPECT_EQ(a[99], 1);
  EXPECT_EQ(b[0], 2);
  device_free(a);
  device_free(b);
  EXPECT_EQ(device_bytes_used(0), before);
}

TEST(DeviceMemory, ExhaustionReuseAndCoalescing) {
  // Device 1 starts empty in every test that uses it.
  constexpr size_t kQuarter = kCapacity / 4;
  EXPECT_EQ(device_malloc(1, kCapacity + 1), nullptr);
  void* parts[4];
  for (void*& part : parts) {
    part = device_malloc(1, kQuarter);
    ASSERT_NE(part, nullptr);
  }
  EXPECT_EQ(device_bytes_used(1), kCapacity);
  EXPECT_EQ(device_malloc(1, 1), nullptr);
  // The two freed middle quarters coalesce into one half.
  device_free(parts[1]);
  device_free(parts[2]);
  void* half = device_malloc(1, 2 * kQuarter);
  EXPECT_EQ(half, parts[1]);
  device_free(half);
  // A freed block is reused for a request of the same size.
  void* again = device_malloc(1, kQuarter);
  EXPECT_EQ(again, parts[1]);
  device_free(again);
  device_free(parts[0]);
  device_free(parts[3]);
  EXPECT_EQ(device_bytes_used(1), 0u);
  void* all = device_malloc(1, kCapacity);
  EXPECT_EQ(all, parts[0]);
  device_free(all);
}

TEST(DeviceMemory, InvalidFrees) {
  EXPECT_NO_THROW(device_free(nullptr));
  int on_stack = 0;
  EXPECT_NE(error_of([&] { device_free(&on_stack); }, Error::kInvalid).find("is not device memory"),
            std::string::npos);
  char* p = static_cast<char*>(device_malloc(0, 4096));
  EXPECT_NE(error_of([&] { device_free(p + 512); }, Error::kInvalid).find("not a live allocation on rbln:0"),
            std::string::npos);
  device_free(p);
  error_of([&] { device_free(p); }, Error::kInvalid);
}

TEST(DeviceMemory, DeviceOf) {
  char* a = static_cast<char*>(device_malloc(0, 4096));
  char* b = static_cast<char*>(device_malloc(1, 4096));
  EXPECT_EQ(device_of(a), 0);
  EXPECT_EQ(device_of(a + 4095), 0);
  EXPECT_EQ(device_of(b), 1);
  EXPECT_EQ(device_of(b + 1234), 1);
  int on_stack = 0;
  std::vector<char> on_heap(16);
  EXPECT_EQ(device_of(&on_stack), -1);
  EXPECT_EQ(device_of(on_heap.data()), -1);
  EXPECT_EQ(device_of(nullptr), -1);
  device_free(a);
  device_free(b);
}

TEST(DeviceMemory, LargeFreeReturnsPagesToTheOs) {
  char* p = static_cast<char*>(device_malloc(1, kCapacity));
  ASSERT_NE(p, nullptr);
  std::memset(p, 7, kCapacity);
  size_t touched = resident_bytes();
  device_free(p);
  EXPECT_LT(resident_bytes() + kCapacity / 2, touched);
  p = static_cast<char*>(device_malloc(1, kCapacity));
  EXPECT_EQ(p[kCapacity / 2], 0);  // released pages come back zeroed
  device_free(p);
}

TEST(DeviceMemory, HostCanTouchDeviceMemoryWhenNotStrict) {
  char* p = static_cast<char*>(device_malloc(0, 64));
  p[0] = 'z';
  EXPECT_EQ(p[0], 'z');
  device_free(p);
}

// ---- pinned host memory ----------------------------------------------------

TEST(PinnedMemory, TracksWholeBlocks) {
  char* p = static_cast<char*>(host_malloc(10000));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 4096, 0u);
  EXPECT_TRUE(is_pinned(p));
  EXPECT_TRUE(is_pinned(p + 9999));
  EXPECT_FALSE(is_pinned(p + 10000));
  EXPECT_FALSE(is_pinned(p - 1));
  std::vector<char> unpinned(16);
  EXPECT_FALSE(is_pinned(unpinned.data()));
  EXPECT_EQ(device_of(p), -1);
  host_free(p);
  EXPECT_FALSE(is_pinned(p));
  EXPECT_NO_THROW(host_free(nullptr));
  error_of([&] { host_free(unpinned.data()); }, Error::kInvalid);
}

TEST(PinnedMemory, FailedAllocationThrowsOutOfMemory) {
  error_of([&] { host_malloc(size_t(1) << 62); }, Error::kOutOfMemory);
  void* p = host_malloc(16);  // still usable
  EXPECT_TRUE(is_pinned(p));
  host_free(p);
}

// ---- streams -----------------------------------------------------------------

TEST(Streams, Ids) {
  Stream* first = default_stream(0);
  EXPECT_EQ(stream_id(first), 0);
  EXPECT_EQ(stream_device(first), 0);
  EXPECT_EQ(default_stream(0), first);
  EXPECT_NE(default_stream(1), first);
  Stream* a = create_stream(0);
  Stream* b = create_stream(0, -1);
  EXPECT_GE(stream_id(a), 1);
  EXPECT_EQ(stream_id(b), stream_id(a) + 1);
  EXPECT_EQ(stream_from_id(0, 0), first);
  EXPECT_EQ(stream_from_id(0, stream_id(a)), a);
  EXPECT_EQ(stream_from_id(0, stream_id(b)), b);
  error_of([] { stream_from_id(0, 1000000); }, Error::kInvalid);
  error_of([] { stream_from_id(0, -1); }, Error::kInvalid);
  error_of([] { default_stream(2); }, Error::kInvalid);
  Stream* other = create_stream(1);
  EXPECT_EQ(stream_device(other), 1);
  EXPECT_EQ(stream_from_id(1, stream_id(other)), other);
}

// Many more tasks than ring slots, with hosts synchronizing (and so running
// head tasks themselves) while producers wrap around the ring: every task runs
// once, in order, and nothing waits forever on a slot a host already ran.
TEST(Streams, OrderHoldsWhileHostsRunTasksAcrossRingWraps) {
  Stream* stream = create_stream(0);
  std::vector<int> order;
  int next = 0;
  for (int round = 0; round < 40; ++round) {
    for (int i = 0; i < 2500 + round * 37; ++i, ++next) {
      launch(stream, "append", [&order, next] { order.push_back(next); });
      if (i % 97 == 0) stream_synchronize(stream);
    }
    if (round % 3 == 0) stream_synchronize(stream);
  }
  stream_synchronize(stream);
  std::vector<int> expected(next);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(order, expected);
}

TEST(Streams, TasksRunInOrder) {
  Stream* stream = create_stream(0);
  std::vector<int> order;  // touched only by the worker until synchronize
  for (int i = 0; i < 1000; ++i) launch(stream, "append", [&order, i] { order.push_back(i); });
  stream_synchronize(stream);
  EXPECT_TRUE(stream_query(stream));
  std::vector<int> expected(1000);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(order, expected);
}

// A task of `Bytes` payload aligned to `Align`, counting its live copies and runs.
template <size_t Bytes, size_t Align>
struct alignas(Align) CountedTask {
  std::atomic<int>* live;
  std::atomic<int>* runs;
  std::atomic<int>* misaligned;
  unsigned char payload[Bytes] = {};
  CountedTask(std::atomic<int>* l, std::atomic<int>* r, std::atomic<int>* m) : live(l), runs(r), misaligned(m) { ++*live; }
  CountedTask(const CountedTask& o) : live(o.live), runs(o.runs), misaligned(o.misaligned) { ++*live; }
  ~CountedTask() { --*live; }
  void operator()() const {
    ++*runs;
    if (reinterpret_cast<uintptr_t>(this) % Align != 0) ++*misaligned;
  }
};

// Whatever its size and alignment (in a ring slot or boxed on the heap), a task
// is moved, or copied from an lvalue, into the stream, run once and destroyed.
TEST(Streams, TasksOfAnySizeRunOnceAndAreDestroyed) {
  Stream* stream = create_stream(0);
  std::atomic<int> live{0}, runs{0}, misaligned{0};
  launch(stream, "small", CountedTask<8, 8>(&live, &runs, &misaligned));
  launch(stream, "large", CountedTask<4096, 8>(&live, &runs, &misaligned));
  launch(stream, "aligned", CountedTask<8, 128>(&live, &runs, &misaligned));
  const CountedTask<600, 8> lvalue(&live, &runs, &misaligned);
  launch(stream, "copied", lvalue);
  stream_synchronize(stream);
  EXPECT_EQ(runs.load(), 4);
  EXPECT_EQ(misaligned.load(), 0);
  EXPECT_EQ(live.load(), 1);  // `lvalue` itself
}

template <size_t Bytes>
struct UnmovableTask {
  bool* ran;
  unsigned char payload[Bytes] = {};
  explicit UnmovableTask(bool* r) : ran(r) {}
  UnmovableTask(UnmovableTask&&) { throw std::runtime_error("cannot move"); }
  void operator()() const { *ran = true; }
};

// A task whose move throws is not queued: launch rethrows, and the stream runs
// what comes next with no error pending.
TEST(Streams, LaunchOfATaskThatCannotMoveThrowsAndTheStreamGoesOn) {
  Stream* stream = create_stream(0);
  bool ran_small = false, ran_large = false, after = false;
  EXPECT_THROW(launch(stream, "unmovable", UnmovableTask<8>(&ran_small)), std::runtime_error);
  EXPECT_THROW(launch(stream, "unmovable", UnmovableTask<4096>(&ran_large)), std::runtime_error);
  launch(stream, "after", [&] { after = true; });
  stream_synchronize(stream);
  EXPECT_FALSE(ran_small);
  EXPECT_FALSE(ran_large);
  EXPECT_TRUE(after);
}

TEST(Streams, LaunchIsAsynchronous) {
  Stream* stream = create_stream(0);
  EXPECT_TRUE(stream_query(stream));
  std::atomic<bool> release{false}, after{false};
  launch(stream, "blocked", [&] { wait_for(release); });
  launch(stream, "after", [&] { after = true; });
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_FALSE(stream_query(stream));
  EXPECT_FALSE(after.load());
  release = true;
  stream_synchronize(stream);
  EXPECT_TRUE(stream_query(stream));
  EXPECT_TRUE(after.load());
}

TEST(Streams, StreamsRunConcurrently) {
  Stream* a = create_stream(0);
  Stream* b = create_stream(0);
  std::atomic<bool> release{false};
  launch(a, "blocked", [&] { wait_for(release); });
  launch(b, "releaser", [&] { release = true; });
  stream_synchronize(a);
  stream_synchronize(b);
}

TEST(Streams, FirstErrorSurfacesAtSynchronizeThenStreamRecovers) {
  Stream* stream = create_stream(0);
  std::atomic<bool> later{false};
  launch(stream, "aten::bad", [] { throw std::runtime_error("boom"); });
  launch(stream, "aten::worse", [] { throw std::runtime_error("second"); });
  launch(stream, "later", [&] { later = true; });
  EXPECT_EQ(error_of([&] { stream_synchronize(stream); }, Error::kKernel), "aten::bad: boom");
  EXPECT_TRUE(later.load());  // tasks after a failure still run
  EXPECT_NO_THROW(stream_synchronize(stream));
  launch(stream, "aten::odd", [] { throw 42; });
  EXPECT_EQ(error_of([&] { stream_synchronize(stream); }, Error::kKernel), "aten::odd: unknown exception");
  launch(stream, "aten::index", [] { throw std::out_of_range("index 5 is out of bounds"); });
  EXPECT_EQ(error_of([&] { stream_synchronize(stream); }, Error::kIndex), "aten::index: index 5 is out of bounds");
  int value = 0;
  launch(stream, "set", [&] { value = 1; });
  EXPECT_NO_THROW(stream_synchronize(stream));
  EXPECT_EQ(value, 1);
}

TEST(Streams, ErrorSurfacesAtMemcpySyncAndDeviceSynchronize) {
  Stream* stream = create_stream(1);
  int src = 5, dst = 0;
  launch(stream, "aten::bad", [] { throw std::runtime_error("boom"); });
  EXPECT_EQ(error_of([&] { memcpy_sync(&dst, &src, sizeof src, stream); }, Error::kKernel), "aten::bad: boom");
  EXPECT_EQ(dst, 5);
  launch(stream, "aten::bad", [] { throw std::runtime_error("again"); });
  EXPECT_EQ(error_of([] { device_synchronize(1); }, Error::kKernel), "aten::bad: again");
  EXPECT_NO_THROW(device_synchronize(1));
}

TEST(Streams, DeviceSynchronizeWaitsForEveryStream) {
  std::atomic<int> done{0};
  for (Stream* stream : {default_stream(0), create_stream(0), create_stream(0)}) {
    launch(stream, "sleep", [&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      ++done;
    });
  }
  device_synchronize(0);
  EXPECT_EQ(done.load(), 3);
}

TEST(Streams, WorkerParksAndWakesAfterIdling) {
  Stream* stream = create_stream(0);
  int value = 0;
  launch(stream, "first", [&] { value = 1; });
  stream_synchronize(stream);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // long enough to park
  launch(stream, "second", [&] { value = 2; });
  stream_synchronize(stream);
  EXPECT_EQ(value, 2);
}

// The publish/park handshake (asymmetric fence under membarrier): a launch
// made while the worker parks must still run with no host waiting on the
// stream (synchronize would run it on the host and hide a missed wake-up).
TEST(Streams, ParkedWorkerRunsLaunchesNobodyWaitsFor) {
  Stream* stream = create_stream(0);
  std::atomic<int> ran{0};
  for (int i = 1; i <= 50; ++i) {
    std::this_thread::sleep_for(std::chrono::microseconds(100 + 20 * i));  // around the 150 us park point
    launch(stream, "flag", [&] { ran.fetch_add(1); });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (ran.load() < i && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    ASSERT_EQ(ran.load(), i) << "launch " << i << " did not run without a waiter";
  }
  stream_synchronize(stream);
}

// ---- the workers' share of the cores -----------------------------------------

std::atomic<bool> g_told_dispatching{false};
void record_team(bool host_dispatching) { g_told_dispatching = host_dispatching; }

// What the worker was told before the task `queue` launches last, seen from
// inside that task; `wait` then waits for the stream. Tries again, for up to
// 5 s, while the task ran on a waiting host (not sized: it is the host's own
// thread) or the host was descheduled between its launches: on a loaded
// machine (ctest beside make test's pytest workers) the helping host often
// wins the task, and 20 tries were measured failing.
template <class Queue, class Wait>
bool told_dispatching(Stream* stream, Queue queue, Wait wait, bool expected) {
  const auto host = std::this_thread::get_id();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  bool told = !expected;
  while (told != expected && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // ends any burst
    std::atomic<bool> on_worker{false};
    queue([&] {
      on_worker = std::this_thread::get_id() != host;
      told = g_told_dispatching.load();
    });
    wait();
    if (!on_worker) told = !expected;
  }
  return told;
}

// A task queued right behind another comes from a host that is still
// dispatching: its worker leaves the host a core unless a host thread waits
// for the device; a task queued alone (then waited for) gets all of them.
TEST(Streams, WorkerIsToldWhetherTheHostIsDispatching) {
  set_size_worker_team(record_team);
  Stream* stream = create_stream(0);
  auto idle = [&] {
    while (!stream_query(stream)) std::this_thread::yield();
  };
  EXPECT_FALSE(told_dispatching(stream, [&](auto task) { launch(stream, "alone", task); }, idle, false));
  std::atomic<bool> release{false};
  auto behind_another = [&](auto task) {
    release = false;
    launch(stream, "blocked", [&] { wait_for(release); });
    launch(stream, "behind", task);
  };
  EXPECT_TRUE(told_dispatching(stream, behind_another, [&] { release = true; idle(); }, true));
  auto host_waits = [&] {
    std::thread releaser([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      release = true;
    });
    stream_synchronize(stream);
    releaser.join();
  };
  EXPECT_FALSE(told_dispatching(stream, behind_another, host_waits, false));
  set_size_worker_team(nullptr);
}

// ---- copies ----------------------------------------------------------------

TEST(Copies, HostDeviceRoundTrip) {
  constexpr size_t kBytes = 1 << 20;
  std::vector<uint8_t> input(kBytes), output(kBytes);
  for (size_t i = 0; i < kBytes; ++i) input[i] = static_cast<uint8_t>(i * 7 + 3);
  void* a = device_malloc(0, kBytes);
  void* b = device_malloc(1, kBytes);
  uint8_t* pinned = static_cast<uint8_t*>(host_malloc(kBytes));
  Stream* stream = create_stream(0);
  memcpy_async(a, input.data(), kBytes, stream);
  memcpy_async(b, a, kBytes, stream);
  memcpy_async(pinned, b, kBytes, stream);
  memcpy_sync(output.data(), pinned, kBytes, stream);
  EXPECT_EQ(output, input);
  EXPECT_NO_THROW(memcpy_sync(output.data(), a, 0, stream));
  host_free(pinned);
  device_free(a);
  device_free(b);
}

// ---- events ------------------------------------------------------------------

TEST(Events, QueryAndSynchronize) {
  Event* event = event_create();
  EXPECT_TRUE(event_query(event));  // never recorded
  EXPECT_NO_THROW(event_synchronize(event));
  Stream* stream = create_stream(0);
  for (int round = 0; round < 2; ++round) {  // recording again re-arms the event
    std::atomic<bool> release{false};
    launch(stream, "blocked", [&] { wait_for(release); });
    event_record(event, stream);
    EXPECT_FALSE(event_query(event));
    release = true;
    event_synchronize(event);
    EXPECT_TRUE(event_query(event));
  }
  event_destroy(event);
}

TEST(Events, ElapsedTime) {
  Stream* stream = create_stream(0);
  Event* start = event_create();
  Event* end = event_create();
  EXPECT_NE(error_of([&] { event_elapsed_ms(start, end); }, Error::kInvalid).find("never recorded"),
            std::string::npos);
  event_record(start, stream);
  launch(stream, "sleep", [] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); });
  event_record(end, stream);
  event_synchronize(end);
  float ms = event_elapsed_ms(start, end);
  EXPECT_GE(ms, 20.0f);
  EXPECT_LT(ms, 2000.0f);

  std::atomic<bool> release{false};
  launch(stream, "blocked", [&] { wait_for(release); });
  event_record(end, stream);
  EXPECT_NE(error_of([&] { event_elapsed_ms(start, end); }, Error::kInvalid).find("not completed"),
            std::string::npos);
  release = true;
  event_synchronize(end);
  EXPECT_GE(event_elapsed_ms(start, end), ms);
  event_destroy(start);
  event_destroy(end);
}

TEST(Events, StreamWaitEventOrdersStreams) {
  Stream* producer = create_stream(0);
  Stream* consumer = create_stream(1);
  Event* ready = event_create();
  std::atomic<bool> release{false};
  int value = 0, seen = -1;
  launch(producer, "blocked", [&] { wait_for(release); });
  launch(producer, "produce", [&] { value = 42; });
  event_record(ready, producer);
  stream_wait_event(consumer, ready);  // returns at once
  launch(consumer, "consume", [&] { seen = value; });
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_FALSE(stream_query(consumer));
  release = true;
  stream_synchronize(consumer);
  EXPECT_EQ(seen, 42);
  event_destroy(ready);
}

TEST(Events, SynchronizeRethrowsTheStreamsError) {
  Stream* stream = create_stream(0);
  Event* event = event_create();
  launch(stream, "aten::bad", [] { throw std::runtime_error("boom"); });
  event_record(event, stream);
  EXPECT_EQ(error_of([&] { event_synchronize(event); }, Error::kKernel), "aten::bad: boom");
  EXPECT_TRUE(event_query(event));
  EXPECT_NO_THROW(stream_synchronize(stream));
  event_destroy(event);
}

TEST(Events, DestroyWithPendingRecord) {
  Stream* stream = create_stream(0);
  std::atomic<bool> release{false};
  launch(stream, "blocked", [&] { wait_for(release); });
  Event* event = event_create();
  event_record(event, stream);
  event_destroy(event);
  release = true;
  stream_synchronize(stream);
}

// ---- strict mode, launch blocking, fork ------------------------------------

// EXPECT_DEATH rather than KilledBySignal(SIGSEGV): sanitizers turn the fault
// into an exit code. The message is printed only after the driver's own
// accesses worked, and a host read that didn't crash would exit with 0.
TEST(StrictModeDeathTest, HostAccessOutsideTasksCrashes) {
  EXPECT_DEATH(
      {
        setenv("RBLN_STRICT", "1", 1);
        require(strict_mode(), "strict mode");
        char* p = static_cast<char*>(device_malloc(0, 4096));
        std::vector<char> input(4096, 'x');
        std::vector<char> output(4096);
        Stream* stream = default_stream(0);
        memcpy_sync(p, input.data(), input.size(), stream);
        launch(stream, "bump", [p] { p[0] = 'y'; });
        memcpy_sync(output.data(), p, output.size(), stream);
        require(output[0] == 'y' && output[1] == 'x', "copies and launches reach device memory");
        std::fprintf(stderr, "driver access ok\n");
        std::fflush(stderr);
        volatile char c = *static_cast<volatile char*>(p);
        (void)c;
        std::_Exit(0);
      },
      "driver access ok");
}

TEST(LaunchBlockingDeathTest, LaunchWaitsAndThrowsAtOnce) {
  EXPECT_EXIT(
      {
        setenv("RBLN_LAUNCH_BLOCKING", "1", 1);
        Stream* stream = create_stream(0);
        bool done = false;
        launch(stream, "sleep", [&] {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          done = true;
        });
        require(done, "launch returned after the task ran");
        int src = 9;
        int dst = 0;
        memcpy_async(&dst, &src, sizeof src, stream);
        require(dst == 9, "memcpy_async returned after the copy");
        std::string message = error_of([&] { launch(stream, "aten::bad", [] { throw std::runtime_error("boom"); }); },
                                       Error::kKernel);
        std::fprintf(stderr, "[%s]\n", message.c_str());
        std::_Exit(0);
      },
      testing::ExitedWithCode(0), "\\[aten::bad: boom\\]");
}

// Forks, runs body in the child and returns the child's exit code.
template <class F>
int exit_code_of_child(F body) {
  pid_t pid = fork();
  if (pid == 0) {
    alarm(10);  // a child waiting for a worker it lost would hang forever
    std::_Exit(body());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// 0 if a launch + synchronize works, 2 if it is refused as a forked child, 1 otherwise.
int try_stream(int device) {
  try {
    int value = 0;
    launch(default_stream(device), "set", [&] { value = 1; });
    stream_synchronize(default_stream(device));
    return value == 1 ? 0 : 1;
  } catch (const Error& e) {
    return e.kind == Error::kInvalid && std::strstr(e.what(), "'spawn' start method") ? 2 : 1;
  }
}

TEST(Fork, ChildOfInitializedParentIsRefused) {
  ASSERT_EQ(try_stream(0), 0);
  EXPECT_EQ(exit_code_of_child([] { return try_stream(0); }), 2);
  EXPECT_EQ(try_stream(0), 0);  // the parent is unaffected
}

TEST(ForkDeathTest, ChildWorksOnDevicesTheParentNeverStarted) {
  EXPECT_EXIT(
      {
        void* p = device_malloc(0, 512);  // memory alone does not start workers
        require(exit_code_of_child([] { return try_stream(0); }) == 0, "fresh child works");
        require(try_stream(0) == 0, "parent starts device 0");
        int child = exit_code_of_child([] { return try_stream(0) == 2 && try_stream(1) == 0 ? 0 : 1; });
        require(child == 0, "child refuses device 0 and uses device 1");
        device_free(p);
        std::_Exit(0);
      },
      testing::ExitedWithCode(0), "");
}

}  // namespace

TEST(Activities, RecordsKernelsAndCopiesWithTheirCorrelation) {
  Stream* stream = create_stream(0);
  void* device = device_malloc(0, 4096);
  std::vector<char> host(4096, 1);
  launch(stream, "before", [] {});  // not recorded: recording is off
  stream_synchronize(stream);
  set_activity_recording(true);
  set_correlation_id(42);
  launch(stream, "kernel", [] { std::this_thread::sleep_for(std::chrono::milliseconds(2)); });
  memcpy_async(device, host.data(), host.size(), stream);  // queued behind the kernel
  set_correlation_id(0);
  memcpy_sync(host.data(), device, host.size(), stream);
  std::vector<Activity> records = take_activities();
  set_activity_recording(false);
  launch(stream, "after", [] {});
  stream_synchronize(stream);
  EXPECT_TRUE(take_activities().empty());
  device_free(device);

  ASSERT_EQ(records.size(), 3u);
  EXPECT_STREQ(records[0].name, "kernel");
  EXPECT_EQ(records[0].kind, Activity::kKernel);
  EXPECT_EQ(records[0].correlation, 42u);
  EXPECT_EQ(records[0].stream, stream_id(stream));
  EXPECT_GE(records[0].end_ns - records[0].begin_ns, 2'000'000);
  EXPECT_LE(records[0].host_begin_ns, records[0].begin_ns);
  EXPECT_STREQ(records[1].name, "Memcpy HtoD");
  EXPECT_EQ(records[1].kind, Activity::kMemcpy);
  EXPECT_EQ(records[1].bytes, 4096u);
  EXPECT_EQ(records[1].correlation, 42u);
  EXPECT_GE(records[1].begin_ns, records[0].end_ns);  // stream order
  EXPECT_STREQ(records[2].name, "Memcpy DtoH");
  EXPECT_EQ(records[2].correlation, 0u);
  EXPECT_NE(records[0].id, records[1].id);
}

// ---- graph capture -------------------------------------------------------------

// Counts its runs and destructions: a captured task runs once per replay and is
// destroyed with the graph.
struct Counted {
  std::shared_ptr<std::atomic<int>> runs, destroyed;
  bool owner = true;
  Counted(std::shared_ptr<std::atomic<int>> r, std::shared_ptr<std::atomic<int>> d) : runs(r), destroyed(d) {}
  Counted(Counted&& o) noexcept : runs(o.runs), destroyed(o.destroyed) { o.owner = false; }
  ~Counted() {
    if (owner) ++*destroyed;
  }
  void operator()() const { ++*runs; }
};

TEST(Capture, RecordsInsteadOfRunningAndReplaysAsOneTask) {
  Stream* stream = create_stream(0);
  auto* data = static_cast<int*>(device_malloc(0, 4 * sizeof(int)));
  int host[4] = {1, 2, 3, 4};
  auto runs = std::make_shared<std::atomic<int>>(0), destroyed = std::make_shared<std::atomic<int>>(0);
  stream_begin_capture(stream, CaptureMode::kGlobal);
  EXPECT_TRUE(stream_is_capturing(stream));
  memcpy_async(data, host, sizeof(host), stream);  // small: would run inline outside capture
  launch(stream, "double", [data] {
    for (int i = 0; i < 4; ++i) data[i] *= 2;
  });
  launch(stream, "counted", Counted(runs, destroyed));
  Graph* graph = stream_end_capture(stream);
  EXPECT_FALSE(stream_is_capturing(stream));
  EXPECT_EQ(runs->load(), 0);  // nothing ran during capture
  std::vector<GraphNode> nodes = graph_nodes(graph);
  ASSERT_EQ(nodes.size(), 3u);
  EXPECT_STREQ(nodes[0].name, "Memcpy HtoD");
  EXPECT_EQ(nodes[0].bytes, sizeof(host));
  EXPECT_STREQ(nodes[1].name, "double");
  EXPECT_EQ(nodes[2].stream, stream_id(stream));
  for (int replay = 1; replay <= 3; ++replay) {
    host[0] = 10 * replay;  // the copy reads its source at replay
    graph_launch(graph, stream);
    stream_synchronize(stream);
    EXPECT_EQ(data[0], 20 * replay);
    EXPECT_EQ(data[3], 8);
    EXPECT_EQ(runs->load(), replay);
  }
  EXPECT_EQ(destroyed->load(), 0);
  graph_launch(graph, stream);
  graph_destroy(graph);  // the queued replay keeps the work alive
  stream_synchronize(stream);
  EXPECT_EQ(runs->load(), 4);
  EXPECT_EQ(destroyed->load(), 1);
  device_free(data);
}

TEST(Capture, ReplayErrorNamesTheNodeAndTheStreamRecovers) {
  Stream* stream = create_stream(0);
  stream_begin_capture(stream, CaptureMode::kGlobal);
  launch(stream, "bad", [] { throw std::runtime_error("boom"); });
  Graph* graph = stream_end_capture(stream);
  graph_launch(graph, stream);
  EXPECT_EQ(error_of([&] { stream_synchronize(stream); }, Error::kKernel), "graph replay: bad: boom");
  EXPECT_NO_THROW(stream_synchronize(stream));
  graph_destroy(graph);
}

TEST(Capture, SynchronizingCallsFailAndInvalidateTheCapture) {
  Stream* stream = create_stream(0);
  Stream* other = create_stream(0);
  void* device = device_malloc(0, 64);
  char host[64];
  const std::string unsupported = "operation not permitted when stream is capturing";
  const std::string invalidated = "operation failed due to a previous error during capture";
  std::vector<std::function<void()>> calls = {
      [&] { stream_synchronize(stream); },
      [&] { memcpy_sync(host, device, 64, stream); },
      [&] { device_synchronize(0); },
      [&] { stream_query(stream); },
      [&] {
        Event* event = event_create();
        event_record(event, stream);
        struct Destroy {
          Event* e;
          ~Destroy() { event_destroy(e); }
        } destroy{event};
        event_synchronize(event);
      },
      [&] { stream_synchronize(other); },  // another stream: still forbidden in global mode
  };
  for (auto& call : calls) {
    stream_begin_capture(stream, CaptureMode::kGlobal);
    launch(stream, "k", [] {});
    EXPECT_EQ(error_of(call, Error::kInvalid), unsupported);
    EXPECT_EQ(error_of([&] { launch(stream, "k", [] {}); }, Error::kInvalid), invalidated);
    EXPECT_EQ(error_of([&] { stream_end_capture(stream); }, Error::kInvalid), invalidated);
    EXPECT_FALSE(stream_is_capturing(stream));
    // The stream and the device go on working.
    launch(stream, "after", [] {});
    EXPECT_NO_THROW(stream_synchronize(stream));
    EXPECT_NO_THROW(device_synchronize(0));
  }
  device_free(device);
}

TEST(Capture, ModesDecideWhichThreadsMaySynchronize) {
  Stream* stream = create_stream(0);
  Stream* other = create_stream(0);
  // The message of the Error that f() throws on another thread; empty if none.
  auto on_thread = [](const std::function<void()>& f) {
    std::string error;
    std::thread([&] {
      try {
        f();
      } catch (const Error& e) {
        error = e.what();
      }
    }).join();
    return error;
  };
  auto sync_other_from_thread = [&] { return on_thread([&] { stream_synchronize(other); }); };
  // relaxed: only calls on the capture itself fail.
  stream_begin_capture(stream, CaptureMode::kRelaxed);
  EXPECT_NO_THROW(stream_synchronize(other));
  EXPECT_EQ(sync_other_from_thread(), "");
  EXPECT_EQ(error_of([&] { stream_synchronize(stream); }, Error::kInvalid),
            "operation not permitted when stream is capturing");
  EXPECT_THROW(stream_end_capture(stream), Error);
  // thread_local: the capturing thread may not synchronize, others may.
  stream_begin_capture(stream, CaptureMode::kThreadLocal);
  EXPECT_EQ(sync_other_from_thread(), "");
  Graph* graph = stream_end_capture(stream);
  graph_destroy(graph);
  stream_begin_capture(stream, CaptureMode::kThreadLocal);
  EXPECT_THROW(stream_synchronize(other), Error);
  EXPECT_THROW(stream_end_capture(stream), Error);
  // global: no thread may.
  stream_begin_capture(stream, CaptureMode::kGlobal);
  EXPECT_EQ(sync_other_from_thread(), "operation not permitted when stream is capturing");
  EXPECT_THROW(stream_end_capture(stream), Error);
  // thread_local captures end on their own thread only.
  stream_begin_capture(stream, CaptureMode::kThreadLocal);
  EXPECT_EQ(on_thread([&] { stream_end_capture(stream); }),
            "attempt to terminate a thread-local capture sequence from another thread");
  graph_destroy(stream_end_capture(stream));
  EXPECT_EQ(error_of([&] { stream_end_capture(stream); }, Error::kInvalid), "capture was not initiated in this stream");
}

TEST(Capture, SideStreamsJoinThroughEventsAndMustRejoin) {
  Stream* main = create_stream(0);
  Stream* side = create_stream(0);
  Event* fork = event_create();
  Event* join = event_create();
  std::vector<int> order;
  std::mutex mu;
  auto step = [&](int i) {
    return [&, i] {
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(i);
    };
  };
  stream_begin_capture(main, CaptureMode::kGlobal);
  launch(main, "a", step(1));
  event_record(fork, main);
  stream_wait_event(side, fork);
  EXPECT_TRUE(stream_is_capturing(side));
  launch(side, "b", step(2));
  launch(main, "c", step(3));
  event_record(join, side);
  stream_wait_event(main, join);
  launch(main, "d", step(4));
  Graph* graph = stream_end_capture(main);
  EXPECT_FALSE(stream_is_capturing(side));
  std::vector<GraphNode> nodes = graph_nodes(graph);
  ASSERT_EQ(nodes.size(), 4u);
  EXPECT_EQ(nodes[1].stream, stream_id(side));
  graph_launch(graph, main);
  graph_launch(graph, side);  // replays run anywhere
  stream_synchronize(main);
  stream_synchronize(side);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3, 4, 1, 2, 3, 4}));
  graph_destroy(graph);

  // Not rejoined: CUDA's "unjoined" error, and both streams leave the capture.
  stream_begin_capture(main, CaptureMode::kGlobal);
  event_record(fork, main);
  stream_wait_event(side, fork);
  launch(side, "b", [] {});
  EXPECT_EQ(error_of([&] { stream_end_capture(main); }, Error::kInvalid), "capturing stream has unjoined work");
  EXPECT_FALSE(stream_is_capturing(side));
  launch(side, "after", [] {});
  EXPECT_NO_THROW(stream_synchronize(side));
  event_destroy(fork);
  event_destroy(join);
}

TEST(Capture, ReplaysAreRecordedAsActivities) {
  Stream* stream = create_stream(0);
  stream_begin_capture(stream, CaptureMode::kGlobal);
  launch(stream, "first", [] {});
  launch(stream, "second", [] {});
  Graph* graph = stream_end_capture(stream);
  set_activity_recording(true);
  set_correlation_id(7);
  graph_launch(graph, stream);
  set_correlation_id(0);
  stream_synchronize(stream);
  std::vector<Activity> records = take_activities();
  set_activity_recording(false);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_STREQ(records[0].name, "first");
  EXPECT_STREQ(records[1].name, "second");
  EXPECT_EQ(records[1].correlation, 7u);
  EXPECT_LE(records[0].end_ns, records[1].begin_ns);
  graph_destroy(graph);
}
