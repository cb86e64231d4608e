// The emulated device's op library. Where an accelerator calls a vendor
// library (FFT, distinct values, embedding bags, CTC), the emulator runs the
// kernel libtorch's CPU build has, inside a launch, in stream order, over CPU
// views of device memory (host-addressable inside a launch): results are
// CPU's bit for bit, and nothing waits but what waits on CUDA too. A vendor
// replaces these calls with its library's (docs/porting.md).
#pragma once

#include <ATen/core/Tensor.h>

#include <ATen/core/ATen_fwd.h>
#include <c10/util/OptionalArrayRef.h>

#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace rbln::kernels {

// The op on plain CPU tensors: inputs (an undefined one stays undefined) to results.
using LibraryOp = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>& inputs)>;

// Queues op(CPU views of inputs) on the stream of the first defined input's
// device and copies each result into the matching output, a device tensor the
// caller sized. (An op may also write into one of its inputs' views.)
void launch_library(const char* name, const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs,
                    LibraryOp op);

// The op's results as new device tensors, sized by running op on meta tensors
// (its meta function, which also raises CPU's shape errors now), computed on the stream.
std::vector<at::Tensor> library_call(const char* name, const std::vector<at::Tensor>& inputs, LibraryOp op);

// For results whose sizes depend on the values (unique, bincount): the host
// waits for the computation, as CUDA syncs there, then sizes the results.
std::vector<at::Tensor> library_call_synced(const char* name, const std::vector<at::Tensor>& inputs, LibraryOp op);

// Whether the dispatcher has a meta function for the op ("aten::name.overload").
bool has_meta_function(const char* name);

// library_call where the op has a meta function (sized_by_meta: the generated
// wrapper asks has_meta_function once), else library_call_synced: what a
// `strategy: library` entry of ops.yaml runs (codegen writes the op).
std::vector<at::Tensor> library_op(const char* name, bool sized_by_meta, const std::vector<at::Tensor>& inputs,
                                   LibraryOp op);

// `op` with float16/bfloat16 tensors computed in float32 and its float32 results
// rounded back: a library op (`upcast: true`) whose CPU kernel has no half-precision
// form, where CUDA's computes in float32 and rounds.
LibraryOp in_float32(LibraryOp op);

// An op's results as the vector a LibraryOp returns.
inline std::vector<at::Tensor> results(const at::Tensor& t) { return {t}; }
inline std::vector<at::Tensor> results(std::vector<at::Tensor> list) { return list; }
template <class... T>
std::vector<at::Tensor> results(const std::tuple<T...>& r) {
  return std::apply([](const auto&... t) { return std::vector<at::Tensor>{t...}; }, r);
}

inline std::optional<at::Tensor> optional(const at::Tensor& t) {
  return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
}

// A LibraryOp runs after its caller returns: it keeps copies of the arguments
// the dispatcher passes as references (own) and passes them back as such (ref).
inline std::vector<int64_t> own(at::IntArrayRef x) { return x.vec(); }
inline std::vector<c10::SymInt> own(c10::SymIntArrayRef x) { return x.vec(); }
inline std::string own(c10::string_view x) { return std::string(x); }
template <class T>
std::optional<std::vector<T>> own(const c10::OptionalArrayRef<T>& x) {
  return x.has_value() ? std::optional<std::vector<T>>(x->vec()) : std::nullopt;
}
template <class T>
std::optional<std::vector<T>> own(const std::optional<c10::ArrayRef<T>>& x) {
  return x.has_value() ? std::optional<std::vector<T>>(x->vec()) : std::nullopt;
}
inline std::optional<std::string> own(const std::optional<c10::string_view>& x) {
  return x.has_value() ? std::optional<std::string>(*x) : std::nullopt;
}

template <class T>
c10::ArrayRef<T> ref(const std::vector<T>& x) {
  return x;
}
inline c10::string_view ref(const std::string& x) { return x; }
template <class T>
std::optional<c10::ArrayRef<T>> ref(const std::optional<std::vector<T>>& x) {
  return x.has_value() ? std::optional<c10::ArrayRef<T>>(*x) : std::nullopt;
}
inline std::optional<c10::string_view> ref(const std::optional<std::string>& x) {
  return x.has_value() ? std::optional<c10::string_view>(*x) : std::nullopt;
}

}  // namespace rbln::kernels
