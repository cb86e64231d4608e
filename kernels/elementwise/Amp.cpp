// GradScaler's two device ops, with CUDA's semantics: unscale gradients while
// noting any inf/NaN, and grow or back off the scale, all without a host sync.
#include <ATen/ops/empty.h>

#include <cmath>

#include "generated/RBLNNativeFunctions.h"
#include "kernels/common/Common.h"

namespace rbln::kernels {

void _amp_foreach_non_finite_check_and_unscale_(at::TensorList self, at::Tensor& found_inf,
                                                const at::Tensor& inv_scale) {
  TORCH_CHECK(inv_scale.numel() == 1 && inv_scale.scalar_type() == at::kFloat, "inv_scale must be a 1-element float tensor.");
  TORCH_CHECK(found_inf.numel() == 1 && found_inf.scalar_type() == at::kFloat, "found_inf must be a 1-element float tensor.");
  for (const auto& grad : self) {
    check_same_device({&grad, &found_inf, &inv_scale});
    TORCH_CHECK(at::isFloatingType(grad.scalar_type()), "_amp_foreach_non_finite_check_and_unscale_: expected floating "
                "gradients, got ", grad.scalar_type());
    if (grad.numel() == 0) continue;
    at::Tensor g = grad;
    write_contiguous(g, [&](const at::Tensor& target) {
      if (!target.is_same(grad)) device_copy(target, grad);
      RBLN_DISPATCH_FLOATING(grad.scalar_type(), "amp_unscale", [&] {
        using opmath = at::opmath_type<scalar_t>;
        scalar_t* p = target.data_ptr<scalar_t>();
        float* inf = found_inf.data_ptr<float>();
        const float* inv = inv_scale.const_data_ptr<float>();
        const int64_t n = target.numel();
        launch_on(target, "aten::_amp_foreach_non_finite_check_and_unscale_", [=] {
          const opmath scale = static_cast<opmath>(*inv);
          bool bad = false;
          for (int64_t i = 0; i < n; ++i) {
            const opmath v = static_cast<opmath>(p[i]);
            bad = bad || !std::isfinite(v);
            p[i] = static_cast<scalar_t>(scale == opmath(1) ? v : v * scale);
          }
          if (bad) *inf = 1.f;
        });
      });
    });
  }
}

at::Tensor& _amp_update_scale_(at::Tensor& self, at::Tensor& growth_tracker, const at::Tensor& found_inf,
                               double scale_growth_factor, double scale_backoff_factor, int64_t growth_interval) {
  TORCH_CHECK(self.numel() == 1 && self.scalar_type() == at::kFloat, "current_scale must be a 1-element float tensor.");
  TORCH_CHECK(growth_tracker.numel() == 1 && growth_tracker.scalar_type() == at::kInt,
              "growth_tracker must be a 1-element int tensor.");
  TORCH_CHECK(found_inf.numel() == 1 && found_inf.scalar_type() == at::kFloat, "found_inf must be a 1-element float tensor.");
  check_same_device({&self, &growth_tracker, &found_inf});
  float* scale = self.data_ptr<float>();
  int32_t* tracker = growth_tracker.data_ptr<int32_t>();
  const float* inf = found_inf.const_data_ptr<float>();
  launch_on(self, "aten::_amp_update_scale_", [=] {
    if (*inf) {
      *scale = static_cast<float>(*scale * scale_backoff_factor);
      *tracker = 0;
      return;
    }
    const int32_t successful = *tracker + 1;
    if (successful == growth_interval) {
      const float grown = static_cast<float>(*scale * scale_growth_factor);
      if (std::isfinite(grown)) *scale = grown;
      *tracker = 0;
    } else {
      *tracker = successful;
    }
  });
  return self;
}

}  // namespace rbln::kernels
