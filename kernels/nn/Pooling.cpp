// Pooling on the device: max (with indices) and average over fixed windows,
// and adaptive average/max, for 2 and 3 spatial dims, with their backwards;
// max and average pooling take integers too (average: integer division, as CPU).
// Inputs are [(N,) C, *spatial]; each (n, c) plane is pooled independently,
// with CPU's window rules (ceil_mode, padding, count_include_pad, NaN wins).
#include <ATen/native/Pool.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "generated/RBLNNativeFunctions.h"
#include "kernels/common/Checks.h"
#include "kernels/common/Common.h"
#include "kernels/nn/Window.h"
#include "kernels/vec/VecKernels.h"

namespace rbln::kernels {
namespace {

struct Planes {
  Window w;
  int64_t count;                   // (n, c) planes
  std::vector<int64_t> out_sizes;  // leading dims + pooled spatial dims
};

// The forward wrappers run CPU's checks of the input (kernels/common/Checks.h); the rank guards the backwards.
Planes planes_of(const at::Tensor& self, int64_t dims, const char* op) {
  TORCH_CHECK(self.dim() == dims + 1 || self.dim() == dims + 2, op, ": Expected ", dims + 1, "D or ", dims + 2,
              "D (batch mode) tensor for input, but got: ", self.sizes());
  Planes p;
  const int64_t lead = self.dim() - dims;
  p.count = 1;
  for (int64_t d = 0; d < lead; ++d) {
    p.count *= self.size(d);
    p.out_sizes.push_back(self.size(d));
  }
  set_trailing(p.w.in, self.sizes().slice(lead), dims);
  return p;
}

// Fixed windows: kernel, stride (default: kernel), padding, dilation, ceil_mode,
// checked by rbln::checks::pool_window (the generated wrappers run it, as CPU).
Planes plan_window(const at::Tensor& self, int64_t dims, at::IntArrayRef kernel, at::IntArrayRef stride,
                   at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode, const char* op) {
  Planes p = planes_of(self, dims, op);
  Window& w = p.w;
  set_trailing(w.k, kernel, dims);
  set_trailing(w.stride, stride.empty() ? kernel : stride, dims);
  set_trailing(w.pad, padding, dims);
  set_trailing(w.dil, dilation, dims);
  for (int64_t d = 3 - dims; d < 3; ++d) {
    w.out[d] = at::native::pooling_output_shape<int64_t>(w.in[d], w.k[d], w.pad[d], w.stride[d], w.dil[d], ceil_mode);
    p.out_sizes.push_back(w.out[d]);
  }
  return p;
}

// output_size: checked by the wrappers (rbln::checks); a negative size fails creating the output, as on CPU.
Planes plan_adaptive(const at::Tensor& self, int64_t dims, at::IntArrayRef output_size, const char* op) {
  Planes p = planes_of(self, dims, op);
  p.out_sizes.insert(p.out_sizes.end(), output_size.begin(), output_size.end());
  set_trailing(p.w.out, output_size, dims);
  return p;
}

// Per dim, the input range of adaptive output position o: [floor(o*in/out), ceil((o+1)*in/out)).
int64_t adaptive_start(int64_t o, int64_t in, int64_t out) { return (o * in) / out; }
int64_t adaptive_end(int64_t o, int64_t in, int64_t out) { return ((o + 1) * in + out - 1) / out; }

// Calls f(out_index, offsets...) with the in-plane offsets of each adaptive window.
template <class F>
void for_each_adaptive(const Window& w, F&& f) {
  int64_t out_index = 0, o[3];
  for (o[0] = 0; o[0] < w.out[0]; ++o[0])
    for (o[1] = 0; o[1] < w.out[1]; ++o[1])
      for (o[2] = 0; o[2] < w.out[2]; ++o[2], ++out_index) {
        int64_t lo[3], hi[3];
        for (int d = 0; d < 3; ++d) {
          lo[d] = adaptive_start(o[d], w.in[d], w.out[d]);
          hi[d] = adaptive_end(o[d], w.in[d], w.out[d]);
        }
        f(out_index, lo, hi);
      }
}

template <class F>
void for_each_offset(const Window& w, const int64_t (&lo)[3], const int64_t (&hi)[3], F&& f) {
  for (int64_t a = lo[0]; a < hi[0]; ++a)
    for (int64_t b = lo[1]; b < hi[1]; ++b)
      for (int64_t c = lo[2]; c < hi[2]; ++c) f((a * w.in[1] + b) * w.in[2] + c);
}

// Per dim, the first input position of the fixed window at output position o
// and its in-bounds taps [lo, hi) (lo >= hi: none).
void window_taps(const Window& w, const int64_t (&o)[3], int64_t (&start)[3], int64_t (&lo)[3],
                 int64_t (&hi)[3]) {
  for (int d = 0; d < 3; ++d) {
    start[d] = o[d] * w.stride[d] - w.pad[d];
    lo[d] = start[d] >= 0 ? 0 : (-start[d] + w.dil[d] - 1) / w.dil[d];
    hi[d] = start[d] >= w.in[d] ? 0 : std::min(w.k[d], (w.in[d] - 1 - start[d]) / w.dil[d] + 1);
  }
}

// Fixed windows clipped to the input, without a per-tap bounds check:
// f(out_index, visit), where visit(g) calls g(in_offset) for the window's
// in-bounds taps in row-major tap order.
template <class F>
void for_each_window(const Window& w, F&& f) {
  int64_t o[3], out_index = 0;
  for (o[0] = 0; o[0] < w.out[0]; ++o[0])
    for (o[1] = 0; o[1] < w.out[1]; ++o[1])
      for (o[2] = 0; o[2] < w.out[2]; ++o[2], ++out_index) {
        int64_t start[3], lo[3], hi[3];
        window_taps(w, o, start, lo, hi);
        f(out_index, [&](auto&& g) {
          for (int64_t a = lo[0]; a < hi[0]; ++a) {
            const int64_t ia = start[0] + a * w.dil[0];
            for (int64_t b = lo[1]; b < hi[1]; ++b) {
              const int64_t row = (ia * w.in[1] + start[1] + b * w.dil[1]) * w.in[2] + start[2];
              for (int64_t c = lo[2]; c < hi[2]; ++c) g(row + c * w.dil[2]);
            }
          }
        });
      }
}

// CPU's max rule: the first tap starts, a larger value or a NaN replaces.
template <class T>
struct MaxTracker {
  T value = -std::numeric_limits<T>::infinity();
  int64_t index = -1;
  void see(T v, int64_t i) {
    if (index < 0 || v > value || std::isnan(v)) {
      value = v;
      index = i;
    }
  }
};

// One tap of max pooling over a row of n outputs (VecKernels.h: max_tap_f32, the vector loop of float32).
template <class T, class opmath>
void max_tap(const T* src, int64_t stride, int64_t n, opmath* best, int32_t* tap, int32_t id) {
  if constexpr (std::is_same_v<T, float>) {
    vec::table().max_tap_f32(src, stride, n, best, tap, id);
  } else {
    for (int64_t x = 0; x < n; ++x) {
      const opmath v = static_cast<opmath>(src[x * stride]);
      if (tap[x] < 0 || v > best[x] || std::isnan(v)) {
        best[x] = v;
        tap[x] = id;
      }
    }
  }
}

// One plane of fixed-window max pooling, a row of outputs at a time: for each
// tap (in row-major order) a loop over the row's outputs whose tap is in
// bounds, with no bounds checks and, for float32, in vectors; each output
// still sees its taps in CPU's order, so the values, indices, NaN and tie
// rules are CPU's (ResNet-18's 3x3 stride-2 pooling at batch 8: 1.25x CPU's
// time a window at a time, 0.17x so). `best` and `tap` (a tap's number in the
// row's list of in-bounds taps) hold a row.
template <class T, class opmath>
void max_pool_plane(const Window& w, const T* in, T* out, int64_t* indices, opmath* best, int32_t* tap,
                    std::vector<int64_t>& tap_offset) {
  const int64_t width = w.out[2], s = w.stride[2], reach = (width - 1) * s;
  // Taps some output of a row reaches: offset = c * dil - pad in [-reach, in - 1]
  // (a window far wider than the input is not walked tap by tap).
  const int64_t c_lo = std::max<int64_t>(0, (w.pad[2] - reach + w.dil[2] - 1) / w.dil[2]);
  const int64_t c_hi = std::min(w.k[2], (w.in[2] - 1 + w.pad[2]) / w.dil[2] + 1);
  for (int64_t o0 = 0; o0 < w.out[0]; ++o0) {
    for (int64_t o1 = 0; o1 < w.out[1]; ++o1) {
      std::fill(best, best + width, -std::numeric_limits<opmath>::infinity());
      std::fill(tap, tap + width, -1);
      const int64_t o[3] = {o0, o1, 0};
      int64_t start[3], lo[3], hi[3];
      window_taps(w, o, start, lo, hi);  // dims 0 and 1 of this row's windows
      tap_offset.clear();  // per tap number: its input offset, less the output's x * s
      for (int64_t a = lo[0]; a < hi[0]; ++a) {
        for (int64_t b = lo[1]; b < hi[1]; ++b) {
          const int64_t base = ((start[0] + a * w.dil[0]) * w.in[1] + start[1] + b * w.dil[1]) * w.in[2];
          for (int64_t c = c_lo; c < c_hi; ++c) {
            const int64_t offset = c * w.dil[2] - w.pad[2];  // outputs x with 0 <= x * s + offset < in
            const int64_t first = offset >= 0 ? 0 : (-offset + s - 1) / s;
            const int64_t last = offset > w.in[2] - 1 ? 0 : std::min(width, (w.in[2] - 1 - offset) / s + 1);
            if (first < last) {
              const auto number = static_cast<int32_t>(tap_offset.size());
              tap_offset.push_back(base + offset);
              max_tap(in + base + offset + first * s, s, last - first, best + first, tap + first, number);
            }
          }
        }
      }
      const int64_t row = (o0 * w.out[1] + o1) * width;
      for (int64_t x = 0; x < width; ++x) {
        out[row + x] = static_cast<T>(best[x]);
        indices[row + x] = tap[x] < 0 ? -1 : tap_offset[tap[x]] + x * s;
      }
    }
  }
}

// A result in the memory format of the pooled input (channels_last in,
// channels_last out, as on CPU and CUDA, and as the meta functions that
// torch.compile plans with say); the kernels compute in the contiguous one.
at::Tensor in_layout_of(const at::Tensor& result, const at::Tensor& self) {
  const auto format = self.suggest_memory_format();
  return format == at::MemoryFormat::Contiguous ? result : result.contiguous(format);
}

// Runs body(plane) over `count` planes, threaded above the grain size.
template <class F>
void over_planes(int64_t count, int64_t work_per_plane, F&& body) {
  at::parallel_for(0, count, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, work_per_plane)),
                   [&](int64_t lo, int64_t hi) {
                     for (int64_t plane = lo; plane < hi; ++plane) body(plane);
                   });
}

// Planes of a gradient pair: grad_output and input share their leading dims.
struct GradPlanes {
  int64_t count, in, out;  // planes, input plane size, output plane size
};

GradPlanes grad_planes(const at::Tensor& grad_output, const at::Tensor& self, int64_t dims, const char* op) {
  TORCH_CHECK(grad_output.dim() == self.dim() && self.dim() > dims, op, ": grad_output ", grad_output.sizes(),
              " does not match input ", self.sizes());
  const int64_t lead = self.dim() - dims;
  TORCH_CHECK(grad_output.sizes().slice(0, lead) == self.sizes().slice(0, lead), op, ": grad_output ",
              grad_output.sizes(), " does not match input ", self.sizes());
  GradPlanes g{1, 1, 1};
  for (int64_t d = 0; d < lead; ++d) g.count *= self.size(d);
  for (int64_t d = lead; d < self.dim(); ++d) {
    g.in *= self.size(d);
    g.out *= grad_output.size(d);
  }
  return g;
}

std::tuple<at::Tensor, at::Tensor> max_pool(const at::Tensor& self, const Planes& p, bool adaptive, const char* name) {
  auto out = at::empty(p.out_sizes, self.options());
  auto indices = at::empty(p.out_sizes, self.options().dtype(at::kLong));
  if (out.numel() == 0) return {in_layout_of(out, self), in_layout_of(indices, self)};
  auto x = contiguous(self);
  RBLN_DISPATCH_NUMERIC(self.scalar_type(), "pooling", [&] {
    using opmath = at::opmath_type<scalar_t>;
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    scalar_t* yp = out.data_ptr<scalar_t>();
    int64_t* ip = indices.data_ptr<int64_t>();
    launch_on(self, name, [=] {
      const int64_t P = p.w.in_numel(), L = p.w.out_numel();
      over_planes(p.count, L * p.w.k_numel(), [&](int64_t plane) {
        const scalar_t* in = xp + plane * P;
        auto store = [&](int64_t o, const MaxTracker<opmath>& m) {
          yp[plane * L + o] = static_cast<scalar_t>(m.value);
          ip[plane * L + o] = m.index;
        };
        if (adaptive) {
          for_each_adaptive(p.w, [&](int64_t o, const int64_t(&lo)[3], const int64_t(&hi)[3]) {
            MaxTracker<opmath> m;
            for_each_offset(p.w, lo, hi, [&](int64_t i) { m.see(static_cast<opmath>(in[i]), i); });
            store(o, m);
          });
          return;
        }
        std::vector<opmath> best(p.w.out[2]);
        std::vector<int32_t> tap(p.w.out[2]);
        std::vector<int64_t> tap_offset;
        max_pool_plane(p.w, in, yp + plane * L, ip + plane * L, best.data(), tap.data(), tap_offset);
      });
    });
  });
  return {in_layout_of(out, self), in_layout_of(indices, self)};
}

// grad_input[plane][indices] += grad_output
at::Tensor max_pool_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& indices,
                             int64_t dims, const char* name) {
  check_same_device({&grad_output, &self, &indices});
  TORCH_CHECK(grad_output.sizes() == indices.sizes(), name, ": grad_output ", grad_output.sizes(), " and indices ",
              indices.sizes(), " must have the same shape");
  TORCH_CHECK(indices.scalar_type() == at::kLong, name, ": indices must be int64, got ", indices.scalar_type());
  const auto g = grad_planes(grad_output, self, dims, name);
  auto grad_input = at::empty(self.sizes(), self.options());
  auto go = contiguous(grad_output), idx = contiguous(indices);
  RBLN_DISPATCH_FLOATING(self.scalar_type(), "pooling", [&] {
    const scalar_t* gp = go.const_data_ptr<scalar_t>();
    const int64_t* ip = idx.const_data_ptr<int64_t>();
    scalar_t* gi = grad_input.data_ptr<scalar_t>();
    launch_on(self, name, [=] {
      std::fill(gi, gi + g.count * g.in, scalar_t(0));
      over_planes(g.count, g.out, [&](int64_t plane) {
        for (int64_t o = 0; o < g.out; ++o) {
          const int64_t i = ip[plane * g.out + o];
          TORCH_CHECK(i >= 0 && i < g.in, name, ": index ", i, " is out of bounds for an input plane of ", g.in,
                      " elements");
          gi[plane * g.in + i] += gp[plane * g.out + o];
        }
      });
    });
  });
  return in_layout_of(grad_input, self);
}

// CPU's average divisor per output position (0: the window lies in the padding).
std::vector<double> avg_divisors(const Window& w, bool count_include_pad, std::optional<int64_t> divisor_override) {
  std::vector<double> divisors(w.out_numel());
  int64_t o[3], index = 0;
  for (o[0] = 0; o[0] < w.out[0]; ++o[0])
    for (o[1] = 0; o[1] < w.out[1]; ++o[1])
      for (o[2] = 0; o[2] < w.out[2]; ++o[2], ++index) {
        int64_t start[3], lo[3], hi[3];
        window_taps(w, o, start, lo, hi);
        int64_t valid = 1, padded = 1;  // taps in the input; the window clipped to the padded input
        for (int d = 0; d < 3; ++d) {
          valid *= std::max<int64_t>(0, hi[d] - lo[d]);
          padded *= std::min(start[d] + w.k[d], w.in[d] + w.pad[d]) - start[d];
        }
        divisors[index] = valid == 0 ? 0.0
                          : divisor_override ? static_cast<double>(*divisor_override)
                          : count_include_pad ? static_cast<double>(padded)
                                              : static_cast<double>(valid);
      }
  return divisors;
}

at::Tensor avg_pool(const at::Tensor& self, const Planes& p, bool count_include_pad,
                    std::optional<int64_t> divisor_override, const char* name) {
  auto out = at::empty(p.out_sizes, self.options());
  if (out.numel() == 0) return in_layout_of(out, self);
  auto x = contiguous(self);
  RBLN_DISPATCH_NUMERIC(self.scalar_type(), "pooling", [&] {
    using opmath = at::opmath_type<scalar_t>;
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    scalar_t* yp = out.data_ptr<scalar_t>();
    launch_on(self, name, [=] {
      const auto divisors = avg_divisors(p.w, count_include_pad, divisor_override);
      const int64_t P = p.w.in_numel(), L = p.w.out_numel();
      over_planes(p.count, L * p.w.k_numel(), [&](int64_t plane) {
        const scalar_t* in = xp + plane * P;
        for_each_window(p.w, [&](int64_t o, auto&& visit) {
          opmath sum = 0;
          visit([&](int64_t i) { sum += static_cast<opmath>(in[i]); });
          const double div = divisors[o];
          yp[plane * L + o] = static_cast<scalar_t>(div == 0 ? opmath(0) : sum / static_cast<opmath>(div));
        });
      });
    });
  });
  return in_layout_of(out, self);
}

at::Tensor avg_pool_backward(const at::Tensor& grad_output, const at::Tensor& self, const Planes& p,
                             bool count_include_pad, std::optional<int64_t> divisor_override, const char* name) {
  check_same_device({&grad_output, &self});
  TORCH_CHECK(grad_output.sizes() == at::IntArrayRef(p.out_sizes), name, ": grad_output ", grad_output.sizes(),
              " does not match the pooled size ", p.out_sizes);
  auto grad_input = at::empty(self.sizes(), self.options());
  auto go = contiguous(grad_output);
  RBLN_DISPATCH_FLOATING(self.scalar_type(), "pooling", [&] {
    using opmath = at::opmath_type<scalar_t>;
    const scalar_t* gp = go.const_data_ptr<scalar_t>();
    scalar_t* gi = grad_input.data_ptr<scalar_t>();
    launch_on(self, name, [=] {
      const auto divisors = avg_divisors(p.w, count_include_pad, divisor_override);
      const int64_t P = p.w.in_numel(), L = p.w.out_numel();
      std::fill(gi, gi + p.count * P, scalar_t(0));
      over_planes(p.count, L * p.w.k_numel(), [&](int64_t plane) {
        scalar_t* in = gi + plane * P;
        for_each_window(p.w, [&](int64_t o, auto&& visit) {
          if (divisors[o] == 0) return;
          const opmath g = static_cast<opmath>(gp[plane * L + o]) / static_cast<opmath>(divisors[o]);
          visit([&](int64_t i) { in[i] += static_cast<scalar_t>(g); });
        });
      });
    });
  });
  return in_layout_of(grad_input, self);
}

at::Tensor adaptive_avg_pool(const at::Tensor& self, const Planes& p, int64_t dims, const char* name) {
  auto out = at::empty(p.out_sizes, self.options());
  if (out.numel() == 0) return in_layout_of(out, self);
  auto x = contiguous(self);
  RBLN_DISPATCH_FLOATING(self.scalar_type(), "pooling", [&] {
    using opmath = at::opmath_type<scalar_t>;
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    scalar_t* yp = out.data_ptr<scalar_t>();
    launch_on(self, name, [=] {
      const int64_t P = p.w.in_numel(), L = p.w.out_numel();
      over_planes(p.count, P, [&](int64_t plane) {
        const scalar_t* in = xp + plane * P;
        for_each_adaptive(p.w, [&](int64_t o, const int64_t(&lo)[3], const int64_t(&hi)[3]) {
          if (dims == 3) {  // CPU's 3-d kernel sums in the dtype itself, then divides by each extent in turn
            scalar_t sum = 0;
            for_each_offset(p.w, lo, hi, [&](int64_t i) { sum += in[i]; });
            yp[plane * L + o] = sum / (hi[0] - lo[0]) / (hi[1] - lo[1]) / (hi[2] - lo[2]);
            return;
          }
          opmath sum = 0;
          int64_t n = 0;
          for_each_offset(p.w, lo, hi, [&](int64_t i) {
            sum += static_cast<opmath>(in[i]);
            ++n;
          });
          yp[plane * L + o] = static_cast<scalar_t>(sum / static_cast<opmath>(n));
        });
      });
    });
  });
  return in_layout_of(out, self);
}

at::Tensor adaptive_avg_pool_backward(const at::Tensor& grad_output, const at::Tensor& self, int64_t dims,
                                      const char* name) {
  check_same_device({&grad_output, &self});
  grad_planes(grad_output, self, dims, name);
  Planes p = plan_adaptive(self, dims, grad_output.sizes().slice(grad_output.dim() - dims), name);
  auto grad_input = at::empty(self.sizes(), self.options());
  auto go = contiguous(grad_output);
  RBLN_DISPATCH_FLOATING(self.scalar_type(), "pooling", [&] {
    using opmath = at::opmath_type<scalar_t>;
    const scalar_t* gp = go.const_data_ptr<scalar_t>();
    scalar_t* gi = grad_input.data_ptr<scalar_t>();
    launch_on(self, name, [=] {
      const int64_t P = p.w.in_numel(), L = p.w.out_numel();
      std::fill(gi, gi + p.count * P, scalar_t(0));
      over_planes(p.count, P, [&](int64_t plane) {
        scalar_t* in = gi + plane * P;
        for_each_adaptive(p.w, [&](int64_t o, const int64_t(&lo)[3], const int64_t(&hi)[3]) {
          const int64_t n = (hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2]);
          const opmath g = static_cast<opmath>(gp[plane * L + o]) / static_cast<opmath>(n);
          for_each_offset(p.w, lo, hi, [&](int64_t i) { in[i] += static_cast<scalar_t>(g); });
        });
      });
    });
  });
  return in_layout_of(grad_input, self);
}

}  // namespace

// One public pair per op: the 2-d and 3-d forms differ only in `dims`.
#define RBLN_POOL_OPS(D)                                                                                             \
  std::tuple<at::Tensor, at::Tensor> max_pool##D##d_with_indices(const at::Tensor& self, at::IntArrayRef kernel_size, \
                                                                 at::IntArrayRef stride, at::IntArrayRef padding,    \
                                                                 at::IntArrayRef dilation, bool ceil_mode) {         \
    auto p = plan_window(self, D, kernel_size, stride, padding, dilation, ceil_mode, "max_pool" #D "d");             \
    return max_pool(self, p, false, "aten::max_pool" #D "d_with_indices");                                           \
  }                                                                                                                  \
  at::Tensor max_pool##D##d_with_indices_backward(const at::Tensor& grad_output, const at::Tensor& self,             \
                                                  at::IntArrayRef kernel_size, at::IntArrayRef stride,               \
                                                  at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode, \
                                                  const at::Tensor& indices) {                                       \
    checks::max_pool##D##d_with_indices_check(self, kernel_size, stride, padding, dilation, ceil_mode);              \
    return max_pool_backward(grad_output, self, indices, D, "aten::max_pool" #D "d_with_indices_backward");          \
  }                                                                                                                  \
  at::Tensor avg_pool##D##d(const at::Tensor& self, at::IntArrayRef kernel_size, at::IntArrayRef stride,             \
                            at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,                         \
                            std::optional<int64_t> divisor_override) {                                               \
    auto p = plan_window(self, D, kernel_size, stride, padding, 1, ceil_mode, "avg_pool" #D "d");                    \
    return avg_pool(self, p, count_include_pad, divisor_override, "aten::avg_pool" #D "d");                          \
  }                                                                                                                  \
  at::Tensor avg_pool##D##d_backward(const at::Tensor& grad_output, const at::Tensor& self,                          \
                                     at::IntArrayRef kernel_size, at::IntArrayRef stride, at::IntArrayRef padding,   \
                                     bool ceil_mode, bool count_include_pad,                                         \
                                     std::optional<int64_t> divisor_override) {                                      \
    checks::avg_pool##D##d_check(self, kernel_size, stride, padding, ceil_mode, count_include_pad,                   \
                                 divisor_override);                                                                  \
    auto p = plan_window(self, D, kernel_size, stride, padding, 1, ceil_mode, "avg_pool" #D "d_backward");           \
    return avg_pool_backward(grad_output, self, p, count_include_pad, divisor_override,                              \
                             "aten::avg_pool" #D "d_backward");                                                      \
  }                                                                                                                  \
  at::Tensor _adaptive_avg_pool##D##d(const at::Tensor& self, c10::SymIntArrayRef output_size) {                     \
    auto p = plan_adaptive(self, D, C10_AS_INTARRAYREF_SLOW(output_size), "adaptive_avg_pool" #D "d");               \
    return adaptive_avg_pool(self, p, D, "aten::_adaptive_avg_pool" #D "d");                                         \
  }                                                                                                                  \
  at::Tensor _adaptive_avg_pool##D##d_backward(const at::Tensor& grad_output, const at::Tensor& self) {              \
    return adaptive_avg_pool_backward(grad_output, self, D, "aten::_adaptive_avg_pool" #D "d_backward");             \
  }                                                                                                                  \
  std::tuple<at::Tensor, at::Tensor> adaptive_max_pool##D##d(const at::Tensor& self, at::IntArrayRef output_size) {  \
    auto p = plan_adaptive(self, D, output_size, "adaptive_max_pool" #D "d");                                        \
    return max_pool(self, p, true, "aten::adaptive_max_pool" #D "d");                                                \
  }                                                                                                                  \
  at::Tensor adaptive_max_pool##D##d_backward(const at::Tensor& grad_output, const at::Tensor& self,                 \
                                              const at::Tensor& indices) {                                           \
    return max_pool_backward(grad_output, self, indices, D, "aten::adaptive_max_pool" #D "d_backward");              \
  }

RBLN_POOL_OPS(2)
RBLN_POOL_OPS(3)
#undef RBLN_POOL_OPS

}  // namespace rbln::kernels
