// What torch.rbln.explain(), TORCH_RBLN_LOG_LEVEL, TORCH_RBLN_DISABLE_FALLBACK and
// torch.rbln.set_sync_debug_mode() see: fallbacks by kind, and the calls that block
// the host until the device is done (syncs). Counting is a relaxed atomic increment;
// Python is only called while it asked to observe (logging at INFO or below, or an
// explain(with_stack=True) block).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>

namespace rbln {

// Why an op ran on the CPU. The names are TORCH_RBLN_DISABLE_FALLBACK's words.
enum class FallbackKind : int {
  kUnlisted,  // "unlisted": not in ops.yaml
  kListed,    // "listed": strategy: fallback in ops.yaml
  kDtype,     // "dtype": the device kernel lacks the dtype
  kCompile,   // "compile": strategy compile, without a plan for these inputs
};
constexpr int kFallbackKinds = 4;
const char* fallback_kind_name(FallbackKind kind);

// Counts the fallback, raises if TORCH_RBLN_DISABLE_FALLBACK names its kind, warns once per
// op (at log level WARNING or below) and tells the observer.
void count_fallback(const std::string& op, FallbackKind kind, const char* reason);
// Reason text -> kind name, for every reason counted so far (fallback_counts() is op -> reason -> calls).
std::map<std::string, std::string> fallback_reason_kinds();
// The kinds TORCH_RBLN_DISABLE_FALLBACK forbids, as a bit mask; raises on an unknown word.
uint32_t disabled_fallbacks();

enum class SyncKind : int {
  kItem,           // Tensor.item(): _local_scalar_dense
  kDeviceToHost,   // a blocking copy to the CPU
  kSynchronize,    // device, stream or event synchronize
  kDataDependent,  // an op that reads data back to size its output (nonzero, masked_select, ...)
};
constexpr int kSyncKinds = 4;
const char* sync_kind_name(SyncKind kind);
std::array<uint64_t, kSyncKinds> sync_counts();

// A host-blocking call, counted once: syncs inside it (a data-dependent op's read-back) are
// part of it. With `debug_mode`, torch.rbln.set_sync_debug_mode() warns or raises here, as
// CUDA's warn_or_error_on_sync does (CUDA skips device and event synchronize).
class HostSync {
 public:
  explicit HostSync(SyncKind kind, bool debug_mode = true);
  ~HostSync();
  HostSync(const HostSync&) = delete;
  HostSync& operator=(const HostSync&) = delete;
};

// Inside a CPU fallback: its copies are the fallback's cost, counted as the fallback.
class NoSyncAccounting {
 public:
  NoSyncAccounting();
  ~NoSyncAccounting();
  NoSyncAccounting(const NoSyncAccounting&) = delete;
  NoSyncAccounting& operator=(const NoSyncAccounting&) = delete;
};

// 0: off, 1: warn, 2: error (torch.cuda.set_sync_debug_mode's values).
void set_sync_debug_mode(int mode);
int sync_debug_mode();

// Python logging's levels (DEBUG 10, INFO 20, WARNING 30, ERROR 40); WARNING by default.
void set_log_level(int level);

// Called on the thread that hit the fallback or sync, while observing is on.
struct Observer {
  void (*fallback)(const std::string& op, const char* kind, const char* reason);
  void (*sync)(const char* kind);
};
void set_observer(Observer observer);
void set_observing(bool fallbacks, bool syncs);

// count_fallback's steps (runtime/fallback/RBLNFallback.cpp): the once-per-op warning is wanted, and the observer.
bool warn_on_fallback();
void notify_fallback(const std::string& op, FallbackKind kind, const char* reason);

}  // namespace rbln
