// More row reductions over the reduction plan (kernels/Reduce.h): all/any,
// prod, variance and standard deviation (with their means), vector norms.
// Each output element reduces one contiguous row; rows run in parallel.
#include <ATen/AccumulateType.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/ops/empty.h>

#include <cmath>
#include <limits>

#include "kernels/Common.h"
#include "kernels/Kernels.h"
#include "kernels/Reduce.h"

namespace rbln::kernels {
namespace {

// Runs row(r, first, inner) -> value for every row and stores it into `out` (contiguous, dtype Out).
template <class In, class Out, class F>
void for_rows(const Plan& p, const at::Tensor& out, const char* name, F row) {
  if (p.outer == 0) return;
  const In* in = p.rows.const_data_ptr<In>();
  Out* o = out.data_ptr<Out>();
  const int64_t outer = p.outer, inner = p.inner;
  launch_on(out, name, [=] {
    at::parallel_for(0, outer, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(inner, 1)),
                     [&](int64_t b, int64_t e) {
                       for (int64_t r = b; r < e; ++r) o[r] = static_cast<Out>(row(in + r * inner, inner));
                     });
  });
}

// Writes `fill(target)` into `out`, sized and typed by the plan.
template <class F>
at::Tensor& reduce_to(at::Tensor& out, const Plan& p, at::ScalarType dtype, const at::Tensor& self, const char* op,
                      F fill) {
  prepare_out(out, p.out_sizes, dtype, self, op);
  write_contiguous(out, fill);
  return out;
}

at::Tensor& logical_reduce(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim, at::Tensor& out,
                           bool is_all) {
  // uint8 inputs give uint8 results, everything else bool (as on CPU).
  const auto dtype = out.defined() ? out.scalar_type() : (self.scalar_type() == at::kByte ? at::kByte : at::kBool);
  const char* name = is_all ? "aten::all" : "aten::any";
  auto p = plan(self, dims, keepdim, self.scalar_type());
  return reduce_to(out, p, dtype, self, is_all ? "all" : "any", [&](const at::Tensor& target) {
    RBLN_DISPATCH_ALL(self.scalar_type(), "all_any", [&] {
      auto row = [is_all](const scalar_t* x, int64_t n) {
        for (int64_t j = 0; j < n; ++j)
          if ((x[j] != scalar_t(0)) != is_all) return !is_all;
        return is_all;
      };
      if (dtype == at::kByte) for_rows<scalar_t, uint8_t>(p, target, name, row);
      else for_rows<scalar_t, bool>(p, target, name, row);
    });
  });
}

at::ScalarType prod_dtype(const at::Tensor& self, std::optional<at::ScalarType> dtype) {
  if (dtype) return *dtype;
  return at::isIntegralType(self.scalar_type(), /*includeBool=*/true) ? at::kLong : self.scalar_type();
}

at::Tensor& prod_into(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim, at::ScalarType dtype,
                      at::Tensor& out) {
  auto p = plan(self, dims, keepdim, dtype);
  return reduce_to(out, p, dtype, self, "prod", [&](const at::Tensor& target) {
    RBLN_DISPATCH_ALL(dtype, "prod", [&] {
      using acc_t = at::acc_type<scalar_t, false>;
      for_rows<scalar_t, scalar_t>(p, target, "aten::prod", [](const scalar_t* x, int64_t n) {
        acc_t acc = 1;
        for (int64_t j = 0; j < n; ++j) acc *= static_cast<acc_t>(x[j]);
        return acc;
      });
    });
  });
}

void check_floating(const at::Tensor& self, const char* op) {
  TORCH_CHECK(at::isFloatingType(self.scalar_type()), op, " only supports floating point and complex dtypes, got ",
              self.scalar_type(), " (complex inputs run through the CPU fallback)");
}

// Mean and the sum of squared deviations of a row, in double (CPU accumulates float in double too).
template <class T>
std::pair<double, double> moments(const T* x, int64_t n) {
  double sum = 0;
  for (int64_t j = 0; j < n; ++j) sum += static_cast<double>(x[j]);
  const double mean = sum / static_cast<double>(n);
  double sq = 0;
  for (int64_t j = 0; j < n; ++j) {
    const double d = static_cast<double>(x[j]) - mean;
    sq += d * d;
  }
  return {mean, sq};
}

// var (or std, with take_sqrt) into `out`, and the mean into `mean_out` when defined.
void variance_into(const at::Tensor& self, at::OptionalIntArrayRef dims, const std::optional<at::Scalar>& correction,
                   bool keepdim, bool take_sqrt, at::Tensor& out, at::Tensor* mean_out) {
  const char* op = take_sqrt ? "std" : "var";
  check_floating(self, op);
  const double c = correction ? correction->toDouble() : 1.0;
  auto p = plan(self, dims, keepdim, self.scalar_type());
  const char* name = take_sqrt ? "aten::std" : "aten::var";
  reduce_to(out, p, self.scalar_type(), self, op, [&](const at::Tensor& target) {
    RBLN_DISPATCH_FLOATING(self.scalar_type(), "var", [&] {
      for_rows<scalar_t, scalar_t>(p, target, name, [=](const scalar_t* x, int64_t n) {
        if (n == 0) return std::numeric_limits<double>::quiet_NaN();
        const double v = moments(x, n).second / std::max(0.0, static_cast<double>(n) - c);
        return take_sqrt ? std::sqrt(v) : v;
      });
    });
  });
  if (!mean_out) return;
  reduce_to(*mean_out, p, self.scalar_type(), self, op, [&](const at::Tensor& target) {
    RBLN_DISPATCH_FLOATING(self.scalar_type(), "var_mean", [&] {
      for_rows<scalar_t, scalar_t>(p, target, "aten::mean", [](const scalar_t* x, int64_t n) {
        return n == 0 ? std::numeric_limits<double>::quiet_NaN() : moments(x, n).first;
      });
    });
  });
}

}  // namespace

// all / any: the dim, dims and full-reduction overloads, functional and out=.
#define RBLN_LOGICAL_REDUCTION(NAME, IS_ALL)                                                                      \
  at::Tensor& NAME##_out(const at::Tensor& self, int64_t dim, bool keepdim, at::Tensor& out) {                     \
    return logical_reduce(self, at::IntArrayRef(dim), keepdim, out, IS_ALL);                                       \
  }                                                                                                                \
  at::Tensor& NAME##_dims_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim, at::Tensor& out) { \
    return logical_reduce(self, dim, keepdim, out, IS_ALL);                                                        \
  }                                                                                                                \
  at::Tensor& NAME##_all_out(const at::Tensor& self, at::Tensor& out) {                                            \
    return logical_reduce(self, std::nullopt, false, out, IS_ALL);                                                 \
  }                                                                                                                \
  at::Tensor NAME##_dim(const at::Tensor& self, int64_t dim, bool keepdim) {                                       \
    at::Tensor out;                                                                                                \
    return logical_reduce(self, at::IntArrayRef(dim), keepdim, out, IS_ALL);                                       \
  }                                                                                                                \
  at::Tensor NAME##_dims(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim) {                      \
    at::Tensor out;                                                                                                \
    return logical_reduce(self, dim, keepdim, out, IS_ALL);                                                        \
  }                                                                                                                \
  at::Tensor NAME(const at::Tensor& self) {                                                                        \
    at::Tensor out;                                                                                                \
    return logical_reduce(self, std::nullopt, false, out, IS_ALL);                                                 \
  }
RBLN_LOGICAL_REDUCTION(all, true)
RBLN_LOGICAL_REDUCTION(any, false)
#undef RBLN_LOGICAL_REDUCTION

at::Tensor prod(const at::Tensor& self, std::optional<at::ScalarType> dtype) {
  auto out = at::empty({0}, self.options().dtype(prod_dtype(self, dtype)));
  return prod_into(self, std::nullopt, false, out.scalar_type(), out);
}
at::Tensor prod_dim_int(const at::Tensor& self, int64_t dim, bool keepdim, std::optional<at::ScalarType> dtype) {
  auto out = at::empty({0}, self.options().dtype(prod_dtype(self, dtype)));
  return prod_into(self, at::IntArrayRef(dim), keepdim, out.scalar_type(), out);
}
at::Tensor& prod_int_out(const at::Tensor& self, int64_t dim, bool keepdim, std::optional<at::ScalarType> dtype,
                         at::Tensor& out) {
  return prod_into(self, at::IntArrayRef(dim), keepdim, dtype.value_or(out.scalar_type()), out);
}

at::Tensor& var_correction_out(const at::Tensor& self, at::OptionalIntArrayRef dim,
                               const std::optional<at::Scalar>& correction, bool keepdim, at::Tensor& out) {
  variance_into(self, dim, correction, keepdim, false, out, nullptr);
  return out;
}
at::Tensor var_correction(const at::Tensor& self, at::OptionalIntArrayRef dim,
                          const std::optional<at::Scalar>& correction, bool keepdim) {
  auto out = at::empty({0}, self.options());
  return var_correction_out(self, dim, correction, keepdim, out);
}
at::Tensor& std_correction_out(const at::Tensor& self, at::OptionalIntArrayRef dim,
                               const std::optional<at::Scalar>& correction, bool keepdim, at::Tensor& out) {
  variance_into(self, dim, correction, keepdim, true, out, nullptr);
  return out;
}
at::Tensor std_correction(const at::Tensor& self, at::OptionalIntArrayRef dim,
                          const std::optional<at::Scalar>& correction, bool keepdim) {
  auto out = at::empty({0}, self.options());
  return std_correction_out(self, dim, correction, keepdim, out);
}
std::tuple<at::Tensor, at::Tensor> var_mean_correction(const at::Tensor& self, at::OptionalIntArrayRef dim,
                                                       const std::optional<at::Scalar>& correction, bool keepdim) {
  auto var = at::empty({0}, self.options()), mean = at::empty({0}, self.options());
  variance_into(self, dim, correction, keepdim, false, var, &mean);
  return {var, mean};
}
std::tuple<at::Tensor, at::Tensor> std_mean_correction(const at::Tensor& self, at::OptionalIntArrayRef dim,
                                                       const std::optional<at::Scalar>& correction, bool keepdim) {
  auto std = at::empty({0}, self.options()), mean = at::empty({0}, self.options());
  variance_into(self, dim, correction, keepdim, true, std, &mean);
  return {std, mean};
}

at::Tensor& linalg_vector_norm_out(const at::Tensor& self, const at::Scalar& ord, at::OptionalIntArrayRef dim,
                                   bool keepdim, std::optional<at::ScalarType> dtype, at::Tensor& out) {
  TORCH_CHECK(at::isFloatingType(self.scalar_type()),
              "linalg.vector_norm: Expected a floating point or complex tensor as input. Got ", self.scalar_type());
  const double p = ord.toDouble();
  const auto type = dtype.value_or(self.scalar_type());
  auto pl = plan(self, dim, keepdim, type);
  TORCH_CHECK(!((p < 0 || std::isinf(p)) && pl.inner == 0 && pl.outer > 0),
              "linalg.vector_norm cannot compute the ", ord, " norm on an empty tensor because the operation does "
              "not have an identity");
  return reduce_to(out, pl, type, self, "linalg_vector_norm", [&](const at::Tensor& target) {
    RBLN_DISPATCH_FLOATING(type, "linalg_vector_norm", [&] {
      for_rows<scalar_t, scalar_t>(pl, target, "aten::linalg_vector_norm", [p](const scalar_t* x, int64_t n) {
        double acc = 0;
        if (std::isinf(p)) {
          acc = p > 0 ? 0.0 : std::numeric_limits<double>::infinity();
          for (int64_t j = 0; j < n; ++j) {
            const double a = std::abs(static_cast<double>(x[j]));
            if (std::isnan(a)) return a;
            acc = p > 0 ? std::max(acc, a) : std::min(acc, a);
          }
          return acc;
        }
        for (int64_t j = 0; j < n; ++j) {
          const double a = std::abs(static_cast<double>(x[j]));
          acc += p == 0 ? (a != 0 || std::isnan(a)) : p == 1 ? a : p == 2 ? a * a : std::pow(a, p);
        }
        return p == 0 || p == 1 ? acc : p == 2 ? std::sqrt(acc) : std::pow(acc, 1.0 / p);
      });
    });
  });
}
// torch.norm over dims: the vector norm (p defaults to 2), as CPU computes it.
at::Tensor& norm_out(const at::Tensor& self, const std::optional<at::Scalar>& p, at::IntArrayRef dim, bool keepdim,
                     at::Tensor& out) {
  return linalg_vector_norm_out(self, p.value_or(2), dim, keepdim, std::nullopt, out);
}
// The result takes `dtype` (autocast's fp32 policy calls this with float32).
at::Tensor norm_dtype(const at::Tensor& self, const std::optional<at::Scalar>& p, at::IntArrayRef dim, bool keepdim,
                      at::ScalarType dtype) {
  auto out = at::empty({0}, self.options().dtype(dtype));
  return linalg_vector_norm_out(self, p.value_or(2), dim, keepdim, dtype, out);
}
at::Tensor linalg_vector_norm(const at::Tensor& self, const at::Scalar& ord, at::OptionalIntArrayRef dim,
                              bool keepdim, std::optional<at::ScalarType> dtype) {
  auto out = at::empty({0}, self.options().dtype(dtype.value_or(self.scalar_type())));
  return linalg_vector_norm_out(self, ord, dim, keepdim, dtype, out);
}

}  // namespace rbln::kernels
