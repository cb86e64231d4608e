// Matrix multiply on the device's matrix engine: the BLAS libtorch carries
// (sgemm, dgemm, cgemm, zgemm; float16/bfloat16 widen to float32 first), a plain loop for integers
// and, as CPU's bmm, for small batched products; float8 products (mm, addmm) on the op library, as CPU computes them.
#include <ATen/TensorIterator.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>

#include <optional>
#include <vector>

#include "generated/RBLNNativeFunctions.h"
#include "kernels/linalg/Blas.h"
#include "kernels/common/Common.h"
#include "kernels/elementwise/Elementwise.h"
#include "kernels/library/Library.h"

namespace rbln::kernels {
namespace {

// A row-major [rows, cols] operand as BLAS sees it (column-major): either the
// data is row-major (no transpose) or column-major (transpose).
struct Operand {
  at::Tensor t;
  bool transposed;
  int64_t ld;
};

Operand operand(const at::Tensor& m) {  // m: 2-d or a batch of them (last two dims)
  // mm and bmm pass through the Conjugate key (as CPU's BLAS takes conjugate flags): materialize it.
  if (m.is_conj()) return operand(m.resolve_conj());
  auto r = m.dim() - 2, c = m.dim() - 1;
  if (m.stride(c) == 1 && m.stride(r) >= std::max<int64_t>(1, m.size(c))) return {m, false, m.stride(r)};
  if (m.stride(r) == 1 && m.stride(c) >= std::max<int64_t>(1, m.size(r))) return {m, true, m.stride(c)};
  auto copy = contiguous(m);
  return {copy, false, std::max<int64_t>(1, copy.size(c))};
}

// Row-major [rows, cols] copy in float of a (possibly transposed) operand.
template <class T>
std::vector<float> widen(const T* src, int64_t rows, int64_t cols, int64_t ld, bool trans) {
  std::vector<float> out(rows * cols);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) out[i * cols + j] = static_cast<float>(trans ? src[j * ld + i] : src[i * ld + j]);
  return out;
}

// Below this many multiply-adds per product CPU's bmm runs its own loop (not
// BLAS): the device does too, so small batched products round alike.
constexpr int64_t kPlainBmm = 400;

// Below this many multiply-adds a product runs BLAS on the worker thread alone (about 20 us of one core's work:
// waking the team costs more; a decode step's 1 x 64 x 256 products took 1.6 us serial, 4.5 us threaded).
constexpr int64_t kSerialBlas = int64_t(1) << 18;

// C[b] = alpha * A[b] @ B[b] + beta * C[b] for row-major C with unit column stride.
template <class T>
void gemm_batch(int64_t batch, int64_t n, int64_t k, int64_t p, const T* a, int64_t lda, int64_t sa, bool ta,
                const T* b, int64_t ldb, int64_t sb, bool tb, T* c, int64_t ldc, int64_t sc,
                at::opmath_type<T> alpha, at::opmath_type<T> beta, bool plain) {
  for (int64_t i = 0; i < batch; ++i) {
    const T* A = a + i * sa;
    const T* B = b + i * sb;
    T* C = c + i * sc;
    constexpr bool engine = std::is_same_v<T, float> || std::is_same_v<T, double> || c10::is_complex<T>::value;
    if (plain || !(engine || std::is_floating_point_v<at::opmath_type<T>>)) {
      gemm_plain<T, at::opmath_type<T>>(n, k, p, alpha, A, lda, ta, B, ldb, tb, beta, C, ldc);
    } else if constexpr (engine) {
      gemm_rowmajor<T>(n, k, p, alpha, A, lda, ta, B, ldb, tb, beta, C, ldc);
    } else {
      // float16/bfloat16 go through the float32 engine, accumulating in float.
      auto fa = widen(A, n, k, lda, ta), fb = widen(B, k, p, ldb, tb);
      std::vector<float> fc(n * p, 0.f);
      if (beta != 0) fc = widen(C, n, p, ldc, false);
      gemm_rowmajor<float>(n, k, p, static_cast<float>(alpha), fa.data(), k, false, fb.data(), p, false,
                     static_cast<float>(beta), fc.data(), p);
      for (int64_t r = 0; r < n; ++r)
        for (int64_t col = 0; col < p; ++col) C[r * ldc + col] = static_cast<T>(fc[r * p + col]);
    }
  }
}

// out[b] = alpha * (m1[b] @ m2[b]) + beta * out[b]; out already sized.
void matmul_into(const at::Tensor& out, const at::Tensor& m1, const at::Tensor& m2, const at::Scalar& alpha,
                 const at::Scalar& beta, const char* name) {
  if (out.numel() == 0) return;
  if (at::isFloat8Type(out.scalar_type())) {  // mm and addmm: the op library computes CPU's float8 product
    launch_library(name, {m1, m2, out}, {}, [alpha, beta](const std::vector<at::Tensor>& in) {
      auto result = in[2];
      result.addmm_(in[0], in[1], beta, alpha);
      return std::vector<at::Tensor>{};
    });
    return;
  }
  auto A = operand(m1), B = operand(m2);
  bool batched = out.dim() == 3;
  int64_t batch = batched ? out.size(0) : 1;
  int64_t n = m1.size(-2), k = m1.size(-1), p = m2.size(-1);
  auto C = (out.stride(-1) == 1 && out.stride(-2) >= std::max<int64_t>(1, p)) ? out : contiguous(out);
  RBLN_DISPATCH_ALL_AND_COMPLEX(out.scalar_type(), "matmul", [&] {
    using opmath = at::opmath_type<scalar_t>;
    const auto* a = A.t.const_data_ptr<scalar_t>();
    const auto* b = B.t.const_data_ptr<scalar_t>();
    auto* c = C.data_ptr<scalar_t>();
    int64_t sa = batched ? A.t.stride(0) : 0, sb = batched ? B.t.stride(0) : 0, sc = batched ? C.stride(0) : 0;
    int64_t lda = A.ld, ldb = B.ld, ldc = C.stride(-2);
    bool ta = A.transposed, tb = B.transposed;
    const bool plain = batched && n * k * p < kPlainBmm;
    auto al = alpha.to<opmath>(), be = beta.to<opmath>();
    if (k == 0) {
      // Nothing to multiply: C = beta * C (0 when beta is 0, ignoring NaN).
      launch_on(C, name, [=] {
        for (int64_t i = 0; i < batch; ++i)
          for (int64_t r = 0; r < n; ++r)
            for (int64_t col = 0; col < p; ++col) {
              auto& v = c[i * sc + r * ldc + col];
              v = be == opmath(0) ? scalar_t(0) : static_cast<scalar_t>(be * static_cast<opmath>(v));
            }
      });
      return;
    }
    if (batch > 1) {
      // One BLAS call per batch entry, the entries spread over the cores (each
      // call then runs single-threaded inside the pool, as CPU's bmm does).
      launch_on(C, name, [=] {
        at::parallel_for(0, batch, 1, [&](int64_t lo, int64_t hi) {
          gemm_batch<scalar_t>(hi - lo, n, k, p, a + lo * sa, lda, sa, ta, b + lo * sb, ldb, sb, tb, c + lo * sc, ldc,
                               sc, al, be, plain);
        });
      });
      return;
    }
    launch_on(C, name, [=] {
      std::optional<SerialBlas> serial;
      if (n * k * p < kSerialBlas) serial.emplace();
      gemm_batch<scalar_t>(batch, n, k, p, a, lda, sa, ta, b, ldb, sb, tb, c, ldc, sc, al, be, plain);
    });
  });
  if (!C.is_same(out)) device_copy(out, C);
}

void check_matrices(const at::Tensor& a, const at::Tensor& b, int64_t dims, const char* op) {
  const char* what = dims == 2 ? "matrix" : "3D tensor";
  TORCH_CHECK(a.dim() == dims, op, ": Expected self to be a ", what, ", got ", a.dim(), "-D tensor");
  TORCH_CHECK(b.dim() == dims, op, ": Expected mat2 to be a ", what, ", got ", b.dim(), "-D tensor");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "expected m1 and m2 to have the same dtype, but got: ",
              a.scalar_type(), " != ", b.scalar_type());
  check_same_device({&a, &b});
  if (dims == 2) {
    TORCH_CHECK(a.size(1) == b.size(0), "mat1 and mat2 shapes cannot be multiplied (", a.size(0), "x", a.size(1),
                " and ", b.size(0), "x", b.size(1), ")");
  } else {
    TORCH_CHECK(a.size(0) == b.size(0) && a.size(2) == b.size(1),
                "Expected size for first two dimensions of batch2 tensor to be: [", a.size(0), ", ", a.size(2),
                "] but got: [", b.size(0), ", ", b.size(1), "].");
  }
}

// out = beta * self + alpha * (m1 @ m2): self broadcast to `sizes` (CPU's expand error), or, in place, of that size.
at::Tensor& add_product(const at::Tensor& self, const at::Tensor& m1, const at::Tensor& m2, const at::Scalar& beta,
                        const at::Scalar& alpha, at::Tensor& out, at::IntArrayRef sizes, const char* op,
                        const char* name) {
  if (!out.is_same(self)) {
    auto bias = self.resolve_conj().expand(sizes);
    prepare_out(out, sizes, self.scalar_type(), self, op);
    if (beta.toComplexDouble() != 0.0) device_copy(out, bias);
  } else {
    TORCH_CHECK(self.sizes() == sizes, "Bad in-place call: input tensor size ", self.sizes(), " and output tensor size ",
                sizes, " should match");
  }
  matmul_into(out, m1, m2, alpha, beta, name);
  return out;
}

}  // namespace

at::Tensor& mm_out(const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out) {
  check_matrices(self, mat2, 2, "mm");
  prepare_out(out, {self.size(0), mat2.size(1)}, self.scalar_type(), self, "mm");
  matmul_into(out, self, mat2, 1, 0, "aten::mm");
  return out;
}
at::Tensor& bmm_out(const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out) {
  check_matrices(self, mat2, 3, "bmm");
  prepare_out(out, {self.size(0), self.size(1), mat2.size(2)}, self.scalar_type(), self, "bmm");
  matmul_into(out, self, mat2, 1, 0, "aten::bmm");
  return out;
}
at::Tensor& addmm_out(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2, const at::Scalar& beta,
                      const at::Scalar& alpha, at::Tensor& out) {
  check_matrices(mat1, mat2, 2, "addmm");
  check_same_device({&self, &mat1, &out});
  TORCH_CHECK(self.scalar_type() == mat1.scalar_type(), "self and mat2 must have the same dtype, but got ",
              self.scalar_type(), " and ", mat1.scalar_type());
  return add_product(self, mat1, mat2, beta, alpha, out, {mat1.size(0), mat2.size(1)}, "addmm", "aten::addmm");
}

// CPU's order of checks: self broadcast to the result first, then dtypes and shapes.
at::Tensor& baddbmm_out(const at::Tensor& self, const at::Tensor& batch1, const at::Tensor& batch2,
                        const at::Scalar& beta, const at::Scalar& alpha, at::Tensor& out) {
  const std::vector<int64_t> sizes{batch1.size(0), batch1.size(1), batch2.size(2)};
  if (!out.is_same(self)) (void)self.expand(sizes);
  TORCH_CHECK(self.scalar_type() == batch1.scalar_type(), "Input dtypes must be the same, got: input ",
              self.dtype(), ", batch1: ", batch1.dtype(), ", batch2: ", batch2.dtype());
  TORCH_CHECK(batch1.dim() == 3, "batch1 must be a 3D tensor");
  TORCH_CHECK(batch2.dim() == 3, "batch2 must be a 3D tensor");
  TORCH_CHECK(batch2.size(0) == sizes[0] && batch2.size(1) == batch1.size(2),
              "Expected size for first two dimensions of batch2 tensor to be: [", sizes[0], ", ", batch1.size(2),
              "] but got: [", batch2.size(0), ", ", batch2.size(1), "].");
  TORCH_CHECK(batch1.scalar_type() == batch2.scalar_type(), "expected scalar type ", batch1.scalar_type(),
              " but found ", batch2.scalar_type());
  check_same_device({&self, &batch1, &batch2, &out});
  return add_product(self, batch1, batch2, beta, alpha, out, sizes, "baddbmm", "aten::baddbmm");
}

// As CPU: addmm of each batch in turn into the result, beta only for the first, so sums round as CPU's do.
at::Tensor& addbmm_out(const at::Tensor& self, const at::Tensor& batch1, const at::Tensor& batch2,
                       const at::Scalar& beta, const at::Scalar& alpha, at::Tensor& out) {
  const std::vector<int64_t> sizes{batch1.size(1), batch2.size(2)};
  if (!out.is_same(self)) (void)self.expand(sizes);
  TORCH_CHECK(batch1.dim() == 3, "batch1 must be a 3D tensor");
  TORCH_CHECK(batch2.dim() == 3, "batch2 must be a 3D tensor");
  TORCH_CHECK(batch1.size(0) == batch2.size(0), "batch1 and batch2 must have same number of batches, got ",
              batch1.size(0), " and ", batch2.size(0));
  TORCH_CHECK(batch1.size(2) == batch2.size(1), "Incompatible matrix sizes for bmm (", batch1.size(1), "x",
              batch1.size(2), " and ", batch2.size(1), "x", batch2.size(2), ")");
  TORCH_CHECK(self.scalar_type() == batch2.scalar_type(), "self and mat2 must have the same dtype, but got ",
              self.scalar_type(), " and ", batch2.scalar_type());
  TORCH_CHECK(batch1.scalar_type() == batch2.scalar_type(), "mat1 and mat2 must have the same dtype, but got ",
              batch1.scalar_type(), " and ", batch2.scalar_type());
  check_same_device({&self, &batch1, &batch2, &out});
  // addbmm is not structured on CPU: the result is resized with resize_ (no warning), a smaller self in place
  // first broadcast into a copy.
  const at::Tensor bias = out.is_same(self) && self.sizes() != at::IntArrayRef(sizes) ? self.expand(sizes).clone() : self;
  if (out.defined()) out.resize_(sizes);
  const int64_t batches = batch1.size(0);
  // No batches: beta * self (zeros for beta 0), as an empty product.
  add_product(bias, batches ? batch1[0] : batch1.new_empty({sizes[0], 0}), batches ? batch2[0] : batch2.new_empty({0, sizes[1]}),
              beta, alpha, out, sizes, "addbmm", "aten::addbmm");
  for (int64_t b = 1; b < batches; ++b) matmul_into(out, batch1[b], batch2[b], alpha, 1, "aten::addbmm");
  return out;
}

at::Tensor& addmv_out(const at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec, const at::Scalar& beta,
                      const at::Scalar& alpha, at::Tensor& out) {
  TORCH_CHECK(mat.dim() == 2 && vec.dim() == 1, "vector + matrix @ vector expected, got ", self.dim(), ", ", mat.dim(),
              ", ", vec.dim());
  TORCH_CHECK(mat.size(1) == vec.size(0), "size mismatch, got input (", self.size(0), "), mat (", mat.size(0), "x",
              mat.size(1), "), vec (", vec.size(0), ")");
  TORCH_CHECK(self.scalar_type() == mat.scalar_type() && mat.scalar_type() == vec.scalar_type(),
              "addmv input tensors must have the same dtype, but got ", self.scalar_type(), ", ", mat.scalar_type(),
              ", and ", vec.scalar_type());
  check_same_device({&self, &mat, &vec, &out});
  std::vector<int64_t> sizes{mat.size(0)};
  if (!out.is_same(self)) {
    auto bias = self.resolve_conj().expand(sizes);
    prepare_out(out, sizes, mat.scalar_type(), mat, "addmv");
    if (beta.toComplexDouble() != 0.0) device_copy(out, bias);
  } else {
    TORCH_CHECK(self.sizes() == at::IntArrayRef(sizes), "Bad in-place call: input tensor size ", self.sizes(),
                " and output tensor size ", at::IntArrayRef(sizes), " should match");
  }
  matmul_into(out.unsqueeze(1), mat, vec.unsqueeze(1), alpha, beta, "aten::addmv");
  return out;
}
// mv.out is addmv.out(out, bias, self, vec, beta=0) as CPU runs it: the bias is out= itself where out= has the
// result's one element, else a fresh vector, so a wrongly sized out= is resized rather than refused as an
// in-place call (and one aliasing the matrix fails as on CPU).
at::Tensor& mv_out(const at::Tensor& self, const at::Tensor& vec, at::Tensor& out) {
  if (out.dim() > 1 || out.numel() != self.size(0) || out.numel() != 1)
    return addmv_out(at::empty({self.size(0)}, vec.options()), self, vec, 0, 1, out);
  return addmv_out(out, self, vec, 0, 1, out);
}

// The outer product is elementwise over [n, m]: one pass, CPU's roundings (functors::addr).
at::Tensor& addr_out(const at::Tensor& self, const at::Tensor& vec1, const at::Tensor& vec2, const at::Scalar& beta,
                     const at::Scalar& alpha, at::Tensor& out) {
  TORCH_CHECK(vec1.dim() == 1, "addr: Expected 1-D argument vec1, but got ", vec1.dim(), "-D");
  TORCH_CHECK(vec2.dim() == 1, "addr: Expected 1-D argument vec2, but got ", vec2.dim(), "-D");
  // addr_ (out is self) never resizes self, as on CPU.
  TORCH_CHECK(!out.is_same(self) || self.dim() == 2, "2D tensor expected, got ", self.dim(), "D tensor for input");
  check_same_device({&self, &vec1, &vec2, &out});
  const auto dtype = at::promote_types(self.scalar_type(), at::promote_types(vec1.scalar_type(), vec2.scalar_type()));
  for (const auto* s : {&beta, &alpha}) {  // CPU's check_addr_scalar
    TORCH_CHECK(!s->isBoolean() || dtype == at::kBool, "Boolean ", s == &beta ? "beta" : "alpha",
                " only supported for Boolean results.");
    TORCH_CHECK(at::isFloatingType(dtype) || s->isIntegral(true), "For integral input tensors, argument ",
                s == &beta ? "beta" : "alpha", " must not be a floating point number.");
  }
  auto iter = at::TensorIteratorConfig()
                  .set_check_mem_overlap(true)
                  .add_output(out)
                  .add_owned_const_input(self.expand({vec1.size(0), vec2.size(0)}))
                  .add_owned_const_input(vec1.reshape({vec1.size(0), 1}))
                  .add_const_input(vec2)
                  .promote_inputs_to_common_dtype(true)
                  .cast_common_dtype_to_outputs(true)
                  .enforce_safe_casting_to_output(true)
                  .build();
  RBLN_DISPATCH_ALL(iter.common_dtype(), "addr", [&] {
    launch_elementwise<scalar_t, 4>(iter, "aten::addr", functors::addr<scalar_t>(beta, alpha));
  });
  if (!out.defined()) out = iter.output();  // the functional overload's new tensor
  return out;
}

at::Tensor dot(const at::Tensor& self, const at::Tensor& tensor) {
  TORCH_CHECK(self.dim() == 1 && tensor.dim() == 1, "1D tensors expected, but got ", self.dim(), "D and ",
              tensor.dim(), "D tensors");
  TORCH_CHECK(self.scalar_type() == tensor.scalar_type(), "dot : expected both vectors to have same dtype, but found ",
              self.scalar_type(), " and ", tensor.scalar_type());
  TORCH_CHECK(self.numel() == tensor.numel(), "inconsistent tensor size, expected tensor [", self.numel(),
              "] and src [", tensor.numel(), "] to have the same number of elements, but got ", self.numel(), " and ",
              tensor.numel(), " elements respectively");
  check_same_device({&self, &tensor});
  auto out = at::empty({1, 1}, self.options());
  matmul_into(out, self.unsqueeze(0), tensor.unsqueeze(1), 1, 0, "aten::dot");
  return out.view(at::IntArrayRef());
}

// Real vectors: vdot is dot (complex inputs run on the CPU).
at::Tensor vdot(const at::Tensor& self, const at::Tensor& other) { return kernels::dot(self, other); }

}  // namespace rbln::kernels
