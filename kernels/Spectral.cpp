// The FFTs (_fft_r2c, _fft_c2r, _fft_c2c): libtorch's own CPU FFT (what CPU's
// torch.fft runs: pocketfft or MKL) is the emulated device's FFT library
// (kernels/Library.h), so every result is CPU's.
#include <ATen/ops/_fft_c2c.h>
#include <ATen/ops/_fft_c2r.h>
#include <ATen/ops/_fft_r2c.h>

#include <vector>

#include "generated/RBLNNativeFunctions.h"
#include "kernels/Common.h"
#include "kernels/Library.h"

namespace rbln::kernels {
namespace {

bool is_power_of_two(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

// The dtype the library computes a half-precision transform in: CPU's FFT has none.
at::ScalarType widened(at::ScalarType t) {
  return t == at::kHalf ? at::kFloat : t == at::kComplexHalf ? at::kComplexFloat : t;
}

// out (sized `sizes`, of `dtype`) <- fft(in, out) on CPU views of the device buffers. complex32 transforms
// (CUDA's cuFFT computes them for power-of-two signal sizes only, and so does this) run in complex64 and
// round their result, as CPU's library has no half-precision FFT.
template <class F>
at::Tensor& spectral(const at::Tensor& self, at::IntArrayRef sizes, at::ScalarType dtype, at::Tensor& out,
                     at::IntArrayRef dim, const char* op, const char* name, F fft) {
  check_same_device({&self, &out});
  const bool half = self.scalar_type() == at::kComplexHalf;
  if (half) {
    std::vector<int64_t> signal;
    const bool to_real = !c10::isComplexType(dtype);  // c2r: the signal is the real output's
    for (int64_t d : dim) signal.push_back(to_real ? sizes[d] : self.size(d));
    for (int64_t n : signal) {
      TORCH_CHECK(is_power_of_two(n), "cuFFT only supports dimensions whose sizes are powers of two when computing "
                  "in half precision, but got a signal size of", at::IntArrayRef(signal));
    }
  }
  prepare_out(out, sizes, dtype, self, op);
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

}  // namespace rbln::kernels
