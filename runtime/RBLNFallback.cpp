#include "runtime/RBLNFallback.h"

#include <ATen/native/CPUFallback.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cstdlib>
#include <deque>
#include <mutex>

namespace rbln {
namespace {

std::mutex& counters_mutex() {
  static std::mutex m;
  return m;
}
std::deque<DeviceOpCounter*>& device_counters() {
  static std::deque<DeviceOpCounter*> counters;
  return counters;
}
std::map<std::string, std::map<std::string, uint64_t>>& fallbacks() {
  static std::map<std::string, std::map<std::string, uint64_t>> counts;
  return counts;
}

bool fallback_disabled() {
  static const bool disabled = [] {
    const char* v = std::getenv("TORCH_RBLN_DISABLE_FALLBACK");
    return v && std::string(v) != "0" && std::string(v) != "";
  }();
  return disabled;
}

}  // namespace

void count_fallback(const std::string& name, const char* reason) {
  bool first;
  {
    std::lock_guard<std::mutex> lock(counters_mutex());
    auto& per_reason = fallbacks()[name];
    first = per_reason.empty();
    ++per_reason[reason];
  }
  TORCH_CHECK(!fallback_disabled(), name, " is not supported on the rbln device (", reason,
              ") and TORCH_RBLN_DISABLE_FALLBACK=1 forbids running it on the CPU.");
  if (first) {
    TORCH_WARN(name, " is not supported on the rbln device (", reason,
               "); it runs on the CPU with copies in and out. torch.rbln.explain() counts such fallbacks.");
  }
}

namespace {

void run_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack, const char* reason) {
  count_fallback(c10::toString(op.schema().operator_name()), reason);
  at::native::cpu_fallback(op, stack, /*error_on_views=*/true);
}

}  // namespace

DeviceOpCounter::DeviceOpCounter(const char* n) : name(n) {
  std::lock_guard<std::mutex> lock(counters_mutex());
  device_counters().push_back(this);
}

std::map<std::string, uint64_t> device_op_counts() {
  std::lock_guard<std::mutex> lock(counters_mutex());
  std::map<std::string, uint64_t> counts;
  for (auto* c : device_counters()) counts[c->name] += c->count.load(std::memory_order_relaxed);
  return counts;
}

std::map<std::string, std::map<std::string, uint64_t>> fallback_counts() {
  std::lock_guard<std::mutex> lock(counters_mutex());
  return fallbacks();
}

void fallback_unlisted(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  run_fallback(op, stack, "not in ops.yaml");
}
void fallback_listed(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  run_fallback(op, stack, "listed as fallback in ops.yaml");
}
void fallback_dtype(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  run_fallback(op, stack, "dtype not supported on the device");
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback_unlisted>());
}

}  // namespace rbln
