// Distinct values and counts: unique (sorted, consecutive, along a dim), mode
// and bincount, through the device's op library (kernels/library/Library.h): CPU's
// algorithms, so ties, NaNs and index choices are CPU's. unique and bincount
// size their results by the values, so the host waits for them, as on CUDA.
#include <ATen/ops/_unique.h>
#include <ATen/ops/_unique2.h>
#include <ATen/ops/bincount.h>
#include <ATen/ops/mode.h>
#include <ATen/ops/unique_consecutive.h>
#include <ATen/ops/unique_dim.h>
#include <ATen/ops/unique_dim_consecutive.h>

#include <tuple>
#include <vector>

#include "generated/RBLNNativeFunctions.h"
#include "kernels/common/Common.h"
#include "kernels/library/Library.h"

namespace rbln::kernels {
namespace {

using Tensors = std::vector<at::Tensor>;

std::tuple<at::Tensor, at::Tensor, at::Tensor> three(const Tensors& r) { return {r[0], r[1], r[2]}; }

// out <- result, with CPU's out= resize and dtype rules; an undefined out becomes the result.
void assign(at::Tensor& out, const at::Tensor& result, const char* op) {
  if (!out.defined()) {
    out = result;
    return;
  }
  prepare_out(out, result.sizes(), result.scalar_type(), result, op);
  device_copy(out, result);
}

}  // namespace

std::tuple<at::Tensor&, at::Tensor&> mode_values(const at::Tensor& self, int64_t dim, bool keepdim, at::Tensor& values,
                                                 at::Tensor& indices) {
  check_same_device({&self, &values, &indices});
  auto r = library_call("aten::mode", {self}, [dim, keepdim](const Tensors& in) {
    return results(at::mode(in[0], dim, keepdim));
  });
  assign(values, r[0], "mode");
  assign(indices, r[1], "mode");
  return {values, indices};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> _unique2(const at::Tensor& self, bool sorted, bool return_inverse,
                                                        bool return_counts) {
  return three(library_call_synced("aten::_unique2", {self}, [=](const Tensors& in) {
    return results(at::_unique2(in[0], sorted, return_inverse, return_counts));
  }));
}

std::tuple<at::Tensor, at::Tensor> _unique(const at::Tensor& self, bool sorted, bool return_inverse) {
  auto r = library_call_synced("aten::_unique", {self}, [=](const Tensors& in) {
    return results(at::_unique(in[0], sorted, return_inverse));
  });
  return {r[0], r[1]};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> unique_consecutive(const at::Tensor& self, bool return_inverse,
                                                                  bool return_counts, std::optional<int64_t> dim) {
  return three(library_call_synced("aten::unique_consecutive", {self}, [=](const Tensors& in) {
    return results(at::unique_consecutive(in[0], return_inverse, return_counts, dim));
  }));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> unique_dim(const at::Tensor& self, int64_t dim, bool sorted,
                                                          bool return_inverse, bool return_counts) {
  return three(library_call_synced("aten::unique_dim", {self}, [=](const Tensors& in) {
    return results(at::unique_dim(in[0], dim, sorted, return_inverse, return_counts));
  }));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> unique_dim_consecutive(const at::Tensor& self, int64_t dim,
                                                                      bool return_inverse, bool return_counts) {
  return three(library_call_synced("aten::unique_dim_consecutive", {self}, [=](const Tensors& in) {
    return results(at::unique_dim_consecutive(in[0], dim, return_inverse, return_counts));
  }));
}

at::Tensor bincount(const at::Tensor& self, const std::optional<at::Tensor>& weights, c10::SymInt minlength) {
  const auto& w = weights.has_value() ? *weights : at::Tensor();
  check_same_device({&self, &w});
  const int64_t length = minlength.expect_int();
  return library_call_synced("aten::bincount", {self, w}, [length](const Tensors& in) {
    return Tensors{at::bincount(in[0], in[1], length)};
  })[0];
}

}  // namespace rbln::kernels
