// Separable resampling of the trailing 1 to 3 spatial dims: nearest
// upsampling and reflection/replication padding, where each output coordinate
// maps to one input coordinate per dim through a small table (one gather
// kernel for the forwards, one scatter-add for the backwards); and linear and
// cubic interpolation, where it maps to 2 or 4 weighted taps per dim.
#include <ATen/native/UpSample.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <vector>

#include "generated/RBLNNativeFunctions.h"
#include "kernels/common/Common.h"
#include "kernels/vec/VecKernels.h"

namespace rbln::kernels {
namespace {

using Table = std::vector<int64_t>;  // output coordinate -> input coordinate, for one dim

// The planes (leading dims) and the spatial sizes of a resampling.
struct Planes {
  std::vector<int64_t> in_sizes, out_sizes;  // spatial
  int64_t planes = 1;
  int64_t in_plane() const { return product(in_sizes); }
  int64_t out_plane() const { return product(out_sizes); }
  static int64_t product(const std::vector<int64_t>& v) {
    int64_t n = 1;
    for (auto s : v) n *= s;
    return n;
  }
};

// One input coordinate per output coordinate and dim.
struct Mapping : Planes {
  std::vector<Table> tables;  // one per spatial dim
  // The input offset (within a plane) of each output position of a plane.
  std::vector<int64_t> offsets() const {
    std::vector<int64_t> result(1, 0);
    for (size_t d = 0; d < tables.size(); ++d) {
      std::vector<int64_t> next;
      next.reserve(result.size() * tables[d].size());
      for (auto base : result)
        for (auto i : tables[d]) next.push_back(base * in_sizes[d] + i);
      result.swap(next);
    }
    return result;
  }
};

Planes planes_of(at::IntArrayRef input_sizes, int64_t dims, const char* op) {
  TORCH_CHECK(static_cast<int64_t>(input_sizes.size()) >= dims + 1, op, ": expected an input with at least ", dims + 1,
              " dims, got ", input_sizes);
  Planes p;
  const int64_t lead = input_sizes.size() - dims;
  for (int64_t d = 0; d < lead; ++d) p.planes *= input_sizes[d];
  p.in_sizes.assign(input_sizes.begin() + lead, input_sizes.end());
  return p;
}

// The planes of an upsampling to `output_size`, with CPU's size checks.
Planes upsampled(at::IntArrayRef input_sizes, c10::SymIntArrayRef output_size, int64_t dims, const char* op) {
  Planes p = planes_of(input_sizes, dims, op);
  auto out = C10_AS_INTARRAYREF_SLOW(output_size);
  TORCH_CHECK(static_cast<int64_t>(out.size()) == dims, op, ": expected output_size with ", dims, " values, got ", out);
  bool positive = true;
  for (int64_t d = 0; d < dims; ++d) positive = positive && p.in_sizes[d] > 0 && out[d] > 0;
  if (!positive) {  // CPU's upsample_{1,2,3}d_common_check message
    static const char* names[] = {"D", "H", "W"};
    std::ostringstream in, o;
    for (int64_t d = 0; d < dims; ++d) {
      const char* sep = d ? ", " : "";
      in << sep << names[3 - dims + d] << ": " << p.in_sizes[d];
      o << sep << names[3 - dims + d] << ": " << out[d];
    }
    TORCH_CHECK(false, "Input and output sizes should be greater than 0, but got input (", in.str(), ")",
                dims == 1 ? " and" : "", " output (", o.str(), ")");
  }
  int64_t non_batch = 1;
  for (size_t d = 1; d < input_sizes.size(); ++d) non_batch *= input_sizes[d];
  TORCH_CHECK(non_batch != 0, "Non-empty ", dims + 2, "D data tensor expected but got a tensor with sizes ", input_sizes);
  p.out_sizes.assign(out.begin(), out.end());
  return p;
}

std::vector<int64_t> full_sizes(at::IntArrayRef input_sizes, const Planes& m) {
  std::vector<int64_t> sizes(input_sizes.begin(), input_sizes.end() - m.in_sizes.size());
  sizes.insert(sizes.end(), m.out_sizes.begin(), m.out_sizes.end());
  return sizes;
}

at::Tensor gather_planes(const at::Tensor& self, const Mapping& m, const char* name) {
  auto out = at::empty(full_sizes(self.sizes(), m), self.options());
  if (out.numel() == 0) return out;
  auto x = contiguous(self);
  const auto offsets = m.offsets();
  const int64_t in_plane = m.in_plane(), out_plane = m.out_plane(), planes = m.planes, size = self.element_size();
  const char* src = static_cast<const char*>(x.const_data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  launch_on(out, name, [=] {
    at::parallel_for(0, planes, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(out_plane, 1)), [&](int64_t lo, int64_t hi) {
      for (int64_t p = lo; p < hi; ++p)
        for (int64_t o = 0; o < out_plane; ++o)
          std::memcpy(dst + (p * out_plane + o) * size, src + (p * in_plane + offsets[o]) * size, size);
    });
  });
  return out;
}

// grad_input[plane][offset(o)] += grad_output[plane][o]
at::Tensor scatter_planes(const at::Tensor& grad_output, at::IntArrayRef input_sizes, const Mapping& m,
                          const char* name) {
  TORCH_CHECK(grad_output.sizes() == at::IntArrayRef(full_sizes(input_sizes, m)), name, ": grad_output ",
              grad_output.sizes(), " does not match the forward's output ", full_sizes(input_sizes, m));
  auto grad_input = at::empty(input_sizes, grad_output.options());
  if (grad_input.numel() == 0) return grad_input;
  auto go = contiguous(grad_output);
  const auto offsets = m.offsets();
  const int64_t in_plane = m.in_plane(), out_plane = m.out_plane(), planes = m.planes;
  RBLN_DISPATCH_FLOATING(grad_output.scalar_type(), "resample_backward", [&] {
    using opmath = at::opmath_type<scalar_t>;
    const scalar_t* gp = go.const_data_ptr<scalar_t>();
    scalar_t* gi = grad_input.data_ptr<scalar_t>();
    launch_on(grad_input, name, [=] {
      at::parallel_for(0, planes, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(out_plane, 1)), [&](int64_t lo, int64_t hi) {
        std::vector<opmath> acc(in_plane);
        for (int64_t p = lo; p < hi; ++p) {
          std::fill(acc.begin(), acc.end(), opmath(0));
          for (int64_t o = 0; o < out_plane; ++o) acc[offsets[o]] += static_cast<opmath>(gp[p * out_plane + o]);
          for (int64_t i = 0; i < in_plane; ++i) gi[p * in_plane + i] = static_cast<scalar_t>(acc[i]);
        }
      });
    });
  });
  return grad_input;
}

// CPU's nearest source index: floor(o * scale) in float, where scale is 1/scale_factor when given.
Mapping nearest(at::IntArrayRef input_sizes, c10::SymIntArrayRef output_size, at::ArrayRef<std::optional<double>> scales,
                int64_t dims, bool exact, const char* op) {
  Mapping m{upsampled(input_sizes, output_size, dims, op), {}};
  for (int64_t d = 0; d < dims; ++d) {
    const int64_t in = m.in_sizes[d], o_size = m.out_sizes[d];
    const float scale = scales[d] && *scales[d] > 0 ? static_cast<float>(1.0 / *scales[d])
                                                    : static_cast<float>(in) / static_cast<float>(o_size);
    Table t(o_size);
    for (int64_t o = 0; o < o_size; ++o) {
      const float src = exact ? std::floor((static_cast<float>(o) + 0.5f) * scale) : std::floor(static_cast<float>(o) * scale);
      t[o] = std::min(static_cast<int64_t>(src), in - 1);
    }
    m.tables.push_back(std::move(t));
  }
  return m;
}

Mapping pad_mapping(at::IntArrayRef input_sizes, c10::SymIntArrayRef pad, int64_t dims, bool reflect, const char* op) {
  // CPU's check: only the batch dim may be empty.
  const int64_t ndim = input_sizes.size();
  bool valid = ndim == dims + 1 || ndim == dims + 2;
  for (int64_t d = 1; valid && d < ndim; ++d) valid = input_sizes[d] != 0;
  TORCH_CHECK(valid, "Expected ", dims + 1, "D or ", dims + 2, "D (batch mode) tensor with possibly 0 batch size and ",
              "other non-zero dimensions for input, but got: ", input_sizes);
  Mapping m{planes_of(input_sizes, dims, op), {}};
  auto p = C10_AS_INTARRAYREF_SLOW(pad);
  TORCH_CHECK(static_cast<int64_t>(p.size()) == 2 * dims, op, ": padding size is expected to be ", 2 * dims,
              ", but got: ", p.size());
  for (int64_t d = 0; d < dims; ++d) {
    // padding lists the last dim first: (left, right, top, bottom, front, back)
    const int64_t before = p[2 * (dims - 1 - d)], after = p[2 * (dims - 1 - d) + 1], in = m.in_sizes[d];
    if (reflect)
      TORCH_CHECK(before < in && after < in, op, ": Padding size should be less than the corresponding input "
                  "dimension, but got: padding (", before, ", ", after, ") at dimension ", d, " of input ", input_sizes);
    const int64_t o_size = in + before + after;
    TORCH_CHECK(o_size >= 1 && in >= 1, op, ": input ", input_sizes, " is too small for padding ", p);
    Table t(o_size);
    for (int64_t o = 0; o < o_size; ++o) {
      int64_t i = o - before;
      if (reflect) i = i < 0 ? -i : (i >= in ? 2 * (in - 1) - i : i);
      else i = std::min(std::max<int64_t>(i, 0), in - 1);
      t[o] = i;
    }
    m.tables.push_back(std::move(t));
    m.out_sizes.push_back(o_size);
  }
  return m;
}

enum class Interp { linear, cubic };

// Per output coordinate of one dim: `k` input coordinates and their weights.
struct Taps {
  int64_t k = 0;
  std::vector<int64_t> index;
  std::vector<double> weight;
};

// CPU's source coordinate (ATen/native/UpSample.h), with the one FMA its
// vectorized build contracts scale * (o + 0.5) - 0.5 into: without it, a
// weight deep into a large image differs from CPU's in the last bits.
template <class T>
T source_index(T scale, int64_t o, bool align_corners, bool cubic) {
  if (align_corners) return scale * o;
  const T src = std::fma(scale, static_cast<T>(o) + T(0.5), T(-0.5));
  return (!cubic && src < 0) ? T(0) : src;
}

// CPU's taps: its generic forward stores the weights in the tensor's dtype W,
// its backward and channels-last forward keep them in opmath.
template <class W>
Taps taps_of(Interp kind, int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  using opmath = at::opmath_type<W>;
  Taps t;
  t.k = kind == Interp::linear ? 2 : 4;
  t.index.resize(out * t.k);
  t.weight.resize(out * t.k);
  const opmath ratio = at::native::area_pixel_compute_scale<opmath>(in, out, align_corners, scale);
  for (int64_t o = 0; o < out; ++o) {
    int64_t* idx = &t.index[o * t.k];
    double* w = &t.weight[o * t.k];
    int64_t base;
    if (kind == Interp::linear) {
      W l1 = 0;
      if (in == out) {  // CPU copies: both taps on o
        base = o;
        l1 = W(0);
      } else {
        at::native::guard_index_and_lambda(source_index(ratio, o, align_corners, false), in, base, l1);
      }
      idx[0] = base;
      idx[1] = in == out ? base : base + (base < in - 1 ? 1 : 0);
      w[0] = static_cast<opmath>(static_cast<W>(W(1) - l1));
      w[1] = static_cast<opmath>(l1);
      continue;
    }
    opmath lambda, c[4];
    at::native::guard_index_and_lambda(source_index(ratio, o, align_corners, true), in, base, lambda);
    at::native::get_cubic_upsample_coefficients<opmath>(c, lambda);
    for (int j = 0; j < 4; ++j) {
      idx[j] = std::clamp<int64_t>(base - 1 + j, 0, in - 1);
      w[j] = static_cast<opmath>(static_cast<W>(c[j]));
    }
  }
  return t;
}

// Per dim, the weighted taps of each output coordinate.
struct Weighted : Planes {
  std::vector<Taps> taps;
};

template <class W>
Weighted weighted(Interp kind, at::IntArrayRef input_sizes, c10::SymIntArrayRef output_size, bool align_corners,
                  at::ArrayRef<std::optional<double>> scales, int64_t dims, const char* op) {
  Weighted m{upsampled(input_sizes, output_size, dims, op), {}};
  for (int64_t d = 0; d < dims; ++d)
    m.taps.push_back(taps_of<W>(kind, m.in_sizes[d], m.out_sizes[d], align_corners, scales[d]));
  return m;
}

// Output coordinate o of a plane, as one coordinate per dim.
inline void coordinates(int64_t o, const std::vector<int64_t>& sizes, int64_t* coord) {
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    coord[d] = o % sizes[d];
    o /= sizes[d];
  }
}

// Whether CPU takes its channels-last linear kernel (UpSampleKernel.cpp's
// vectorized-kernel condition): for channels-last inputs with more than 3
// channels, and 2-d outputs of at most 128 rows plus columns. It weighs each of the 2^dims corners by the
// product of its lambdas, kept in opmath (not rounded to the dtype), and adds
// the corners in order.
bool cpu_corner_kernel(Interp kind, const at::Tensor& self, const Planes& p, int64_t dims) {
  if (kind != Interp::linear || dims == 1) return false;
  const auto channels_last = dims == 2 ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::ChannelsLast3d;
  return (self.dim() == dims + 2 && self.is_contiguous(channels_last) && self.size(1) > 3) ||
         (dims == 2 && p.out_sizes[0] + p.out_sizes[1] <= 128);
}

// out = sum over taps as CPU adds them: nested, first dim outermost, in tap
// order (its generic kernel), or corner by corner (cpu_corner_kernel).
at::Tensor& interpolate_out(const at::Tensor& self, Interp kind, c10::SymIntArrayRef output_size, bool align_corners,
                            at::ArrayRef<std::optional<double>> scales, int64_t dims, at::Tensor& out, const char* op) {
  RBLN_DISPATCH_FLOATING(self.scalar_type(), "upsample", [&] {
    using opmath = at::opmath_type<scalar_t>;
    const bool corners = cpu_corner_kernel(kind, self, upsampled(self.sizes(), output_size, dims, op), dims);
    const Weighted m = corners ? weighted<opmath>(kind, self.sizes(), output_size, align_corners, scales, dims, op)
                               : weighted<scalar_t>(kind, self.sizes(), output_size, align_corners, scales, dims, op);
    prepare_out(out, full_sizes(self.sizes(), m), self.scalar_type(), self, op);
    if (out.numel() == 0) return;
    auto x = contiguous(self);
    const scalar_t* src = x.const_data_ptr<scalar_t>();
    const bool fused = vec::table().contracts_fma;  // CPU's build contracts `acc += v * w`
    write_contiguous(out, [&](const at::Tensor& target) {
      scalar_t* dst = target.data_ptr<scalar_t>();
      launch_on(target, op, [=] {
        const int64_t in_plane = m.in_plane(), out_plane = m.out_plane();
        auto add = [fused](opmath acc, opmath v, opmath w) { return fused ? std::fma(v, w, acc) : acc + v * w; };
        at::parallel_for(0, m.planes, std::max<int64_t>(1, kGrainSize / out_plane), [&](int64_t lo, int64_t hi) {
          int64_t coord[3];
          auto nested = [&](auto&& nested, const scalar_t* plane, int64_t d, int64_t base) -> opmath {
            if (d == dims) return static_cast<opmath>(plane[base]);
            const Taps& t = m.taps[d];
            opmath acc = 0;
            for (int64_t j = 0; j < t.k; ++j) {
              const int64_t at = coord[d] * t.k + j;
              const opmath v = nested(nested, plane, d + 1, base * m.in_sizes[d] + t.index[at]);
              const opmath w = static_cast<opmath>(t.weight[at]);
              acc = j == 0 ? v * w : add(acc, v, w);
            }
            return acc;
          };
          auto by_corner = [&](const scalar_t* plane) -> opmath {
            const int64_t corners = int64_t(1) << dims;
            opmath v[8], w[8];
            for (int64_t c = 0; c < corners; ++c) {
              int64_t offset = 0;
              for (int64_t d = 0; d < dims; ++d) {
                const int64_t at = coord[d] * 2 + ((c >> (dims - 1 - d)) & 1);
                offset = offset * m.in_sizes[d] + m.taps[d].index[at];
                const opmath lambda = static_cast<opmath>(m.taps[d].weight[at]);
                w[c] = d == 0 ? lambda : w[c] * lambda;
              }
              v[c] = static_cast<opmath>(plane[offset]);
            }
            // CPU's `v0 * w0 + v1 * w1 + ...` as its build contracts it:
            // fma(v0, w0, v1 * w1), then fma(vc, wc, acc).
            opmath acc = add(v[1] * w[1], v[0], w[0]);
            for (int64_t c = 2; c < corners; ++c) acc = add(acc, v[c], w[c]);
            return acc;
          };
          for (int64_t p = lo; p < hi; ++p) {
            for (int64_t o = 0; o < out_plane; ++o) {
              coordinates(o, m.out_sizes, coord);
              const scalar_t* plane = src + p * in_plane;
              dst[p * out_plane + o] = static_cast<scalar_t>(corners ? by_corner(plane) : nested(nested, plane, 0, 0));
            }
          }
        });
      });
    });
  });
  return out;
}

// grad_input[taps of o] += (product of the taps' weights) * grad_output[o], in opmath.
at::Tensor& interpolate_backward_out(const at::Tensor& grad_output, Interp kind, c10::SymIntArrayRef output_size,
                                     c10::SymIntArrayRef input_size, bool align_corners,
                                     at::ArrayRef<std::optional<double>> scales, int64_t dims, at::Tensor& grad_input,
                                     const char* op) {
  auto in_sizes = C10_AS_INTARRAYREF_SLOW(input_size);
  RBLN_DISPATCH_FLOATING(grad_output.scalar_type(), "upsample_backward", [&] {
    using opmath = at::opmath_type<scalar_t>;
    const Weighted m = weighted<opmath>(kind, in_sizes, output_size, align_corners, scales, dims, op);
    TORCH_CHECK(grad_output.sizes() == at::IntArrayRef(full_sizes(in_sizes, m)), op, ": grad_output ",
                grad_output.sizes(), " does not match the forward's output ", full_sizes(in_sizes, m));
    prepare_out(grad_input, in_sizes, grad_output.scalar_type(), grad_output, op);
    if (grad_input.numel() == 0) return;
    auto go = contiguous(grad_output);
    const scalar_t* gp = go.const_data_ptr<scalar_t>();
    write_contiguous(grad_input, [&](const at::Tensor& target) {
      scalar_t* gi = target.data_ptr<scalar_t>();
      launch_on(target, op, [=] {
        const int64_t in_plane = m.in_plane(), out_plane = m.out_plane();
        at::parallel_for(0, m.planes, std::max<int64_t>(1, kGrainSize / out_plane), [&](int64_t lo, int64_t hi) {
          std::vector<opmath> acc(in_plane);
          int64_t coord[3];
          opmath g = 0;
          auto scatter = [&](auto&& scatter, int64_t d, int64_t base, opmath w) -> void {
            if (d == dims) {
              acc[base] = std::fma(w, g, acc[base]);  // CPU's contracted `+= w * g`
              return;
            }
            const Taps& t = m.taps[d];
            for (int64_t j = 0; j < t.k; ++j) {
              const int64_t at = coord[d] * t.k + j;
              const opmath wj = static_cast<opmath>(t.weight[at]);
              scatter(scatter, d + 1, base * m.in_sizes[d] + t.index[at], d == 0 ? wj : w * wj);
            }
          };
          for (int64_t p = lo; p < hi; ++p) {
            std::fill(acc.begin(), acc.end(), opmath(0));
            for (int64_t o = 0; o < out_plane; ++o) {
              coordinates(o, m.out_sizes, coord);
              g = static_cast<opmath>(gp[p * out_plane + o]);
              scatter(scatter, 0, 0, opmath(1));
            }
            for (int64_t i = 0; i < in_plane; ++i) gi[p * in_plane + i] = static_cast<scalar_t>(acc[i]);
          }
        });
      });
    });
  });
  return grad_input;
}

}  // namespace

// Each resampling op's scale parameters (SCALES_D) and their names (NAMES_D).
#define RBLN_SCALES_1 std::optional<double> scales
#define RBLN_SCALES_2 std::optional<double> scales_h, std::optional<double> scales_w
#define RBLN_SCALES_3 std::optional<double> scales_d, std::optional<double> scales_h, std::optional<double> scales_w
#define RBLN_NAMES_1 scales
#define RBLN_NAMES_2 scales_h, scales_w
#define RBLN_NAMES_3 scales_d, scales_h, scales_w

// upsample_nearest{1,2,3}d and _upsample_nearest_exact{1,2,3}d, with their backwards.
#define RBLN_NEAREST_OPS(NAME, EXACT, D)                                                                          \
  at::Tensor NAME(const at::Tensor& self, c10::SymIntArrayRef output_size, RBLN_SCALES_##D) {                     \
    return gather_planes(self, nearest(self.sizes(), output_size, {RBLN_NAMES_##D}, D, EXACT, #NAME),             \
                         "aten::" #NAME);                                                                         \
  }                                                                                                               \
  at::Tensor NAME##_backward(const at::Tensor& grad_output, c10::SymIntArrayRef output_size,                      \
                             c10::SymIntArrayRef input_size, RBLN_SCALES_##D) {                                   \
    auto in = C10_AS_INTARRAYREF_SLOW(input_size);                                                                \
    return scatter_planes(grad_output, in, nearest(in, output_size, {RBLN_NAMES_##D}, D, EXACT, #NAME "_backward"), \
                          "aten::" #NAME "_backward");                                                            \
  }
RBLN_NEAREST_OPS(upsample_nearest1d, false, 1)
RBLN_NEAREST_OPS(upsample_nearest2d, false, 2)
RBLN_NEAREST_OPS(upsample_nearest3d, false, 3)
RBLN_NEAREST_OPS(_upsample_nearest_exact1d, true, 1)
RBLN_NEAREST_OPS(_upsample_nearest_exact2d, true, 2)
RBLN_NEAREST_OPS(_upsample_nearest_exact3d, true, 3)
#undef RBLN_NEAREST_OPS

// upsample_linear1d, upsample_bilinear2d, upsample_trilinear3d and
// upsample_bicubic2d (out= kernels, registered structured), with their backwards.
#define RBLN_INTERP_OPS(NAME, KIND, D)                                                                            \
  at::Tensor& NAME##_out(const at::Tensor& self, c10::SymIntArrayRef output_size, bool align_corners,             \
                         RBLN_SCALES_##D, at::Tensor& out) {                                                      \
    return interpolate_out(self, Interp::KIND, output_size, align_corners, {RBLN_NAMES_##D}, D, out, "aten::" #NAME); \
  }                                                                                                               \
  at::Tensor& NAME##_backward_out(const at::Tensor& grad_output, c10::SymIntArrayRef output_size,                 \
                                  c10::SymIntArrayRef input_size, bool align_corners, RBLN_SCALES_##D,            \
                                  at::Tensor& grad_input) {                                                       \
    return interpolate_backward_out(grad_output, Interp::KIND, output_size, input_size, align_corners,            \
                                    {RBLN_NAMES_##D}, D, grad_input, "aten::" #NAME "_backward");                 \
  }
RBLN_INTERP_OPS(upsample_linear1d, linear, 1)
RBLN_INTERP_OPS(upsample_bilinear2d, linear, 2)
RBLN_INTERP_OPS(upsample_trilinear3d, linear, 3)
RBLN_INTERP_OPS(upsample_bicubic2d, cubic, 2)
#undef RBLN_INTERP_OPS

// reflection_pad{1,2,3}d and replication_pad{1,2,3}d, with their backwards.
#define RBLN_PAD_OPS(KIND, REFLECT, D)                                                                              \
  at::Tensor KIND##_pad##D##d(const at::Tensor& self, c10::SymIntArrayRef padding) {                                 \
    return gather_planes(self, pad_mapping(self.sizes(), padding, D, REFLECT, #KIND "_pad" #D "d"), "aten::" #KIND "_pad" #D "d");         \
  }                                                                                                                  \
  at::Tensor KIND##_pad##D##d_backward(const at::Tensor& grad_output, const at::Tensor& self,                        \
                                       c10::SymIntArrayRef padding) {                                                \
    return scatter_planes(grad_output, self.sizes(), pad_mapping(self.sizes(), padding, D, REFLECT, #KIND "_pad" #D "d"),                  \
                          "aten::" #KIND "_pad" #D "d_backward");                                                    \
  }
RBLN_PAD_OPS(reflection, true, 1)
RBLN_PAD_OPS(reflection, true, 2)
RBLN_PAD_OPS(reflection, true, 3)
RBLN_PAD_OPS(replication, false, 1)
RBLN_PAD_OPS(replication, false, 2)
RBLN_PAD_OPS(replication, false, 3)
#undef RBLN_PAD_OPS
#undef RBLN_SCALES_1
#undef RBLN_SCALES_2
#undef RBLN_SCALES_3
#undef RBLN_NAMES_1
#undef RBLN_NAMES_2
#undef RBLN_NAMES_3

}  // namespace rbln::kernels
