// The reduction family: sum, mean, amax/amin, max/min (values and indices),
// argmax/argmin. The reduced dims are moved innermost and made contiguous,
// so every reduction is a row reduction over [outer, inner].
#include <ATen/AccumulateType.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/isnan.h>
#include <ATen/ops/where.h>

#include <bitset>
#include <cmath>
#include <vector>

#include "kernels/Common.h"
#include "kernels/Kernels.h"
#include "kernels/Parallel.h"
#include "kernels/Reduce.h"
#include "kernels/vec/VecKernels.h"

namespace rbln::kernels {

Plan plan(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim, at::ScalarType compute) {
  const int64_t ndim = self.dim();
  std::bitset<64> reduced;
  if (!dims || dims->empty()) {
    reduced.set();
  } else {
    for (auto d : *dims) {
      auto w = at::maybe_wrap_dim(d, std::max<int64_t>(ndim, 1));
      TORCH_CHECK(!reduced[w], "dim ", w, " appears multiple times in the list of dims");
      reduced.set(w);
    }
  }
  Plan p;
  std::vector<int64_t> perm;
  p.outer = p.inner = 1;
  for (int64_t d = 0; d < ndim; ++d) {
    if (reduced[d]) {
      if (keepdim) p.out_sizes.push_back(1);
    } else {
      p.out_sizes.push_back(self.size(d));
      perm.push_back(d);
      p.outer *= self.size(d);
    }
  }
  for (int64_t d = 0; d < ndim; ++d) {
    if (reduced[d]) {
      perm.push_back(d);
      p.inner *= self.size(d);
    }
  }
  auto permuted = ndim ? self.permute(perm) : self;
  if (permuted.is_contiguous() && self.scalar_type() == compute) {
    p.rows = permuted;
  } else {
    p.rows = at::empty(permuted.sizes(), self.options().dtype(compute));
    device_copy(p.rows, permuted);
  }
  return p;
}

namespace {

enum class Op { kSum, kMean, kMax, kMin };

// values (and indices, for max/min) into contiguous outputs.
void run(const Plan& p, Op op, const at::Tensor& values, const at::Tensor* indices, const char* name) {
  if (p.outer == 0) return;
  RBLN_DISPATCH_ALL(p.rows.scalar_type(), "reduce", [&] {
    using acc_t = at::acc_type<scalar_t, false>;
    const auto* in = p.rows.const_data_ptr<scalar_t>();
    auto* out = values.data_ptr<scalar_t>();
    auto* idx = indices ? indices->data_ptr<int64_t>() : nullptr;
    const int64_t outer = p.outer, inner = p.inner;
    if ((op == Op::kSum || op == Op::kMean) && inner >= 4 * kGrainSize && outer < 4 * at::get_num_threads()) {
      // Few long rows (a full reduction is one row): split each row into fixed
      // pieces summed in parallel (claimed by the threads), then add the pieces
      // in order, so the result does not depend on the threads.
      launch_on(values, name, [=] {
        constexpr int64_t kPiece = 1 << 16;
        const int64_t pieces = (inner + kPiece - 1) / kPiece;
        std::vector<acc_t> partial(outer * pieces);
        const int64_t total = outer * pieces;
        parallel_claim(total, std::min<int64_t>(at::get_num_threads(), total), [&](int64_t t, int64_t) {
          const scalar_t* piece = in + (t / pieces) * inner + (t % pieces) * kPiece;
          const int64_t len = std::min(kPiece, inner - (t % pieces) * kPiece);
          if constexpr (std::is_same_v<scalar_t, float>) {
            partial[t] = static_cast<acc_t>(vec::table().sum_f32(reinterpret_cast<const float*>(piece), len));
          } else {
            acc_t acc = 0;
            for (int64_t j = 0; j < len; ++j) acc += static_cast<acc_t>(piece[j]);
            partial[t] = acc;
          }
        });
        for (int64_t r = 0; r < outer; ++r) {
          acc_t acc = 0;
          for (int64_t k = 0; k < pieces; ++k) acc += partial[r * pieces + k];
          if (op == Op::kMean) acc /= static_cast<acc_t>(inner);
          out[r] = static_cast<scalar_t>(acc);
        }
      });
      return;
    }
    launch_on(values, name, [=] {
      at::parallel_for(0, outer, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(inner, 1)), [&](int64_t b,
                                                                                                   int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          const scalar_t* row = in + r * inner;
          if (op == Op::kSum || op == Op::kMean) {
            acc_t acc = 0;
            for (int64_t j = 0; j < inner; ++j) acc += static_cast<acc_t>(row[j]);
            if (op == Op::kMean) acc /= static_cast<acc_t>(inner);
            out[r] = static_cast<scalar_t>(acc);
            continue;
          }
          scalar_t best = row[0];
          int64_t best_j = 0;
          for (int64_t j = 1; j < inner; ++j) {
            auto v = row[j];
            if constexpr (std::is_floating_point_v<at::opmath_type<scalar_t>>) {
              if (std::isnan(static_cast<float>(best))) break;
              if (std::isnan(static_cast<float>(v))) {
                best = v;
                best_j = j;
                break;
              }
            }
            if (op == Op::kMax ? (v > best) : (v < best)) {
              best = v;
              best_j = j;
            }
          }
          out[r] = best;
          if (idx) idx[r] = best_j;
        }
      });
    });
  });
}

at::ScalarType sum_dtype(const at::Tensor& self, std::optional<at::ScalarType> dtype) {
  if (dtype) return *dtype;
  return at::isIntegralType(self.scalar_type(), /*includeBool=*/true) ? at::kLong : self.scalar_type();
}

at::ScalarType mean_dtype(const at::Tensor& self, std::optional<at::ScalarType> dtype) {
  auto t = dtype.value_or(self.scalar_type());
  TORCH_CHECK(at::isFloatingType(t) || at::isComplexType(t), "mean(): could not infer output dtype. ",
              dtype ? "Optional" : "Input", " dtype must be either a floating point or complex dtype. Got: ", t);
  return t;
}

at::Tensor& reduce_into(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim, at::ScalarType dtype,
                        at::Tensor& out, Op op, const char* name) {
  auto p = plan(self, dim, keepdim, dtype);
  prepare_out(out, p.out_sizes, dtype, self, name);
  if (op == Op::kMean && p.inner == 0) return fill_Scalar(out, std::nan(""));
  if (p.inner == 0) return fill_Scalar(out, 0);
  write_contiguous(out, [&](const at::Tensor& target) { run(p, op, target, nullptr, name); });
  return out;
}

void check_nonempty(const at::Tensor& self, const char* op) {
  TORCH_CHECK(self.numel() > 0, op, "(): Expected reduction dim to be specified for input.numel() == 0. ",
              "Specify the reduction dim with the 'dim' argument.");
}

std::tuple<at::Tensor&, at::Tensor&> extremum_dim(const at::Tensor& self, int64_t dim, bool keepdim,
                                                  at::Tensor& values, at::Tensor& indices, Op op, const char* name) {
  dim = at::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
  TORCH_CHECK(self.dim() == 0 || self.size(dim) > 0, name, "(): Expected reduction dim ", dim,
              " to have non-zero size.");
  int64_t dims[1] = {dim};
  auto p = plan(self, at::IntArrayRef(dims, self.dim() ? 1 : 0), keepdim, self.scalar_type());
  prepare_out(values, p.out_sizes, self.scalar_type(), self, name);
  prepare_out(indices, p.out_sizes, at::kLong, self, name);
  auto v = contiguous(values);
  auto i = contiguous(indices);
  run(p, op, v, &i, name);
  if (!v.is_same(values)) device_copy(values, v);
  if (!i.is_same(indices)) device_copy(indices, i);
  return {values, indices};
}

at::Tensor full_extremum(const at::Tensor& self, Op op, const char* name) {
  check_nonempty(self, name);
  auto out = at::empty({0}, self.options());
  return reduce_into(self, std::nullopt, false, self.scalar_type(), out, op, name);
}

at::Tensor arg_extremum(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim, Op op, const char* name) {
  if (!dim) {
    check_nonempty(self, name);
    auto values = at::empty({0}, self.options());
    auto indices = at::empty({0}, self.options().dtype(at::kLong));
    extremum_dim(self.reshape({-1}), 0, false, values, indices, op, name);
    return keepdim ? indices.reshape(std::vector<int64_t>(self.dim(), 1)) : indices;
  }
  auto values = at::empty({0}, self.options());
  auto indices = at::empty({0}, self.options().dtype(at::kLong));
  extremum_dim(self, *dim, keepdim, values, indices, op, name);
  return indices;
}

}  // namespace

at::Tensor& sum_IntList_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                            std::optional<at::ScalarType> dtype, at::Tensor& out) {
  return reduce_into(self, dim, keepdim, dtype.value_or(out.scalar_type()), out, Op::kSum, "sum");
}
at::Tensor sum_dim_IntList(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                           std::optional<at::ScalarType> dtype) {
  auto out = at::empty({0}, self.options().dtype(sum_dtype(self, dtype)));
  return reduce_into(self, dim, keepdim, out.scalar_type(), out, Op::kSum, "sum");
}
// NaNs count as zero: the sum of the input with its NaNs replaced.
at::Tensor nansum(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                  std::optional<at::ScalarType> dtype) {
  const auto x = at::isFloatingType(self.scalar_type()) ? at::where(at::isnan(self), 0, self) : self;
  return sum_dim_IntList(x, dim, keepdim, dtype);
}
at::Tensor trace(const at::Tensor& self) {
  TORCH_CHECK(self.dim() == 2, "trace: expected a matrix, but got tensor with dim ", self.dim());
  return sum_dim_IntList(self.diagonal(), std::nullopt, false, std::nullopt);
}
at::Tensor& mean_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                     std::optional<at::ScalarType> dtype, at::Tensor& out) {
  return reduce_into(self, dim, keepdim, mean_dtype(self, dtype ? dtype : out.scalar_type()), out, Op::kMean, "mean");
}
at::Tensor mean_dim(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                    std::optional<at::ScalarType> dtype) {
  auto out = at::empty({0}, self.options().dtype(mean_dtype(self, dtype)));
  return reduce_into(self, dim, keepdim, out.scalar_type(), out, Op::kMean, "mean");
}
at::Tensor& amax_out(const at::Tensor& self, at::IntArrayRef dim, bool keepdim, at::Tensor& out) {
  check_nonempty(self, "amax");
  return reduce_into(self, dim, keepdim, self.scalar_type(), out, Op::kMax, "amax");
}
at::Tensor amax(const at::Tensor& self, at::IntArrayRef dim, bool keepdim) {
  auto out = at::empty({0}, self.options());
  return amax_out(self, dim, keepdim, out);
}
at::Tensor& amin_out(const at::Tensor& self, at::IntArrayRef dim, bool keepdim, at::Tensor& out) {
  check_nonempty(self, "amin");
  return reduce_into(self, dim, keepdim, self.scalar_type(), out, Op::kMin, "amin");
}
at::Tensor amin(const at::Tensor& self, at::IntArrayRef dim, bool keepdim) {
  auto out = at::empty({0}, self.options());
  return amin_out(self, dim, keepdim, out);
}
at::Tensor max(const at::Tensor& self) { return full_extremum(self, Op::kMax, "max"); }
at::Tensor min(const at::Tensor& self) { return full_extremum(self, Op::kMin, "min"); }

std::tuple<at::Tensor&, at::Tensor&> max_dim_max(const at::Tensor& self, int64_t dim, bool keepdim, at::Tensor& max,
                                                 at::Tensor& max_values) {
  return extremum_dim(self, dim, keepdim, max, max_values, Op::kMax, "max");
}
std::tuple<at::Tensor, at::Tensor> max_dim(const at::Tensor& self, int64_t dim, bool keepdim) {
  auto values = at::empty({0}, self.options());
  auto indices = at::empty({0}, self.options().dtype(at::kLong));
  extremum_dim(self, dim, keepdim, values, indices, Op::kMax, "max");
  return {values, indices};
}
std::tuple<at::Tensor&, at::Tensor&> min_dim_min(const at::Tensor& self, int64_t dim, bool keepdim, at::Tensor& min,
                                                 at::Tensor& min_indices) {
  return extremum_dim(self, dim, keepdim, min, min_indices, Op::kMin, "min");
}
std::tuple<at::Tensor, at::Tensor> min_dim(const at::Tensor& self, int64_t dim, bool keepdim) {
  auto values = at::empty({0}, self.options());
  auto indices = at::empty({0}, self.options().dtype(at::kLong));
  extremum_dim(self, dim, keepdim, values, indices, Op::kMin, "min");
  return {values, indices};
}
at::Tensor argmax(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim) {
  return arg_extremum(self, dim, keepdim, Op::kMax, "argmax");
}
at::Tensor argmin(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim) {
  return arg_extremum(self, dim, keepdim, Op::kMin, "argmin");
}

}  // namespace rbln::kernels
