// softmax and log_softmax over one dim of a contiguous [outer, dim, inner] view.
#include <ATen/WrapDimUtils.h>
#include <ATen/ops/empty.h>

#include <cmath>

#include "generated/RBLNNativeFunctions.h"
#include "kernels/common/Common.h"
#include "kernels/vec/VecKernels.h"

namespace rbln::kernels {
namespace {

at::Tensor& softmax_into(const at::Tensor& self, int64_t dim, bool half_to_float, at::Tensor& out, bool log,
                         const char* name) {
  TORCH_CHECK(!half_to_float, "softmax with half to float conversion is not supported on rbln");
  TORCH_CHECK(at::isFloatingType(self.scalar_type()), name, " not implemented for '", self.scalar_type(), "'");
  dim = at::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
  prepare_out(out, self.sizes(), self.scalar_type(), self, name);
  if (self.numel() == 0) return out;
  auto in = contiguous(self);
  int64_t size = self.dim() ? self.size(dim) : 1;
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < self.dim(); ++d) inner *= self.size(d);
  int64_t outer = self.numel() / (size * inner);
  write_contiguous(out, [&](const at::Tensor& target) {
    RBLN_DISPATCH_FLOATING(self.scalar_type(), "softmax", [&] {
      using acc_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
      const auto* x = in.const_data_ptr<scalar_t>();
      auto* y = target.data_ptr<scalar_t>();
      if constexpr (std::is_same_v<scalar_t, float>) {
        if (inner == 1) {  // rows are contiguous: the vectorized loop
          launch_on(target, name, [=] {
            at::parallel_for(0, outer, std::max<int64_t>(1, kGrainSize / size), [&](int64_t b, int64_t e) {
              vec::table().softmax_rows_f32(reinterpret_cast<const float*>(x + b * size),  // scalar_t is float here
                                            reinterpret_cast<float*>(y + b * size), e - b, size, log);
            });
          });
          return;
        }
        // columns: [outer, size, inner] in tiles of 64 columns
        constexpr int64_t kTile = 64;
        const int64_t tiles = (inner + kTile - 1) / kTile;
        launch_on(target, name, [=] {
          const int64_t grain = std::max<int64_t>(1, kGrainSize / (size * kTile));
          at::parallel_for(0, outer * tiles, grain, [&](int64_t b, int64_t e) {
            for (int64_t t = b; t < e; ++t) {
              const int64_t o = t / tiles, c0 = t % tiles * kTile, first = o * size * inner + c0;
              vec::table().softmax_cols_f32(reinterpret_cast<const float*>(x) + first,
                                            reinterpret_cast<float*>(y) + first, size, inner,
                                            std::min(kTile, inner - c0), log);
            }
          });
        });
        return;
      }
      launch_on(target, name, [=] {
        at::parallel_for(0, outer * inner, std::max<int64_t>(1, kGrainSize / size), [&](int64_t b, int64_t e) {
          for (int64_t r = b; r < e; ++r) {
            int64_t base = (r / inner) * size * inner + r % inner;
            acc_t mx = -std::numeric_limits<acc_t>::infinity();
            for (int64_t j = 0; j < size; ++j) mx = std::max<acc_t>(mx, static_cast<acc_t>(x[base + j * inner]));
            acc_t sum = 0;
            for (int64_t j = 0; j < size; ++j) sum += std::exp(static_cast<acc_t>(x[base + j * inner]) - mx);
            if (log) {  // CPU's order: (x - max) - log(sum)
              const acc_t log_sum = std::log(sum);
              for (int64_t j = 0; j < size; ++j) {
                y[base + j * inner] = static_cast<scalar_t>((static_cast<acc_t>(x[base + j * inner]) - mx) - log_sum);
              }
            } else {
              for (int64_t j = 0; j < size; ++j) {
                y[base + j * inner] = static_cast<scalar_t>(std::exp(static_cast<acc_t>(x[base + j * inner]) - mx) / sum);
              }
            }
          }
        });
      });
    });
  });
  return out;
}

// grad_input from grad_output and the forward output over [outer, dim, inner]:
// softmax: y * (g - sum(g * y)); log_softmax: g - exp(y) * sum(g).
at::Tensor& softmax_backward_into(const at::Tensor& grad, const at::Tensor& output, int64_t dim, at::Tensor& out,
                                  bool log, const char* name) {
  TORCH_CHECK(grad.sizes() == output.sizes(), name, ": grad_output and output must have the same shape");
  check_same_device({&grad, &output, &out});
  dim = at::maybe_wrap_dim(dim, std::max<int64_t>(output.dim(), 1));
  prepare_out(out, output.sizes(), output.scalar_type(), output, name);
  if (output.numel() == 0) return out;
  auto g = contiguous(grad), y = contiguous(output);
  int64_t size = output.dim() ? output.size(dim) : 1;
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < output.dim(); ++d) inner *= output.size(d);
  int64_t outer = output.numel() / (size * inner);
  write_contiguous(out, [&](const at::Tensor& target) {
    RBLN_DISPATCH_FLOATING(output.scalar_type(), "softmax_backward", [&] {
      using acc_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
      const auto* gp = g.const_data_ptr<scalar_t>();
      const auto* yp = y.const_data_ptr<scalar_t>();
      auto* gi = target.data_ptr<scalar_t>();
      launch_on(target, name, [=] {
        at::parallel_for(0, outer * inner, std::max<int64_t>(1, kGrainSize / size), [&](int64_t b, int64_t e) {
          for (int64_t r = b; r < e; ++r) {
            int64_t base = (r / inner) * size * inner + r % inner;
            acc_t sum = 0;
            for (int64_t j = 0; j < size; ++j) {
              auto k = base + j * inner;
              sum += log ? static_cast<acc_t>(gp[k]) : static_cast<acc_t>(gp[k]) * static_cast<acc_t>(yp[k]);
            }
            for (int64_t j = 0; j < size; ++j) {
              auto k = base + j * inner;
              acc_t gv = gp[k], yv = yp[k];
              gi[k] = static_cast<scalar_t>(log ? gv - std::exp(yv) * sum : yv * (gv - sum));
            }
          }
        });
      });
    });
  });
  return out;
}

}  // namespace

at::Tensor& _softmax_backward_data_out(const at::Tensor& grad_output, const at::Tensor& output, int64_t dim,
                                       at::ScalarType input_dtype, at::Tensor& grad_input) {
  return softmax_backward_into(grad_output, output, dim, grad_input, false, "aten::_softmax_backward_data");
}
at::Tensor& _log_softmax_backward_data_out(const at::Tensor& grad_output, const at::Tensor& output, int64_t dim,
                                           at::ScalarType input_dtype, at::Tensor& out) {
  return softmax_backward_into(grad_output, output, dim, out, true, "aten::_log_softmax_backward_data");
}

at::Tensor& _softmax_out(const at::Tensor& self, int64_t dim, bool half_to_float, at::Tensor& out) {
  return softmax_into(self, dim, half_to_float, out, false, "softmax");
}
at::Tensor& _log_softmax_out(const at::Tensor& self, int64_t dim, bool half_to_float, at::Tensor& out) {
  return softmax_into(self, dim, half_to_float, out, true, "log_softmax");
}

}  // namespace rbln::kernels
