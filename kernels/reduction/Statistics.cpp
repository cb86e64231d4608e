// More reductions over the reduction plan and loop (kernels/reduction/Reduce.h):
// all/any, prod, variance and standard deviation (with their means), vector
// norms. Each is an accumulator, a step and a final store. count_nonzero over
// dims is CPU's composition of two device ops.
#include <ATen/AccumulateType.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/ne.h>
#include <ATen/ops/sum.h>

#include <cmath>
#include <limits>

#include "generated/RBLNNativeFunctions.h"
#include "kernels/common/Common.h"
#include "kernels/common/Dispatch.h"
#include "kernels/reduction/Reduce.h"
#include "kernels/vec/VecKernels.h"

namespace rbln::kernels {
namespace {

// Writes `fill(target)` into `out`, sized and typed by the plan.
// With `castable`, out may have any dtype the result casts to (CPU's std/var).
template <class F>
at::Tensor& reduce_to(at::Tensor& out, const Plan& p, at::ScalarType dtype, const at::Tensor& self, const char* op,
                      F fill, bool castable = false) {
  if (castable && out.defined()) {
    TORCH_CHECK(at::canCast(dtype, out.scalar_type()), "result type ", dtype, " can't be cast to the desired output type ",
                out.scalar_type());
  }
  prepare_out(out, p.out_sizes, dtype, self, op, castable);
  write_as(out, dtype, fill);
  return out;
}

at::Tensor& logical_reduce(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim, at::Tensor& out,
                           bool is_all) {
  // uint8 inputs give uint8 results, everything else bool (as on CPU).
  const auto dtype = out.defined() ? out.scalar_type() : (self.scalar_type() == at::kByte ? at::kByte : at::kBool);
  const char* name = is_all ? "aten::all" : "aten::any";
  auto p = plan(self, dims, keepdim, self.scalar_type(), /*empty_reduces_all=*/false);
  return reduce_to(out, p, dtype, self, is_all ? "all" : "any", [&](const at::Tensor& target) {
    RBLN_DISPATCH_ALL_AND_COMPLEX32_AND_FLOAT8(self.scalar_type(), "all_any", [&] {
      using C = at::opmath_type<scalar_t>;  // compared as a number: float8_e8m0fnu has no zero of its own
      auto step = [is_all](bool a, scalar_t x, int64_t) {
        return is_all ? a && static_cast<C>(x) != C(0) : a || static_cast<C>(x) != C(0);
      };
      if (dtype == at::kByte) {
        launch_lines<scalar_t>(p, target, name, is_all, step,
                               [o = target.data_ptr<uint8_t>()](int64_t i, bool a) { o[i] = a; });
      } else {
        launch_lines<scalar_t>(p, target, name, is_all, step,
                               [o = target.data_ptr<bool>()](int64_t i, bool a) { o[i] = a; });
      }
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
    RBLN_DISPATCH_ALL_AND_COMPLEX32(dtype, "prod", [&] {  // complex32 accumulated in complex64, as on CUDA
      using acc_t = at::acc_type<scalar_t, false>;
      auto* o = target.data_ptr<scalar_t>();
      launch_lines<scalar_t>(p, target, "aten::prod", acc_t(1),
                             [](acc_t a, scalar_t x, int64_t) { return a * static_cast<acc_t>(x); },
                             [o](int64_t i, acc_t a) { o[i] = static_cast<scalar_t>(a); });
    });
  });
}

void check_floating(const at::Tensor& self, const char* op) {
  TORCH_CHECK(at::isFloatingType(self.scalar_type()), op, " only supports floating point and complex dtypes, got ",
              self.scalar_type(), " (complex inputs run through the CPU fallback)");
}

// A row's mean and sum of squared deviations in two passes, and Welford's
// one-pass update for columns (their steps run side by side); both in double,
// as CPU accumulates float.
struct Moments {
  double mean, m2;
};
template <class T>
Moments row_moments(const T* x, int64_t n) {
  double sum = 0, sq = 0;
  for (int64_t j = 0; j < n; ++j) sum += static_cast<double>(x[j]);
  const double mean = sum / static_cast<double>(n);
  for (int64_t j = 0; j < n; ++j) {
    const double d = static_cast<double>(x[j]) - mean;
    sq += d * d;
  }
  return {mean, sq};
}
template <class T>
Moments welford(Moments a, T x, int64_t r) {
  const double v = static_cast<double>(x), d = v - a.mean;
  a.mean += d * (1.0 / static_cast<double>(r + 1));  // the reciprocal is shared by a row of columns
  a.m2 += d * (v - a.mean);
  return a;
}

// Queues store(i, moments of output i) over the plan.
template <class T, class Store>
void launch_moments(const Plan& p, const at::Tensor& out, const char* name, Store store) {
  if (p.outputs() == 0) return;
  if (p.lines.cols > 1 || p.inner() == 0) {
    launch_lines<T>(p, out, name, Moments{0, 0}, [](Moments a, T x, int64_t r) { return welford(a, x, r); }, store);
    return;
  }
  const T* in = p.rows.const_data_ptr<T>();
  const Lines l = p.lines;
  launch_rows(out, name, l, [=](int64_t o) { store(o, row_moments(in + o * l.inner, l.inner)); });
}

// var (or std, with take_sqrt) into `out`, and the mean into `mean_out` when defined.
void variance_into(const at::Tensor& self, at::OptionalIntArrayRef dims, const std::optional<at::Scalar>& correction,
                   bool keepdim, bool take_sqrt, at::Tensor& out, at::Tensor* mean_out) {
  const char* op = take_sqrt ? "std" : "var";
  // As CPU (get_dtype_from_result): an out= of another floating dtype is reduced in that dtype.
  if (!mean_out && out.defined() && at::isFloatingType(out.scalar_type()) && out.scalar_type() != self.scalar_type() &&
      at::isFloatingType(self.scalar_type())) {
    variance_into(self.to(out.scalar_type()), dims, correction, keepdim, take_sqrt, out, nullptr);
    return;
  }
  check_floating(self, op);
  const double c = correction ? correction->toDouble() : 1.0;
  auto p = plan(self, dims, keepdim, self.scalar_type());
  const char* name = take_sqrt ? "aten::std" : "aten::var";
  const int64_t n = p.inner();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  reduce_to(out, p, self.scalar_type(), self, op, [&](const at::Tensor& target) {
    RBLN_DISPATCH_FLOATING(self.scalar_type(), "var", [&] {
      auto* o = target.data_ptr<scalar_t>();
      launch_moments<scalar_t>(p, target, name, [o, n, c, take_sqrt, nan](int64_t i, Moments m) {
        const double v = n == 0 ? nan : m.m2 / std::max(0.0, static_cast<double>(n) - c);
        o[i] = static_cast<scalar_t>(take_sqrt ? std::sqrt(v) : v);
      });
    });
  }, /*castable=*/true);
  if (!mean_out) return;
  reduce_to(*mean_out, p, self.scalar_type(), self, op, [&](const at::Tensor& target) {
    RBLN_DISPATCH_FLOATING(self.scalar_type(), "var_mean", [&] {
      auto* o = target.data_ptr<scalar_t>();
      launch_moments<scalar_t>(p, target, "aten::mean", [o, n, nan](int64_t i, Moments m) {
        o[i] = static_cast<scalar_t>(n == 0 ? nan : m.mean);
      });
    });
  });
}

}  // namespace

// all / any: the dim, dims and full-reduction out= overloads (structured: the functionals pass no out).
#define RBLN_LOGICAL_REDUCTION(NAME, IS_ALL)                                                                      \
  at::Tensor& NAME##_out(const at::Tensor& self, int64_t dim, bool keepdim, at::Tensor& out) {                     \
    return logical_reduce(self, at::IntArrayRef(dim), keepdim, out, IS_ALL);                                       \
  }                                                                                                                \
  at::Tensor& NAME##_dims_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim, at::Tensor& out) { \
    return logical_reduce(self, dim, keepdim, out, IS_ALL);                                                        \
  }                                                                                                                \
  at::Tensor& NAME##_all_out(const at::Tensor& self, at::Tensor& out) {                                            \
    return logical_reduce(self, std::nullopt, false, out, IS_ALL);                                                 \
  }
RBLN_LOGICAL_REDUCTION(all, true)
RBLN_LOGICAL_REDUCTION(any, false)
#undef RBLN_LOGICAL_REDUCTION

at::Tensor prod(const at::Tensor& self, std::optional<at::ScalarType> dtype) {
  auto out = at::empty({0}, self.options().dtype(prod_dtype(self, dtype)));
  return prod_into(self, std::nullopt, false, out.scalar_type(), out);
}
// The result's dtype: `dtype`, else out='s (as CPU's meta function), else the functional's rule.
at::Tensor& prod_int_out(const at::Tensor& self, int64_t dim, bool keepdim, std::optional<at::ScalarType> dtype,
                         at::Tensor& out) {
  const auto type = out.defined() ? dtype.value_or(out.scalar_type()) : prod_dtype(self, dtype);
  return prod_into(self, at::IntArrayRef(dim), keepdim, type, out);
}

at::Tensor& var_correction_out(const at::Tensor& self, at::OptionalIntArrayRef dim,
                               const std::optional<at::Scalar>& correction, bool keepdim, at::Tensor& out) {
  variance_into(self, dim, correction, keepdim, false, out, nullptr);
  return out;
}
at::Tensor& std_correction_out(const at::Tensor& self, at::OptionalIntArrayRef dim,
                               const std::optional<at::Scalar>& correction, bool keepdim, at::Tensor& out) {
  variance_into(self, dim, correction, keepdim, true, out, nullptr);
  return out;
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
  TORCH_CHECK(!dtype || at::isFloatingType(*dtype) || at::isComplexType(*dtype),
              "linalg.vector_norm: dtype should be floating point or complex, but got ", *dtype);
  TORCH_CHECK(!dtype || at::promoteTypes(self.scalar_type(), *dtype) == *dtype, "linalg.vector_norm: the dtype of the ",
              "input (", self.scalar_type(), ") should be convertible without narrowing to the specified dtype (", *dtype,
              ")");
  const auto type = dtype.value_or(self.scalar_type());
  auto pl = plan(self, dim, keepdim, type);
  // As CPU and CUDA: when each output reduces one element, any order but 0 gives |x| (1's sum), without
  // the rounding (or overflow) of |x|^p and back.
  const double p = pl.inner() == 1 && ord.toDouble() != 0 ? 1.0 : ord.toDouble();
  TORCH_CHECK(!((p < 0 || std::isinf(p)) && pl.inner() == 0 && pl.outputs() > 0),
              "linalg.vector_norm cannot compute the ", ord, " norm on an empty tensor because the operation does "
              "not have an identity");
  return reduce_to(out, pl, type, self, "linalg_vector_norm", [&](const at::Tensor& target) {
    if (type == at::kFloat && pl.lines.cols == 1 && (p == 1 || p == 2) && pl.outputs() > 0) {  // vector rows
      const float* in = pl.rows.const_data_ptr<float>();
      float* o = target.data_ptr<float>();
      const Lines l = pl.lines;
      const int power = static_cast<int>(p);
      launch_rows(target, "aten::linalg_vector_norm", l, [=](int64_t r) {
        const double sum = vec::table().sum_pow_f32(in + r * l.inner, l.inner, power);
        o[r] = static_cast<float>(power == 2 ? std::sqrt(sum) : sum);
      });
      return;
    }
    RBLN_DISPATCH_FLOATING(type, "linalg_vector_norm", [&] {
      auto store = [o = target.data_ptr<scalar_t>(), p](int64_t i, double acc) {
        o[i] = static_cast<scalar_t>(std::isinf(p) || p == 0 || p == 1 ? acc
                                     : p == 2                        ? std::sqrt(acc)
                                                                     : std::pow(acc, 1.0 / p));
      };
      if (std::isinf(p)) {  // the largest (smallest) magnitude; a NaN wins
        launch_lines<scalar_t>(
            pl, target, "aten::linalg_vector_norm", p > 0 ? 0.0 : std::numeric_limits<double>::infinity(),
            [p](double a, scalar_t x, int64_t) {
              const double v = std::abs(static_cast<double>(x));
              return std::isnan(a) || (p > 0 ? a >= v : a <= v) ? a : v;
            },
            store);
        return;
      }
      launch_lines<scalar_t>(
          pl, target, "aten::linalg_vector_norm", 0.0,
          [p](double a, scalar_t x, int64_t) {
            const double v = std::abs(static_cast<double>(x));
            return a + (p == 0 ? (v != 0 || std::isnan(v)) : p == 1 ? v : p == 2 ? v * v : std::pow(v, p));
          },
          store);
    });
  });
}
// torch.norm over dims: the vector norm (p defaults to 2), as CPU computes it.
at::Tensor& norm_out(const at::Tensor& self, const std::optional<at::Scalar>& p, at::IntArrayRef dim, bool keepdim,
                     at::Tensor& out) {
  return linalg_vector_norm_out(self, p.value_or(2), dim, keepdim, std::nullopt, out);
}
// The result takes `dtype` (autocast's fp32 policy calls this with float32).
at::Tensor& norm_dtype_out(const at::Tensor& self, const std::optional<at::Scalar>& p, at::IntArrayRef dim,
                           bool keepdim, at::ScalarType dtype, at::Tensor& out) {
  TORCH_CHECK(at::isFloatingType(dtype) || at::isComplexType(dtype), "norm(): the desired output dtype should be either ",
              "floating point or complex. Got ", dtype, " instead.");
  return linalg_vector_norm_out(self, p.value_or(2), dim, keepdim, dtype, out);
}

// CPU's count_nonzero_cpu over dims: (self != 0).sum(dims); no dims counts every element.
at::Tensor count_nonzero_dim(const at::Tensor& self, at::IntArrayRef dim) { return at::ne(self, 0).sum(dim); }

}  // namespace rbln::kernels
