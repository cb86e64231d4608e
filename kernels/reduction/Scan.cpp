// The scans: cumsum, cumprod and logcumsumexp, running along one dim in the
// accumulate type, as CPU's kernels do; cummax and cummin with their indices.
#include <ATen/AccumulateType.h>
#include <ATen/NumericUtils.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "generated/RBLNNativeFunctions.h"
#include "kernels/common/Common.h"

namespace rbln::kernels {

namespace {

enum class Scan { sum, product, logsumexp };

// log-sum-exp starts from -inf (floating accumulators only: logcumsumexp is floating).
template <class T>
T scan_init() {
  if constexpr (std::is_floating_point_v<T>) return -std::numeric_limits<T>::infinity();
  else return T(0);
}

// CPU's log(exp(x) + exp(acc)): stable, and exact for equal infinities.
template <class T>
T scan_log_add_exp(T x, T acc) {
  if constexpr (std::is_floating_point_v<T>) {
    const T lo = std::isnan(acc) ? acc : std::min(x, acc), hi = std::isnan(acc) ? acc : std::max(x, acc);
    return (lo != hi || std::isfinite(lo)) ? std::log1p(std::exp(lo - hi)) + hi : x;
  } else {
    return acc;
  }
}

// Running sum, product or log-sum-exp along `dim`, accumulated in the accumulate type.
at::Tensor& scan_out(const at::Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype, at::Tensor& out,
                     Scan kind, const char* op, const char* name) {
  // As CPU: the dtype argument, else out's dtype, else the input's (int64 for integers).
  auto type = dtype.value_or(out.defined() ? out.scalar_type()
                                           : (at::isIntegralType(self.scalar_type(), true) ? at::kLong : self.scalar_type()));
  dim = at::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
  // cumsum_/cumprod_ (out is self): CPU's structured in-place check, before its kernel runs.
  TORCH_CHECK(!out.is_same(self) || type == self.scalar_type(), "Bad in-place call: input tensor dtype ", self.dtype(),
              " and output tensor dtype ", c10::scalarTypeToTypeMeta(type), " should match");
  // CPU's scans take no bool result (a bool input scans in int64).
  TORCH_CHECK_NOT_IMPLEMENTED(type != at::kBool, "\"", op, "_out_cpu\" not implemented for 'Bool'");
  prepare_out(out, self.sizes(), type, self, op);
  if (self.numel() == 0) return out;
  auto x = at::empty(self.sizes(), self.options().dtype(type));
  device_copy(x, self);  // contiguous, in the result dtype
  int64_t size = self.dim() ? self.size(dim) : 1, inner = 1;
  for (int64_t d = dim + 1; d < self.dim(); ++d) inner *= self.size(d);
  int64_t outer = self.numel() / (size * inner);
  write_contiguous(out, [&](const at::Tensor& target) {
    RBLN_DISPATCH_ALL_AND_COMPLEX(type, "scan", [&] {
      using acc_t = at::acc_type<scalar_t, false>;
      const auto* xp = x.const_data_ptr<scalar_t>();
      auto* yp = target.data_ptr<scalar_t>();
      launch_on(target, name, [=] {
        at::parallel_for(0, outer * inner, std::max<int64_t>(1, kGrainSize / size), [&](int64_t lo, int64_t hi) {
          for (int64_t r = lo; r < hi; ++r) {
            int64_t base = (r / inner) * size * inner + r % inner;
            acc_t acc = kind == Scan::product ? acc_t(1) : kind == Scan::sum ? acc_t(0) : scan_init<acc_t>();
            for (int64_t j = 0; j < size; ++j) {
              const auto v = static_cast<acc_t>(xp[base + j * inner]);
              acc = kind == Scan::product ? static_cast<acc_t>(acc * v)
                    : kind == Scan::sum   ? static_cast<acc_t>(acc + v)
                                          : scan_log_add_exp(v, acc);
              yp[base + j * inner] = static_cast<scalar_t>(acc);
            }
          }
        });
      });
    });
  });
  return out;
}

// Running extremum along `dim` and its index: a NaN wins and stays, and an equal value takes over (greater_equal or
// less_equal), so the index is the last one, as in CPU's cummax_cummin_helper. values and indices come sized.
template <bool is_max>
void cumulative_extremum(const at::Tensor& self, at::Tensor& values, at::Tensor& indices, int64_t dim,
                         const char* name) {
  if (self.numel() == 0) return;
  dim = at::maybe_wrap_dim(dim, self.dim());
  auto x = contiguous(self);
  int64_t size = self.size(dim), inner = 1;
  for (int64_t d = dim + 1; d < self.dim(); ++d) inner *= self.size(d);
  const int64_t outer = self.numel() / (size * inner);
  write_contiguous(values, [&](const at::Tensor& v) {
    write_contiguous(indices, [&](const at::Tensor& i) {
      RBLN_DISPATCH_ALL(self.scalar_type(), "cumulative_extremum", [&] {
        const auto* xp = x.const_data_ptr<scalar_t>();
        auto* vp = v.data_ptr<scalar_t>();
        auto* ip = i.data_ptr<int64_t>();
        launch_on(self, name, [=] {
          at::parallel_for(0, outer * inner, std::max<int64_t>(1, kGrainSize / size), [&](int64_t lo, int64_t hi) {
            for (int64_t r = lo; r < hi; ++r) {
              const int64_t base = (r / inner) * size * inner + r % inner;
              scalar_t best = xp[base];
              int64_t index = 0;
              for (int64_t j = 0; j < size; ++j) {
                const scalar_t cur = xp[base + j * inner];
                const bool takes = is_max ? cur >= best : cur <= best;
                if (at::_isnan(cur) || (!at::_isnan(best) && takes)) {
                  best = cur;
                  index = j;
                }
                vp[base + j * inner] = best;
                ip[base + j * inner] = index;
              }
            }
          });
        });
      });
    });
  });
}

}  // namespace

void cummax_helper(const at::Tensor& self, at::Tensor& values, at::Tensor& indices, int64_t dim) {
  cumulative_extremum<true>(self, values, indices, dim, "aten::_cummax_helper");
}
void cummin_helper(const at::Tensor& self, at::Tensor& values, at::Tensor& indices, int64_t dim) {
  cumulative_extremum<false>(self, values, indices, dim, "aten::_cummin_helper");
}

at::Tensor& cumsum_out(const at::Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype, at::Tensor& out) {
  return scan_out(self, dim, dtype, out, Scan::sum, "cumsum", "aten::cumsum");
}
at::Tensor& cumprod_out(const at::Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype, at::Tensor& out) {
  return scan_out(self, dim, dtype, out, Scan::product, "cumprod", "aten::cumprod");
}
at::Tensor& _logcumsumexp_out(const at::Tensor& self, int64_t dim, at::Tensor& out) {
  return scan_out(self, dim, self.scalar_type(), out, Scan::logsumexp, "logcumsumexp", "aten::_logcumsumexp");
}

}  // namespace rbln::kernels
