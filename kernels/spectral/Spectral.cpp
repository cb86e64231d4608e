// The FFTs (_fft_r2c, _fft_c2r, _fft_c2c): libtorch's own CPU FFT (what CPU's
// torch.fft runs: pocketfft or MKL) is the emulated device's FFT library
// (kernels/library/Library.h), so every result is CPU's. And the torch.fft functions
// over them, for float16 as CUDA runs it.
#include <ATen/WrapDimUtils.h>
#include <ATen/ops/_fft_c2c.h>
#include <ATen/ops/_fft_c2r.h>
#include <ATen/ops/_fft_r2c.h>
#include <ATen/ops/fft_fft2_native.h>
#include <ATen/ops/fft_fft_native.h>
#include <ATen/ops/fft_fftn_native.h>
#include <ATen/ops/fft_hfft2_native.h>
#include <ATen/ops/fft_hfft_native.h>
#include <ATen/ops/fft_hfftn_native.h>
#include <ATen/ops/fft_ifft2_native.h>
#include <ATen/ops/fft_ifft_native.h>
#include <ATen/ops/fft_ifftn_native.h>
#include <ATen/ops/fft_ihfft2_native.h>
#include <ATen/ops/fft_ihfft_native.h>
#include <ATen/ops/fft_ihfftn_native.h>
#include <ATen/ops/fft_irfft2_native.h>
#include <ATen/ops/fft_irfft_native.h>
#include <ATen/ops/fft_irfftn_native.h>
#include <ATen/ops/fft_rfft2_native.h>
#include <ATen/ops/fft_rfft_native.h>
#include <ATen/ops/fft_rfftn_native.h>

#include <vector>

#include "generated/RBLNNativeFunctions.h"
#include "kernels/common/Common.h"
#include "kernels/library/Library.h"

namespace rbln::kernels {
namespace {

bool is_power_of_two(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

// The dtype the library computes a half-precision transform in: CPU's FFT has none.
at::ScalarType widened(at::ScalarType t) {
  return t == at::kHalf ? at::kFloat : t == at::kComplexHalf ? at::kComplexFloat : t;
}

// out (sized `sizes`, of `dtype`) <- fft(in, out) on CPU views of the device buffers. Half-precision
// transforms, of complex32 or float16 (CUDA's cuFFT computes them for power-of-two signal sizes only, and
// so does this) run in complex64/float32 and round their result, as CPU's library has none.
template <class F>
at::Tensor& spectral(const at::Tensor& self, at::IntArrayRef sizes, at::ScalarType dtype, at::Tensor& out,
                     at::IntArrayRef dim, const char* op, const char* name, F fft) {
  check_same_device({&self, &out});
  const bool half = self.scalar_type() == at::kComplexHalf || self.scalar_type() == at::kHalf;
  if (half) {
    std::vector<int64_t> signal;
    const bool to_real = !c10::isComplexType(dtype);  // c2r: the signal is the real output's
    for (int64_t d : dim) signal.push_back(to_real ? sizes[d] : self.size(d));
    for (int64_t n : signal) {
      TORCH_CHECK(is_power_of_two(n), "cuFFT only supports dimensions whose sizes are powers of two when computing "
                  "in half precision, but got a signal size of", at::IntArrayRef(signal));
    }
  }
  prepare_out(out, sizes, dtype, self, op, /*castable=*/true);  // CPU's and CUDA's out= variants copy_ into out
  if (out.numel() == 0 || self.numel() == 0) return out;
  auto x = contiguous(self);
  write_contiguous(out, [&](const at::Tensor& target) {
    launch_library(name, {x, target}, {}, [fft, half](const std::vector<at::Tensor>& cpu) {
      if (!half) {
        at::Tensor result = cpu[1];
        fft(cpu[0], result);
      } else {
        at::Tensor result = at::empty(cpu[1].sizes(), cpu[1].options().dtype(widened(cpu[1].scalar_type())));
        fft(cpu[0].to(widened(cpu[0].scalar_type())), result);
        cpu[1].copy_(result);
      }
      return std::vector<at::Tensor>{};
    });
  });
  return out;
}

void check_complex(const at::Tensor& self, const char* op) {
  TORCH_CHECK(self.is_complex(), op, " expects a complex input tensor, but got ", self.scalar_type());
}

}  // namespace

at::Tensor& fft_r2c_out(const at::Tensor& self, at::IntArrayRef dim, int64_t normalization, bool onesided,
                        at::Tensor& out) {
  TORCH_CHECK(self.is_floating_point(), "_fft_r2c expects a floating point input tensor, but got ", self.scalar_type());
  auto sizes = self.sizes().vec();
  if (onesided && !dim.empty()) sizes[dim.back()] = sizes[dim.back()] / 2 + 1;
  return spectral(self, sizes, c10::toComplexType(self.scalar_type()), out, dim, "_fft_r2c", "aten::_fft_r2c",
                  [dim = dim.vec(), normalization, onesided](const at::Tensor& in, at::Tensor& result) {
                    at::_fft_r2c_out(result, in, dim, normalization, onesided);
                  });
}

at::Tensor& fft_c2r_out(const at::Tensor& self, at::IntArrayRef dim, int64_t normalization, c10::SymInt last_dim_size,
                        at::Tensor& out) {
  check_complex(self, "_fft_c2r");
  auto sizes = self.sizes().vec();
  const int64_t last = last_dim_size.expect_int();
  if (!dim.empty()) sizes[dim.back()] = last;
  return spectral(self, sizes, c10::toRealValueType(self.scalar_type()), out, dim, "_fft_c2r", "aten::_fft_c2r",
                  [dim = dim.vec(), normalization, last](const at::Tensor& in, at::Tensor& result) {
                    at::_fft_c2r_out(result, in, dim, normalization, last);
                  });
}

at::Tensor& fft_c2c_out(const at::Tensor& self, c10::SymIntArrayRef dim, int64_t normalization, bool forward,
                        at::Tensor& out) {
  check_complex(self, "_fft_c2c");
  const auto dims = C10_AS_INTARRAYREF_SLOW(dim).vec();
  return spectral(self, self.sizes(), self.scalar_type(), out, dims, "_fft_c2c", "aten::_fft_c2c",
                  [dims, normalization, forward](const at::Tensor& in, at::Tensor& result) {
                    at::_fft_c2c_out(result, in, dims, normalization, forward);
                  });
}

// ---- the torch.fft functions ----------------------------------------------------
// PyTorch's composites (fft_fft, ...) refuse a float16 input on every device but CUDA
// (promote_type_fft), where cuFFT transforms it in half precision, power-of-two sizes
// only. Here they run unchanged for every other dtype; a float16 input is taken as
// complex32, which they accept and the complex32 kernels above transform as cuFFT
// does. A real-to-complex transform (rfft, ihfft) of float16 is the complex transform
// (fft, ifft) of it as complex32, cut to the onesided half along its last transformed
// dimension: the same values, as on CUDA, in complex32.
namespace {

at::Tensor as_complex32(const at::Tensor& x) { return x.scalar_type() == at::kHalf ? x.to(at::kComplexHalf) : x; }

at::Tensor onesided(const at::Tensor& full, int64_t dim) {
  dim = at::maybe_wrap_dim(dim, full.dim());
  return full.narrow(dim, 0, full.size(dim) / 2 + 1);
}

// The last dimension an n-dimensional transform runs over: its `dim`'s last, or the tensor's.
int64_t last_fft_dim(const at::Tensor& self, at::OptionalIntArrayRef dim) {
  return dim && !dim->empty() ? dim->back() : self.dim() - 1;
}

}  // namespace

using OptSymInt = std::optional<c10::SymInt>;
using Norm = std::optional<c10::string_view>;

#define RBLN_FFT_AS_COMPLEX32(name, S, D)                                      \
  at::Tensor name(const at::Tensor& self, S s, D dim, Norm norm) {             \
    return at::native::name##_symint(as_complex32(self), s, dim, norm);        \
  }
#define RBLN_FFT_ONESIDED(name, complex_name, S, D, last)                     \
  at::Tensor name(const at::Tensor& self, S s, D dim, Norm norm) {             \
    if (self.scalar_type() != at::kHalf) return at::native::name##_symint(self, s, dim, norm); \
    return onesided(at::native::complex_name##_symint(as_complex32(self), s, dim, norm), last); \
  }

// One family's six functions: 1-d (suffix empty), 2-d (2) or n-d (n), with its size and dim types.
#define RBLN_FFT_FAMILY(suffix, S, D, last)                                \
  RBLN_FFT_AS_COMPLEX32(fft_fft##suffix, S, D)                             \
  RBLN_FFT_AS_COMPLEX32(fft_ifft##suffix, S, D)                            \
  RBLN_FFT_AS_COMPLEX32(fft_irfft##suffix, S, D)                           \
  RBLN_FFT_AS_COMPLEX32(fft_hfft##suffix, S, D)                            \
  RBLN_FFT_ONESIDED(fft_rfft##suffix, fft_fft##suffix, S, D, last)         \
  RBLN_FFT_ONESIDED(fft_ihfft##suffix, fft_ifft##suffix, S, D, last)

RBLN_FFT_FAMILY(, OptSymInt, int64_t, dim)
RBLN_FFT_FAMILY(2, at::OptionalSymIntArrayRef, at::IntArrayRef, last_fft_dim(self, dim))
RBLN_FFT_FAMILY(n, at::OptionalSymIntArrayRef, at::OptionalIntArrayRef, last_fft_dim(self, dim))
#undef RBLN_FFT_FAMILY
#undef RBLN_FFT_ONESIDED
#undef RBLN_FFT_AS_COMPLEX32

}  // namespace rbln::kernels
