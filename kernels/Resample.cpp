// Separable resampling of the trailing 1 to 3 spatial dims: nearest
// upsampling and reflection/replication padding. Each output coordinate maps
// to one input coordinate per dim through a small table, so one gather kernel
// serves the forwards and one scatter-add kernel the backwards.
#include <ATen/ops/empty.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/Common.h"
#include "kernels/Kernels.h"

namespace rbln::kernels {
namespace {

using Table = std::vector<int64_t>;  // output coordinate -> input coordinate, for one dim

struct Mapping {
  std::vector<Table> tables;           // one per spatial dim
  std::vector<int64_t> in_sizes, out_sizes;  // spatial
  int64_t planes = 1;
  int64_t in_plane() const { return product(in_sizes); }
  int64_t out_plane() const { return product(out_sizes); }
  static int64_t product(const std::vector<int64_t>& v) {
    int64_t n = 1;
    for (auto s : v) n *= s;
    return n;
  }
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

Mapping mapping_of(at::IntArrayRef input_sizes, int64_t dims, const char* op) {
  TORCH_CHECK(static_cast<int64_t>(input_sizes.size()) >= dims + 1, op, ": expected an input with at least ", dims + 1,
              " dims, got ", input_sizes);
  Mapping m;
  const int64_t lead = input_sizes.size() - dims;
  for (int64_t d = 0; d < lead; ++d) m.planes *= input_sizes[d];
  m.in_sizes.assign(input_sizes.begin() + lead, input_sizes.end());
  return m;
}

std::vector<int64_t> full_sizes(at::IntArrayRef input_sizes, const Mapping& m) {
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
  Mapping m = mapping_of(input_sizes, dims, op);
  auto out = C10_AS_INTARRAYREF_SLOW(output_size);
  TORCH_CHECK(static_cast<int64_t>(out.size()) == dims, op, ": expected output_size with ", dims, " values, got ", out);
  for (int64_t d = 0; d < dims; ++d) {
    const int64_t in = m.in_sizes[d], o_size = out[d];
    TORCH_CHECK(in > 0 && o_size > 0, op, ": input and output sizes should be greater than 0, but got input ",
                input_sizes, " and output ", out);
    const float scale = scales[d] && *scales[d] > 0 ? static_cast<float>(1.0 / *scales[d])
                                                    : static_cast<float>(in) / static_cast<float>(o_size);
    Table t(o_size);
    for (int64_t o = 0; o < o_size; ++o) {
      const float src = exact ? std::floor((static_cast<float>(o) + 0.5f) * scale) : std::floor(static_cast<float>(o) * scale);
      t[o] = std::min(static_cast<int64_t>(src), in - 1);
    }
    m.tables.push_back(std::move(t));
    m.out_sizes.push_back(o_size);
  }
  return m;
}

Mapping pad_mapping(at::IntArrayRef input_sizes, c10::SymIntArrayRef pad, int64_t dims, bool reflect, const char* op) {
  Mapping m = mapping_of(input_sizes, dims, op);
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

}  // namespace

at::Tensor upsample_nearest1d(const at::Tensor& self, c10::SymIntArrayRef output_size, std::optional<double> scales) {
  return gather_planes(self, nearest(self.sizes(), output_size, {scales}, 1, false, "upsample_nearest1d"),
                       "aten::upsample_nearest1d");
}
at::Tensor upsample_nearest2d(const at::Tensor& self, c10::SymIntArrayRef output_size, std::optional<double> scales_h,
                              std::optional<double> scales_w) {
  return gather_planes(self, nearest(self.sizes(), output_size, {scales_h, scales_w}, 2, false, "upsample_nearest2d"),
                       "aten::upsample_nearest2d");
}
at::Tensor upsample_nearest3d(const at::Tensor& self, c10::SymIntArrayRef output_size, std::optional<double> scales_d,
                              std::optional<double> scales_h, std::optional<double> scales_w) {
  return gather_planes(
      self, nearest(self.sizes(), output_size, {scales_d, scales_h, scales_w}, 3, false, "upsample_nearest3d"),
      "aten::upsample_nearest3d");
}
at::Tensor upsample_nearest1d_backward(const at::Tensor& grad_output, c10::SymIntArrayRef output_size,
                                       c10::SymIntArrayRef input_size, std::optional<double> scales) {
  auto in = C10_AS_INTARRAYREF_SLOW(input_size);
  return scatter_planes(grad_output, in, nearest(in, output_size, {scales}, 1, false, "upsample_nearest1d_backward"),
                        "aten::upsample_nearest1d_backward");
}
at::Tensor upsample_nearest2d_backward(const at::Tensor& grad_output, c10::SymIntArrayRef output_size,
                                       c10::SymIntArrayRef input_size, std::optional<double> scales_h,
                                       std::optional<double> scales_w) {
  auto in = C10_AS_INTARRAYREF_SLOW(input_size);
  return scatter_planes(grad_output, in,
                        nearest(in, output_size, {scales_h, scales_w}, 2, false, "upsample_nearest2d_backward"),
                        "aten::upsample_nearest2d_backward");
}
at::Tensor upsample_nearest3d_backward(const at::Tensor& grad_output, c10::SymIntArrayRef output_size,
                                       c10::SymIntArrayRef input_size, std::optional<double> scales_d,
                                       std::optional<double> scales_h, std::optional<double> scales_w) {
  auto in = C10_AS_INTARRAYREF_SLOW(input_size);
  return scatter_planes(
      grad_output, in, nearest(in, output_size, {scales_d, scales_h, scales_w}, 3, false, "upsample_nearest3d_backward"),
      "aten::upsample_nearest3d_backward");
}

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

}  // namespace rbln::kernels
