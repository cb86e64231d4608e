// The norms: layer norm and group norm, forward and backward, row-wise over a
// contiguous [outer, n] view (batch norm has its own file).
#include <ATen/AccumulateType.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/layer_norm.h>
#include <ATen/ops/empty.h>

#include <cmath>
#include <limits>
#include <type_traits>

#include "generated/RBLNNativeFunctions.h"
#include "kernels/common/Common.h"
#include "kernels/vec/VecKernels.h"

namespace rbln::kernels {

namespace {

// The dtype of layer norm's weight and bias, mean and rstd: the input's, or
// float for a float16/bfloat16 input with float parameters (what autocast
// produces; CPU's and CUDA's mixed mode). Other mixes raise CPU's errors.
at::ScalarType layer_norm_param_type(const at::Tensor& input, const at::Tensor& w, const at::Tensor& b) {
  const auto type = w.defined() ? w.scalar_type() : b.defined() ? b.scalar_type() : input.scalar_type();
  if (type == input.scalar_type()) return type;
  for (const auto* t : {&w, &b})
    TORCH_CHECK(!t->defined() || t->scalar_type() == at::kFloat,
                "mixed dtype (CPU): expect parameter to have scalar type of Float");
  TORCH_CHECK(at::isReducedFloatingType(input.scalar_type()), "mixed dtype (CPU): all inputs must share same datatype.");
  return at::kFloat;
}

// Normalizes `rows` rows of n elements of x (T) into y with weight and bias
// (optional) and stores mean and rstd, all in S, the parameters' dtype.
template <class T, class S>
void launch_layer_norm_rows(const at::Tensor& input, const T* xp, const S* wp, const S* bp, T* yp, S* mp, S* rp,
                            int64_t rows, int64_t n, double eps) {
  const int64_t grain = std::max<int64_t>(1, kGrainSize / std::max<int64_t>(n, 1));
  if constexpr (std::is_same_v<T, float> && std::is_same_v<S, float>) {  // the vectorized row loop
    launch_on(input, "aten::native_layer_norm", [=] {
      at::parallel_for(0, rows, grain, [&](int64_t lo, int64_t hi) {
        vec::table().layer_norm_rows_f32(xp + lo * n, wp, bp, yp + lo * n, mp + lo, rp + lo, hi - lo, n,
                                         static_cast<float>(eps));
      });
    });
  } else {
    using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;
    launch_on(input, "aten::native_layer_norm", [=] {
      at::parallel_for(0, rows, grain, [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r) {
          const T* row = xp + r * n;
          acc_t sum = 0, sq = 0;
          for (int64_t j = 0; j < n; ++j) sum += static_cast<acc_t>(row[j]);
          const acc_t mu = vec::moments_mean(sum, n);
          for (int64_t j = 0; j < n; ++j) {
            acc_t d = static_cast<acc_t>(row[j]) - mu;
            sq += d * d;
          }
          acc_t inv = acc_t(1) / std::sqrt(sq / n + static_cast<acc_t>(eps));
          const acc_t shift = -inv * mu;
          for (int64_t j = 0; j < n; ++j) {
            acc_t v = std::fma(static_cast<acc_t>(row[j]), inv, shift);  // CPU's fused x * rstd - rstd * mean
            if (wp) v *= static_cast<acc_t>(wp[j]);
            if (bp) v += static_cast<acc_t>(bp[j]);
            yp[r * n + j] = static_cast<T>(v);
          }
          mp[r] = static_cast<S>(mu);
          rp[r] = static_cast<S>(inv);
        }
      });
    });
  }
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_layer_norm(const at::Tensor& input,
                                                                c10::SymIntArrayRef normalized_shape,
                                                                const std::optional<at::Tensor>& weight,
                                                                const std::optional<at::Tensor>& bias, double eps) {
  auto shape = C10_AS_INTARRAYREF_SLOW(normalized_shape);
  auto w = weight && weight->defined() ? contiguous(*weight) : at::Tensor();
  auto b = bias && bias->defined() ? contiguous(*bias) : at::Tensor();
  const auto [rows, n] = at::native::_check_layer_norm_inputs(input, shape, w, b);
  check_same_device({&input, &w, &b});
  const auto stats = layer_norm_param_type(input, w, b);
  const int64_t axis = input.dim() - static_cast<int64_t>(shape.size());
  auto x = contiguous(input);
  auto out = at::empty(input.sizes(), input.options());
  std::vector<int64_t> stat_shape(input.sizes().begin(), input.sizes().begin() + axis);
  stat_shape.resize(input.dim(), 1);
  auto mean = at::empty(stat_shape, input.options().dtype(stats)), rstd = at::empty(stat_shape, input.options().dtype(stats));
  if (rows == 0) return {out, mean, rstd};
  if (n == 0) {  // CPU's moments of no element: mean 0, variance 0 / 0
    mean.zero_();
    rstd.fill_(std::numeric_limits<double>::quiet_NaN());
    return {out, mean, rstd};
  }
  RBLN_DISPATCH_FLOATING(input.scalar_type(), "native_layer_norm", [&] {
    using T = scalar_t;
    const T* xp = x.const_data_ptr<T>();
    T* yp = out.data_ptr<T>();
    RBLN_DISPATCH_FLOATING(stats, "native_layer_norm", [&] {
      using S = scalar_t;
      launch_layer_norm_rows<T, S>(input, xp, w.defined() ? w.const_data_ptr<S>() : nullptr,
                                   b.defined() ? b.const_data_ptr<S>() : nullptr, yp, mean.data_ptr<S>(),
                                   rstd.data_ptr<S>(), rows, n, eps);
    });
  });
  return {out, mean, rstd};
}

// Per row: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * w;
// dw and db sum dy * xhat and dy over the rows.
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_layer_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, c10::SymIntArrayRef normalized_shape, const at::Tensor& mean,
    const at::Tensor& rstd, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    std::array<bool, 3> output_mask) {
  auto shape = C10_AS_INTARRAYREF_SLOW(normalized_shape);
  auto w = weight && weight->defined() ? contiguous(*weight) : at::Tensor();
  const at::Tensor b = bias && bias->defined() ? *bias : at::Tensor();
  const auto [rows, n] = at::native::_check_layer_norm_inputs(input, shape, w, b);
  TORCH_CHECK(grad_out.sizes() == input.sizes(), "native_layer_norm_backward: grad_out ", grad_out.sizes(),
              " does not match input ", input.sizes());
  check_same_device({&grad_out, &input, &mean, &rstd, &w});
  const auto stats = layer_norm_param_type(input, w, b);
  at::Tensor dx = output_mask[0] ? at::empty(input.sizes(), input.options()) : at::Tensor();
  at::Tensor dw = output_mask[1] && w.defined() ? at::empty(w.sizes(), w.options()) : at::Tensor();
  at::Tensor db = output_mask[2] && b.defined() ? at::empty(b.sizes(), b.options()) : at::Tensor();
  auto x = contiguous(input), dy = contiguous(grad_out), mu = contiguous(mean), rs = contiguous(rstd);
  RBLN_DISPATCH_FLOATING(input.scalar_type(), "native_layer_norm_backward", [&] {
    using T = scalar_t;
    using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const T* xp = x.const_data_ptr<T>();
    const T* dyp = dy.const_data_ptr<T>();
    T* dxp = dx.defined() ? dx.data_ptr<T>() : nullptr;
    RBLN_DISPATCH_FLOATING(stats, "native_layer_norm_backward", [&] {
      using S = scalar_t;  // the statistics' and parameters' dtype
      const S* mp = mu.const_data_ptr<S>();
      const S* rp = rs.const_data_ptr<S>();
      const S* wp = w.defined() ? w.const_data_ptr<S>() : nullptr;
      S* dwp = dw.defined() ? dw.data_ptr<S>() : nullptr;
      S* dbp = db.defined() ? db.data_ptr<S>() : nullptr;
      launch_on(input, "aten::native_layer_norm_backward", [=] {
        if (dxp) {
          at::parallel_for(0, rows, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(n, 1)), [&](int64_t lo, int64_t hi) {
            for (int64_t r = lo; r < hi; ++r) {
              const acc_t m = static_cast<acc_t>(mp[r]), inv = static_cast<acc_t>(rp[r]);
              acc_t sum_g = 0, sum_gx = 0;
              for (int64_t j = 0; j < n; ++j) {
                const acc_t g = static_cast<acc_t>(dyp[r * n + j]) * (wp ? static_cast<acc_t>(wp[j]) : acc_t(1));
                sum_g += g;
                sum_gx += g * (static_cast<acc_t>(xp[r * n + j]) - m) * inv;
              }
              for (int64_t j = 0; j < n; ++j) {
                const acc_t g = static_cast<acc_t>(dyp[r * n + j]) * (wp ? static_cast<acc_t>(wp[j]) : acc_t(1));
                const acc_t xhat = (static_cast<acc_t>(xp[r * n + j]) - m) * inv;
                dxp[r * n + j] = static_cast<T>(inv * (g - sum_g / n - xhat * sum_gx / n));
              }
            }
          });
        }
        if (dwp || dbp) {
          at::parallel_for(0, n, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(rows, 1)), [&](int64_t lo, int64_t hi) {
            for (int64_t j = lo; j < hi; ++j) {
              acc_t sw = 0, sb = 0;
              for (int64_t r = 0; r < rows; ++r) {
                const acc_t d = static_cast<acc_t>(dyp[r * n + j]);
                sw += d * (static_cast<acc_t>(xp[r * n + j]) - static_cast<acc_t>(mp[r])) * static_cast<acc_t>(rp[r]);
                sb += d;
              }
              if (dwp) dwp[j] = static_cast<S>(sw);
              if (dbp) dbp[j] = static_cast<S>(sb);
            }
          });
        }
      });
    });
  });
  return {dx, dw, db};
}

// Group norm over input viewed as [N, C, HxW], groups of D = C / group channels.
// As CPU: statistics per (n, group), then per channel y = x * scale + bias with
// scale = rstd * gamma, bias = beta - scale * mean, in the compute type (float
// for float16/bfloat16), rounded once. mean and rstd take the parameters' dtype.
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_group_norm(const at::Tensor& input,
                                                                const std::optional<at::Tensor>& weight,
                                                                const std::optional<at::Tensor>& bias, c10::SymInt N,
                                                                c10::SymInt C, c10::SymInt HxW, int64_t group,
                                                                double eps) {
  const int64_t n_ = N.expect_int(), c_ = C.expect_int(), hw = HxW.expect_int();
  auto w = weight && weight->defined() ? contiguous(*weight) : at::Tensor();
  auto b = bias && bias->defined() ? contiguous(*bias) : at::Tensor();
  check_same_device({&input, &w, &b});
  check_norm_param_dtypes(input, {&w, &b});
  TORCH_CHECK(group > 0 && c_ % group == 0, "Expected number of channels in input to be divisible by num_groups, ",
              "but got input of shape ", input.sizes(), " and num_groups=", group);
  TORCH_CHECK(input.numel() == n_ * c_ * hw, "native_group_norm: input ", input.sizes(), " is not [", n_, ", ", c_,
              ", ", hw, "]");
  TORCH_CHECK(!w.defined() || w.numel() == c_, "Expected weight to be a vector of size equal to the number of ",
              "channels in input, but got weight of shape ", w.sizes(), " and input of shape ", input.sizes());
  TORCH_CHECK(!b.defined() || b.numel() == c_, "Expected bias to be a vector of size equal to the number of ",
              "channels in input, but got bias of shape ", b.sizes(), " and input of shape ", input.sizes());
  TORCH_CHECK(input.is_contiguous(input.suggest_memory_format()),
              "Expected X.is_contiguous(memory_format) to be true, but got false.");  // CPU's check
  const auto stats = w.defined() ? w.scalar_type() : input.scalar_type();
  TORCH_CHECK(!b.defined() || b.scalar_type() == stats, "native_group_norm: weight and bias dtypes differ");
  auto x = contiguous(input);
  auto out = at::empty(input.sizes(), input.options());
  auto mean = at::empty({n_, group}, input.options().dtype(stats));
  auto rstd = at::empty({n_, group}, input.options().dtype(stats));
  if (n_ * group == 0) return {out, mean, rstd};
  const int64_t d = c_ / group;
  RBLN_DISPATCH_FLOATING(input.scalar_type(), "native_group_norm", [&] {
    using T = scalar_t;
    const T* xp = x.const_data_ptr<T>();
    T* yp = out.data_ptr<T>();
    RBLN_DISPATCH_FLOATING(stats, "native_group_norm", [&] {
      using S = scalar_t;
      using opmath_t = at::opmath_type<S>;
      const S* wp = w.defined() ? w.const_data_ptr<S>() : nullptr;
      const S* bp = b.defined() ? b.const_data_ptr<S>() : nullptr;
      S* mp = mean.data_ptr<S>();
      S* rp = rstd.data_ptr<S>();
      launch_on(input, "aten::native_group_norm", [=] {
        const int64_t count = d * hw;
        at::parallel_for(0, n_ * group, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(count, 1)),
                         [&](int64_t lo, int64_t hi) {
          for (int64_t ng = lo; ng < hi; ++ng) {
            const T* xg = xp + ng * count;
            T* yg = yp + ng * count;
            double sum = 0, sq = 0;  // two passes in double: the statistics CPU's float moments approximate
            for (int64_t i = 0; i < count; ++i) sum += static_cast<double>(xg[i]);
            const double mu = vec::moments_mean(sum, count);
            for (int64_t i = 0; i < count; ++i) {
              const double dv = static_cast<double>(xg[i]) - mu;
              sq += dv * dv;
            }
            const opmath_t m = static_cast<opmath_t>(mu);
            const opmath_t r = opmath_t(1) / std::sqrt(static_cast<opmath_t>(count ? sq / count : 0.0) +
                                                       static_cast<opmath_t>(eps));
            const int64_t g = ng % group;
            for (int64_t k = 0; k < d; ++k) {
              const int64_t c = g * d + k;
              const opmath_t scale = r * (wp ? static_cast<opmath_t>(wp[c]) : opmath_t(1));
              const opmath_t shift = (bp ? static_cast<opmath_t>(bp[c]) : opmath_t(0)) - scale * m;
              for (int64_t i = k * hw; i < (k + 1) * hw; ++i)
                yg[i] = static_cast<T>(static_cast<opmath_t>(xg[i]) * scale + shift);
            }
            mp[ng] = static_cast<S>(m);
            rp[ng] = static_cast<S>(r);
          }
        });
      });
    });
  });
  return {out, mean, rstd};
}

// CPU's backward: per (n, c) ds = sum(dy * x) and db = sum(dy); per group
// c2 = (sum(db * gamma) * mean - sum(ds * gamma)) * rstd^3 / (D * HxW) and
// c3 = -c2 * mean - sum(db * gamma) * rstd / (D * HxW); dx = rstd * gamma * dy + c2 * x + c3;
// dgamma sums (ds - db * mean) * rstd and dbeta sums db over the batch. Sums in double.
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_group_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean, const at::Tensor& rstd,
    const std::optional<at::Tensor>& weight, c10::SymInt N, c10::SymInt C, c10::SymInt HxW, int64_t group,
    std::array<bool, 3> output_mask) {
  const int64_t n_ = N.expect_int(), c_ = C.expect_int(), hw = HxW.expect_int();
  auto w = weight && weight->defined() ? contiguous(*weight) : at::Tensor();
  check_same_device({&grad_out, &input, &mean, &rstd, &w});
  TORCH_CHECK(group > 0 && c_ % group == 0 && input.numel() == n_ * c_ * hw && grad_out.sizes() == input.sizes() &&
                  mean.numel() == n_ * group && rstd.numel() == n_ * group,
              "native_group_norm_backward: grad_out ", grad_out.sizes(), ", input ", input.sizes(), ", mean ",
              mean.sizes(), " and rstd ", rstd.sizes(), " do not match N=", n_, " C=", c_, " HxW=", hw,
              " group=", group);
  const auto stats = mean.scalar_type();
  at::Tensor dx = output_mask[0] ? at::empty(input.sizes(), input.options()) : at::Tensor();
  at::Tensor dw = output_mask[1] ? at::empty({c_}, input.options().dtype(stats)) : at::Tensor();
  at::Tensor db = output_mask[2] ? at::empty({c_}, input.options().dtype(stats)) : at::Tensor();
  auto x = contiguous(input), dy = contiguous(grad_out), mu = contiguous(mean), rs = contiguous(rstd);
  const int64_t d = c_ / group;
  RBLN_DISPATCH_FLOATING(input.scalar_type(), "native_group_norm_backward", [&] {
    using T = scalar_t;
    const T* xp = x.const_data_ptr<T>();
    const T* dyp = dy.const_data_ptr<T>();
    T* dxp = dx.defined() ? dx.data_ptr<T>() : nullptr;
    RBLN_DISPATCH_FLOATING(stats, "native_group_norm_backward", [&] {
      using S = scalar_t;
      using opmath_t = at::opmath_type<S>;
      const S* mp = mu.const_data_ptr<S>();
      const S* rp = rs.const_data_ptr<S>();
      const S* wp = w.defined() ? w.const_data_ptr<S>() : nullptr;
      S* dwp = dw.defined() ? dw.data_ptr<S>() : nullptr;
      S* dbp = db.defined() ? db.data_ptr<S>() : nullptr;
      launch_on(input, "aten::native_group_norm_backward", [=] {
        std::vector<double> ds(n_ * c_), dbs(n_ * c_);  // per (n, c)
        at::parallel_for(0, n_ * c_, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(hw, 1)),
                         [&](int64_t lo, int64_t hi) {
          for (int64_t nc = lo; nc < hi; ++nc) {
            double s = 0, t = 0;
            for (int64_t i = nc * hw; i < (nc + 1) * hw; ++i) {
              s += static_cast<double>(dyp[i]) * static_cast<double>(xp[i]);
              t += static_cast<double>(dyp[i]);
            }
            ds[nc] = s;
            dbs[nc] = t;
          }
        });
        auto gamma = [&](int64_t c) { return wp ? static_cast<double>(wp[c]) : 1.0; };
        if (dxp) {
          const double scale = 1.0 / static_cast<double>(d * hw);
          at::parallel_for(0, n_ * group, 1, [&](int64_t lo, int64_t hi) {
            for (int64_t ng = lo; ng < hi; ++ng) {
              const int64_t n = ng / group, g = ng % group;
              double ds_g = 0, db_g = 0;
              for (int64_t c = g * d; c < (g + 1) * d; ++c) {
                ds_g += ds[n * c_ + c] * gamma(c);
                db_g += dbs[n * c_ + c] * gamma(c);
              }
              const double m = static_cast<double>(mp[ng]), r = static_cast<double>(rp[ng]);
              const opmath_t c2 = static_cast<opmath_t>((db_g * m - ds_g) * r * r * r * scale);
              const opmath_t c3 = static_cast<opmath_t>(-static_cast<double>(c2) * m - db_g * r * scale);
              for (int64_t c = g * d; c < (g + 1) * d; ++c) {
                const opmath_t c1 = static_cast<opmath_t>(r * gamma(c));
                for (int64_t i = (n * c_ + c) * hw; i < (n * c_ + c + 1) * hw; ++i)
                  dxp[i] = static_cast<T>(c1 * static_cast<opmath_t>(dyp[i]) + c2 * static_cast<opmath_t>(xp[i]) + c3);
              }
            }
          });
        }
        for (int64_t c = 0; c < c_ && (dwp || dbp); ++c) {
          double sw = 0, sb = 0;
          for (int64_t n = 0; n < n_; ++n) {
            const int64_t ng = n * group + c / d;
            sw += (ds[n * c_ + c] - dbs[n * c_ + c] * static_cast<double>(mp[ng])) * static_cast<double>(rp[ng]);
            sb += dbs[n * c_ + c];
          }
          if (dwp) dwp[c] = static_cast<S>(sw);
          if (dbp) dbp[c] = static_cast<S>(sb);
        }
      });
    });
  });
  return {dx, dw, db};
}

}  // namespace rbln::kernels
