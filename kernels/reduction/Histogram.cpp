// Histograms: histc. Floating inputs bin as CPU's histc does (its
// interpolation in the input type, no edge search), so every value lands in
// CPU's bin; integer inputs, which CUDA supports and CPU does not (Hugging
// Face's mixture-of-experts path counts int32 expert ids with histc off the
// CPU), bin with CUDA's integer formula.
#include <ATen/ops/max.h>
#include <ATen/ops/min.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "generated/RBLNNativeFunctions.h"
#include "kernels/common/Common.h"

namespace rbln::kernels {
namespace {

// The bin of v in [lo, hi], or bins for v == hi (the caller folds it into the last bin).
template <class T>
int64_t histc_bin(T v, T lo, T hi, int64_t bins) {
  if constexpr (std::is_integral_v<T>) {
    return (static_cast<int64_t>(v) - lo) * bins / (static_cast<int64_t>(hi) - lo);
  } else {
    return static_cast<int64_t>((v - lo) * bins / (hi - lo));
  }
}

// CPU's histc range: [min, max], the data's range where they are equal, widened by one each way where that is
// empty too.
std::pair<double, double> histc_range(const at::Tensor& self, const at::Scalar& min, const at::Scalar& max) {
  const bool integral = at::isIntegralType(self.scalar_type(), /*includeBool=*/false);
  double lo = integral ? static_cast<double>(min.to<int64_t>()) : min.to<double>();
  double hi = integral ? static_cast<double>(max.to<int64_t>()) : max.to<double>();
  if (lo == hi && self.numel() > 0) {
    const auto wide = integral ? self.to(at::kLong) : self;  // the device's min and max cover int64, not int8
    lo = at::min(wide).item<double>();
    hi = at::max(wide).item<double>();
  }
  if (lo == hi) {
    lo -= 1;
    hi += 1;
  }
  TORCH_CHECK(std::isfinite(lo) && std::isfinite(hi), "torch.histc: range of [", lo, ", ", hi, "] is not finite");
  TORCH_CHECK(lo < hi, "torch.histc: max must be larger than min");
  return {lo, hi};
}

}  // namespace

at::Tensor& histc_out(const at::Tensor& self, int64_t bins, const at::Scalar& min, const at::Scalar& max,
                      at::Tensor& out) {
  check_same_device({&self, &out});
  TORCH_CHECK(bins > 0, "torch.histogram(): bins must be > 0, but got ", bins, " for dimension 0");
  TORCH_CHECK(!out.defined() || out.scalar_type() == self.scalar_type(),
              "torch.histogram: input tensor and hist tensor should have the same dtype, but got input ",
              self.dtype(), " and hist ", out.dtype());
  const auto [lo, hi] = histc_range(self, min, max);
  prepare_out(out, {bins}, self.scalar_type(), self, "histc");
  auto x = contiguous(self);
  write_contiguous(out, [&](const at::Tensor& target) {
    RBLN_DISPATCH_NUMERIC(self.scalar_type(), "histc", [&] {
      const scalar_t* xp = x.const_data_ptr<scalar_t>();
      scalar_t* hp = target.data_ptr<scalar_t>();
      const int64_t n = x.numel();
      const auto l = static_cast<scalar_t>(lo), h = static_cast<scalar_t>(hi);
      launch_on(self, "aten::histc", [=] {
        // Exact counts per chunk, summed in a fixed order: the result does not depend on the thread count.
        const int64_t chunks = std::clamp<int64_t>(n / kGrainSize, 1, at::get_num_threads());
        std::vector<int64_t> counts(chunks * bins, 0);
        at::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
          for (int64_t c = c0; c < c1; ++c) {
            int64_t* count = counts.data() + c * bins;
            for (int64_t i = n * c / chunks, end = n * (c + 1) / chunks; i < end; ++i) {
              const scalar_t v = xp[i];
              if (!(v >= l && v <= h)) continue;  // outside the range, or NaN
              count[std::min(histc_bin(v, l, h, bins), bins - 1)] += 1;
            }
          }
        });
        for (int64_t b = 0; b < bins; ++b) {
          int64_t total = 0;
          for (int64_t c = 0; c < chunks; ++c) total += counts[c * bins + b];
          hp[b] = static_cast<scalar_t>(total);
        }
      });
    });
  });
  return out;
}

}  // namespace rbln::kernels
