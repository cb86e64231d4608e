// The `compile` strategy of ops.yaml: an ATen op that runs as a plan Inductor
// compiled from its decomposition (python/torch_rbln/_inductor/op_compiler.py).
//
// A call builds a key (the functional overload, the tensors' dtypes and ranks,
// the other arguments' values, the device) and looks it up in a bounded cache
// of loaded plans; a plan whose guard accepts the input sizes runs: it
// allocates its outputs through the caching allocator and queues its kernels on
// the current stream, with no Python and no GIL. On a miss the plans on disk
// for the key are loaded; if none fits, the compiler (Python, with the GIL) makes
// one. In-place and out= variants run the functional plan and copy into their
// output with CPU's shape and dtype rules (WriteRule).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/ScalarType.h>
#include <torch/library.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace rbln {

// What the compiler answers for one new plan.
struct CompileOutcome {
  enum Status { kOk, kInvalid, kFailed };
  Status status;
  std::string message;  // kInvalid: the op's own error for these inputs; kFailed: why no plan can be made
};

// Compiles `functional` for the canonical (contiguous) arguments `args` into a plan at `path`.
using OpCompiler =
    std::function<CompileOutcome(const c10::OperatorHandle& functional, const torch::jit::Stack& args,
                                 const std::string& path)>;

// Installed once by torch_rbln at import: the compiler, and where plans live on
// disk (asked at the first miss; one directory per key under it, and it names
// the backend's version).
void set_op_compiler(OpCompiler compiler, std::function<std::string()> cache_dir);

// How the op's in-place and out= forms take a result, as CPU's kernels do.
enum class WriteRule {
  kExact,     // structured: out's dtype must be the result's ("Expected out tensor to have dtype ...")
  kCastable,  // TensorIterator: the result must cast to out's dtype; self's shape must be the result's
  kMeta,      // the variant's meta function checks (it runs on meta copies of the arguments first)
};

// The registration of one variant (functional, in-place or out=) of an op
// whose functional overload is `functional`.`overload`. The data tensors (the
// functional's arguments at `data_args`, not its indices or masks) of other
// dtypes than `dtypes` fall back to the CPU.
torch::CppFunction compiled_op(const char* functional, const char* overload, std::vector<c10::ScalarType> dtypes,
                               std::vector<size_t> data_args, WriteRule rule);

// op (the registered overload) -> calls that ran a plan; functional op -> plans compiled.
std::map<std::string, uint64_t> compiled_op_counts();
std::map<std::string, uint64_t> compile_counts();

struct PlanCacheInfo {
  uint64_t plans, bytes, max_plans, max_bytes, hits, misses, disk_loads, evictions;
};
PlanCacheInfo plan_cache_info();
// Bounds the cache of loaded plans (least recently used out); 0 keeps a bound as it is.
void set_plan_cache_limits(uint64_t max_plans, uint64_t max_bytes);
void clear_plan_cache();  // forgets loaded plans and remembered failures (the disk cache stays)

}  // namespace rbln
