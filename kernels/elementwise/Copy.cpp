// Device-to-device copies: a byte copy when layouts match, the vector
// conversion between float32 and bfloat16/float16, a blocked copy out of a
// transposed matrix, else the elementwise engine (any dtypes, any strides).
#include <ATen/MemoryOverlap.h>
#include <ATen/TensorIterator.h>
#include <ATen/ops/empty.h>

#include <optional>

#include "generated/RBLNNativeFunctions.h"
#include "kernels/common/Common.h"
#include "kernels/common/Dispatch.h"
#include "kernels/elementwise/Elementwise.h"
#include "kernels/vec/VecKernels.h"

namespace rbln::kernels {
namespace {
template <class C>
struct identity {
  C operator()(C x) const { return x; }
};

// float32 <-> bfloat16/float16 between contiguous tensors: the vector conversion.
std::optional<vec::Conversion> conversion(at::ScalarType from, at::ScalarType to) {
  if (from == at::kFloat && to == at::kBFloat16) return vec::Conversion::kToBFloat16;
  if (from == at::kBFloat16 && to == at::kFloat) return vec::Conversion::kFromBFloat16;
  if (from == at::kFloat && to == at::kHalf) return vec::Conversion::kToHalf;
  if (from == at::kHalf && to == at::kFloat) return vec::Conversion::kFromHalf;
  return std::nullopt;
}

// dst[i][j] = src[i][j] for a contiguous [rows, cols] dst and a src whose
// rows are its unit stride (a transposed matrix): square blocks, so both
// sides are read and written a cache line at a time, as CPU's transpose copy.
template <class E>
void transpose_copy(E* dst, const E* src, int64_t rows, int64_t cols, int64_t ld) {
  constexpr int64_t kBlock = 64;
  const int64_t row_blocks = (rows + kBlock - 1) / kBlock, col_blocks = (cols + kBlock - 1) / kBlock;
  at::parallel_for(0, row_blocks * col_blocks, 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t i0 = t / col_blocks * kBlock, j0 = t % col_blocks * kBlock;
      const int64_t i1 = std::min(rows, i0 + kBlock), j1 = std::min(cols, j0 + kBlock);
      for (int64_t j = j0; j < j1; ++j)
        for (int64_t i = i0; i < i1; ++i) dst[i * cols + j] = src[i + j * ld];
    }
  });
}

void copy_kernel(const at::Tensor& dst, const at::Tensor& src) {
  if (dst.numel() == 0) return;
  const bool same_shape = dst.sizes() == src.sizes(), dense = dst.is_contiguous() && src.is_contiguous();
  const bool apart = !dst.storage().is_alias_of(src.storage());  // the fast paths below read and write in blocks
  if (dst.dtype() == src.dtype() && same_shape && dense) {
    auto* d = static_cast<char*>(dst.data_ptr());
    const auto* s = static_cast<const char*>(src.const_data_ptr());
    if (d == s) return;
    memcpy_async(d, s, dst.nbytes(), dst.device().index());
    return;
  }
  if (auto kind = conversion(src.scalar_type(), dst.scalar_type()); kind && same_shape && dense && apart) {
    const char* s = static_cast<const char*>(src.const_data_ptr());
    char* d = static_cast<char*>(dst.data_ptr());
    const int64_t n = dst.numel(), in_size = src.element_size(), out_size = dst.element_size();
    launch_on(dst, "aten::copy_", [=, kind = *kind] {
      at::parallel_for(0, n, kGrainSize, [&](int64_t b, int64_t e) {
        vec::table().convert_f32(s + b * in_size, d + b * out_size, e - b, kind);
      });
    });
    return;
  }
  const bool transposed = dst.dim() == 2 && dst.is_contiguous() && src.stride(0) == 1 && src.stride(1) >= src.size(0);
  if (dst.dtype() == src.dtype() && same_shape && apart && transposed && dst.numel() >= kGrainSize) {
    const int64_t rows = dst.size(0), cols = dst.size(1), ld = src.stride(1);
    const void* s = src.const_data_ptr();
    void* d = dst.data_ptr();
    auto launch = [&](auto element) {
      using E = decltype(element);
      launch_on(dst, "aten::copy_",
                [=] { transpose_copy(static_cast<E*>(d), static_cast<const E*>(s), rows, cols, ld); });
    };
    switch (dst.element_size()) {
      case 1: return launch(uint8_t());
      case 2: return launch(uint16_t());
      case 4: return launch(uint32_t());
      case 8: return launch(uint64_t());
      default: break;
    }
  }
  if (at::isFloat8Type(src.scalar_type()) && dst.scalar_type() == at::kHalf) {
    // CPU's float8 -> float16 goes through float32 with F16C, which keeps a NaN's payload: here the vector
    // conversion of a float32 copy (exact) does.
    auto wide = at::empty(dst.sizes(), dst.options().dtype(at::kFloat));
    copy_kernel(wide, src);
    return copy_kernel(dst, wide);
  }
  if (dst.scalar_type() == at::kFloat4_e2m1fn_x2 && src.scalar_type() == dst.scalar_type()) {
    // Two float4 values a byte, with no arithmetic: the bytes move (a cast raises CPU's error below).
    return copy_kernel(dst.view(at::kByte), src.view(at::kByte));
  }
  auto iter = at::TensorIteratorConfig()
                  .add_output(dst)
                  .add_const_input(src)
                  .resize_outputs(false)
                  .check_all_same_dtype(false)
                  .build();
  // A source dtype the loop cannot read (float4_e2m1fn_x2, the bare unsigned types) raises CPU's error here.
  RBLN_DISPATCH_ALL_AND_COMPLEX32_AND_FLOAT8(src.scalar_type(), "copy_kernel", [] {});
  RBLN_DISPATCH_ALL_AND_COMPLEX32_AND_FLOAT8(dst.scalar_type(), "copy_kernel", [&] {
    launch_elementwise<scalar_t, 2>(iter, "aten::copy_", identity<at::opmath_type<scalar_t>>());
  });
}

}  // namespace

void prepare_out(at::Tensor& out, at::IntArrayRef sizes, at::ScalarType dtype, const at::Tensor& like,
                 const char* op, bool castable) {
  if (!out.defined()) {  // a functional call: a fresh result
    out = at::empty(sizes, like.options().dtype(dtype));
    return;
  }
  TORCH_CHECK(castable || out.scalar_type() == dtype, "Expected out tensor to have dtype ",
              c10::scalarTypeToTypeMeta(dtype), ", but got ", out.dtype(), " instead");  // CPU's structured kernels' words
  check_same_device({&like, &out});
  at::native::resize_output(out, sizes);
}

void check_no_overlap(const at::Tensor& out, std::initializer_list<const at::Tensor*> inputs) {
  if (!out.defined()) return;
  at::assert_no_internal_overlap(out);
  for (const auto* t : inputs) {
    if (t->defined()) at::assert_no_overlap(out, *t);
  }
}

}  // namespace rbln::kernels

// The glue's device copy (the contract in generated/RBLNNativeFunctions.h) is this backend's copy kernel.
void rbln::device_copy(const at::Tensor& dst, const at::Tensor& src) { kernels::copy_kernel(dst, src); }
