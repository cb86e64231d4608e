// Convolution on the device: im2col/col2im around the matrix engine, for 1 to
// 3 spatial dims, with groups, stride, padding, dilation and transposition.
//
// Both directions are the same two moves between a "big" image and a "small"
// one (the strided side): gather (small = W @ im2col(big)) and scatter
// (big = col2im(W^T @ small)). A convolution gathers and its input gradient
// scatters; a transposed convolution scatters and its input gradient gathers.
// float16/bfloat16 compute in float32, int64 in its own type (exact, the plain
// product loop). A float32 forward with a spatial kernel over 16 or more input
// channels, or with channels_last operands, is the op library's (kernels/library/Library.h), as CUDA's is cuDNN's:
// oneDNN's direct convolution moves less memory than the column matrix
// (ResNet-18's 3x3 layers up to 1.3x faster), while im2col's batched gemm
// stays ahead on thin inputs (the 7x7 stem over 3 channels: 1.35x) and on 1x1
// kernels (1.3 to 1.9x) in the contiguous layout. Results and gradients take CUDA's memory
// format (kernels/nn/Convolution.cpp); the column kernels compute contiguous and convert. Other integer dtypes, whose support on CPU varies by
// convolution form (it raises where it has none), and integer backwards go to
// the CPU, counted.
#include <ATen/Parallel.h>
#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/sum.h>

#include <algorithm>
#include <vector>

#include "generated/RBLNNativeFunctions.h"
#include "kernels/linalg/Blas.h"
#include "kernels/common/Common.h"
#include "kernels/library/Library.h"
#include "runtime/device/RBLNParallel.h"
#include "kernels/nn/Window.h"
#include "runtime/fallback/RBLNFallback.h"
#include "runtime/observability/RBLNObserve.h"

namespace rbln::kernels {
namespace {

// Groups and channels: the weight is [G * A, B, *k]; big has G * B channels, small G * A.
struct Shape {
  int64_t batch, groups, a, b;
  Window w;  // in = big spatial, out = small spatial
  int64_t chunks = 1;  // pieces the (image, group) items are split into (see over_items)
  int64_t cols() const { return b * w.k_numel(); }
};

// Identity im2col: 1x1 taps, unit stride, no padding.
bool is_pointwise(const Window& w) {
  for (int d = 0; d < 3; ++d)
    if (w.k[d] != 1 || w.stride[d] != 1 || w.pad[d] != 0 || w.in[d] != w.out[d]) return false;
  return true;
}

// The column matrix one row segment at a time (a tap and all but the last
// output dim): f(tap, out_offset, valid, in_base, lo, hi) where output
// positions out_offset + o2, o2 in [lo, hi), read plane[in_base + o2 * stride[2]];
// the rest of the out[2] positions (all of them when !valid) are padding.
// Only output rows (flattened out[0], out[1]) in [row_lo, row_hi) are
// visited, out_offset counting from row_lo.
template <class F>
void for_each_tap_row(const Window& w, F&& f, int64_t row_lo = 0, int64_t row_hi = -1) {
  if (row_hi < 0) row_hi = w.out[0] * w.out[1];
  int64_t t[3], o[2], tap = 0;
  for (t[0] = 0; t[0] < w.k[0]; ++t[0])
    for (t[1] = 0; t[1] < w.k[1]; ++t[1])
      for (t[2] = 0; t[2] < w.k[2]; ++t[2], ++tap) {
        const int64_t shift = t[2] * w.dil[2] - w.pad[2], s = w.stride[2];
        // ceil(-shift / s) without forming -shift + s - 1, which overflows for a huge stride
        const int64_t lo = shift >= 0 ? 0 : std::min(w.out[2], (-shift - 1) / s + 1);
        const int64_t hi = shift >= w.in[2] ? lo : std::max(lo, std::min(w.out[2], (w.in[2] - 1 - shift) / s + 1));
        int64_t out_offset = 0;
        for (int64_t row = row_lo; row < row_hi; ++row, out_offset += w.out[2]) {
          o[0] = row / w.out[1];
          o[1] = row % w.out[1];
          const int64_t i0 = o[0] * w.stride[0] - w.pad[0] + t[0] * w.dil[0];
          const int64_t i1 = o[1] * w.stride[1] - w.pad[1] + t[1] * w.dil[1];
          const bool valid = i0 >= 0 && i0 < w.in[0] && i1 >= 0 && i1 < w.in[1];
          f(tap, out_offset, valid, (i0 * w.in[1] + i1) * w.in[2] + shift, lo, hi);
        }
      }
}

// cols is [channels * taps, ld]: this image's output rows [row_lo, row_hi)
// (all by default) fill columns [0, (row_hi - row_lo) * out[2]).
template <class T>
void im2col(const T* img, int64_t channels, const Window& w, T* cols, int64_t ld, int64_t row_lo = 0,
            int64_t row_hi = -1) {
  const int64_t K = w.k_numel(), P = w.in_numel(), n = w.out[2], s = w.stride[2];
  for (int64_t c = 0; c < channels; ++c) {
    const T* plane = img + c * P;
    T* rows = cols + c * K * ld;
    for_each_tap_row(w, [&](int64_t t, int64_t out_offset, bool valid, int64_t base, int64_t lo, int64_t hi) {
      T* dst = rows + t * ld + out_offset;
      if (!valid) {
        std::fill(dst, dst + n, T(0));
        return;
      }
      std::fill(dst, dst + lo, T(0));
      const T* src = plane + base;
      if (s == 1) std::copy(src + lo, src + hi, dst + lo);
      else for (int64_t o = lo; o < hi; ++o) dst[o] = src[o * s];
      std::fill(dst + hi, dst + n, T(0));
    }, row_lo, row_hi);
  }
}

template <class T>
void col2im(const T* cols, int64_t channels, const Window& w, T* img) {  // img += cols, img zeroed by the caller
  const int64_t K = w.k_numel(), L = w.out_numel(), P = w.in_numel(), s = w.stride[2];
  for (int64_t c = 0; c < channels; ++c) {
    T* plane = img + c * P;
    const T* rows = cols + c * K * L;
    for_each_tap_row(w, [&](int64_t t, int64_t out_offset, bool valid, int64_t base, int64_t lo, int64_t hi) {
      if (!valid) return;
      const T* src = rows + t * L + out_offset;
      T* dst = plane + base;
      for (int64_t o = lo; o < hi; ++o) dst[o * s] += src[o];
    });
  }
}

// Runs body(item, chunk, cols) for each (image, group) item: split across the
// intra-op threads when each gets at least one (their gemms then run
// single-threaded inside the parallel region), else in one chunk with the
// gemm itself threaded. cols is the chunk's own im2col buffer in the scratch
// tensor (from the caching allocator: no page faults, no zeroing). `claim`:
// threads claim items (parallel_claim); otherwise chunk c gets a fixed range.
template <class T, class F>
void over_items(const Shape& s, bool pointwise, bool claim, T* scratch, F&& body) {
  const int64_t items = s.batch * s.groups, chunks = s.chunks, cols = pointwise ? 0 : s.cols() * s.w.out_numel();
  if (claim) return parallel_claim(items, chunks, [&](int64_t item, int64_t c) { body(item, c, scratch + c * cols); });
  at::parallel_for(0, chunks, 1, [&](int64_t clo, int64_t chi) {
    for (int64_t c = clo; c < chi; ++c)
      for (int64_t item = c * items / chunks; item < (c + 1) * items / chunks; ++item)
        body(item, c, scratch + c * cols);
  });
}

// Below this many output positions (7x7-class planes) a per-image gemm is too
// thin for the matrix engine: the batch shares one gemm. Larger planes keep
// per-image columns, which stay in cache (a whole-batch column matrix is
// slower there, measured single-threaded on 14x14 to 56x56 ResNet layers).
constexpr int64_t kThinPlane = 100;
constexpr int64_t kColumnTileBytes = 1 << 20;

bool batched(const Shape& s) { return s.batch > 1 && s.w.out_numel() < kThinPlane; }
int64_t cols_size(const Shape& s) { return is_pointwise(s.w) ? 0 : s.cols() * s.w.out_numel(); }

// Scratch elements of each direction: per-chunk columns, or the batched
// gather's columns and product; the weight gradient adds per-chunk partials.
int64_t gather_scratch(const Shape& s) {
  return batched(s) ? (s.cols() + s.a) * s.batch * s.w.out_numel() : s.chunks * cols_size(s);
}
int64_t scatter_scratch(const Shape& s) { return s.chunks * cols_size(s); }
int64_t weight_grad_scratch(const Shape& s) {
  return s.chunks * cols_size(s) + (s.chunks - 1) * s.groups * s.a * s.cols();
}

// The thin case: per group, the whole batch's columns side by side in one
// [BK, batch * L] matrix, one threaded gemm, then its [A, batch, L] result
// moved to [batch, A, L] (with the bias).
template <class T>
void gather_batched(const Shape& s, const T* big, const T* weight, const T* bias, T* small, T* scratch) {
  const int64_t L = s.w.out_numel(), P = s.w.in_numel(), BK = s.cols(), NL = s.batch * L;
  T* cols = scratch;
  T* prod = scratch + BK * NL;
  for (int64_t g = 0; g < s.groups; ++g) {
    at::parallel_for(0, s.batch, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t n = lo; n < hi; ++n) im2col(big + (n * s.groups + g) * s.b * P, s.b, s.w, cols + n * L, NL);
    });
    gemm_rowmajor<T>(s.a, BK, NL, 1, weight + g * s.a * BK, BK, false, cols, NL, false, 0, prod, NL);
    at::parallel_for(0, s.batch * s.a, std::max<int64_t>(1, kGrainSize / L), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const int64_t n = i / s.a, r = i % s.a;
        const T* src = prod + r * NL + n * L;
        T* dst = small + ((n * s.groups + g) * s.a + r) * L;
        const T add = bias ? bias[g * s.a + r] : T(0);
        for (int64_t l = 0; l < L; ++l) dst[l] = src[l] + add;
      }
    });
  }
}

// small[n, g] = W_g @ im2col(big[n, g]) (+ bias, broadcast over the plane)
template <class T>
void gather(const Shape& s, const T* big, const T* weight, const T* bias, T* small, T* scratch) {
  const int64_t L = s.w.out_numel(), P = s.w.in_numel(), BK = s.cols();
  if (batched(s)) return gather_batched(s, big, weight, bias, small, scratch);
  const bool pointwise = is_pointwise(s.w);
  over_items<T>(s, pointwise, true, scratch, [&](int64_t item, int64_t, T* cols) {
    const int64_t g = item % s.groups;
    const T* img = big + item * s.b * P;
    T* out = small + item * s.a * L;
    if (bias)
      for (int64_t r = 0; r < s.a; ++r) std::fill(out + r * L, out + (r + 1) * L, bias[g * s.a + r]);
    if (pointwise)
      return gemm_rowmajor<T>(s.a, BK, L, 1, weight + g * s.a * BK, BK, false, img, L, false, bias ? 1 : 0, out, L);
    // Column tiles of whole output rows that stay in the core's cache
    // between im2col writing them and the gemm reading them.
    const int64_t n = s.w.out[2], rows = L / n;
    const int64_t tile = std::clamp<int64_t>(kColumnTileBytes / (static_cast<int64_t>(sizeof(T)) * BK * n), 1, rows);
    for (int64_t r0 = 0; r0 < rows; r0 += tile) {
      const int64_t r1 = std::min(rows, r0 + tile), width = (r1 - r0) * n;
      im2col(img, s.b, s.w, cols, width, r0, r1);
      gemm_rowmajor<T>(s.a, BK, width, 1, weight + g * s.a * BK, BK, false, cols, width, false, bias ? 1 : 0,
                       out + r0 * n, L);
    }
  });
}

// big[n, g] = col2im(W_g^T @ small[n, g]) (+ bias)
template <class T>
void scatter(const Shape& s, const T* small, const T* weight, const T* bias, T* big, T* scratch) {
  const int64_t L = s.w.out_numel(), P = s.w.in_numel(), BK = s.cols();
  const bool pointwise = is_pointwise(s.w);
  over_items<T>(s, pointwise, true, scratch, [&](int64_t item, int64_t, T* cols) {
    const int64_t g = item % s.groups;
    T* img = big + item * s.b * P;
    if (bias)
      for (int64_t r = 0; r < s.b; ++r) std::fill(img + r * P, img + (r + 1) * P, bias[g * s.b + r]);
    else if (!pointwise)
      std::fill(img, img + s.b * P, T(0));
    gemm_rowmajor<T>(BK, s.a, L, 1, weight + g * s.a * BK, BK, true, small + item * s.a * L, L, false,
                     pointwise && bias ? 1 : 0, pointwise ? img : cols, L);
    if (!pointwise) col2im(cols, s.b, s.w, img);
  });
}

// dW_g = sum over n of small[n, g] @ im2col(big[n, g])^T; each thread sums
// its images into its own partial, added in chunk order (deterministic).
template <class T>
void weight_grad(const Shape& s, const T* small, const T* big, T* grad_weight, T* scratch) {
  const int64_t L = s.w.out_numel(), P = s.w.in_numel(), BK = s.cols(), W = s.groups * s.a * BK;
  const bool pointwise = is_pointwise(s.w);
  T* partials = scratch + s.chunks * cols_size(s);
  std::fill(grad_weight, grad_weight + W, T(0));
  std::fill(partials, partials + (s.chunks - 1) * W, T(0));
  over_items<T>(s, pointwise, false, scratch, [&](int64_t item, int64_t chunk, T* cols) {
    T* acc = chunk == 0 ? grad_weight : partials + (chunk - 1) * W;
    const int64_t g = item % s.groups;
    const T* img = big + item * s.b * P;
    if (!pointwise) im2col(img, s.b, s.w, cols, L);
    gemm_rowmajor<T>(s.a, L, BK, 1, small + item * s.a * L, L, false, pointwise ? img : cols, L, true, 1,
                     acc + g * s.a * BK, BK);
  });
  for (int64_t c = 1; c < s.chunks; ++c)
    for (int64_t i = 0; i < W; ++i) grad_weight[i] += partials[(c - 1) * W + i];
}

Shape shape_of(const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride, at::IntArrayRef padding,
               at::IntArrayRef dilation, bool transposed, at::IntArrayRef output_padding, int64_t groups) {
  const int64_t dims = input.dim() - 2;
  TORCH_CHECK(dims >= 1 && dims <= 3, "rbln convolution: expected a batched 1-d, 2-d or 3-d input, got ",
              input.sizes());
  Shape s{input.size(0), groups, weight.size(0) / groups, weight.size(1), {}};
  const int64_t threads = at::get_num_threads();
  s.chunks = s.batch * s.groups >= threads ? threads : 1;
  set_trailing(s.w.k, weight.sizes().slice(2), dims);
  set_trailing(s.w.stride, stride, dims);
  set_trailing(s.w.pad, padding, dims);
  set_trailing(s.w.dil, dilation, dims);
  int64_t extra[3] = {0, 0, 0};
  if (transposed) set_trailing(extra, output_padding, dims);
  for (int64_t d = 3 - dims; d < 3; ++d) {
    const int64_t span = s.w.dil[d] * (s.w.k[d] - 1) + 1, size = input.size(2 + d - (3 - dims));
    if (transposed) {  // input is the small side
      s.w.out[d] = size;
      s.w.in[d] = (size - 1) * s.w.stride[d] - 2 * s.w.pad[d] + span + extra[d];
    } else {
      s.w.in[d] = size;
      s.w.out[d] = (size + 2 * s.w.pad[d] - span) / s.w.stride[d] + 1;
    }
    TORCH_CHECK(s.w.in[d] > 0 && s.w.out[d] > 0, "rbln convolution: output size is too small for input ",
                input.sizes(), " and weight ", weight.sizes());
  }
  return s;
}

std::vector<int64_t> sizes_of(int64_t batch, int64_t channels, const int64_t (&spatial)[3], int64_t dims) {
  std::vector<int64_t> sizes{batch, channels};
  sizes.insert(sizes.end(), spatial + 3 - dims, spatial + 3);
  return sizes;
}

// A contiguous copy in the compute dtype (float32 for float16/bfloat16).
at::Tensor compute_copy(const at::Tensor& t, at::ScalarType compute) {
  if (t.scalar_type() == compute) return contiguous(t);
  auto copy = at::empty(t.sizes(), t.options().dtype(compute));
  device_copy(copy, t);
  return copy;
}

at::ScalarType compute_type(const at::Tensor& t) {
  if (at::isIntegralType(t.scalar_type(), false)) return t.scalar_type();
  return t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

at::Tensor host(const at::Tensor& t) { return t.defined() ? t.cpu() : t; }
at::Tensor back(const at::Tensor& t, const at::Device& device) { return t.defined() ? t.to(device) : t; }
constexpr const char* kIntegerReason = "integer convolution other than int64 runs on the CPU";

// The result in the caller's dtype.
at::Tensor finish(const at::Tensor& result, at::ScalarType dtype) {
  if (result.scalar_type() == dtype) return result;
  auto out = at::empty(result.sizes(), result.options().dtype(dtype));
  device_copy(out, result);
  return out;
}

// A result the kernels computed contiguous, in the format the rule gives.
at::Tensor in_format(const at::Tensor& result, at::MemoryFormat format) {
  return result.defined() ? result.contiguous(format) : result;
}

template <class F>
void dispatch_compute(at::ScalarType compute, F&& f) {
  AT_DISPATCH_FLOATING_TYPES_AND(at::kLong, compute, "convolution", [&] { f(scalar_t{}); });
}

}  // namespace

at::MemoryFormat convolution_memory_format(const at::Tensor& input, const at::Tensor& weight) {
  if (input.scalar_type() == at::kDouble || weight.scalar_type() == at::kDouble) return at::MemoryFormat::Contiguous;
  const auto in = input.suggest_memory_format(), w = weight.suggest_memory_format();
  for (auto format : {at::MemoryFormat::ChannelsLast, at::MemoryFormat::ChannelsLast3d}) {
    const int64_t dims = format == at::MemoryFormat::ChannelsLast ? 4 : 5;
    if (weight.dim() == dims && (in == format || w == format)) return format;
  }
  return at::MemoryFormat::Contiguous;
}

at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias, c10::SymIntArrayRef stride,
                                    c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed,
                                    c10::SymIntArrayRef output_padding, c10::SymInt groups) {
  const at::Tensor b = bias && bias->defined() ? *bias : at::Tensor();
  check_same_device({&input, &weight, &b});
  // at::_convolution checks parameter types per backend, and not for this one.
  TORCH_CHECK(input.options().type_equal(weight.options()), "Input type (", input.toString(), ") and weight type (",
              weight.toString(), ") should be the same");
  TORCH_CHECK(!b.defined() || input.options().type_equal(b.options()), "Input type (", input.toString(),
              ") and bias type (", b.toString(), ") should be the same");
  const auto dtype = input.scalar_type();
  if (at::isIntegralType(dtype, true) && dtype != at::kLong) {
    count_fallback("aten::convolution_overrideable", kIntegerReason);
    const NoSyncAccounting quiet;  // the fallback's copies are its cost
    return in_format(back(at::convolution_symint(host(input), host(weight), host(b), stride, padding, dilation,
                                                 transposed, output_padding, groups),
                          input.device()),
                     convolution_memory_format(input, weight));
  }
  const auto compute = compute_type(input);
  const int64_t dims = input.dim() - 2;
  auto s = shape_of(input, weight, C10_AS_INTARRAYREF_SLOW(stride), C10_AS_INTARRAYREF_SLOW(padding),
                    C10_AS_INTARRAYREF_SLOW(dilation), transposed, C10_AS_INTARRAYREF_SLOW(output_padding),
                    groups.expect_int());
  const int64_t out_channels = transposed ? s.groups * s.b : s.groups * s.a;
  const auto format = convolution_memory_format(input, weight);
  // oneDNN takes either layout and writes the rule's; the other kernels compute contiguous, so
  // channels_last operands go to oneDNN whatever the kernel's shape.
  const bool library = dtype == at::kFloat && !transposed &&
                       ((s.b >= 16 && s.w.k_numel() > 1) || format != at::MemoryFormat::Contiguous);
  auto out = at::empty(sizes_of(s.batch, out_channels, transposed ? s.w.in : s.w.out, dims),
                       input.options().dtype(compute).memory_format(library ? format : at::MemoryFormat::Contiguous));
  if (out.numel() == 0) return in_format(finish(out, input.scalar_type()), format);
  if (library) {
    launch_library("aten::convolution_overrideable", {input, weight, b}, {out},
                   [stride = own(stride), padding = own(padding), dilation = own(dilation), transposed,
                    output_padding = own(output_padding), groups](const std::vector<at::Tensor>& in) {
                     return results(at::convolution_symint(in[0], in[1], optional(in[2]), stride, padding, dilation,
                                                           transposed, output_padding, groups));
                   });
    return out;
  }
  auto x = compute_copy(input, compute), w = compute_copy(weight, compute);
  auto bc = b.defined() ? compute_copy(b, compute) : at::Tensor();
  dispatch_compute(compute, [&](auto zero) {
    using T = decltype(zero);
    const T* xp = x.const_data_ptr<T>();
    const T* wp = w.const_data_ptr<T>();
    const T* bp = bc.defined() ? bc.const_data_ptr<T>() : nullptr;
    T* yp = out.data_ptr<T>();
    at::Tensor scratch = at::empty({transposed ? scatter_scratch(s) : gather_scratch(s)}, out.options());
    T* sp = scratch.data_ptr<T>();
    launch_on(out, "aten::convolution_overrideable", [=] {
      if (transposed) scatter<T>(s, xp, wp, bp, yp, sp);
      else gather<T>(s, xp, wp, bp, yp, sp);
    });
  });
  return in_format(finish(out, input.scalar_type()), format);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::SymIntArrayRef stride,
    c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed, c10::SymIntArrayRef output_padding,
    c10::SymInt groups, std::array<bool, 3> output_mask) {
  check_same_device({&grad_output, &input, &weight});
  if (!at::isFloatingType(input.scalar_type())) {
    count_fallback("aten::convolution_backward_overrideable", "integer convolution backward runs on the CPU");
    const NoSyncAccounting quiet;
    std::vector<c10::SymInt> bias_sizes{grad_output.sym_size(1)};
    auto [gi, gw, gb] = at::convolution_backward_symint(host(grad_output), host(input), host(weight), bias_sizes,
                                                        stride, padding, dilation, transposed, output_padding, groups,
                                                        output_mask);
    const auto format = convolution_memory_format(input, weight);
    return {in_format(back(gi, input.device()), format), in_format(back(gw, input.device()), format),
            back(gb, input.device())};
  }
  const auto compute = compute_type(input);
  auto s = shape_of(input, weight, C10_AS_INTARRAYREF_SLOW(stride), C10_AS_INTARRAYREF_SLOW(padding),
                    C10_AS_INTARRAYREF_SLOW(dilation), transposed, C10_AS_INTARRAYREF_SLOW(output_padding),
                    groups.expect_int());
  at::Tensor grad_input, grad_weight, grad_bias;
  if (output_mask[2]) {
    std::vector<int64_t> dims{0};
    for (int64_t d = 2; d < grad_output.dim(); ++d) dims.push_back(d);
    grad_bias = at::sum(grad_output, dims);
  }
  if (!output_mask[0] && !output_mask[1]) return {grad_input, grad_weight, grad_bias};
  auto go = compute_copy(grad_output, compute), x = compute_copy(input, compute), w = compute_copy(weight, compute);
  if (output_mask[0]) grad_input = at::empty(input.sizes(), input.options().dtype(compute));
  if (output_mask[1]) grad_weight = at::empty(weight.sizes(), weight.options().dtype(compute));
  if (input.numel() == 0 || grad_output.numel() == 0) {
    if (grad_input.defined()) grad_input.zero_();
    if (grad_weight.defined()) grad_weight.zero_();
  } else {
    dispatch_compute(compute, [&](auto zero) {
      using T = decltype(zero);
      const T* gop = go.const_data_ptr<T>();
      const T* xp = x.const_data_ptr<T>();
      const T* wp = w.const_data_ptr<T>();
      T* gip = grad_input.defined() ? grad_input.data_ptr<T>() : nullptr;
      T* gwp = grad_weight.defined() ? grad_weight.data_ptr<T>() : nullptr;
      const int64_t input_scratch = output_mask[0] ? (transposed ? gather_scratch(s) : scatter_scratch(s)) : 0;
      const int64_t weight_scratch = output_mask[1] ? weight_grad_scratch(s) : 0;
      at::Tensor scratch = at::empty({std::max(input_scratch, weight_scratch)}, go.options());
      T* sp = scratch.data_ptr<T>();
      launch_on(input, "aten::convolution_backward_overrideable", [=] {
        // The small side is grad_output for a convolution, the input for a transposed one.
        if (gip) {
          if (transposed) gather<T>(s, gop, wp, nullptr, gip, sp);
          else scatter<T>(s, gop, wp, nullptr, gip, sp);
        }
        if (gwp) {
          if (transposed) weight_grad<T>(s, xp, gop, gwp, sp);
          else weight_grad<T>(s, gop, xp, gwp, sp);
        }
      });
    });
  }
  const auto format = convolution_memory_format(input, weight);
  return {in_format(grad_input.defined() ? finish(grad_input, input.scalar_type()) : grad_input, format),
          in_format(grad_weight.defined() ? finish(grad_weight, weight.scalar_type()) : grad_weight, format),
          grad_bias};
}

}  // namespace rbln::kernels
