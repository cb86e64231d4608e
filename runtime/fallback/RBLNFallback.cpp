#include "runtime/fallback/RBLNFallback.h"

#include <ATen/core/op_registration/adaption.h>
#include <ATen/ops/_copy_from_and_resize.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <optional>
#include <vector>
#include <deque>
#include <mutex>

#include "generated/RBLNNativeFunctions.h"
#include "runtime/observability/RBLNObserve.h"

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
std::map<std::string, std::string>& reason_kinds() {
  static std::map<std::string, std::string> kinds;
  return kinds;
}

}  // namespace

void count_fallback(const std::string& name, FallbackKind kind, const char* reason) {
  bool first;
  {
    std::lock_guard<std::mutex> lock(counters_mutex());
    auto& per_reason = fallbacks()[name];
    first = per_reason.empty();
    ++per_reason[reason];
    reason_kinds().emplace(reason, fallback_kind_name(kind));
  }
  notify_fallback(name, kind, reason);
  TORCH_CHECK(!(disabled_fallbacks() & (1u << static_cast<int>(kind))), name, " is not supported on the rbln device (",
              reason, ") and TORCH_RBLN_DISABLE_FALLBACK=", std::getenv("TORCH_RBLN_DISABLE_FALLBACK"),
              " forbids running it on the CPU (fallback kind '", fallback_kind_name(kind), "').");
  if (first && warn_on_fallback()) {
    TORCH_WARN(name, " is not supported on the rbln device (", reason,
               "); it runs on the CPU with copies in and out. torch.rbln.explain() counts such fallbacks.");
  }
}

// A hand-written wrapper's own fallback is for a dtype its kernel lacks (integer convolution).
void count_fallback(const std::string& name, const char* reason) { count_fallback(name, FallbackKind::kDtype, reason); }

namespace {

// Inputs CPU kernels write although native_functions.yaml does not mark them written
// (native_batch_norm updates its running statistics in place).
bool written_undeclared(const c10::FunctionSchema& schema, const c10::Argument& arg) {
  return schema.name() == "aten::native_batch_norm" && (arg.name() == "running_mean" || arg.name() == "running_var");
}

bool is_written(const c10::FunctionSchema& schema, const c10::Argument& arg) {
  return (arg.alias_info() && arg.alias_info()->isWrite()) || written_undeclared(schema, arg);
}

// One tensor of the op's arguments: where it sits on the stack, and its host copy.
struct Slot {
  size_t arg;
  std::optional<size_t> element;  // in a (optional) tensor list
  at::Tensor device, host;
  bool written;
};

std::vector<Slot> tensor_slots(const c10::FunctionSchema& schema, torch::jit::Stack& stack, size_t begin) {
  std::vector<Slot> slots;
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const auto& v = stack[begin + i];
    const bool written = is_written(schema, schema.arguments()[i]);
    if (v.isTensor()) {
      slots.push_back({i, std::nullopt, v.toTensor(), {}, written});
    } else if (v.isTensorList()) {
      const auto list = v.toTensorList();
      for (size_t j = 0; j < list.size(); ++j) slots.push_back({i, j, list.get(j), {}, written});
    } else if (v.isOptionalTensorList()) {
      const auto list = v.toOptionalTensorList();
      for (size_t j = 0; j < list.size(); ++j) {
        const std::optional<at::Tensor> t = list.get(j);
        if (t) slots.push_back({i, j, *t, {}, written});
      }
    }
  }
  return slots;
}

std::string method_name(const c10::FunctionSchema& schema) {
  std::string name = "wrapper_" + schema.name().substr(schema.name().find("::") + 2);
  if (!schema.overload_name().empty()) name += "_" + schema.overload_name();
  return name;
}

// Devices as the kernel the fallback stands in for checks them on CUDA: torchgen's wrapper wants every positional
// and out= tensor on one device (device_check: ExactSame); the other ops check in their kernels, as
// TensorIterator does: CPU 0-dim tensors are taken, index lists may live anywhere.
void check_devices(const c10::FunctionSchema& schema, const std::vector<Slot>& slots) {
  const bool exact = !skips_device_check(c10::toString(schema.operator_name()));
  const std::string method = method_name(schema);
  std::optional<c10::Device> common;
  for (const auto& s : slots) {
    const auto& arg = schema.arguments()[s.arg];
    if (!s.device.defined()) continue;
    if (exact) {
      if (!arg.kwarg_only() || arg.is_out()) {
        c10::impl::check_and_update_common_device(common, s.device, method.c_str(), arg.name().c_str());
      }
      continue;
    }
    if (arg.type()->kind() == c10::ListType::Kind && s.element && !s.written &&
        arg.type()->containedType(0)->kind() == c10::OptionalType::Kind)
      continue;
    if (s.device.is_cpu() && s.device.dim() == 0 && !s.written) continue;
    if (!common) {
      common = s.device.device();
    } else {
      TORCH_CHECK(*common == s.device.device(), "Expected all tensors to be on the same device, but found at least ",
                  "two devices, ", *common, " and ", s.device.device(), "!");
    }
  }
}

// Byte extent [first, last) of `t` in its storage.
std::pair<int64_t, int64_t> byte_extent(const at::Tensor& t) {
  const int64_t item = t.element_size();
  int64_t last = t.storage_offset() + (t.numel() ? 1 : 0);
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d) * (t.numel() ? 1 : 0);
  return {t.storage_offset() * item, last * item};
}

// Host copies of the device tensors. Device tensors that share storage with a written one get views of one host
// copy of that storage, so the CPU kernel sees the aliasing the device tensors have: it raises where CPU raises
// ("some elements of the input tensor and the written-to tensor refer to a single memory location"), or reads
// what it writes, as it would on the device.
void copy_to_host(std::vector<Slot>& slots) {
  std::map<const c10::StorageImpl*, std::vector<Slot*>> by_storage;
  for (auto& s : slots) {
    if (!s.device.defined() || s.device.is_cpu()) {
      s.host = s.device;
    } else if (s.device.is_sparse()) {  // indices and values, copied whole: it has no strided storage
      s.host = s.device.to(at::kCPU);
    } else {
      by_storage[s.device.storage().unsafeGetStorageImpl()].push_back(&s);
    }
  }
  for (auto& [storage, group] : by_storage) {
    bool shared = group.size() > 1 && std::any_of(group.begin(), group.end(), [](Slot* s) { return s->written; });
    int64_t lo = std::numeric_limits<int64_t>::max(), hi = 0;
    for (Slot* s : group) {
      const auto [first, last] = byte_extent(s->device);
      lo = std::min(lo, first);
      hi = std::max(hi, last);
      shared = shared && !s->device.is_conj() && !s->device.is_neg();
    }
    for (Slot* s : group) shared = shared && (byte_extent(s->device).first - lo) % s->device.element_size() == 0;
    if (!shared) {
      for (Slot* s : group) s->host = s->device.to(at::kCPU);
      continue;
    }
    const at::Tensor& any = group.front()->device;
    auto bytes = at::empty({0}, any.options().dtype(at::kByte)).set_(any.storage(), lo, {hi - lo}, {1}).to(at::kCPU);
    for (Slot* s : group) {
      s->host = at::empty({0}, s->device.options().device(at::kCPU))
                    .set_(bytes.storage(), (byte_extent(s->device).first - lo) / s->device.element_size(),
                          s->device.sizes(), s->device.strides());
    }
  }
}

void put_back(torch::jit::Stack& stack, size_t begin, const std::vector<Slot>& slots, bool host) {
  for (const auto& s : slots) {
    auto& v = stack[begin + s.arg];
    const at::Tensor& t = host ? s.host : s.device;
    if (!s.element) {
      v = t;
    } else if (v.isTensorList()) {
      auto list = v.toTensorList();
      list.set(*s.element, t);
    } else {
      auto list = v.toOptionalTensorList();
      list.set(*s.element, t);
    }
  }
}

// The boxed CPU fallback (at::native::cpu_fallback's steps, with the device checks, aliasing and
// written inputs above): host copies in, the CPU kernel, written tensors copied back, results to the device.
void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack, FallbackKind kind, const char* reason) {
  const auto& schema = op.schema();
  const size_t begin = stack->size() - schema.arguments().size();
  auto slots = tensor_slots(schema, *stack, begin);
  check_devices(schema, slots);
  count_fallback(c10::toString(schema.operator_name()), kind, reason);
  const NoSyncAccounting quiet;

  std::optional<c10::Device> target;
  for (const auto& s : slots) {
    if (s.device.defined() && !s.device.is_cpu()) {
      target = s.device.device();
      break;
    }
  }
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    auto& v = (*stack)[begin + i];
    if (v.isDevice()) {
      if (!target) target = v.toDevice();
      v = c10::Device(at::kCPU);
    }
  }
  // Lists are copied before they are rewritten, as the stack may hold the caller's list.
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    auto& v = (*stack)[begin + i];
    if (v.isTensorList()) v = c10::List<at::Tensor>(v.toTensorVector());
    if (v.isOptionalTensorList()) v = c10::List<std::optional<at::Tensor>>(v.toOptionalTensorVector());
  }
  try {
    copy_to_host(slots);
  } catch (const c10::Error& e) {
    // Inside a graph capture the copies to the host are refused (the driver's
    // capture error): say which op could not be captured.
    const std::string what = e.what_without_backtrace();
    TORCH_CHECK(what.find("when stream is capturing") == std::string::npos, schema.operator_name(),
                " has no rbln kernel for these inputs and runs on the CPU, which a graph capture cannot record: ", what);
    throw;
  }
  put_back(*stack, begin, slots, /*host=*/true);

  const bool sparse = std::any_of(slots.begin(), slots.end(), [](const Slot& s) { return s.host.is_sparse(); });
  op.redispatchBoxed(c10::DispatchKeySet(sparse ? c10::DispatchKey::SparseCPU : c10::DispatchKey::CPU), stack);

  for (const auto& s : slots) {
    if (!s.written || !s.device.defined() || s.device.is_same(s.host)) continue;
    if (s.device.is_sparse()) {
      s.device.copy_(s.host);  // new indices and values (sparse copy_ resizes)
    } else {
      at::_copy_from_and_resize(s.host, s.device);
    }
  }
  const size_t returns_begin = stack->size() - schema.returns().size();
  for (size_t r = 0; r < schema.returns().size(); ++r) {
    const auto* alias = schema.returns()[r].alias_info();
    auto& v = (*stack)[returns_begin + r];
    if (alias && alias->isWrite()) {  // the written argument itself
      for (size_t i = 0; i < schema.arguments().size(); ++i) {
        const auto* a = schema.arguments()[i].alias_info();
        if (a && *a == *alias) {
          // The stack's argument entries were popped; the slots hold the originals.
          for (const auto& s : slots) {
            if (s.arg != i) continue;
            if (!s.element) v = s.device;
          }
          if (v.isTensorList()) {
            std::vector<at::Tensor> originals;
            for (const auto& s : slots)
              if (s.arg == i) originals.push_back(s.device);
            v = c10::List<at::Tensor>(originals);
          }
          break;
        }
      }
      continue;
    }
    TORCH_CHECK(!alias, "The operator ", schema.operator_name(), " appears to be a view operator, ",
                "but it has no implementation for the backend \"rbln\". View operators don't support falling back ",
                "to run on the CPU, since the tensor's storage cannot be shared across devices.");
    if (!target) continue;
    if (v.isTensor()) {
      const auto& t = v.toTensor();
      if (t.defined()) v = t.to(*target);
    } else if (v.isTensorList()) {
      std::vector<at::Tensor> moved;
      for (const at::Tensor& t : v.toTensorVector()) moved.push_back(t.defined() ? t.to(*target) : t);
      v = c10::List<at::Tensor>(moved);
    }
  }
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

std::map<std::string, std::string> fallback_reason_kinds() {
  std::lock_guard<std::mutex> lock(counters_mutex());
  return reason_kinds();
}

void fallback_unlisted(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  cpu_fallback(op, stack, FallbackKind::kUnlisted, "not in ops.yaml");
}
void fallback_listed(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  cpu_fallback(op, stack, FallbackKind::kListed, "listed as fallback in ops.yaml");
}
void fallback_dtype(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  cpu_fallback(op, stack, FallbackKind::kDtype, "dtype not supported on the device");
}
void fallback_compile(const c10::OperatorHandle& op, torch::jit::Stack* stack, const char* reason) {
  cpu_fallback(op, stack, FallbackKind::kCompile, reason);
}
void fallback_sparse(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  cpu_fallback(op, stack, FallbackKind::kUnlisted, "sparse layout: no device kernel");
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback_unlisted>());
}

}  // namespace rbln
