// Configuration, device memory arenas, strict mode and pinned host memory.
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <system_error>
#include <unordered_map>
#include <utility>

#include "runtime/driver/internal.h"
#include "runtime/driver/rbln_driver.h"

namespace rbln::driver {
namespace internal {

std::optional<uint64_t> parse_uint(const std::string& text) {
  if (text.empty()) return std::nullopt;
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    uint64_t digit = static_cast<uint64_t>(c - '0');
    if (value > (UINT64_MAX - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
  }
  return value;
}

std::optional<size_t> parse_bytes(const std::string& text) {
  static const std::pair<const char*, int> kSuffixes[] = {
      {"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"K", 10}, {"M", 20}, {"G", 30}};
  std::string digits = text;
  int shift = 0;
  for (const auto& [suffix, bits] : kSuffixes) {
    std::string s = suffix;
    if (text.size() > s.size() && text.compare(text.size() - s.size(), s.size(), s) == 0) {
      digits = text.substr(0, text.size() - s.size());
      shift = bits;
      break;
    }
  }
  std::optional<uint64_t> value = parse_uint(digits);
  if (!value || *value == 0 || *value > (SIZE_MAX >> shift)) return std::nullopt;
  return static_cast<size_t>(*value << shift);
}

}  // namespace internal

namespace {

constexpr uint64_t kMaxDevices = 1024;
constexpr size_t kAlignment = 512;
constexpr size_t kPageSize = 4096;
// Free ranges at least this large are handed back to the OS so RSS drops.
constexpr size_t kReleaseThreshold = size_t{64} << 20;

struct Config {
  int device_count = 2;
  std::string device_count_error;
  size_t device_memory = size_t{8} << 30;
  std::string device_memory_error;
  bool launch_blocking = false;
  bool strict = false;
};

bool env_flag(const char* name) {
  const char* value = std::getenv(name);
  return value && std::string(value) == "1";
}

Config read_config() {
  Config config;
  if (const char* text = std::getenv("RBLN_DEVICE_COUNT")) {
    std::optional<uint64_t> count = internal::parse_uint(text);
    std::string quoted = std::string("RBLN_DEVICE_COUNT='") + text + "'";
    if (!count) {
      config.device_count_error = quoted + " is not a non-negative integer";
    } else if (*count > kMaxDevices) {
      config.device_count_error =
          quoted + " exceeds the maximum of " + std::to_string(kMaxDevices) + " devices";
    }
    config.device_count = config.device_count_error.empty() ? static_cast<int>(*count) : 0;
  }
  if (const char* text = std::getenv("RBLN_DEVICE_MEMORY")) {
    if (std::optional<size_t> bytes = internal::parse_bytes(text)) {
      config.device_memory = *bytes;
    } else {
      config.device_memory_error = std::string("RBLN_DEVICE_MEMORY='") + text +
                                   "' is not a positive byte count such as 8G, 512MiB or 1048576";
    }
  }
  config.launch_blocking = env_flag("RBLN_LAUNCH_BLOCKING");
  config.strict = env_flag("RBLN_STRICT");
  return config;
}

// Leaked on purpose, like every driver global: detached workers may still use
// them while static destructors run at exit.
const Config& config() {
  static const Config& config = *new Config(read_config());
  return config;
}

void check_sys(int rc, const char* what) {
  if (rc != 0) throw std::system_error(errno, std::generic_category(), what);
}

struct Arena {
  // Published once the arena is mapped; plain atomics so device_of needs no lock.
  std::atomic<uintptr_t> base{0};
  std::atomic<size_t> size{0};

  std::mutex mu;  // guards the allocator state below
  std::map<size_t, size_t> free_by_offset;           // offset -> size
  std::set<std::pair<size_t, size_t>> free_by_size;  // (size, offset): best fit
  std::unordered_map<size_t, size_t> live;           // offset -> size
  size_t used = 0;

  void add_free(size_t offset, size_t bytes) {
    free_by_offset.emplace(offset, bytes);
    free_by_size.emplace(bytes, offset);
  }
  void remove_free(std::map<size_t, size_t>::iterator it) {
    free_by_size.erase({it->second, it->first});
    free_by_offset.erase(it);
  }
};

Arena* arenas() {
  static Arena* const arenas = new Arena[std::max(device_count(), 1)];
  return arenas;
}

// Strict mode: arenas are readable only while some memory task runs.
std::mutex strict_mu;
int active_memory_tasks = 0;  // guarded by strict_mu

void protect_arenas(int prot) {
  for (int d = 0; d < device_count(); ++d) {
    Arena& arena = arenas()[d];
    if (uintptr_t base = arena.base.load(std::memory_order_acquire)) {
      check_sys(mprotect(reinterpret_cast<void*>(base), arena.size.load(), prot), "mprotect");
    }
  }
}

void map_arena(Arena& arena, int device, size_t bytes) {
  // Under strict_mu so a concurrent begin/end_memory_task sees a consistent set.
  std::lock_guard<std::mutex> lock(strict_mu);
  int prot = PROT_READ | PROT_WRITE;
  if (config().strict && active_memory_tasks == 0) prot = PROT_NONE;
  void* base = mmap(nullptr, bytes, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) {
    throw Error(Error::kOutOfMemory, "cannot reserve " + std::to_string(bytes) +
                                         " bytes of address space for rbln:" + std::to_string(device));
  }
  arena.add_free(0, bytes);
  arena.size.store(bytes, std::memory_order_relaxed);
  arena.base.store(reinterpret_cast<uintptr_t>(base), std::memory_order_release);
}

std::string describe(const void* ptr) {
  char text[32];
  std::snprintf(text, sizeof text, "%p", ptr);
  return text;
}

struct PinnedBlocks {
  std::mutex mu;
  std::map<uintptr_t, size_t> blocks;  // start -> size
};

PinnedBlocks& pinned() {
  static PinnedBlocks& pinned = *new PinnedBlocks;
  return pinned;
}

}  // namespace

namespace internal {

void begin_memory_task() {
  std::lock_guard<std::mutex> lock(strict_mu);
  if (active_memory_tasks++ == 0) protect_arenas(PROT_READ | PROT_WRITE);
}

void end_memory_task() {
  std::lock_guard<std::mutex> lock(strict_mu);
  if (--active_memory_tasks == 0) protect_arenas(PROT_NONE);
}

}  // namespace internal

// ---- devices ---------------------------------------------------------------

int device_count() noexcept { return config().device_count; }

std::string device_count_error() { return config().device_count_error; }

void check_device(int device) {
  int count = device_count();
  if (device >= 0 && device < count) return;
  std::string message = "Invalid device index rbln:" + std::to_string(device) + ": there " +
                        (count == 1 ? "is 1 RBLN device" : "are " + std::to_string(count) + " RBLN devices");
  if (!device_count_error().empty()) message += " (" + device_count_error() + ")";
  throw Error(Error::kInvalid, message);
}

size_t device_capacity(int device) {
  check_device(device);
  if (!config().device_memory_error.empty()) throw Error(Error::kInvalid, config().device_memory_error);
  return config().device_memory;
}

bool launch_blocking() { return config().launch_blocking; }

bool strict_mode() { return config().strict; }

// ---- device memory ---------------------------------------------------------

void* device_malloc(int device, size_t bytes) {
  size_t capacity = device_capacity(device);
  if (bytes == 0 || bytes > capacity) return nullptr;
  size_t need = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  Arena& arena = arenas()[device];
  std::lock_guard<std::mutex> lock(arena.mu);
  if (arena.base.load(std::memory_order_relaxed) == 0) map_arena(arena, device, capacity);
  auto fit = arena.free_by_size.lower_bound({need, 0});
  if (fit == arena.free_by_size.end()) return nullptr;
  auto [size, offset] = *fit;
  arena.remove_free(arena.free_by_offset.find(offset));
  if (size > need) arena.add_free(offset + need, size - need);
  arena.live.emplace(offset, need);
  arena.used += need;
  return reinterpret_cast<void*>(arena.base.load(std::memory_order_relaxed) + offset);
}

void device_free(void* ptr, bool keep_pages) {
  if (!ptr) return;
  int device = device_of(ptr);
  if (device < 0) throw Error(Error::kInvalid, "device_free: " + describe(ptr) + " is not device memory");
  Arena& arena = arenas()[device];
  std::lock_guard<std::mutex> lock(arena.mu);
  uintptr_t base = arena.base.load(std::memory_order_relaxed);
  auto live = arena.live.find(reinterpret_cast<uintptr_t>(ptr) - base);
  if (live == arena.live.end()) {
    throw Error(Error::kInvalid, "device_free: " + describe(ptr) + " is not a live allocation on rbln:" +
                                     std::to_string(device));
  }
  size_t offset = live->first;
  size_t size = live->second;
  arena.live.erase(live);
  arena.used -= size;
  // Coalesce with free neighbours.
  auto next = arena.free_by_offset.find(offset + size);
  if (next != arena.free_by_offset.end()) {
    size += next->second;
    arena.remove_free(next);
  }
  auto prev = arena.free_by_offset.lower_bound(offset);
  if (prev != arena.free_by_offset.begin() && (--prev)->first + prev->second == offset) {
    offset = prev->first;
    size += prev->second;
    arena.remove_free(prev);
  }
  arena.add_free(offset, size);
  if (size >= kReleaseThreshold && !keep_pages) {
    uintptr_t begin = (base + offset + kPageSize - 1) / kPageSize * kPageSize;
    uintptr_t end = (base + offset + size) / kPageSize * kPageSize;
    check_sys(madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED), "madvise");
  }
}

size_t device_bytes_used(int device) {
  check_device(device);
  Arena& arena = arenas()[device];
  std::lock_guard<std::mutex> lock(arena.mu);
  return arena.used;
}

int device_of(const void* ptr) {
  uintptr_t address = reinterpret_cast<uintptr_t>(ptr);
  for (int d = 0; d < device_count(); ++d) {
    const Arena& arena = arenas()[d];
    uintptr_t base = arena.base.load(std::memory_order_acquire);
    // Unsigned wrap-around also rejects addresses below base.
    if (base != 0 && address - base < arena.size.load(std::memory_order_relaxed)) return d;
  }
  return -1;
}

// ---- pinned host memory ----------------------------------------------------

void* host_malloc(size_t bytes) {
  bytes = std::max<size_t>(bytes, 1);  // distinct, freeable pointers for empty blocks
  void* ptr = nullptr;
  if (posix_memalign(&ptr, kPageSize, bytes) != 0) {
    throw Error(Error::kOutOfMemory, "RBLN out of memory: cannot allocate " + std::to_string(bytes) +
                                         " bytes of pinned host memory");
  }
  std::lock_guard<std::mutex> lock(pinned().mu);
  pinned().blocks.emplace(reinterpret_cast<uintptr_t>(ptr), bytes);
  return ptr;
}

void host_free(void* ptr) {
  if (!ptr) return;
  {
    std::lock_guard<std::mutex> lock(pinned().mu);
    if (pinned().blocks.erase(reinterpret_cast<uintptr_t>(ptr)) == 0) {
      throw Error(Error::kInvalid, "host_free: " + describe(ptr) + " is not pinned host memory");
    }
  }
  std::free(ptr);
}

bool is_pinned(const void* ptr) {
  uintptr_t address = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(pinned().mu);
  auto after = pinned().blocks.upper_bound(address);
  if (after == pinned().blocks.begin()) return false;
  --after;
  return address - after->first < after->second;
}

}  // namespace rbln::driver
