// Op accounting: which ATen ops ran on the device and which fell back to the
// CPU, and why. torch.rbln.explain() reads these counters.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <atomic>
#include <map>
#include <string>

namespace rbln {

// One per registered device op; counting is a relaxed atomic increment.
struct DeviceOpCounter {
  explicit DeviceOpCounter(const char* name);
  void hit() { count.fetch_add(1, std::memory_order_relaxed); }
  const char* name;
  std::atomic<uint64_t> count{0};
};

#define RBLN_COUNT_DEVICE_OP(name)                     \
  do {                                                 \
    static ::rbln::DeviceOpCounter rbln_counter_{name}; \
    rbln_counter_.hit();                               \
  } while (0)

std::map<std::string, uint64_t> device_op_counts();
// op -> reason -> calls
std::map<std::string, std::map<std::string, uint64_t>> fallback_counts();

// Counts a fallback that a hand-written wrapper performs itself (for ops the
// CPU has no kernel under that name, like convolution_overrideable); raises
// under TORCH_RBLN_DISABLE_FALLBACK=1 and warns once per op.
void count_fallback(const std::string& op, const char* reason);

// Boxed CPU fallbacks, one per reason.
void fallback_unlisted(const c10::OperatorHandle& op, torch::jit::Stack* stack);  // not in ops.yaml
void fallback_listed(const c10::OperatorHandle& op, torch::jit::Stack* stack);    // strategy: fallback
void fallback_dtype(const c10::OperatorHandle& op, torch::jit::Stack* stack);     // dtype not on device
// a sparse operand (runtime/device/RBLNSparse.cpp): the op computes on host copies of its indices and values.
void fallback_sparse(const c10::OperatorHandle& op, torch::jit::Stack* stack);
// strategy: compile, without a plan for these inputs (`reason` says why).
void fallback_compile(const c10::OperatorHandle& op, torch::jit::Stack* stack, const char* reason);

}  // namespace rbln
