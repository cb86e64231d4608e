// The reduction family: sum, mean, amax/amin, max/min (values and indices),
// argmax/argmin, over the plan of kernels/reduction/Reduce.h, and equal. Float32 rows and
// columns take the vector loops of kernels/vec; other dtypes fold element by element.
#include <ATen/AccumulateType.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/ReduceOpsUtils.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/isnan.h>
#include <ATen/ops/where.h>

#include <algorithm>
#include <bitset>
#include <cmath>
#include <limits>
#include <vector>

#include "generated/RBLNNativeFunctions.h"
#include "kernels/common/Common.h"
#include "runtime/device/RBLNParallel.h"
#include "kernels/reduction/Reduce.h"
#include "kernels/vec/VecKernels.h"

namespace rbln::kernels {

Plan plan(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim, at::ScalarType compute,
          bool empty_reduces_all) {
  const int64_t ndim = self.dim();
  TORCH_CHECK(ndim <= 64, "only tensors with up to 64 dims are supported");  // CPU's dim_list_to_bitset
  std::bitset<64> reduced;
  if (!dims || (dims->empty() && empty_reduces_all)) {
    reduced.set();
  } else {
    for (auto d : *dims) {
      auto w = at::maybe_wrap_dim(d, std::max<int64_t>(ndim, 1));
      TORCH_CHECK(!reduced[w], "dim ", w, " appears multiple times in the list of dims");
      reduced.set(w);
    }
  }
  Plan p;
  std::vector<int64_t> kept, folded;
  // first and last reduced dim of more than one element: between them, every
  // dim of more than one element must be reduced for the block to be the input
  int64_t first = ndim, last = -1;
  bool adjacent = true;
  for (int64_t d = 0; d < ndim; ++d) {
    if (reduced[d]) {
      if (keepdim) p.out_sizes.push_back(1);
      folded.push_back(d);
      if (self.size(d) != 1) first = std::min(first, d), last = d;
    } else {
      p.out_sizes.push_back(self.size(d));
      kept.push_back(d);
    }
  }
  for (int64_t d = first + 1; d < last; ++d) adjacent &= reduced[d] || self.size(d) == 1;
  if (adjacent) {
    auto count = [&](int64_t lo, int64_t hi) {
      int64_t n = 1;
      for (int64_t d = lo; d < hi; ++d) n *= self.size(d);
      return n;
    };
    if (last < 0) first = last = ndim;  // nothing of more than one element is reduced
    else ++last;
    p.lines = {count(0, first), count(first, last), count(last, ndim)};
    if (self.is_contiguous() && self.scalar_type() == compute) {
      p.rows = self;
    } else {
      p.rows = at::empty(self.sizes(), self.options().dtype(compute));
      device_copy(p.rows, self);
    }
    return p;
  }
  int64_t outer = 1, inner = 1;
  for (auto d : kept) outer *= self.size(d);
  for (auto d : folded) inner *= self.size(d);
  kept.insert(kept.end(), folded.begin(), folded.end());
  auto permuted = self.permute(kept);
  p.lines = {outer, inner, 1};
  p.rows = at::empty(permuted.sizes(), self.options().dtype(compute));
  device_copy(p.rows, permuted);
  return p;
}

namespace {

enum class Op { kSum, kMean, kMax, kMin };

template <class T>
bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<at::opmath_type<T>>) return std::isnan(static_cast<float>(v));
  return false;
}
// The identity of max (lowest) and of min (highest): -inf/+inf where the type has them.
template <class T>
T lowest() {
  if constexpr (std::numeric_limits<T>::has_infinity) return -std::numeric_limits<T>::infinity();
  return std::numeric_limits<T>::lowest();
}
template <class T>
T highest() {
  if constexpr (std::numeric_limits<T>::has_infinity) return std::numeric_limits<T>::infinity();
  return std::numeric_limits<T>::max();
}

template <class Acc, class T>
Acc row_sum(const T* x, int64_t n) {
  if constexpr (std::is_same_v<T, float>) return static_cast<Acc>(vec::table().row_sum_f32(x, n));
  Acc acc = 0;
  for (int64_t j = 0; j < n; ++j) acc += static_cast<Acc>(x[j]);
  return acc;
}

// A piece of a long row: CPU's order depends on how its threads split the
// row, so float32 takes the fastest vector sum (float blocks added in double).
template <class Acc, class T>
Acc piece_sum(const T* x, int64_t n) {
  if constexpr (std::is_same_v<T, float>) return static_cast<Acc>(vec::table().sum_f32(x, n));
  return row_sum<Acc>(x, n);
}

// Whether x replaces the best value a of a max (min): greater (less), or NaN.
template <class T>
bool beats(T x, T a, bool max) {
  return (max ? x > a : x < a) || is_nan(x);
}
// max (or min) folding: a NaN wins and stays.
template <class T>
auto extremum_step(bool max) {
  return [max](T a, T x, int64_t) { return beats(x, a, max) ? x : a; };
}
template <class T>
T row_extremum(const T* x, int64_t n, bool max) {
  T a = max ? lowest<T>() : highest<T>();
  auto step = extremum_step<T>(max);
  for (int64_t j = 0; j < n; ++j) a = step(a, x[j], j);
  return a;
}
float row_extremum(const float* x, int64_t n, bool max) { return vec::table().extremum_f32(x, n, max); }

// Float32 columns, a tile at a time: the vector sums (in CPU's order: its
// serial loop puts the leading multiple of 32 columns, or of 4 below 8
// columns, in the cascade groups) or max/min; store(i, float).
template <class Store>
void launch_float_cols(const Plan& p, const at::Tensor& out, const char* name, Op op, Store store) {
  const float* in = p.rows.const_data_ptr<float>();
  const Lines l = p.lines;
  const int64_t cascade = l.cols >= 8 ? l.cols / 32 * 32 : l.cols / 4 * 4;
  launch_on(out, name, [=] {
    for_column_tiles(l, [&](int64_t o, int64_t c0, int64_t w) {
      float acc[kColumnTile];
      const float* x = in + o * l.inner * l.cols + c0;
      if (op == Op::kSum || op == Op::kMean) {
        vec::table().sum_cols_f32(x, l.inner, w, l.cols, std::clamp<int64_t>(cascade - c0, 0, w), acc);
      } else {
        vec::table().extremum_cols_f32(x, l.inner, w, l.cols, op == Op::kMax, acc);
      }
      for (int64_t c = 0; c < w; ++c) store(o * l.cols + c0 + c, acc[c]);
    });
  });
}

// Rows (cols == 1): row(o) for each row, the rows split over the threads;
// few long rows (a full reduction is one row) are cut into fixed pieces
// folded in parallel, piece(o, start, len) -> Acc, the pieces then combined
// in order, so results do not depend on the threads. store(o, Acc).
template <class Row, class Piece, class Combine, class Store>
void launch_rows_or_pieces(const at::Tensor& out, const char* name, Lines l, Row row, Piece piece, Combine combine,
                           Store store) {
  if (l.inner < 4 * kGrainSize || l.outer >= 4 * at::get_num_threads()) return launch_rows(out, name, l, row);
  using Acc = decltype(piece(0, 0, 1));
  launch_on(out, name, [=] {
    constexpr int64_t kPiece = 1 << 16;
    const int64_t pieces = (l.inner + kPiece - 1) / kPiece, total = l.outer * pieces;
    std::vector<Acc> partial(total);
    parallel_claim(total, std::min<int64_t>(at::get_num_threads(), total), [&](int64_t t, int64_t) {
      const int64_t start = (t % pieces) * kPiece;
      partial[t] = piece(t / pieces, start, std::min(kPiece, l.inner - start));
    });
    for (int64_t o = 0; o < l.outer; ++o) {
      Acc acc = partial[o * pieces];
      for (int64_t k = 1; k < pieces; ++k) acc = combine(acc, partial[o * pieces + k]);
      store(o, acc);
    }
  });
}

// The best value so far and its position (index -1: none yet). A NaN wins and stays.
template <class T>
struct Best {
  T value;
  int64_t index;
};

template <class T>
auto best_step(bool max) {
  return [max](Best<T> a, T x, int64_t r) {
    if (a.index >= 0 && (is_nan(a.value) || !beats(x, a.value, max))) return a;
    return Best<T>{x, r};
  };
}
template <class T>
Best<T> row_best(const T* x, int64_t n, bool max) {
  Best<T> a{T(0), -1};
  auto step = best_step<T>(max);
  for (int64_t j = 0; j < n; ++j) a = step(a, x[j], j);
  return a;
}
// The vector extremum, then the first position holding it.
Best<float> row_best(const float* x, int64_t n, bool max) {
  const float v = vec::table().extremum_f32(x, n, max);
  int64_t j = 0;
  if (std::isnan(v)) {
    while (!std::isnan(x[j])) ++j;
  } else {
    while (x[j] != v) ++j;
  }
  return {x[j], j};  // CPU's value is the element at the index (-0.0 where max says 0.0)
}

// Sums and means (every dtype, complex too) into a contiguous output.
template <class scalar_t>
void run_sum(const Plan& p, Op op, const at::Tensor& values, const char* name) {
  using acc_t = at::acc_type<scalar_t, false>;
  const auto* in = p.rows.const_data_ptr<scalar_t>();
  auto* out = values.data_ptr<scalar_t>();
  const Lines l = p.lines;
  const bool mean = op == Op::kMean;
  auto store = [out, mean, inner = l.inner](int64_t i, acc_t acc) {
    if (mean) acc /= static_cast<acc_t>(inner);
    out[i] = static_cast<scalar_t>(acc);
  };
  if constexpr (std::is_same_v<scalar_t, float>) {
    if (l.cols > 1) return launch_float_cols(p, values, name, op, store);
  }
  if (l.cols > 1) {
    return launch_lines<scalar_t>(p, values, name, acc_t(0),
                                  [](acc_t a, scalar_t x, int64_t) { return a + static_cast<acc_t>(x); }, store);
  }
  launch_rows_or_pieces(values, name, l, [=](int64_t o) { store(o, row_sum<acc_t>(in + o * l.inner, l.inner)); },
                        [=](int64_t o, int64_t start, int64_t len) {  // CPU splits long rows its own way
                          return piece_sum<acc_t>(in + o * l.inner + start, len);
                        },
                        [](acc_t a, acc_t b) { return a + b; }, store);
}

// values (and indices, for max/min) into contiguous outputs.
void run(const Plan& p, Op op, const at::Tensor& values, const at::Tensor* indices, const char* name) {
  if (p.outputs() == 0) return;
  if (op == Op::kSum || op == Op::kMean) {
    // complex32 too (sum only: ops.yaml), accumulated in complex64 as CUDA's sum does
    RBLN_DISPATCH_ALL_AND_COMPLEX32(p.rows.scalar_type(), "reduce", [&] { run_sum<scalar_t>(p, op, values, name); });
    return;
  }
  RBLN_DISPATCH_ALL(p.rows.scalar_type(), "reduce", [&] {
    const auto* in = p.rows.const_data_ptr<scalar_t>();
    auto* out = values.data_ptr<scalar_t>();
    const Lines l = p.lines;
    const bool max = op == Op::kMax;
    if (!indices) {  // amax/amin: values only
      if (l.cols == 1) {
        auto step = extremum_step<scalar_t>(max);
        launch_rows_or_pieces(
            values, name, l, [=](int64_t o) { out[o] = row_extremum(in + o * l.inner, l.inner, max); },
            [=](int64_t o, int64_t start, int64_t len) { return row_extremum(in + o * l.inner + start, len, max); },
            [step](scalar_t a, scalar_t b) { return step(a, b, 0); }, [out](int64_t i, scalar_t a) { out[i] = a; });
      } else if (p.rows.scalar_type() == at::kFloat) {
        launch_float_cols(p, values, name, op, [out](int64_t i, float a) { out[i] = static_cast<scalar_t>(a); });
      } else {
        launch_lines<scalar_t>(p, values, name, max ? lowest<scalar_t>() : highest<scalar_t>(),
                               extremum_step<scalar_t>(max), [out](int64_t i, scalar_t a) { out[i] = a; });
      }
      return;
    }
    auto* idx = indices->data_ptr<int64_t>();
    auto store = [out, idx](int64_t i, Best<scalar_t> a) {
      out[i] = a.value;
      idx[i] = a.index;
    };
    if (l.cols == 1) {
      auto step = best_step<scalar_t>(max);
      launch_rows_or_pieces(
          values, name, l, [=](int64_t o) { store(o, row_best(in + o * l.inner, l.inner, max)); },
          [=](int64_t o, int64_t start, int64_t len) {
            auto b = row_best(in + o * l.inner + start, len, max);
            return Best<scalar_t>{b.value, b.index + start};
          },
          [step](Best<scalar_t> a, Best<scalar_t> b) { return a.index < 0 ? b : step(a, b.value, b.index); }, store);
    } else {
      launch_lines<scalar_t>(p, values, name, Best<scalar_t>{scalar_t(0), -1}, best_step<scalar_t>(max), store);
    }
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
  if (op == Op::kMean && p.inner() == 0) return fill_Scalar(out, std::nan(""));
  if (p.inner() == 0) return fill_Scalar(out, 0);
  write_contiguous(out, [&](const at::Tensor& target) { run(p, op, target, nullptr, name); });
  return out;
}

void check_nonempty(const at::Tensor& self, const char* op) {
  TORCH_CHECK(self.numel() > 0, op, "(): Expected reduction dim to be specified for input.numel() == 0. ",
              "Specify the reduction dim with the 'dim' argument.");
}
// max and min have no identity: CPU's errors for an empty input (an empty
// result is fine where only kept dims are empty).
void check_reduced_nonempty(const at::Tensor& self, at::IntArrayRef dims, const char* op) {
  if (self.numel() != 0) return;
  if (dims.empty()) check_nonempty(self, op);
  for (auto d : dims) {
    d = at::maybe_wrap_dim(d, std::max<int64_t>(self.dim(), 1));
    TORCH_CHECK_INDEX(self.dim() == 0 || self.size(d) != 0, op, "(): Expected reduction dim ", d,
                      " to have non-zero size.");
  }
}

std::tuple<at::Tensor&, at::Tensor&> extremum_dim(const at::Tensor& self, int64_t dim, bool keepdim,
                                                  at::Tensor& values, at::Tensor& indices, Op op, const char* name) {
  dim = at::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
  check_reduced_nonempty(self, dim, name);
  int64_t dims[1] = {dim};
  auto p = plan(self, at::IntArrayRef(dims, self.dim() ? 1 : 0), keepdim, self.scalar_type());
  check_no_overlap(values, {&self});
  check_no_overlap(indices, {&self});
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
    TORCH_CHECK_INDEX(self.numel() > 0, name, "(): Expected reduction dim to be specified for input.numel() == 0.");
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

// The result's dtype: `dtype`, else out='s (as CPU's meta functions), else the functional's rule.
at::Tensor& sum_IntList_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                            std::optional<at::ScalarType> dtype, at::Tensor& out) {
  const auto type = out.defined() ? dtype.value_or(out.scalar_type()) : sum_dtype(self, dtype);
  return reduce_into(self, dim, keepdim, type, out, Op::kSum, "sum");
}
// NaNs count as zero: the sum of the input with its NaNs replaced.
at::Tensor nansum(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                  std::optional<at::ScalarType> dtype) {
  const auto x = at::isFloatingType(self.scalar_type()) ? at::where(at::isnan(self), 0, self) : self;
  at::Tensor out;
  return sum_IntList_out(x, dim, keepdim, dtype, out);
}
at::Tensor trace(const at::Tensor& self) {
  TORCH_CHECK(self.dim() == 2, "trace: expected a matrix, but got tensor with dim ", self.dim());
  at::Tensor out;
  return sum_IntList_out(self.diagonal(), std::nullopt, false, std::nullopt, out);
}
at::Tensor& mean_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                     std::optional<at::ScalarType> dtype, at::Tensor& out) {
  const auto type = mean_dtype(self, dtype || !out.defined() ? dtype : out.scalar_type());
  return reduce_into(self, dim, keepdim, type, out, Op::kMean, "mean");
}
at::Tensor& amax_out(const at::Tensor& self, at::IntArrayRef dim, bool keepdim, at::Tensor& out) {
  check_reduced_nonempty(self, dim, "amax");
  return reduce_into(self, dim, keepdim, self.scalar_type(), out, Op::kMax, "amax");
}
at::Tensor& amin_out(const at::Tensor& self, at::IntArrayRef dim, bool keepdim, at::Tensor& out) {
  check_reduced_nonempty(self, dim, "amin");
  return reduce_into(self, dim, keepdim, self.scalar_type(), out, Op::kMin, "amin");
}
// Both extremes, with CPU's checks (aminmax's meta function): over one dim, or over all with a
// nonempty input.
std::tuple<at::Tensor&, at::Tensor&> aminmax_out(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim,
                                                 at::Tensor& min, at::Tensor& max) {
  at::OptionalIntArrayRef dims;
  int64_t wrapped = 0;
  if (dim) {
    wrapped = at::maybe_wrap_dim(*dim, self.dim());
    at::native::zero_numel_check_dims(self, wrapped, "aminmax");
    dims = at::IntArrayRef(&wrapped, self.dim() ? 1 : 0);
  } else {
    TORCH_CHECK(self.numel() > 0,
                "aminmax(): cannot compute aminmax over an empty dimension as the operation has no identity.");
  }
  check_no_overlap(min, {&self});
  check_no_overlap(max, {&self});
  reduce_into(self, dims, keepdim, self.scalar_type(), min, Op::kMin, "aminmax");
  reduce_into(self, dims, keepdim, self.scalar_type(), max, Op::kMax, "aminmax");
  return {min, max};
}
at::Tensor max(const at::Tensor& self) { return full_extremum(self, Op::kMax, "max"); }
at::Tensor min(const at::Tensor& self) { return full_extremum(self, Op::kMin, "min"); }

std::tuple<at::Tensor&, at::Tensor&> max_dim_max(const at::Tensor& self, int64_t dim, bool keepdim, at::Tensor& max,
                                                 at::Tensor& max_values) {
  return extremum_dim(self, dim, keepdim, max, max_values, Op::kMax, "max");
}
std::tuple<at::Tensor&, at::Tensor&> min_dim_min(const at::Tensor& self, int64_t dim, bool keepdim, at::Tensor& min,
                                                 at::Tensor& min_indices) {
  return extremum_dim(self, dim, keepdim, min, min_indices, Op::kMin, "min");
}
at::Tensor argmax(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim) {
  return arg_extremum(self, dim, keepdim, Op::kMax, "argmax");
}
at::Tensor argmin(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim) {
  return arg_extremum(self, dim, keepdim, Op::kMin, "argmin");
}

// All elements equal: an elementwise compare on the device, one count read back.
bool equal(const at::Tensor& self, const at::Tensor& other) {
  check_same_device({&self, &other});
  if (self.sizes() != other.sizes()) return false;
  if (self.numel() == 0) return true;
  // Elementwise on the device (promoting mixed dtypes, as CPU does), then one boolean read back.
  auto same = at::eq(self, other).logical_not_().sum().item<int64_t>();
  return same == 0;
}

}  // namespace rbln::kernels
