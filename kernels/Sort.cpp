// Sorting along one dim: sort and topk. The dim is moved innermost and each
// row is sorted on the device with CPU's comparators (NaN is the largest
// value) and CPU's algorithms (std::sort, std::stable_sort, partial_sort or
// nth_element), so even the order of equal keys in an unstable sort is CPU's.
#include <ATen/AccumulateType.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "generated/RBLNNativeFunctions.h"
#include "kernels/Common.h"

namespace rbln::kernels {
namespace {

template <class T>
bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<at::opmath_type<T>>) return std::isnan(static_cast<float>(v));
  return false;
}

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
  RBLN_DISPATCH_ALL(self.scalar_type(), "sort", [&] {
    using acc_t = at::acc_type<scalar_t, false>;
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
  });
  device_copy(values, self.dim() ? v.movedim(-1, dim) : v.reshape({}));
  device_copy(indices, self.dim() ? i.movedim(-1, dim) : i.reshape({}));
}

}  // namespace

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
