// Sorting and selection along one dim: sort, topk, kthvalue, median and
// nanmedian. The dim is moved innermost and each row is sorted or selected on
// the device with CPU's comparators (NaN is the largest value) and CPU's
// algorithms (std::sort, std::stable_sort, partial_sort, nth_element, or
// kthvalue's quickselect), so even which of several equal keys is chosen is CPU's.
#include <ATen/AccumulateType.h>
#include <ATen/Dispatch_v2.h>
#include <ATen/NumericUtils.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/ReduceOpsUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/native/SortingUtils.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <type_traits>
#include <vector>

#include "generated/RBLNNativeFunctions.h"
#include "kernels/common/Common.h"

namespace rbln::kernels {
namespace {

template <class T>
bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<at::opmath_type<T>>) return std::isnan(static_cast<float>(v));
  return false;
}

// topk's accumulate type. The bare unsigned types have none (CPU sorts them but has no topk for them).
template <class T, class = void>
struct SortAcc {
  using type = at::acc_type<T, false>;
};
template <class T>
struct SortAcc<T, std::enable_if_t<std::is_unsigned_v<T> && (sizeof(T) >= 2)>> {
  using type = T;
};

// a before b: ascending with NaN last, or descending with NaN first.
template <class T>
bool before(T a, T b, bool descending) {
  if (descending) return (is_nan(a) && !is_nan(b)) || (!is_nan(b) && a > b);
  return (!is_nan(a) && is_nan(b)) || (!is_nan(a) && a < b);
}

// Rows of `self` along `dim`: sorted (topk = false) or CPU's topk selection of k; written to values/indices.
void sort_rows(const at::Tensor& self, int64_t dim, int64_t k, bool descending, bool stable, bool topk, bool sorted,
               at::Tensor& values, at::Tensor& indices, const char* name) {
  const int64_t n = self.dim() ? self.size(dim) : 1;
  auto out_sizes = self.sizes().vec();
  if (self.dim()) out_sizes[dim] = k;
  prepare_out(values, out_sizes, self.scalar_type(), self, name);
  prepare_out(indices, out_sizes, at::kLong, self, name);
  if (values.numel() == 0) return;
  // Rows are contiguous after moving `dim` last.
  auto rows = self.dim() ? contiguous(self.movedim(dim, -1)) : contiguous(self.reshape({1}));
  auto moved_sizes = rows.sizes().vec();
  moved_sizes.back() = k;
  auto v = at::empty(moved_sizes, values.options()), i = at::empty(moved_sizes, indices.options());
  const int64_t outer = rows.numel() / std::max<int64_t>(n, 1);
  AT_DISPATCH_V2(self.scalar_type(), "sort", AT_WRAP([&] {
    using acc_t = typename SortAcc<scalar_t>::type;
    const scalar_t* x = rows.const_data_ptr<scalar_t>();
    scalar_t* vp = v.data_ptr<scalar_t>();
    int64_t* ip = i.data_ptr<int64_t>();
    launch_on(self, name, [=] {
      at::parallel_for(0, outer, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(n, 1)), [&](int64_t lo, int64_t hi) {
        if (!topk) {
          std::vector<int64_t> order(n);
          for (int64_t r = lo; r < hi; ++r) {
            const scalar_t* row = x + r * n;
            std::iota(order.begin(), order.end(), 0);
            auto cmp = [&](int64_t a, int64_t b) { return before(row[a], row[b], descending); };
            if (stable) std::stable_sort(order.begin(), order.end(), cmp);
            else std::sort(order.begin(), order.end(), cmp);
            for (int64_t j = 0; j < k; ++j) {
              vp[r * k + j] = row[order[j]];
              ip[r * k + j] = order[j];
            }
          }
          return;
        }
        // CPU's topk: (value, index) pairs in the accumulate type, partial_sort for small k.
        std::vector<std::pair<acc_t, int64_t>> queue(n);
        auto cmp = [descending](const std::pair<acc_t, int64_t>& a, const std::pair<acc_t, int64_t>& b) {
          return before(a.first, b.first, descending);
        };
        for (int64_t r = lo; r < hi; ++r) {
          for (int64_t j = 0; j < n; ++j) queue[j] = {static_cast<acc_t>(x[r * n + j]), j};
          if (k * 64 <= n) {
            std::partial_sort(queue.begin(), queue.begin() + k, queue.end(), cmp);
          } else if (k > 0) {
            std::nth_element(queue.begin(), queue.begin() + k - 1, queue.end(), cmp);
            if (sorted) std::sort(queue.begin(), queue.begin() + k - 1, cmp);
          }
          for (int64_t j = 0; j < k; ++j) {
            vp[r * k + j] = static_cast<scalar_t>(queue[j].first);
            ip[r * k + j] = queue[j].second;
          }
        }
      });
    });
  }), AT_EXPAND(AT_ALL_TYPES), at::kHalf, at::kBFloat16, at::kBool, AT_EXPAND(AT_BAREBONES_UNSIGNED_TYPES));
  device_copy(values, self.dim() ? v.movedim(-1, dim) : v.reshape({}));
  device_copy(indices, self.dim() ? i.movedim(-1, dim) : i.reshape({}));
}

// Hoare quickselect with a median-of-three pivot (Sedgewick's, as CPU's kthvalue runs it): the same comparisons
// and swaps, so among equal values CPU's index is chosen. Leaves the k-th smallest at v[k].
template <class T, class Greater, class Swap>
void quick_select(T* v, int64_t n, int64_t k, Greater greater, Swap swap) {
  int64_t lo = 0, hi = n - 1;
  while (hi > lo) {
    if (hi == lo + 1) {
      if (greater(v[lo], v[hi])) swap(lo, hi);
      return;
    }
    swap((lo + hi) >> 1, lo + 1);
    if (greater(v[lo + 1], v[hi])) swap(lo + 1, hi);
    if (greater(v[lo], v[hi])) swap(lo, hi);
    if (greater(v[lo + 1], v[lo])) swap(lo + 1, lo);
    const T pivot = v[lo];
    int64_t i = lo + 1, j = hi;
    while (true) {
      do ++i; while (greater(pivot, v[i]));
      do --j; while (greater(v[j], pivot));
      if (j < i) break;
      swap(i, j);
    }
    swap(lo, j);
    if (j <= k) lo = i;
    if (j >= k) hi = j - 1;
  }
}

enum class Select { kth, median, nanmedian };

// One value and index per row along `dim` into values/indices (sized with `dim` kept as 1).
void select_rows(const at::Tensor& self, int64_t dim, int64_t k, Select kind, const at::Tensor& values,
                 const at::Tensor& indices, const char* name) {
  if (values.numel() == 0) return;
  auto rows = self.dim() ? contiguous(self.movedim(dim, -1)) : contiguous(self.reshape({1}));
  const int64_t n = rows.size(-1), outer = rows.numel() / n;
  auto v = at::empty({outer}, values.options()), i = at::empty({outer}, indices.options());
  RBLN_DISPATCH_NUMERIC(self.scalar_type(), "select", [&] {
    const scalar_t* x = rows.const_data_ptr<scalar_t>();
    scalar_t* vp = v.data_ptr<scalar_t>();
    int64_t* ip = i.data_ptr<int64_t>();
    launch_on(self, name, [=] {
      at::parallel_for(0, outer, std::max<int64_t>(1, kGrainSize / n), [&](int64_t lo, int64_t hi) {
        std::vector<scalar_t> vals(n);
        std::vector<int64_t> order(n);
        for (int64_t r = lo; r < hi; ++r) {
          const scalar_t* row = x + r * n;
          std::iota(order.begin(), order.end(), 0);
          if (kind == Select::kth) {
            std::copy(row, row + n, vals.begin());
            quick_select(vals.data(), n, k, [](scalar_t a, scalar_t b) { return (at::_isnan(a) && !at::_isnan(b)) || a > b; },
                         [&](int64_t a, int64_t b) {
                           std::swap(vals[a], vals[b]);
                           std::swap(order[a], order[b]);
                         });
            vp[r] = vals[k];
            ip[r] = order[k];
            continue;
          }
          // median: a NaN, if any, is the answer; nanmedian: the median of the values that are not NaN.
          if (kind == Select::median) {
            const scalar_t* nan = std::find_if(row, row + n, [](scalar_t a) { return at::_isnan(a); });
            if (nan != row + n) {
              vp[r] = *nan;
              ip[r] = nan - row;
              continue;
            }
          }
          const int64_t nans = kind == Select::nanmedian
                                   ? std::count_if(row, row + n, [](scalar_t a) { return at::_isnan(a); }) : 0;
          auto nth = order.begin() + (n - nans - 1) / 2;
          std::nth_element(order.begin(), nth, order.end(), [row](int64_t a, int64_t b) {
            return row[a] < row[b] || (row[a] == row[b] && a < b) || (at::_isnan(row[b]) && !at::_isnan(row[a]));
          });
          vp[r] = row[*nth];
          ip[r] = *nth;
        }
      });
    });
  });
  device_copy(values, v.view(values.sizes()));
  device_copy(indices, i.view(indices.sizes()));
}

// median.dim_values and nanmedian.dim_values: CPU's checks, then one row selection.
std::tuple<at::Tensor&, at::Tensor&> median_dim(const at::Tensor& self, int64_t dim, bool keepdim, at::Tensor& values,
                                                at::Tensor& indices, Select kind, const char* name) {
  check_same_device({&self, &values, &indices});
  dim = at::maybe_wrap_dim(dim, self.dim());
  at::native::zero_numel_check_dims(self, dim, kind == Select::median ? "median()" : "nanmedian()");
  // CPU's checkScalarType and checkSameType messages, with the device's tensor type names (as CUDA's read).
  const auto type_name = [](const at::Tensor& t) {
    return std::string("torch.rbln.") + c10::toString(t.scalar_type()) + "Tensor";
  };
  TORCH_CHECK(indices.scalar_type() == at::kLong, "Expected tensor for argument #1 'indices' to have scalar type Long; ",
              "but got ", type_name(indices), " instead (while checking arguments for median)");
  TORCH_CHECK(values.scalar_type() == self.scalar_type(), "Expected tensor for 'values' to have the same type as tensor ",
              "for argument #2 'self'; but type ", type_name(values), " does not equal ", type_name(self),
              " (while checking arguments for median)");
  auto out_sizes = self.sizes().vec();
  if (self.dim() && keepdim) out_sizes[dim] = 1;
  else if (self.dim()) out_sizes.erase(out_sizes.begin() + dim);
  at::native::resize_output(values, out_sizes);
  at::native::resize_output(indices, out_sizes);
  auto kept_values = keepdim || !self.dim() ? values : values.unsqueeze(dim);
  auto kept_indices = keepdim || !self.dim() ? indices : indices.unsqueeze(dim);
  select_rows(self, dim, 0, kind, kept_values, kept_indices, name);
  return {values, indices};
}

// median() and nanmedian(): the value only; NaN for an empty input.
at::Tensor median_all(const at::Tensor& self, Select kind, const char* name) {
  auto out = at::empty({}, self.options());
  if (self.numel() == 0) return out.fill_(std::numeric_limits<double>::quiet_NaN());
  auto x = self.clone(at::MemoryFormat::Contiguous);
  RBLN_DISPATCH_NUMERIC(self.scalar_type(), "median", [&] {
    scalar_t* first = x.data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    const int64_t n = x.numel();
    launch_on(self, name, [=] {
      auto is_nan = [](scalar_t a) { return at::_isnan(a); };
      if (kind == Select::median && std::any_of(first, first + n, is_nan)) {
        *op = std::numeric_limits<scalar_t>::quiet_NaN();
        return;
      }
      scalar_t* nth = first + (n - std::count_if(first, first + n, is_nan) - 1) / 2;
      std::nth_element(first, nth, first + n, [](scalar_t a, scalar_t b) {
        return a < b || (at::_isnan(b) && !at::_isnan(a));
      });
      *op = *nth;
    });
  });
  return out;
}

}  // namespace

std::tuple<at::Tensor&, at::Tensor&> kthvalue_values(const at::Tensor& self, c10::SymInt sym_k, int64_t dim,
                                                     bool keepdim, at::Tensor& values, at::Tensor& indices) {
  const int64_t k = sym_k.expect_int();
  check_same_device({&self, &values, &indices});
  dim = at::maybe_wrap_dim(dim, self.dim(), /*wrap_scalar=*/true);
  at::native::zero_numel_check_dims(self, dim, "kthvalue()");
  TORCH_CHECK(k >= 1 && k <= (self.dim() > 0 ? self.size(dim) : 1),
              "kthvalue(): selected number k out of range for dimension ", dim);
  check_no_overlap(values, {&self});
  check_no_overlap(indices, {&self});
  at::native::_reduction_with_indices_allocate_or_resize_output(values, indices, self, dim, keepdim);
  select_rows(self, dim, k - 1, Select::kth, values, indices, "aten::kthvalue");
  if (!keepdim && self.dim()) {
    values.squeeze_(dim);
    indices.squeeze_(dim);
  }
  return {values, indices};
}

std::tuple<at::Tensor&, at::Tensor&> median_dim_values(const at::Tensor& self, int64_t dim, bool keepdim,
                                                       at::Tensor& values, at::Tensor& indices) {
  return median_dim(self, dim, keepdim, values, indices, Select::median, "aten::median");
}
std::tuple<at::Tensor&, at::Tensor&> nanmedian_dim_values(const at::Tensor& self, int64_t dim, bool keepdim,
                                                          at::Tensor& values, at::Tensor& indices) {
  return median_dim(self, dim, keepdim, values, indices, Select::nanmedian, "aten::nanmedian");
}
at::Tensor median(const at::Tensor& self) { return median_all(self, Select::median, "aten::median"); }
at::Tensor nanmedian(const at::Tensor& self) { return median_all(self, Select::nanmedian, "aten::nanmedian"); }

std::tuple<at::Tensor&, at::Tensor&> sort_values_stable(const at::Tensor& self, std::optional<bool> stable,
                                                        int64_t dim, bool descending, at::Tensor& values,
                                                        at::Tensor& indices) {
  check_same_device({&self, &values, &indices});
  dim = at::maybe_wrap_dim(dim, self.dim());
  sort_rows(self, dim, self.dim() ? self.size(dim) : 1, descending, stable.value_or(false), false, true, values,
            indices, "aten::sort");
  return {values, indices};
}

std::tuple<at::Tensor&, at::Tensor&> topk_values(const at::Tensor& self, c10::SymInt k, int64_t dim, bool largest,
                                                 bool sorted, at::Tensor& values, at::Tensor& indices) {
  check_same_device({&self, &values, &indices});
  dim = at::maybe_wrap_dim(dim, self.dim());
  const int64_t kk = k.expect_int(), n = self.dim() ? self.size(dim) : 1;
  TORCH_CHECK(kk >= 0 && kk <= n, "selected index k out of range");
  sort_rows(self, dim, kk, largest, false, true, sorted, values, indices, "aten::topk");
  return {values, indices};
}

}  // namespace rbln::kernels
