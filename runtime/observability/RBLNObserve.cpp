#include "runtime/observability/RBLNObserve.h"

#include <c10/macros/Macros.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <cstdlib>
#include <sstream>

namespace rbln {
namespace {

constexpr const char* kFallbackNames[kFallbackKinds] = {"unlisted", "listed", "dtype", "compile"};
constexpr const char* kSyncNames[kSyncKinds] = {"item", "device_to_host", "synchronize", "data_dependent"};

std::array<std::atomic<uint64_t>, kSyncKinds> g_syncs{};
std::atomic<int> g_sync_debug_mode{0};
std::atomic<int> g_log_level{30};
std::atomic<bool> g_observe_fallbacks{false}, g_observe_syncs{false};
Observer g_observer{};
thread_local int t_sync_depth = 0;  // > 0 inside a counted sync or a fallback

uint32_t parse_disabled(const std::string& value) {
  if (value.empty() || value == "0") return 0;
  if (value == "1" || value == "all") return (1u << kFallbackKinds) - 1;
  uint32_t mask = 0;
  std::stringstream words(value);
  for (std::string word; std::getline(words, word, ',');) {
    word.erase(0, word.find_first_not_of(" \t"));
    word.erase(word.find_last_not_of(" \t") + 1);
    int kind = 0;
    while (kind < kFallbackKinds && word != kFallbackNames[kind]) ++kind;
    TORCH_CHECK_VALUE(kind < kFallbackKinds, "TORCH_RBLN_DISABLE_FALLBACK=", value, ": unknown fallback kind '", word,
                      "'; expected 0, 1, all, or a comma-separated list of unlisted, listed, dtype, compile");
    mask |= 1u << kind;
  }
  return mask;
}

}  // namespace

const char* fallback_kind_name(FallbackKind kind) { return kFallbackNames[static_cast<int>(kind)]; }
const char* sync_kind_name(SyncKind kind) { return kSyncNames[static_cast<int>(kind)]; }

uint32_t disabled_fallbacks() {
  // Read once; a bad value raises at every fallback (and at import, which asks first).
  static const std::string value = [] {
    const char* v = std::getenv("TORCH_RBLN_DISABLE_FALLBACK");
    return std::string(v ? v : "");
  }();
  static const uint32_t mask = parse_disabled(value);
  return mask;
}

std::array<uint64_t, kSyncKinds> sync_counts() {
  std::array<uint64_t, kSyncKinds> counts{};
  for (int i = 0; i < kSyncKinds; ++i) counts[i] = g_syncs[i].load(std::memory_order_relaxed);
  return counts;
}

HostSync::HostSync(SyncKind kind, bool debug_mode) {
  if (t_sync_depth++ > 0) return;
  g_syncs[static_cast<int>(kind)].fetch_add(1, std::memory_order_relaxed);
  if (C10_UNLIKELY(g_observe_syncs.load(std::memory_order_relaxed)) && g_observer.sync) {
    g_observer.sync(sync_kind_name(kind));
  }
  const int mode = debug_mode ? g_sync_debug_mode.load(std::memory_order_relaxed) : 0;
  if (C10_UNLIKELY(mode != 0)) {
    if (mode == 2) {
      --t_sync_depth;  // the destructor does not run when the constructor throws
      TORCH_CHECK(false, "called a synchronizing rbln operation (", sync_kind_name(kind), ")");
    }
    TORCH_WARN("called a synchronizing rbln operation (", sync_kind_name(kind), ")");
  }
}
HostSync::~HostSync() { --t_sync_depth; }

NoSyncAccounting::NoSyncAccounting() { ++t_sync_depth; }
NoSyncAccounting::~NoSyncAccounting() { --t_sync_depth; }

void set_sync_debug_mode(int mode) {
  TORCH_CHECK(mode >= 0 && mode <= 2, "invalid value of debug_mode, expected one of `default`, `warn`, `error`");
  g_sync_debug_mode.store(mode, std::memory_order_relaxed);
}
int sync_debug_mode() { return g_sync_debug_mode.load(std::memory_order_relaxed); }

void set_log_level(int level) { g_log_level.store(level, std::memory_order_relaxed); }

void set_observer(Observer observer) { g_observer = observer; }
void set_observing(bool fallbacks, bool syncs) {
  g_observe_fallbacks.store(fallbacks, std::memory_order_relaxed);
  g_observe_syncs.store(syncs, std::memory_order_relaxed);
}

bool warn_on_fallback() { return g_log_level.load(std::memory_order_relaxed) <= 30; }
void notify_fallback(const std::string& op, FallbackKind kind, const char* reason) {
  if (C10_UNLIKELY(g_observe_fallbacks.load(std::memory_order_relaxed)) && g_observer.fallback) {
    g_observer.fallback(op, fallback_kind_name(kind), reason);
  }
}

}  // namespace rbln
