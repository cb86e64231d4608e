#include "kernels/library/Library.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/from_blob.h>
#include <c10/core/InferenceMode.h>

#include <exception>
#include <memory>
#include <optional>
#include <string>

#include "kernels/common/Common.h"
#include "runtime/device/RBLNFunctions.h"
#include "runtime/observability/RBLNObserve.h"

namespace rbln::kernels {
namespace {

// What a launch needs to see a device tensor as a CPU one, without holding the tensor.
struct View {
  void* data = nullptr;
  std::vector<int64_t> sizes, strides;
  at::ScalarType dtype = at::kFloat;
  bool defined = false;
};

View view_of(const at::Tensor& t) {
  if (!t.defined()) return {};
  return {t.data_ptr(), t.sizes().vec(), t.strides().vec(), t.scalar_type(), true};
}

at::Tensor as_cpu(const View& v) {
  if (!v.defined) return {};
  return at::from_blob(v.data, v.sizes, v.strides, at::TensorOptions().device(at::kCPU).dtype(v.dtype));
}

const at::Tensor& first_defined(const std::vector<at::Tensor>& inputs) {
  for (const auto& t : inputs) {
    if (t.defined()) return t;
  }
  TORCH_INTERNAL_ASSERT(false, "a library call needs a device tensor");
}

std::vector<at::Tensor> on_meta(const std::vector<at::Tensor>& inputs) {
  std::vector<at::Tensor> meta;
  for (const auto& t : inputs) {
    meta.push_back(t.defined() ? at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kMeta)) : t);
  }
  return meta;
}

}  // namespace

void launch_library(const char* name, const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs,
                    LibraryOp op) {
  std::vector<View> in, out;
  for (const auto& t : inputs) in.push_back(view_of(t));
  for (const auto& t : outputs) out.push_back(view_of(t));
  launch_on(first_defined(inputs), name, [name, in = std::move(in), out = std::move(out), op = std::move(op)] {
    c10::InferenceMode no_autograd;  // plain CPU tensors over device memory
    std::vector<at::Tensor> cpu;
    for (const auto& v : in) cpu.push_back(as_cpu(v));
    auto results = op(cpu);
    TORCH_INTERNAL_ASSERT(results.size() >= out.size(), "the op returned ", results.size(), " results");
    for (size_t i = 0; i < out.size(); ++i) {
      if (!out[i].defined) continue;
      // copy_ would broadcast a result whose meta function gave another size into the output.
      TORCH_CHECK(results[i].sizes() == c10::IntArrayRef(out[i].sizes), name, ": result ", i, " has size ",
                  results[i].sizes(), " where the meta function gave ", out[i].sizes,
                  " (an ops.yaml library entry with such a meta function needs `synced: true`)");
      as_cpu(out[i]).copy_(results[i]);
    }
  });
}

std::vector<at::Tensor> library_call_synced(const char* name, const std::vector<at::Tensor>& inputs, LibraryOp op) {
  const auto& on = first_defined(inputs);
  struct Outcome {
    std::vector<at::Tensor> results;
    std::exception_ptr error;  // CPU's error, raised here as CPU raises it (the host waits anyway)
  };
  auto outcome = std::make_shared<Outcome>();
  launch_library(name, inputs, {}, [outcome, op = std::move(op)](const std::vector<at::Tensor>& cpu) {
    try {
      for (auto& r : op(cpu)) outcome->results.push_back(r.clone());  // not a view of device memory
    } catch (...) {
      outcome->error = std::current_exception();
    }
    return std::vector<at::Tensor>{};
  });
  {
    const HostSync sync(SyncKind::kDataDependent);
    to_c10(current_stream(on.device().index())).synchronize();
  }
  if (outcome->error) std::rethrow_exception(outcome->error);
  std::vector<at::Tensor> outputs;
  for (const auto& r : outcome->results) {
    if (!r.defined()) {
      outputs.emplace_back();
      continue;
    }
    auto t = at::empty_strided(r.sizes(), r.strides(), on.options().dtype(r.scalar_type()));
    t.copy_(r);
    outputs.push_back(t);
  }
  return outputs;
}

std::vector<at::Tensor> library_call(const char* name, const std::vector<at::Tensor>& inputs, LibraryOp op) {
  const auto& on = first_defined(inputs);
  std::vector<at::Tensor> meta;
  try {
    c10::InferenceMode no_autograd;
    meta = op(on_meta(inputs));
  } catch (const std::exception&) {
    // The meta function refused the call (a Python one with its own exception types, or checks in another
    // order): CPU's kernel answers it, with CPU's error, or CPU's result where the meta function is stricter.
    return library_call_synced(name, inputs, std::move(op));
  }
  // Outside inference mode: autograd may save the results for backward (mode's values).
  std::vector<at::Tensor> outputs;
  for (const auto& m : meta) {  // an undefined result (a backward's unrequested gradient) stays undefined
    outputs.push_back(m.defined() ? at::empty_strided(m.sizes(), m.strides(), on.options().dtype(m.scalar_type()))
                                  : at::Tensor());
  }
  launch_library(name, inputs, outputs, std::move(op));
  return outputs;
}

LibraryOp in_float32(LibraryOp op) {
  return [op = std::move(op)](const std::vector<at::Tensor>& inputs) {
    std::optional<at::ScalarType> half;
    std::vector<at::Tensor> wide;
    for (const auto& t : inputs) {
      const bool reduced = t.defined() && (t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16);
      if (reduced) half = t.scalar_type();
      wide.push_back(reduced ? t.to(at::kFloat) : t);
    }
    auto results = op(wide);
    for (auto& r : results) {
      if (half && r.defined() && r.scalar_type() == at::kFloat) r = r.to(*half);
    }
    return results;
  };
}

bool has_meta_function(const char* name) {
  const std::string qualified(name);
  const auto dot = qualified.find('.');
  return c10::Dispatcher::singleton()
      .findSchemaOrThrow(qualified.substr(0, dot).c_str(), dot == std::string::npos ? "" : qualified.c_str() + dot + 1)
      .hasKernelForDispatchKey(c10::DispatchKey::Meta);
}

std::vector<at::Tensor> library_op(const char* name, bool sized_by_meta, const std::vector<at::Tensor>& inputs,
                                   LibraryOp op) {
  // Every tensor the library reads is on one device, keyword arguments too (the generated device check sees
  // only positional ones), as CUDA's kernels check theirs.
  const auto device = first_defined(inputs).device();
  for (const auto& t : inputs) {
    TORCH_CHECK(!t.defined() || t.device() == device, "Expected all tensors to be on the same device, but found ",
                "at least two devices, ", device, " and ", t.device(), "!");
  }
  return sized_by_meta ? library_call(name, inputs, std::move(op)) : library_call_synced(name, inputs, std::move(op));
}

}  // namespace rbln::kernels
