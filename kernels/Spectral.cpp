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

// out (sized `sizes`, of `dtype`) <- fft(in, out) on CPU views of the device buffers.
template <class F>
at::Tensor& spectral(const at::Tensor& self, at::IntArrayRef sizes, at::ScalarType dtype, at::Tensor& out,
                     const char* op, const char* name, F fft) {
  check_same_device({&self, &out});
  prepare_out(out, sizes, dtype, self, op);
  if (out.numel() == 0 || self.numel() == 0) return out;
  auto x = contiguous(self);
  write_contiguous(out, [&](const at::Tensor& target) {
    launch_library(name, {x, target}, {}, [fft](const std::vector<at::Tensor>& cpu) {
      at::Tensor result = cpu[1];
      fft(cpu[0], result);
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
  return spectral(self, sizes, c10::toComplexType(self.scalar_type()), out, "_fft_r2c", "aten::_fft_r2c",
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
  return spectral(self, sizes, c10::toRealValueType(self.scalar_type()), out, "_fft_c2r", "aten::_fft_c2r",
                  [dim = dim.vec(), normalization, last](const at::Tensor& in, at::Tensor& result) {
                    at::_fft_c2r_out(result, in, dim, normalization, last);
                  });
}

at::Tensor& fft_c2c_out(const at::Tensor& self, c10::SymIntArrayRef dim, int64_t normalization, bool forward,
                        at::Tensor& out) {
  check_complex(self, "_fft_c2c");
  return spectral(self, self.sizes(), self.scalar_type(), out, "_fft_c2c", "aten::_fft_c2c",
                  [dim = C10_AS_INTARRAYREF_SLOW(dim).vec(), normalization, forward](const at::Tensor& in,
                                                                                      at::Tensor& result) {
                    at::_fft_c2c_out(result, in, dim, normalization, forward);
                  });
}

}  // namespace rbln::kernels
