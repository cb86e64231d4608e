// Batch normalization on the device: per-channel statistics over [N, C, *]
// (accumulated in double for float32, as CPU does), running-stat updates,
// and the backward. Every ATen entry point (native_batch_norm,
// _native_batch_norm_legit, _batch_norm_with_update) shares one forward.
#include <ATen/AccumulateType.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mean.h>

#include <cmath>

#include "generated/RBLNNativeFunctions.h"
#include "kernels/common/Common.h"

namespace rbln::kernels {
namespace {

struct Layout {
  int64_t batch, channels, plane;  // input viewed as [batch, channels, plane]
};

Layout layout_of(const at::Tensor& input) {
  TORCH_CHECK(input.dim() >= 2, "batch_norm: expected an input with at least 2 dims, got ", input.sizes());
  Layout l{input.size(0), input.size(1), 1};
  for (int64_t d = 2; d < input.dim(); ++d) l.plane *= input.size(d);
  return l;
}

const at::Tensor& defined_or(const std::optional<at::Tensor>& t, const at::Tensor& fallback) {
  return t && t->defined() ? *t : fallback;
}

// CPU's kernels read the first `channels` elements and check nothing; a shorter parameter, which CPU
// would read past, is refused.
void check_param(const at::Tensor& t, int64_t channels, const char* what) {
  if (!t.defined()) return;
  TORCH_CHECK(t.numel() >= channels, "batch_norm: ", what, " should contain ", channels, " elements, not ", t.numel());
}

// A contiguous copy of a per-channel parameter in the statistics dtype.
at::Tensor param(const at::Tensor& t, at::ScalarType dtype) {
  if (!t.defined()) return t;
  if (t.scalar_type() == dtype) return contiguous(t);
  auto copy = at::empty(t.sizes(), t.options().dtype(dtype));
  device_copy(copy, t);
  return copy;
}

// Mixed precision (float16/bfloat16 input, float parameters) keeps statistics in the parameters' dtype.
at::ScalarType stat_type(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& running_mean) {
  if (running_mean.defined()) return running_mean.scalar_type();
  if (weight.defined()) return weight.scalar_type();
  return input.scalar_type();
}

// y = x * a[c] + b[c] with a = invstd * weight, b = bias - mean * a (unrounded statistics).
template <class T, class Acc>
void normalize(const T* x, T* y, const Acc* a, const Acc* b, Layout l) {
  at::parallel_for(0, l.batch * l.channels, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, l.plane)),
                   [&](int64_t lo, int64_t hi) {
                     for (int64_t r = lo; r < hi; ++r) {
                       const int64_t c = r % l.channels;
                       for (int64_t i = 0; i < l.plane; ++i)
                         y[r * l.plane + i] = static_cast<T>(static_cast<Acc>(x[r * l.plane + i]) * a[c] + b[c]);
                     }
                   });
}

// Per channel: mean (`given`, or summed here), sum of squared deviations from it.
template <class T, class Acc, class S, class F>
void channel_stats(const T* x, Layout l, const S* given, F&& f) {
  at::parallel_for(0, l.channels, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      const int64_t n = l.batch * l.plane;
      Acc mean;
      if (given) {
        mean = static_cast<Acc>(given[c]);
      } else {
        Acc sum = 0;
        for (int64_t b = 0; b < l.batch; ++b)
          for (int64_t i = 0; i < l.plane; ++i) sum += static_cast<Acc>(x[(b * l.channels + c) * l.plane + i]);
        mean = sum / n;
      }
      Acc sq = 0;
      for (int64_t b = 0; b < l.batch; ++b)
        for (int64_t i = 0; i < l.plane; ++i) {
          const Acc d = static_cast<Acc>(x[(b * l.channels + c) * l.plane + i]) - mean;
          sq += d * d;
        }
      f(c, mean, sq, n);
    }
  });
}

// The kernels compute contiguous; results take the input's suggested memory format, as CPU's
// and CUDA's (channels_last in, channels_last out).
at::Tensor in_input_format(const at::Tensor& result, const at::Tensor& input) {
  return result.defined() ? result.contiguous(input.suggest_memory_format()) : result;
}

// (output, save_mean, save_invstd); running stats updated in place when training.
std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_forward(const at::Tensor& input, const at::Tensor& weight,
                                                                  const at::Tensor& bias, const at::Tensor& running_mean,
                                                                  const at::Tensor& running_var, bool training,
                                                                  double momentum, double eps) {
  check_same_device({&input, &weight, &bias, &running_mean, &running_var});
  check_norm_param_dtypes(input, {&weight, &bias, &running_mean, &running_var});
  const auto l = layout_of(input);
  TORCH_CHECK(!training || input.numel() > 0, "input tensor must have at least one element, but got input_sizes = ",
              input.sizes());
  for (const auto& [t, what] : {std::pair{&weight, "weight"}, {&bias, "bias"}, {&running_mean, "running_mean"},
                                {&running_var, "running_var"}})
    if (input.numel() > 0) check_param(*t, l.channels, what);
  TORCH_CHECK(training || (running_mean.defined() && running_var.defined()),
              "batch_norm: running_mean and running_var must be defined in evaluation mode");
  const auto stats = stat_type(input, weight, running_mean);
  auto out = at::empty(input.sizes(), input.options());
  auto save_mean = at::empty({training ? l.channels : 0}, input.options().dtype(stats));
  auto save_invstd = at::empty({training ? l.channels : 0}, input.options().dtype(stats));
  // CPU's fused kernel takes dense layouts; others go through its step-by-step TensorIterator path.
  const bool dense = input.is_contiguous() || input.is_contiguous(at::MemoryFormat::ChannelsLast) ||
                     input.is_contiguous(at::MemoryFormat::ChannelsLast3d);
  // CPU's path for other layouts centres the variance on at::mean's result, rounded to the statistics' dtype.
  at::Tensor rounded_mean;
  if (training && !dense && input.numel() > 0) {
    std::vector<int64_t> dims{0};
    for (int64_t d = 2; d < input.dim(); ++d) dims.push_back(d);
    rounded_mean = at::mean(input, dims, /*keepdim=*/false, stats);
  }
  auto x = contiguous(input);
  auto w = param(weight, stats), b = param(bias, stats);
  // Running stats are updated through contiguous copies written back afterwards.
  auto rm = param(running_mean, stats), rv = param(running_var, stats);
  auto mean = training ? save_mean : rm;
  auto invstd = save_invstd;  // empty in evaluation mode
  if (input.numel() > 0) {
    RBLN_DISPATCH_FLOATING(input.scalar_type(), "batch_norm", [&] {
      using T = scalar_t;
      const T* xp = x.const_data_ptr<T>();
      T* yp = out.data_ptr<T>();
      RBLN_DISPATCH_FLOATING(stats, "batch_norm", [&] {
        using S = scalar_t;
        using Acc = at::acc_type<S, false>;
        const S* wp = w.defined() ? w.const_data_ptr<S>() : nullptr;
        const S* bp = b.defined() ? b.const_data_ptr<S>() : nullptr;
        S* mp = mean.data_ptr<S>();
        S* ip = training ? invstd.data_ptr<S>() : nullptr;
        S* rmp = rm.defined() ? rm.data_ptr<S>() : nullptr;
        S* rvp = rv.defined() ? rv.data_ptr<S>() : nullptr;
        const S* rv_read = rvp;
        const S* given_mean = rounded_mean.defined() ? rounded_mean.const_data_ptr<S>() : nullptr;
        launch_on(input, "aten::native_batch_norm", [=] {
          // Training normalizes with the statistics rounded to their stored dtype, as CPU does
          // (float16/bfloat16 parameters round them to float16/bfloat16).
          std::vector<Acc> mean_acc(l.channels), invstd_acc(l.channels);
          if (training) {
            channel_stats<T, Acc>(xp, l, given_mean, [&](int64_t c, Acc m, Acc sq, int64_t n) {
              mp[c] = static_cast<S>(m);
              ip[c] = static_cast<S>(Acc(1) / std::sqrt(sq / n + static_cast<Acc>(eps)));
              mean_acc[c] = static_cast<Acc>(mp[c]);
              invstd_acc[c] = static_cast<Acc>(ip[c]);
              if (rmp) rmp[c] = static_cast<S>(momentum * m + (1 - momentum) * static_cast<Acc>(rmp[c]));
              if (rvp)
                rvp[c] = static_cast<S>(momentum * sq / (n - 1) + (1 - momentum) * static_cast<Acc>(rvp[c]));
            });
          } else {
            for (int64_t c = 0; c < l.channels; ++c) {
              mean_acc[c] = static_cast<Acc>(mp[c]);
              invstd_acc[c] = Acc(1) / std::sqrt(static_cast<Acc>(rv_read[c]) + static_cast<Acc>(eps));
            }
          }
          if (!dense) {
            // CPU's path for other layouts: ((x - mean) * invstd) * weight + bias, every step rounded
            // to the statistics' dtype; in evaluation invstd = 1 / sqrt(var + eps), also step by step.
            auto r = [](Acc v) { return static_cast<Acc>(static_cast<S>(v)); };
            std::vector<Acc> m(l.channels), is(l.channels), w(l.channels), b(l.channels);
            for (int64_t c = 0; c < l.channels; ++c) {
              m[c] = mean_acc[c];
              is[c] = training ? invstd_acc[c]
                               : r(Acc(1) / r(std::sqrt(r(static_cast<Acc>(rv_read[c]) + r(static_cast<Acc>(eps))))));
              w[c] = wp ? static_cast<Acc>(wp[c]) : Acc(1);
              b[c] = bp ? static_cast<Acc>(bp[c]) : Acc(0);
            }
            at::parallel_for(0, l.batch * l.channels, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, l.plane)),
                             [&](int64_t lo, int64_t hi) {
                               for (int64_t row = lo; row < hi; ++row) {
                                 const int64_t c = row % l.channels;
                                 for (int64_t k = row * l.plane; k < (row + 1) * l.plane; ++k)
                                   yp[k] = static_cast<T>(r(r(r(r(static_cast<Acc>(xp[k]) - m[c]) * is[c]) * w[c]) + b[c]));
                               }
                             });
            return;
          }
          std::vector<Acc> a(l.channels), b(l.channels);
          for (int64_t c = 0; c < l.channels; ++c) {
            a[c] = invstd_acc[c] * (wp ? static_cast<Acc>(wp[c]) : Acc(1));
            b[c] = (bp ? static_cast<Acc>(bp[c]) : Acc(0)) - mean_acc[c] * a[c];
          }
          normalize<T, Acc>(xp, yp, a.data(), b.data(), l);
        });
      });
    });
  }
  if (training) {
    if (rm.defined() && !rm.is_same(running_mean)) device_copy(running_mean, rm);
    if (rv.defined() && !rv.is_same(running_var)) device_copy(running_var, rv);
  }
  return {in_input_format(out, input), save_mean, save_invstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_backward_impl(
    const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& weight, const at::Tensor& running_mean,
    const at::Tensor& running_var, const at::Tensor& save_mean, const at::Tensor& save_invstd, bool train, double eps,
    std::array<bool, 3> mask) {
  check_same_device({&grad_out, &input, &weight, &running_mean, &running_var, &save_mean, &save_invstd});
  TORCH_CHECK(grad_out.sizes() == input.sizes(), "batch_norm_backward: grad_output ", grad_out.sizes(),
              " does not match input ", input.sizes());
  const auto l = layout_of(input);
  const at::Tensor& mean_src = train ? save_mean : running_mean;
  TORCH_CHECK(mean_src.defined() && (train ? save_invstd : running_var).defined(), "batch_norm_backward: ",
              train ? "save_mean and save_invstd" : "running_mean and running_var", " must be defined");
  const auto stats = mean_src.scalar_type();
  at::Tensor grad_input = mask[0] ? at::empty(input.sizes(), input.options()) : at::Tensor();
  const auto param_options = input.options().dtype(weight.defined() ? weight.scalar_type() : stats);
  at::Tensor grad_weight = mask[1] ? at::empty({l.channels}, param_options) : at::Tensor();
  at::Tensor grad_bias = mask[2] ? at::empty({l.channels}, param_options) : at::Tensor();
  auto x = contiguous(input), dy = contiguous(grad_out);
  auto mean = param(mean_src, stats), spread = param(train ? save_invstd : running_var, stats);
  auto w = param(weight, stats);
  auto gw = grad_weight.defined() ? at::empty({l.channels}, input.options().dtype(stats)) : at::Tensor();
  auto gb = grad_bias.defined() ? at::empty({l.channels}, input.options().dtype(stats)) : at::Tensor();
  RBLN_DISPATCH_FLOATING(input.scalar_type(), "batch_norm_backward", [&] {
    using T = scalar_t;
    const T* xp = x.const_data_ptr<T>();
    const T* dyp = dy.const_data_ptr<T>();
    T* gip = grad_input.defined() ? grad_input.data_ptr<T>() : nullptr;
    RBLN_DISPATCH_FLOATING(stats, "batch_norm_backward", [&] {
      using S = scalar_t;
      using Acc = at::acc_type<S, false>;
      const S* mp = mean.const_data_ptr<S>();
      const S* sp = spread.const_data_ptr<S>();
      const S* wp = w.defined() ? w.const_data_ptr<S>() : nullptr;
      S* gwp = gw.defined() ? gw.data_ptr<S>() : nullptr;
      S* gbp = gb.defined() ? gb.data_ptr<S>() : nullptr;
      launch_on(input, "aten::native_batch_norm_backward", [=] {
        at::parallel_for(0, l.channels, 1, [&](int64_t lo, int64_t hi) {
          for (int64_t c = lo; c < hi; ++c) {
            const int64_t n = l.batch * l.plane;
            const Acc m = static_cast<Acc>(mp[c]);
            const Acc invstd =
                train ? static_cast<Acc>(sp[c]) : Acc(1) / std::sqrt(static_cast<Acc>(sp[c]) + static_cast<Acc>(eps));
            const Acc wc = wp ? static_cast<Acc>(wp[c]) : Acc(1);
            Acc sum_dy = 0, dot = 0;
            for (int64_t b = 0; b < l.batch; ++b)
              for (int64_t i = 0; i < l.plane; ++i) {
                const int64_t k = (b * l.channels + c) * l.plane + i;
                sum_dy += static_cast<Acc>(dyp[k]);
                dot += static_cast<Acc>(dyp[k]) * (static_cast<Acc>(xp[k]) - m);
              }
            if (gwp) gwp[c] = static_cast<S>(dot * invstd);
            if (gbp) gbp[c] = static_cast<S>(sum_dy);
            if (!gip) continue;
            const Acc proj = train && n > 0 ? dot * invstd * invstd / n : Acc(0);
            const Acc grad_mean = train && n > 0 ? sum_dy / n : Acc(0);
            for (int64_t b = 0; b < l.batch; ++b)
              for (int64_t i = 0; i < l.plane; ++i) {
                const int64_t k = (b * l.channels + c) * l.plane + i;
                const Acc d = static_cast<Acc>(dyp[k]) - (static_cast<Acc>(xp[k]) - m) * proj - grad_mean;
                gip[k] = static_cast<T>(d * invstd * wc);
              }
          }
        });
      });
    });
  });
  if (grad_weight.defined()) device_copy(grad_weight, gw);
  if (grad_bias.defined()) device_copy(grad_bias, gb);
  return {in_input_format(grad_input, input), grad_weight, grad_bias};
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var, bool training,
    double momentum, double eps) {
  const at::Tensor none;
  return batch_norm_forward(input, defined_or(weight, none), defined_or(bias, none), defined_or(running_mean, none),
                            defined_or(running_var, none), training, momentum, eps);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> _native_batch_norm_legit(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    at::Tensor& running_mean, at::Tensor& running_var, bool training, double momentum, double eps) {
  const at::Tensor none;
  return batch_norm_forward(input, defined_or(weight, none), defined_or(bias, none), running_mean, running_var,
                            training, momentum, eps);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> _native_batch_norm_legit_no_stats(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    bool training, double momentum, double eps) {
  const at::Tensor none;
  return batch_norm_forward(input, defined_or(weight, none), defined_or(bias, none), none, none, training, momentum,
                            eps);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> _batch_norm_with_update(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    at::Tensor& running_mean, at::Tensor& running_var, double momentum, double eps) {
  const at::Tensor none;
  auto [out, mean, invstd] = batch_norm_forward(input, defined_or(weight, none), defined_or(bias, none), running_mean,
                                                running_var, true, momentum, eps);
  return {out, mean, invstd, at::empty({0}, input.options().dtype(at::kByte))};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    const std::optional<at::Tensor>& save_mean, const std::optional<at::Tensor>& save_invstd, bool train, double eps,
    std::array<bool, 3> output_mask) {
  const at::Tensor none;
  return batch_norm_backward_impl(grad_out, input, defined_or(weight, none), defined_or(running_mean, none),
                                  defined_or(running_var, none), defined_or(save_mean, none),
                                  defined_or(save_invstd, none), train, eps, output_mask);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& weight,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    const std::optional<at::Tensor>& save_mean, const std::optional<at::Tensor>& save_var, bool update, double eps,
    std::array<bool, 3> output_mask, const at::Tensor& /*reserve*/) {
  const at::Tensor none;
  return batch_norm_backward_impl(grad_out, input, weight, defined_or(running_mean, none),
                                  defined_or(running_var, none), defined_or(save_mean, none),
                                  defined_or(save_var, none), update, eps, output_mask);
}

}  // namespace rbln::kernels
