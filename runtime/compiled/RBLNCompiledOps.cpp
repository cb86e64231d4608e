#include "runtime/compiled/RBLNCompiledOps.h"

#include <ATen/ATen.h>
#include <ATen/core/op_registration/adaption.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>
#include <c10/util/strides.h>
#include <torch/csrc/inductor/aoti_torch/tensor_converter.h>
#include <torch/csrc/inductor/aoti_torch/utils.h>

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_map>

#include "generated/RBLNNativeFunctions.h"
#include "runtime/compiled/RBLNCompiledKernels.h"
#include "runtime/fallback/RBLNFallback.h"
#include "runtime/device/RBLNFunctions.h"
#include "runtime/observability/RBLNObserve.h"

namespace rbln {
namespace {

namespace fs = std::filesystem;
constexpr int kPlanAbiVersion = 1;  // python/torch_rbln/_inductor/cpp_wrapper.py's ABI_VERSION

// A loaded plan: the shared object and the four entry points of its ABI.
struct Plan {
  void* handle = nullptr;
  bool (*guard)(const int64_t* const* sizes) = nullptr;
  void (*run)(AtenTensorHandle* inputs, AtenTensorHandle* outputs) = nullptr;
  uint64_t bytes = 0;
  std::string file;

  ~Plan() {
    // Kernels this plan queued may still be waiting on a stream: their code must stay mapped.
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
      try {
        driver::device_synchronize(d);
      } catch (...) {  // a kernel's error belongs to the program's next synchronizing call, not here
      }
    }
    dlclose(handle);
  }
};

void* intern_kernel(const char* name) { return plan_kernel(name); }

std::shared_ptr<Plan> load_plan(const fs::path& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  TORCH_CHECK(handle, "rbln: cannot load the compiled op ", path.string(), ": ", dlerror());
  auto plan = std::make_shared<Plan>();
  plan->handle = handle;
  plan->file = path.filename().string();
  auto abi = reinterpret_cast<int (*)()>(dlsym(handle, "rbln_plan_abi_version"));
  auto bind = reinterpret_cast<void (*)(decltype(&rbln_launch_compiled_kernel), void* (*)(const char*))>(
      dlsym(handle, "rbln_plan_bind"));
  plan->guard = reinterpret_cast<decltype(plan->guard)>(dlsym(handle, "rbln_plan_guard"));
  plan->run = reinterpret_cast<decltype(plan->run)>(dlsym(handle, "rbln_plan_run"));
  TORCH_CHECK(abi && bind && plan->guard && plan->run && abi() == kPlanAbiVersion, "rbln: ", path.string(),
              " is not a compiled op of this torch_rbln version");
  bind(&rbln_launch_compiled_kernel, &intern_kernel);
  plan->bytes = fs::file_size(path);
  return plan;
}

// The plans of one key: those loaded, the disk files they came from, or why none can be made.
struct KeyPlans {
  std::vector<std::shared_ptr<Plan>> plans;
  std::set<std::string> files;
  std::optional<std::string> failure;  // "compile failed: ...": the fallback's reason, counted per call
  std::list<std::string>::iterator lru;
};

struct Compiler {
  OpCompiler compile;
  std::function<std::string()> find_cache_dir;
  std::once_flag found;
  std::string cache_dir;
};

// Loaded plans by key, least recently used first out, bounded in plans and bytes.
class PlanCache {
 public:
  // A copy of the key's plans (their refcounts keep them loaded while they run).
  std::vector<std::shared_ptr<Plan>> find(const std::string& key, std::optional<std::string>* failure) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = keys_.find(key);
    if (it == keys_.end()) return {};
    lru_.splice(lru_.end(), lru_, it->second.lru);
    *failure = it->second.failure;
    return it->second.plans;
  }
  std::set<std::string> files(const std::string& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = keys_.find(key);
    return it == keys_.end() ? std::set<std::string>{} : it->second.files;
  }
  void add(const std::string& key, std::shared_ptr<Plan> plan) {
    std::vector<std::shared_ptr<Plan>> evicted;  // unloaded after the lock is released
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto& entry = slot(key);
      if (!entry.files.insert(plan->file).second) return;  // another thread loaded it first
      bytes_ += plan->bytes;
      ++plans_;
      entry.plans.push_back(std::move(plan));
      trim(evicted, /*keep=*/1);  // the key just added stays, whatever it weighs
    }
  }
  void fail(const std::string& key, std::string reason) {
    std::lock_guard<std::mutex> lock(mutex_);
    slot(key).failure = std::move(reason);
  }
  void clear() {
    std::vector<std::shared_ptr<Plan>> evicted;
    std::lock_guard<std::mutex> lock(mutex_);
    while (!lru_.empty()) evict_oldest(evicted);
  }
  void set_limits(uint64_t max_plans, uint64_t max_bytes) {
    std::vector<std::shared_ptr<Plan>> evicted;
    std::lock_guard<std::mutex> lock(mutex_);
    if (max_plans) max_plans_ = max_plans;
    if (max_bytes) max_bytes_ = max_bytes;
    trim(evicted, /*keep=*/0);
  }
  PlanCacheInfo info() {
    std::lock_guard<std::mutex> lock(mutex_);
    return {plans_, bytes_, max_plans_, max_bytes_, hits, misses, disk_loads, evictions};
  }

  std::atomic<uint64_t> hits{0}, misses{0}, disk_loads{0}, evictions{0};

 private:
  KeyPlans& slot(const std::string& key) {
    auto [it, inserted] = keys_.try_emplace(key);
    if (inserted) it->second.lru = lru_.insert(lru_.end(), key);
    return it->second;
  }
  // Least recently used keys out until the bounds hold, keeping the `keep` newest.
  void trim(std::vector<std::shared_ptr<Plan>>& evicted, size_t keep) {
    while ((plans_ > max_plans_ || bytes_ > max_bytes_) && lru_.size() > keep) evict_oldest(evicted);
  }
  void evict_oldest(std::vector<std::shared_ptr<Plan>>& evicted) {
    auto it = keys_.find(lru_.front());
    for (auto& plan : it->second.plans) {
      bytes_ -= plan->bytes;
      --plans_;
      ++evictions;
      evicted.push_back(std::move(plan));
    }
    keys_.erase(it);
    lru_.pop_front();
  }

  std::mutex mutex_;
  std::unordered_map<std::string, KeyPlans> keys_;
  std::list<std::string> lru_;
  uint64_t plans_ = 0, bytes_ = 0, max_plans_ = 512, max_bytes_ = 256ull << 20;
};

// Never destroyed: a plan's destructor waits for the device, which is gone at exit.
PlanCache& cache() {
  static auto* c = new PlanCache();
  return *c;
}

Compiler& compiler() {
  static auto* c = new Compiler();
  return *c;
}

std::mutex& counts_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, uint64_t>& compiles() {
  static auto* c = new std::map<std::string, uint64_t>();
  return *c;
}
std::map<std::string, std::atomic<uint64_t>*>& ran_plans() {
  static auto* c = new std::map<std::string, std::atomic<uint64_t>*>();
  return *c;
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// The part of the key one argument contributes; false for an argument no plan can take.
bool append_key(std::string& key, const c10::IValue& v) {
  char buf[40];
  if (v.isTensor()) {
    const auto& t = v.toTensor();
    if (!t.defined()) {
      key += "u;";
      return true;
    }
    std::snprintf(buf, sizeof buf, "t%d.%lld;", static_cast<int>(t.scalar_type()), static_cast<long long>(t.dim()));
  } else if (v.isNone()) {
    std::snprintf(buf, sizeof buf, "n;");
  } else if (v.isDouble()) {
    std::snprintf(buf, sizeof buf, "d%a;", v.toDouble());
  } else if (v.isInt()) {
    std::snprintf(buf, sizeof buf, "i%lld;", static_cast<long long>(v.toInt()));
  } else if (v.isBool()) {
    std::snprintf(buf, sizeof buf, "b%d;", v.toBool() ? 1 : 0);
  } else if (v.isDevice()) {
    std::snprintf(buf, sizeof buf, "D%d.%d;", static_cast<int>(v.toDevice().type()), v.toDevice().index());
  } else if (v.isIntList()) {
    key += "l";
    for (int64_t x : v.toIntList()) key += std::to_string(x) + ",";
    key += ";";
    return true;
  } else if (v.isString()) {
    key += "s" + v.toStringRef() + ";";
    return true;
  } else {
    return false;  // tensor lists, complex scalars, ...: the op falls back
  }
  key += buf;
  return true;
}

// An in-place or out= variant's own rules (the out dtype it accepts, the shapes it broadcasts to), as its
// meta function states them: the variant runs on meta copies of the arguments first. Variants without a
// meta function skip the check: copy_ then casts, as TensorIterator's out= does.
void check_with_meta(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args) {
  if (!op.hasKernelForDispatchKey(c10::DispatchKey::Meta)) return;
  torch::jit::Stack meta;
  for (const auto& a : args) {
    if (a.isTensor() && a.toTensor().defined()) {
      const auto& t = a.toTensor();
      meta.emplace_back(at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kMeta)));
    } else {
      meta.push_back(a);
    }
  }
  run_meta([&] { op.callBoxed(meta); });
}

class CompiledOpKernel final : public c10::OperatorKernel {
 public:
  CompiledOpKernel(const char* functional, const char* overload, std::vector<c10::ScalarType> dtypes,
                   std::vector<size_t> data_args, WriteRule rule)
      : functional_name_(functional), overload_(overload), key_prefix_(functional_name_ + "." + overload_ + "|"),
        dtypes_(std::move(dtypes)), data_args_(std::move(data_args)), rule_(rule) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
    std::call_once(init_, [&] { init(op); });
    const size_t n = op.schema().arguments().size();
    auto args = torch::jit::last(*stack, n);
    for (size_t i : data_args_) {
      if (args[i].isTensor() && args[i].toTensor().defined() &&
          std::find(dtypes_.begin(), dtypes_.end(), args[i].toTensor().scalar_type()) == dtypes_.end()) {
        return fallback_dtype(op, stack);
      }
    }
    const c10::Device device = common_device(op, args);
    if (kind_ != Kind::kFunctional && rule_ == WriteRule::kMeta) check_with_meta(op, args);
    std::vector<c10::IValue> functional_args(args.begin(), args.begin() + n_functional_);
    std::string reason;
    auto results = run_functional(device, functional_args, &reason);
    if (!results) return fallback_compile(op, stack, reason.c_str());
    counter_->hit();
    ran_->fetch_add(1, std::memory_order_relaxed);
    std::vector<c10::IValue> returns;
    if (kind_ == Kind::kFunctional) {
      for (auto& r : *results) returns.emplace_back(std::move(r));
    } else if (kind_ == Kind::kInplace) {
      const at::Tensor& self = args[0].toTensor();
      check_write((*results)[0], self);
      self.copy_((*results)[0]);
      returns.emplace_back(self);
    } else {
      for (size_t i = 0; i < results->size(); ++i) {
        const at::Tensor& out = args[n_functional_ + i].toTensor();
        check_write((*results)[i], out);
        if (rule_ != WriteRule::kMeta) {
          at::native::resize_output(out, (*results)[i].sizes());
        } else if (out.sizes() != (*results)[i].sizes()) {
          out.resize_((*results)[i].sizes());  // the meta function warned as CPU's kernel does
        }
        out.copy_((*results)[i]);
        returns.emplace_back(out);
      }
    }
    torch::jit::drop(*stack, n);
    for (auto& r : returns) stack->emplace_back(std::move(r));
  }

 private:
  enum class Kind { kFunctional, kInplace, kOut };

  // CPU's checks of a result written into self (in-place) or out (out=), with CPU's messages.
  void check_write(const at::Tensor& result, const at::Tensor& target) const {
    if (rule_ == WriteRule::kExact) {
      TORCH_CHECK(target.dtype() == result.dtype(), "Expected out tensor to have dtype ", result.dtype(),
                  ", but got ", target.dtype(), " instead");
    } else if (rule_ == WriteRule::kCastable) {
      TORCH_CHECK(c10::canCast(result.scalar_type(), target.scalar_type()), "result type ", result.scalar_type(),
                  " can't be cast to the desired output type ", target.scalar_type());
    }
    TORCH_CHECK(kind_ != Kind::kInplace || rule_ == WriteRule::kMeta || target.sizes() == result.sizes(),
                "output with shape ", target.sizes(), " doesn't match the broadcast shape ", result.sizes());
  }

  void init(const c10::OperatorHandle& op) {
    const auto& schema = op.schema();
    functional_ = c10::Dispatcher::singleton().findSchemaOrThrow(functional_name_.c_str(), overload_.c_str());
    n_functional_ = functional_->schema().arguments().size();
    for (size_t i = 0; i < n_functional_; ++i) {  // codegen registers only variants that lead with these (registry.py)
      TORCH_INTERNAL_ASSERT(i < schema.arguments().size() &&
                            schema.arguments()[i].name() == functional_->schema().arguments()[i].name());
    }
    n_outputs_ = functional_->schema().returns().size();
    const bool is_out = std::any_of(schema.arguments().begin(), schema.arguments().end(),
                                    [](const c10::Argument& a) { return a.is_out(); });
    kind_ = is_out ? Kind::kOut : schema.name() == functional_name_ ? Kind::kFunctional : Kind::kInplace;
    name_ = schema.name() + (schema.overload_name().empty() ? "" : "." + schema.overload_name());
    scalars_may_be_cpu_ = skips_device_check(name_);
    counter_ = std::make_unique<DeviceOpCounter>(name_.c_str());
    std::lock_guard<std::mutex> lock(counts_mutex());
    auto& ran = ran_plans()[name_];
    if (!ran) ran = new std::atomic<uint64_t>(0);
    ran_ = ran;
  }

  // The device the call runs on, with the device check CUDA's wrappers make (outs included; CPU 0-dim
  // tensors pass where the op's kernel takes them, `device_check: NoCheck`).
  c10::Device common_device(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args) {
    std::optional<c10::Device> common, requested;
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i].isDevice() && !requested) requested = args[i].toDevice();
      if (!args[i].isTensor() || !args[i].toTensor().defined()) continue;
      const at::Tensor& t = args[i].toTensor();
      if (scalars_may_be_cpu_ && t.is_cpu() && t.dim() == 0) continue;
      c10::impl::check_and_update_common_device(common, t, name_.c_str(), op.schema().arguments()[i].name().c_str());
    }
    const auto device = common ? common : requested;
    return device && device->type() == kRBLN ? *device : c10::Device(kRBLN, current_device());
  }

  // The functional op's results from a plan, or nullopt with the fallback's reason.
  std::optional<std::vector<at::Tensor>> run_functional(c10::Device device, std::vector<c10::IValue>& args,
                                                        std::string* reason) {
    const c10::DeviceGuard guard(device);

    std::string key = key_prefix_ + std::to_string(device.index()) + "|";
    std::vector<at::Tensor> tensors;
    std::vector<const int64_t*> sizes;
    for (auto& v : args) {
      if (v.isTensor() && v.toTensor().defined()) {
        at::Tensor t = v.toTensor();
        // Plans take canonical contiguous inputs (one layout per key); CPU scalars move to the device.
        if (t.device() != device) t = t.to(device);
        if (t.strides() != c10::IntArrayRef(c10::contiguous_strides(t.sizes()))) {
          t = at::empty(t.sizes(), t.options()).copy_(t);
        }
        v = t;
        tensors.push_back(t);
      }
      if (!append_key(key, v)) {
        *reason = "compile failed: an argument no compiled plan takes (a tensor list or a complex scalar)";
        return std::nullopt;
      }
    }
    for (const auto& t : tensors) sizes.push_back(t.sizes().data());

    std::optional<std::string> failure;
    auto plans = cache().find(key, &failure);
    for (int attempt = 0; attempt < 3; ++attempt) {
      for (const auto& plan : plans) {
        if (plan->guard(sizes.data())) {
          if (attempt == 0) ++cache().hits;
          return run(*plan, tensors);
        }
      }
      if (failure) {
        *reason = *failure;
        return std::nullopt;
      }
      if (attempt == 0) {
        ++cache().misses;
        plans = load_from_disk(key);
      } else if (attempt == 1) {
        const auto outcome = compile(key, args);
        if (outcome.status != CompileOutcome::kOk) {
          *reason = outcome.status == CompileOutcome::kInvalid
                        ? "compile: the decomposition's checks reject these inputs; CPU's kernel gives its error"
                        : "compile failed: " + outcome.message;
          if (outcome.status == CompileOutcome::kFailed) cache().fail(key, *reason);
          return std::nullopt;
        }
        plans = cache().find(key, &failure);
      }
    }
    *reason = "compile failed: the plan's guard rejects the inputs it was compiled for";
    cache().fail(key, *reason);
    return std::nullopt;
  }

  std::vector<at::Tensor> run(Plan& plan, const std::vector<at::Tensor>& tensors) {
    std::vector<AtenTensorHandle> inputs;  // stolen by the plan
    inputs.reserve(tensors.size());
    for (const auto& t : tensors) inputs.push_back(torch::aot_inductor::new_tensor_handle(at::Tensor(t)));
    std::vector<AtenTensorHandle> outputs(n_outputs_, nullptr);
    plan.run(inputs.data(), outputs.data());
    return torch::aot_inductor::alloc_tensors_by_stealing_from_handles(outputs.data(), outputs.size());
  }

  fs::path key_dir(const std::string& key) {
    auto& c = compiler();
    TORCH_CHECK(c.compile, "rbln: no op compiler is installed (import torch_rbln)");
    std::call_once(c.found, [&] { c.cache_dir = c.find_cache_dir(); });
    char name[17];
    std::snprintf(name, sizeof name, "%016llx", static_cast<unsigned long long>(fnv1a(key)));
    return fs::path(c.cache_dir) / name;
  }

  // The key's plans on disk that this process has not loaded (compiled by an earlier or another process).
  std::vector<std::shared_ptr<Plan>> load_from_disk(const std::string& key) {
    const auto dir = key_dir(key);
    std::error_code ec;
    std::ifstream key_file(dir / "key");
    std::string stored((std::istreambuf_iterator<char>(key_file)), std::istreambuf_iterator<char>());
    if (stored != key) return {};  // none yet, or a hash collision: this key compiles its own
    const auto loaded = cache().files(key);
    for (const auto& file : fs::directory_iterator(dir, ec)) {
      const auto name = file.path().filename().string();
      if (file.path().extension() != ".so" || loaded.count(name)) continue;
      cache().add(key, load_plan(file.path()));
      ++cache().disk_loads;
    }
    std::optional<std::string> failure;
    return cache().find(key, &failure);
  }

  CompileOutcome compile(const std::string& key, const std::vector<c10::IValue>& args) {
    const auto dir = key_dir(key);
    fs::create_directories(dir);
    {
      std::ofstream(dir / "key") << key;
    }
    static std::atomic<uint64_t> sequence{0};
    const auto name = "plan-" + std::to_string(getpid()) + "-" + std::to_string(sequence++);
    const auto tmp = dir / (name + ".tmp"), path = dir / (name + ".so");
    torch::jit::Stack stack(args.begin(), args.end());
    auto outcome = compiler().compile(*functional_, stack, tmp.string());
    if (outcome.status != CompileOutcome::kOk) return outcome;
    fs::rename(tmp, path);  // whole files only: another process may be listing the directory
    cache().add(key, load_plan(path));
    std::lock_guard<std::mutex> lock(counts_mutex());
    ++compiles()[functional_name_ + (overload_.empty() ? "" : "." + overload_)];
    return outcome;
  }

  const std::string functional_name_, overload_;
  const std::string key_prefix_;  // every key starts with the functional overload
  const std::vector<c10::ScalarType> dtypes_;
  const std::vector<size_t> data_args_;
  const WriteRule rule_;
  std::once_flag init_;
  std::optional<c10::OperatorHandle> functional_;
  size_t n_functional_ = 0, n_outputs_ = 0;
  Kind kind_ = Kind::kFunctional;
  std::string name_;
  bool scalars_may_be_cpu_ = false;
  std::unique_ptr<DeviceOpCounter> counter_;
  std::atomic<uint64_t>* ran_ = nullptr;
};

}  // namespace

void set_op_compiler(OpCompiler compile, std::function<std::string()> cache_dir) {
  auto& c = compiler();
  TORCH_CHECK(!c.compile, "rbln: the op compiler is installed once, at import");
  c.compile = std::move(compile);
  c.find_cache_dir = std::move(cache_dir);
}

torch::CppFunction compiled_op(const char* functional, const char* overload, std::vector<c10::ScalarType> dtypes,
                               std::vector<size_t> data_args, WriteRule rule) {
  return torch::CppFunction::makeFromBoxedFunctor(
      std::make_unique<CompiledOpKernel>(functional, overload, std::move(dtypes), std::move(data_args), rule));
}

std::map<std::string, uint64_t> compiled_op_counts() {
  std::lock_guard<std::mutex> lock(counts_mutex());
  std::map<std::string, uint64_t> counts;
  for (const auto& [name, count] : ran_plans()) counts[name] = count->load(std::memory_order_relaxed);
  return counts;
}

std::map<std::string, uint64_t> compile_counts() {
  std::lock_guard<std::mutex> lock(counts_mutex());
  return compiles();
}

PlanCacheInfo plan_cache_info() { return cache().info(); }
void set_plan_cache_limits(uint64_t max_plans, uint64_t max_bytes) { cache().set_limits(max_plans, max_bytes); }
void clear_plan_cache() { cache().clear(); }

}  // namespace rbln
