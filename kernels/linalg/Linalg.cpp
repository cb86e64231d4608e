// Dense linear algebra on the device: triangular solves, LU, Cholesky, QR,
// singular value and symmetric eigen decompositions and the solves, determinants and inverses built on them,
// Householder products, the matrix exponential and the cross product, through the BLAS and
// LAPACK libtorch carries. Matrices are copied into column-major
// batches in device memory, as LAPACK wants, and handed back in CPU's
// conventions: LU packed as getrf leaves it, 1-based int32 pivots, int32 info
// (a singular or non-positive-definite input is reported there, not thrown,
// unless check_errors asks for it).
#include <ATen/ExpandUtils.h>
#include <ATen/TensorOperators.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/LinearAlgebraUtils.h>
#include <ATen/ops/_linalg_check_errors.h>
#include <ATen/ops/_linalg_eigh.h>
#include <ATen/ops/_linalg_solve_ex.h>
#include <ATen/ops/_linalg_svd.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/util/accumulate.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <vector>

#include "generated/RBLNNativeFunctions.h"
#include "kernels/linalg/Blas.h"
#include "kernels/common/Common.h"
#include "kernels/library/Library.h"

extern "C" {
void strsm_(const char* side, const char* uplo, const char* transa, const char* diag, const int* m, const int* n,
            const float* alpha, const float* a, const int* lda, float* b, const int* ldb);
void dtrsm_(const char* side, const char* uplo, const char* transa, const char* diag, const int* m, const int* n,
            const double* alpha, const double* a, const int* lda, double* b, const int* ldb);
void sgetrf_(const int* m, const int* n, float* a, const int* lda, int* ipiv, int* info);
void dgetrf_(const int* m, const int* n, double* a, const int* lda, int* ipiv, int* info);
void sgetrs_(const char* trans, const int* n, const int* nrhs, const float* a, const int* lda, const int* ipiv,
             float* b, const int* ldb, int* info);
void dgetrs_(const char* trans, const int* n, const int* nrhs, const double* a, const int* lda, const int* ipiv,
             double* b, const int* ldb, int* info);
void spotrf_(const char* uplo, const int* n, float* a, const int* lda, int* info);
void dpotrf_(const char* uplo, const int* n, double* a, const int* lda, int* info);
void sormqr_(const char* side, const char* trans, const int* m, const int* n, const int* k, const float* a,
             const int* lda, const float* tau, float* c, const int* ldc, float* work, const int* lwork, int* info);
void dormqr_(const char* side, const char* trans, const int* m, const int* n, const int* k, const double* a,
             const int* lda, const double* tau, double* c, const int* ldc, double* work, const int* lwork, int* info);
void sorgqr_(const int* m, const int* n, const int* k, float* a, const int* lda, const float* tau, float* work,
             const int* lwork, int* info);
void dorgqr_(const int* m, const int* n, const int* k, double* a, const int* lda, const double* tau, double* work,
             const int* lwork, int* info);
void sgeqrf_(const int* m, const int* n, float* a, const int* lda, float* tau, float* work, const int* lwork,
             int* info);
void dgeqrf_(const int* m, const int* n, double* a, const int* lda, double* tau, double* work, const int* lwork,
             int* info);
void spotrs_(const char* uplo, const int* n, const int* nrhs, const float* a, const int* lda, float* b,
             const int* ldb, int* info);
void dpotrs_(const char* uplo, const int* n, const int* nrhs, const double* a, const int* lda, double* b,
             const int* ldb, int* info);
void sgesdd_(const char* jobz, const int* m, const int* n, float* a, const int* lda, float* s, float* u, const int* ldu,
             float* vt, const int* ldvt, float* work, const int* lwork, int* iwork, int* info);
void dgesdd_(const char* jobz, const int* m, const int* n, double* a, const int* lda, double* s, double* u,
             const int* ldu, double* vt, const int* ldvt, double* work, const int* lwork, int* iwork, int* info);
void ssyevd_(const char* jobz, const char* uplo, const int* n, float* a, const int* lda, float* w, float* work,
             const int* lwork, int* iwork, const int* liwork, int* info);
void dsyevd_(const char* jobz, const char* uplo, const int* n, double* a, const int* lda, double* w, double* work,
             const int* lwork, int* iwork, const int* liwork, int* info);
}

namespace rbln::kernels {
namespace {

// LAPACK by element type. Leading dimensions are at least 1, as LAPACK requires.
int ld(int64_t rows) { return static_cast<int>(std::max<int64_t>(1, rows)); }

template <class T>
void trsm(char side, char uplo, char trans, char diag, int m, int n, const T* a, int lda, T* b, int ldb) {
  const T one = 1;
  if constexpr (std::is_same_v<T, float>) strsm_(&side, &uplo, &trans, &diag, &m, &n, &one, a, &lda, b, &ldb);
  else dtrsm_(&side, &uplo, &trans, &diag, &m, &n, &one, a, &lda, b, &ldb);
}
template <class T>
void getrf(int m, int n, T* a, int lda, int* ipiv, int* info) {
  if constexpr (std::is_same_v<T, float>) sgetrf_(&m, &n, a, &lda, ipiv, info);
  else dgetrf_(&m, &n, a, &lda, ipiv, info);
}
template <class T>
void getrs(char trans, int n, int nrhs, const T* a, int lda, const int* ipiv, T* b, int ldb, int* info) {
  if constexpr (std::is_same_v<T, float>) sgetrs_(&trans, &n, &nrhs, a, &lda, ipiv, b, &ldb, info);
  else dgetrs_(&trans, &n, &nrhs, a, &lda, ipiv, b, &ldb, info);
}
template <class T>
void potrf(char uplo, int n, T* a, int lda, int* info) {
  if constexpr (std::is_same_v<T, float>) spotrf_(&uplo, &n, a, &lda, info);
  else dpotrf_(&uplo, &n, a, &lda, info);
}
template <class T>
void potrs(char uplo, int n, int nrhs, const T* a, int lda, T* b, int ldb, int* info) {
  if constexpr (std::is_same_v<T, float>) spotrs_(&uplo, &n, &nrhs, a, &lda, b, &ldb, info);
  else dpotrs_(&uplo, &n, &nrhs, a, &lda, b, &ldb, info);
}

template <class T>
void ormqr(char side, char trans, int m, int n, int k, const T* a, int lda, const T* tau, T* c, int ldc, T* work,
           int lwork, int* info) {
  if constexpr (std::is_same_v<T, float>) sormqr_(&side, &trans, &m, &n, &k, a, &lda, tau, c, &ldc, work, &lwork, info);
  else dormqr_(&side, &trans, &m, &n, &k, a, &lda, tau, c, &ldc, work, &lwork, info);
}

template <class T>
void orgqr(int m, int n, int k, T* a, int lda, const T* tau, T* work, int lwork, int* info) {
  if constexpr (std::is_same_v<T, float>) sorgqr_(&m, &n, &k, a, &lda, tau, work, &lwork, info);
  else dorgqr_(&m, &n, &k, a, &lda, tau, work, &lwork, info);
}

template <class T>
void geqrf(int m, int n, T* a, int lda, T* tau, T* work, int lwork, int* info) {
  if constexpr (std::is_same_v<T, float>) sgeqrf_(&m, &n, a, &lda, tau, work, &lwork, info);
  else dgeqrf_(&m, &n, a, &lda, tau, work, &lwork, info);
}

template <class T>
void gesdd(char jobz, int m, int n, T* a, int lda, T* s, T* u, int ldu, T* vt, int ldvt, T* work, int lwork,
           int* iwork, int* info) {
  if constexpr (std::is_same_v<T, float>) sgesdd_(&jobz, &m, &n, a, &lda, s, u, &ldu, vt, &ldvt, work, &lwork, iwork, info);
  else dgesdd_(&jobz, &m, &n, a, &lda, s, u, &ldu, vt, &ldvt, work, &lwork, iwork, info);
}

template <class T>
void syevd(char jobz, char uplo, int n, T* a, int lda, T* w, T* work, int lwork, int* iwork, int liwork, int* info) {
  if constexpr (std::is_same_v<T, float>) ssyevd_(&jobz, &uplo, &n, a, &lda, w, work, &lwork, iwork, &liwork, info);
  else dsyevd_(&jobz, &uplo, &n, a, &lda, w, work, &lwork, iwork, &liwork, info);
}

// LAPACK's workspace protocol: ask for the size (lwork = -1), then run
// call(i, work, lwork) on each batch entry with one workspace.
template <class T, class F>
void with_workspace(int64_t count, const F& call) {
  T size = 0;
  call(0, &size, -1);
  std::vector<T> work(std::max<int64_t>(1, static_cast<int64_t>(size)));
  for (int64_t i = 0; i < count; ++i) call(i, work.data(), static_cast<int>(work.size()));
}

std::vector<int64_t> batch_of(at::IntArrayRef sizes) { return {sizes.begin(), sizes.end() - 2}; }
std::vector<int64_t> with_matrix(std::vector<int64_t> batch, int64_t rows, int64_t cols) {
  batch.push_back(rows);
  batch.push_back(cols);
  return batch;
}
int64_t batch_count(const at::Tensor& t) { return c10::multiply_integers(t.sizes().begin(), t.sizes().end() - 2); }

// A fresh batch of `sizes` in column-major order (CPU's layout for these
// results); fortran_copy fills it with `src` broadcast to it in `dtype`.
at::Tensor fortran_empty(at::IntArrayRef sizes, const at::TensorOptions& options) {
  return at::empty_strided(sizes, at::native::batched_matrix_contiguous_strides(sizes, /*f_contig=*/true), options);
}
at::Tensor fortran_copy(const at::Tensor& src, at::IntArrayRef sizes, at::ScalarType dtype) {
  auto out = fortran_empty(sizes, src.options().dtype(dtype));
  if (out.numel()) device_copy(out, src);
  return out;
}

// Hands `value` back through `out`: as is for a functional call, else copied
// in like CPU's out= (resized, dtype checked). With `castable` (CPU's
// checkLinalgCompatibleDtype ops) out may have any dtype value casts to.
void assign(at::Tensor& out, const at::Tensor& value, const char* op, bool castable = false) {
  if (!out.defined()) {
    out = value;
    return;
  }
  if (out.is_same(value)) return;
  if (castable) at::native::checkLinalgCompatibleDtype(op, out.scalar_type(), value.scalar_type());
  prepare_out(out, value.sizes(), value.scalar_type(), value, op, castable);
  if (out.numel()) device_copy(out, value);
}

// CPU's op (LAPACK's complex routines, for the complex inputs the hand-written
// kernels here leave out) in the device's op library, its results handed back
// through `outs` in order.
template <class... Out>
void in_library(const char* name, const std::vector<at::Tensor>& inputs, const char* op, LibraryOp call,
                Out&... outs) {
  const auto r = library_call(name, inputs, std::move(call));
  size_t i = 0;
  (assign(outs, r[i++], op), ...);
}

// X <- op(A)^-1 X (left) or X op(A)^-1 for triangular A; A and X column-major
// batches of the same batch shape.
void trsm_batch(const at::Tensor& A, const at::Tensor& X, bool left, bool upper, bool transpose, bool unit,
                const char* name) {
  if (X.numel() == 0) return;
  const int64_t n = A.size(-1), rows = X.size(-2), cols = X.size(-1), batch = batch_count(X);
  AT_DISPATCH_FLOATING_TYPES(X.scalar_type(), "trsm", [&] {
    const scalar_t* a = A.const_data_ptr<scalar_t>();
    scalar_t* x = X.data_ptr<scalar_t>();
    launch_on(X, name, [=] {
      for (int64_t i = 0; i < batch; ++i)
        trsm<scalar_t>(left ? 'L' : 'R', upper ? 'U' : 'L', transpose ? 'T' : 'N', unit ? 'U' : 'N', rows, cols,
                       a + i * n * n, ld(n), x + i * rows * cols, ld(rows));
    });
  });
}

// getrf of `A` ([*, m, n]): LU packed in a column-major batch, pivots
// [*, min(m, n)] and info [*] in int32, as CPU's linalg_lu_factor_ex.
struct LUFactors {
  at::Tensor LU, pivots, info;
};

LUFactors lu_factor(const at::Tensor& A) {
  const int64_t m = A.size(-2), n = A.size(-1), k = std::min(m, n);
  const auto batch = batch_of(A.sizes());
  auto piv_sizes = batch;
  piv_sizes.push_back(k);
  LUFactors f{fortran_copy(A, A.sizes(), A.scalar_type()), at::empty(piv_sizes, A.options().dtype(at::kInt)),
              at::empty(batch, A.options().dtype(at::kInt))};
  if (A.numel() == 0) {  // a batch of 0x0 matrices still reports success
    if (f.info.numel()) kernels::zero_(f.info);
    return f;
  }
  const int64_t count = batch_count(A);
  AT_DISPATCH_FLOATING_TYPES(A.scalar_type(), "aten::linalg_lu_factor_ex", [&] {
    scalar_t* lu = f.LU.data_ptr<scalar_t>();
    int* piv = f.pivots.data_ptr<int>();
    int* info = f.info.data_ptr<int>();
    launch_on(A, "aten::linalg_lu_factor_ex", [=] {
      for (int64_t i = 0; i < count; ++i) getrf<scalar_t>(m, n, lu + i * m * n, ld(m), piv + i * k, info + i);
    });
  });
  return f;
}

// det (or, with `logabs`, sign and log|det|) of each square matrix from its
// LU factors: the permutation's parity times the product of U's diagonal.
void lu_det(const LUFactors& f, const at::Tensor& det, const at::Tensor* logabs, const char* name) {
  if (det.numel() == 0) return;
  const int64_t n = f.LU.size(-1), count = det.numel();
  AT_DISPATCH_FLOATING_TYPES(det.scalar_type(), "lu_det", [&] {
    const scalar_t* lu = f.LU.const_data_ptr<scalar_t>();
    const int* piv = f.pivots.const_data_ptr<int>();
    scalar_t* d = det.data_ptr<scalar_t>();
    scalar_t* la = logabs ? logabs->data_ptr<scalar_t>() : nullptr;
    launch_on(det, name, [=] {
      for (int64_t b = 0; b < count; ++b) {
        const scalar_t* u = lu + b * n * n;
        scalar_t sign = 1, prod = 1, log_sum = 0;
        for (int64_t i = 0; i < n; ++i) {
          if (piv[b * n + i] != i + 1) sign = -sign;
          const scalar_t v = u[i * n + i];
          if (la) {
            sign *= v > 0 ? 1 : v < 0 ? -1 : 0;  // CPU's sgn: 0 and NaN give 0
            log_sum += std::log(std::abs(v));
          } else {
            prod *= v;
          }
        }
        d[b] = la ? sign : sign * prod;
        if (la) la[b] = log_sum;
      }
    });
  });
}

// The LU of A, or of A^T when A is contiguous (CPU's choice: the transpose is
// already column-major and has the same determinant; the backward of det and
// slogdet relies on which one it is).
LUFactors lu_factor_of(const at::Tensor& A) {
  TORCH_CHECK(A.dim() >= 2, "torch.lu_factor: Expected tensor with 2 or more dimensions. Got size: ", A.sizes(),
              " instead");  // CPU's linalg_lu_factor_ex check
  return lu_factor(A.is_contiguous() ? A.mT() : A);
}

// potrf of each matrix of `A` ([*, n, n]): the factor in a column-major batch,
// the other triangle zeroed as CPU does, and info [*] in int32.
std::pair<at::Tensor, at::Tensor> cholesky_factor(const at::Tensor& A, bool upper) {
  auto factor = fortran_copy(A, A.sizes(), A.scalar_type());
  auto info = at::empty(batch_of(A.sizes()), A.options().dtype(at::kInt));
  if (factor.numel() == 0) {
    if (info.numel()) kernels::zero_(info);
    return {factor, info};
  }
  const int64_t n = A.size(-1), count = batch_count(factor);
  AT_DISPATCH_FLOATING_TYPES(A.scalar_type(), "potrf", [&] {
    scalar_t* a = factor.data_ptr<scalar_t>();
    int* status = info.data_ptr<int>();
    launch_on(factor, "aten::linalg_cholesky_ex", [=] {
      for (int64_t b = 0; b < count; ++b) {
        scalar_t* m = a + b * n * n;
        potrf<scalar_t>(upper ? 'U' : 'L', n, m, ld(n), status + b);
        for (int64_t j = 0; j < n; ++j)  // potrf leaves the other triangle as it was
          for (int64_t i = 0; i < n; ++i)
            if (upper ? i > j : i < j) m[j * n + i] = 0;
      }
    });
  });
  return {factor, info};
}

// Q <- the first Q.size(-1) columns of the product of the Householder
// reflectors stored below Q's diagonal, scaled by tau ([*, k], contiguous).
void orgqr_batch(const at::Tensor& Q, const at::Tensor& tau) {
  if (Q.numel() == 0) return;
  const int64_t m = Q.size(-2), n = Q.size(-1), k = tau.size(-1), count = batch_count(Q);
  AT_DISPATCH_FLOATING_TYPES(Q.scalar_type(), "orgqr", [&] {
    scalar_t* q = Q.data_ptr<scalar_t>();
    const scalar_t* tp = tau.const_data_ptr<scalar_t>();
    launch_on(Q, "aten::orgqr", [=] {
      with_workspace<scalar_t>(count, [&](int64_t i, scalar_t* work, int lwork) {
        int info = 0;
        orgqr<scalar_t>(m, n, k, q + i * m * n, ld(m), tp + i * k, work, lwork, &info);
      });
    });
  });
}

}  // namespace

at::Tensor& linalg_solve_triangular_out(const at::Tensor& self, const at::Tensor& B, bool upper, bool left,
                                        bool unitriangular, at::Tensor& out) {
  at::native::checkInputsSolver(self, B, left, "linalg.solve_triangular");
  check_same_device({&self, &B, &out});
  auto [B_, A_] = at::native::_linalg_broadcast_batch_dims(B, self, /*name=*/nullptr);
  // The result takes A's dtype, as on CPU.
  auto X = fortran_copy(B_, B_.sizes(), self.scalar_type());
  trsm_batch(fortran_copy(A_, A_.sizes(), self.scalar_type()), X, left, upper, /*transpose=*/false, unitriangular,
             "aten::linalg_solve_triangular");
  assign(out, X, "linalg.solve_triangular");
  return out;
}

std::tuple<at::Tensor&, at::Tensor&> triangular_solve_X(const at::Tensor& self, const at::Tensor& A, bool upper,
                                                        bool transpose, bool unitriangular, at::Tensor& X,
                                                        at::Tensor& M) {
  TORCH_CHECK(self.dim() >= 2, "torch.triangular_solve: Expected b to have at least 2 dimensions, but it has ",
              self.dim(), " dimensions instead");
  TORCH_CHECK(A.dim() >= 2, "torch.triangular_solve: Expected A to have at least 2 dimensions, but it has ", A.dim(),
              " dimensions instead");
  check_same_device({&self, &A, &X, &M});
  auto [b_, A_] = at::native::_linalg_broadcast_batch_dims(self, A, "triangular_solve");
  // M: the (broadcast) coefficient matrix, cloned, as CPU returns it.
  auto x = fortran_copy(b_, b_.sizes(), self.scalar_type()), m = fortran_copy(A_, A_.sizes(), A.scalar_type());
  trsm_batch(m, x, /*left=*/true, upper, transpose, unitriangular, "aten::triangular_solve");
  assign(X, x, "triangular_solve");
  assign(M, m, "triangular_solve");
  return {X, M};
}

at::Tensor& linalg_lu_solve_out(const at::Tensor& LU, const at::Tensor& pivots, const at::Tensor& B, bool left,
                                bool adjoint, at::Tensor& out) {
  at::native::checkFloatingOrComplex(LU, "torch.linalg.lu_solve");
  TORCH_CHECK(LU.scalar_type() == B.scalar_type(), "linalg.lu_solve: Expected LU and B to have the same dtype, but found LU of type ",
              LU.scalar_type(), " and B of type ", B.scalar_type(), " instead");
  TORCH_CHECK(pivots.scalar_type() == at::kInt, "linalg.lu_solve: pivots should be a Tensor of scalar type torch.int32");
  at::native::squareCheckInputs(LU, "torch.linalg.lu_solve");
  at::native::checkInputsSolver(LU, B, left, "linalg.lu_solve");
  TORCH_CHECK(LU.size(-1) == pivots.size(-1),
              "linalg.lu_solve: Number of pivots per batch should be same as the dimension of the matrix");
  TORCH_CHECK(LU.sizes().slice(0, LU.dim() - 1).equals(pivots.sizes()),
              "linalg.lu_solve: Expected LU.shape[:-1] and pivots.shape to be the same, but got pivots with shape ",
              pivots.sizes(), " instead");
  check_same_device({&LU, &pivots, &B, &out});
  auto sizes = std::get<0>(at::native::_linalg_broadcast_batch_dims(B, LU));
  const int64_t n = LU.size(-1);
  // X A = B is A^T X^T = B^T: solve for X^T with the other transpose.
  auto batch = batch_of(sizes);
  auto X = fortran_copy(left ? B : B.mT(), with_matrix(batch, n, left ? sizes.back() : sizes.end()[-2]),
                        B.scalar_type());
  if (X.numel()) {
    auto lu = fortran_copy(LU, with_matrix(batch, n, n), LU.scalar_type());
    auto piv_sizes = batch;
    piv_sizes.push_back(n);
    auto piv = contiguous(pivots.expand(piv_sizes));
    const int64_t nrhs = X.size(-1), count = batch_count(X);
    const char trans = adjoint == left ? 'T' : 'N';
    AT_DISPATCH_FLOATING_TYPES(X.scalar_type(), "aten::linalg_lu_solve", [&] {
      const scalar_t* a = lu.const_data_ptr<scalar_t>();
      const int* p = piv.const_data_ptr<int>();
      scalar_t* x = X.data_ptr<scalar_t>();
      launch_on(X, "aten::linalg_lu_solve", [=] {
        // getrs writes outside the matrix for a pivot out of range: checked on the device, like CUDA's
        // device-side asserts, with CPU's messages (in CPU's order: every pivot >= 1, then every pivot <= n).
        const int* end = p + count * n;
        TORCH_CHECK(std::all_of(p, end, [](int v) { return v >= 1; }),
                    "Pivots given to lu_solve must all be greater or equal to 1. "
                    "Did you properly pass the result of lu_factor?");
        TORCH_CHECK(std::all_of(p, end, [=](int v) { return v <= n; }),
                    "Pivots given to lu_solve must all be smaller or equal to LU.size(-2). "
                    "Did you properly pass the result of lu_factor?");
        int info = 0;  // getrs only reports bad arguments
        for (int64_t i = 0; i < count; ++i)
          getrs<scalar_t>(trans, n, nrhs, a + i * n * n, ld(n), p + i * n, x + i * n * nrhs, ld(n), &info);
      });
    });
  }
  assign(out, left ? X : X.mT(), "linalg.lu_solve");
  return out;
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> lu_unpack_out(const at::Tensor& LU_data,
                                                                const at::Tensor& LU_pivots, bool unpack_data,
                                                                bool unpack_pivots, at::Tensor& P, at::Tensor& L,
                                                                at::Tensor& U) {
  TORCH_CHECK(LU_data.dim() >= 2, "torch.lu_unpack: Expected tensor with 2 or more dimensions. Got size: ",
              LU_data.sizes(), " instead");
  if (unpack_pivots) {
    TORCH_CHECK(LU_pivots.scalar_type() == at::kInt,
                "torch.lu_unpack: LU_pivots is expected to be a contiguous tensor of torch.int32 dtype.\n"
                "Note: this function is intended to be used with the output produced by torch.linalg.lu_factor");
  }
  check_same_device({&LU_data, &LU_pivots, &P, &L, &U});
  const int64_t m = LU_data.size(-2), n = LU_data.size(-1), k = std::min(m, n);
  const auto batch = batch_of(LU_data.sizes());
  const int64_t count = batch_count(LU_data);
  const auto dtype = LU_data.scalar_type();
  const std::vector<int64_t> none{0};
  prepare_out(P, unpack_pivots ? with_matrix(batch, m, m) : none, dtype, LU_data, "lu_unpack");
  prepare_out(L, unpack_data ? with_matrix(batch, m, k) : none, dtype, LU_data, "lu_unpack");
  prepare_out(U, unpack_data ? with_matrix(batch, k, n) : none, dtype, LU_data, "lu_unpack");
  AT_DISPATCH_FLOATING_TYPES(dtype, "aten::lu_unpack", [&] {
    if (unpack_data && LU_data.numel()) {
      auto lu = contiguous(LU_data);
      const scalar_t* a = lu.const_data_ptr<scalar_t>();
      write_contiguous(L, [&](const at::Tensor& l_out) {
        write_contiguous(U, [&](const at::Tensor& u_out) {
          scalar_t* l = l_out.data_ptr<scalar_t>();
          scalar_t* u = u_out.data_ptr<scalar_t>();
          launch_on(lu, "aten::lu_unpack", [=] {
            // L: the strict lower part with a unit diagonal; U: the upper part.
            for (int64_t b = 0; b < count; ++b)
              for (int64_t i = 0; i < m; ++i)
                for (int64_t j = 0; j < n; ++j) {
                  const scalar_t v = a[(b * m + i) * n + j];
                  if (j < k) l[(b * m + i) * k + j] = i > j ? v : i == j ? scalar_t(1) : scalar_t(0);
                  if (i < k) u[(b * k + i) * n + j] = i <= j ? v : scalar_t(0);
                }
          });
        });
      });
    }
    if (unpack_pivots && P.numel()) {
      auto piv_sizes = batch;
      piv_sizes.push_back(k);
      auto piv = contiguous(LU_pivots.expand(piv_sizes));
      const int* p = piv.const_data_ptr<int>();
      write_contiguous(P, [&](const at::Tensor& p_out) {
        scalar_t* out = p_out.data_ptr<scalar_t>();
        launch_on(piv, "aten::lu_unpack", [=] {
          // Apply the row swaps to the identity permutation; P[perm[j], j] = 1 gives A = P L U.
          std::vector<int64_t> perm(m);
          for (int64_t b = 0; b < count; ++b) {
            for (int64_t j = 0; j < m; ++j) perm[j] = j;
            for (int64_t i = 0; i < k; ++i) {
              const int64_t to = p[b * k + i];
              TORCH_CHECK(to >= 1 && to <= m,
                          "pivots passed to lu_unpack must be between 1 and LU.size(-2) inclusive."
                          "Did you properly pass the result of lu_factor?");
              std::swap(perm[i], perm[to - 1]);
            }
            scalar_t* pb = out + b * m * m;
            std::fill(pb, pb + m * m, scalar_t(0));
            for (int64_t j = 0; j < m; ++j) pb[perm[j] * m + j] = 1;
          }
        });
      });
    }
  });
  return {P, L, U};
}

at::Tensor _cholesky_solve_helper(const at::Tensor& self, const at::Tensor& A, bool upper) {
  // cholesky_solve has already broadcast the batches and checked the shapes.
  auto X = fortran_copy(self, self.sizes(), self.scalar_type());
  if (X.numel() == 0) return X;
  auto a = fortran_copy(A, A.sizes(), A.scalar_type());
  const int64_t n = A.size(-1), nrhs = X.size(-1), count = batch_count(X);
  AT_DISPATCH_FLOATING_TYPES(X.scalar_type(), "aten::_cholesky_solve_helper", [&] {
    const scalar_t* f = a.const_data_ptr<scalar_t>();
    scalar_t* x = X.data_ptr<scalar_t>();
    launch_on(X, "aten::_cholesky_solve_helper", [=] {
      int info = 0;  // potrs only reports bad arguments
      for (int64_t i = 0; i < count; ++i)
        potrs<scalar_t>(upper ? 'U' : 'L', n, nrhs, f + i * n * n, ld(n), x + i * n * nrhs, ld(n), &info);
    });
  });
  return X;
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> linalg_lu_factor_ex_out(const at::Tensor& A, bool pivot,
                                                                          bool check_errors, at::Tensor& LU,
                                                                          at::Tensor& pivots, at::Tensor& info) {
  TORCH_CHECK(A.dim() >= 2, "torch.lu_factor: Expected tensor with 2 or more dimensions. Got size: ", A.sizes(),
              " instead");
  TORCH_CHECK(pivot, "linalg.lu_factor: LU without pivoting is not implemented on the CPU");
  check_same_device({&A, &LU, &pivots, &info});
  auto f = lu_factor(A);
  assign(LU, f.LU, "linalg.lu_factor_ex");
  assign(pivots, f.pivots, "linalg.lu_factor_ex");
  assign(info, f.info, "linalg.lu_factor_ex");
  if (check_errors) at::_linalg_check_errors(f.info, "torch.linalg.lu_factor_ex", A.dim() == 2);
  return {LU, pivots, info};
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> linalg_lu_out(const at::Tensor& A, bool pivot, at::Tensor& P,
                                                                at::Tensor& L, at::Tensor& U) {
  TORCH_CHECK(A.dim() >= 2, "linalg.lu: Expected tensor with 2 or more dimensions. Got size: ", A.sizes(),
              " instead");
  TORCH_CHECK(pivot, "linalg.lu_factor: LU without pivoting is not implemented on the CPU");
  check_same_device({&A, &P, &L, &U});
  auto f = lu_factor(A);
  return lu_unpack_out(f.LU, f.pivots, /*unpack_data=*/true, /*unpack_pivots=*/true, P, L, U);
}

std::tuple<at::Tensor&, at::Tensor&> linalg_cholesky_ex_L(const at::Tensor& self, bool upper, bool check_errors,
                                                          at::Tensor& L, at::Tensor& info) {
  at::native::squareCheckInputs(self, "torch.linalg.cholesky");
  at::native::checkFloatingOrComplex(self, "torch.linalg.cholesky");
  check_same_device({&self, &L, &info});
  auto f = cholesky_factor(self, upper);
  assign(L, f.first, "linalg.cholesky_ex");
  assign(info, f.second, "linalg.cholesky_ex");
  if (check_errors) at::_linalg_check_errors(f.second, "torch.linalg.cholesky_ex", self.dim() == 2);
  return {L, info};
}

// The deprecated torch.cholesky: raises where linalg.cholesky_ex reports.
at::Tensor& cholesky_out(const at::Tensor& self, bool upper, at::Tensor& out) {
  TORCH_WARN_ONCE(
      "torch.cholesky is deprecated in favor of torch.linalg.cholesky and will be ",
      "removed in a future PyTorch release.\n", "L = torch.cholesky(A)\n", "should be replaced with\n",
      "L = torch.linalg.cholesky(A)\n", "and\n", "U = torch.cholesky(A, upper=True)\n",
      "should be replaced with\n", "U = torch.linalg.cholesky(A).mH\n",
      "This transform will produce equivalent results for all valid (symmetric positive definite) inputs.");
  check_same_device({&self, &out});
  if (self.numel() == 0) {  // before the shape checks: CPU's cholesky returns an empty result
    assign(out, at::empty_like(self, at::MemoryFormat::Contiguous), "cholesky", /*castable=*/true);
    return out;
  }
  at::native::squareCheckInputs(self, "cholesky");
  auto f = cholesky_factor(self, upper);
  at::_linalg_check_errors(f.second, "cholesky", self.dim() == 2);
  assign(out, f.first, "cholesky", /*castable=*/true);
  return out;
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&, at::Tensor&> _linalg_solve_ex_result(
    const at::Tensor& A, const at::Tensor& B, bool left, bool check_errors, at::Tensor& result, at::Tensor& LU,
    at::Tensor& pivots, at::Tensor& info) {
  at::native::checkFloatingOrComplex(A, "linalg.solve");
  TORCH_CHECK(A.scalar_type() == B.scalar_type(), "linalg.solve: Expected A and B to have the same dtype, but found A of type ",
              A.scalar_type(), " and B of type ", B.scalar_type(), " instead");
  // NumPy's rule: B is a (batch of) vector(s) when it has one dim fewer than A and matches its batch.
  const bool vector_case = at::native::linalg_solve_is_vector_rhs(A, B);
  auto B_ = vector_case ? B.unsqueeze(-1) : B;
  at::native::checkInputsSolver(A, B_, left, "linalg.solve");
  auto sizes = std::get<0>(at::native::_linalg_broadcast_batch_dims(B_, A));
  TORCH_CHECK(left || !vector_case,
              "linalg.solve: Vector broadcasting of the left hand side is not supported for left=False. In this case "
              "linalg.solve is equivalent to B / A.squeeze(-1)");
  check_same_device({&A, &B, &result, &LU, &pivots, &info});
  if (A.is_complex()) {  // LAPACK's cgetrf/cgetrs (z...) in the op library, as CPU runs them
    in_library("aten::_linalg_solve_ex", {A, B}, "linalg.solve_ex", [left](const std::vector<at::Tensor>& in) {
      return results(at::_linalg_solve_ex(in[0], in[1], left, /*check_errors=*/false));
    }, result, LU, pivots, info);
    if (check_errors) at::_linalg_check_errors(info, "torch.linalg.solve_ex", A.dim() == 2);
    return {result, LU, pivots, info};
  }
  if (vector_case) sizes.pop_back();
  prepare_out(result, sizes, B.scalar_type(), B, "linalg.solve_ex");
  linalg_lu_factor_ex_out(A, /*pivot=*/true, /*check_errors=*/false, LU, pivots, info);
  if (check_errors) at::_linalg_check_errors(info, "torch.linalg.solve_ex", A.dim() == 2);
  auto result_ = vector_case ? result.unsqueeze(-1) : result;
  linalg_lu_solve_out(LU, pivots, B_, left, /*adjoint=*/false, result_);
  return {result, LU, pivots, info};
}

std::tuple<at::Tensor&, at::Tensor&> linalg_inv_ex_inverse(const at::Tensor& A, bool check_errors,
                                                           at::Tensor& inverse, at::Tensor& info) {
  at::native::squareCheckInputs(A, "linalg.inv");
  at::native::checkFloatingOrComplex(A, "linalg.inv", /*allow_low_precision_dtypes=*/false);
  check_same_device({&A, &inverse, &info});
  // inv(A) solves A X = I.
  auto eye = at::empty(A.sizes(), A.options());
  kernels::zero_(eye);
  auto diagonal = eye.diagonal(0, -2, -1);
  fill_Scalar(diagonal, 1);
  at::Tensor LU, pivots;
  _linalg_solve_ex_result(A, eye, /*left=*/true, /*check_errors=*/false, inverse, LU, pivots, info);
  if (check_errors) at::_linalg_check_errors(info, "linalg.inv_ex", A.dim() == 2);
  return {inverse, info};
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> _linalg_det_result(const at::Tensor& A, at::Tensor& result,
                                                                     at::Tensor& LU, at::Tensor& pivots) {
  at::native::squareCheckInputs(A, "linalg.det");
  at::native::checkFloatingOrComplex(A, "linalg.det");
  check_same_device({&A, &result, &LU, &pivots});
  // The result is sized first, as CPU's structured meta does: an out= that is A itself reshapes A.
  at::native::resize_output(result, batch_of(A.sizes()));
  auto f = lu_factor_of(A);
  auto det = at::empty(batch_of(A.sizes()), A.options());
  lu_det(f, det, nullptr, "aten::_linalg_det");
  assign(result, det, "linalg.det");
  assign(LU, f.LU, "linalg.det");
  assign(pivots, f.pivots, "linalg.det");
  return {result, LU, pivots};
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&, at::Tensor&> _linalg_slogdet_sign(const at::Tensor& A,
                                                                                    at::Tensor& sign,
                                                                                    at::Tensor& logabsdet,
                                                                                    at::Tensor& LU,
                                                                                    at::Tensor& pivots) {
  at::native::squareCheckInputs(A, "linalg.slogdet");
  at::native::checkFloatingOrComplex(A, "linalg.slogdet", /*allow_low_precision_dtypes=*/false);
  check_same_device({&A, &sign, &logabsdet, &LU, &pivots});
  auto f = lu_factor_of(A);
  auto s = at::empty(batch_of(A.sizes()), A.options()), l = at::empty(batch_of(A.sizes()), A.options());
  lu_det(f, s, &l, "aten::_linalg_slogdet");
  assign(sign, s, "linalg.slogdet");
  assign(logabsdet, l, "linalg.slogdet");
  assign(LU, f.LU, "linalg.slogdet");
  assign(pivots, f.pivots, "linalg.slogdet");
  return {sign, logabsdet, LU, pivots};
}

at::Tensor& ormqr_out(const at::Tensor& self, const at::Tensor& input2, const at::Tensor& input3, bool left,
                      bool transpose, at::Tensor& out) {
  const auto &input = self, &tau = input2, &other = input3;
  TORCH_CHECK(input.dim() >= 2, "torch.ormqr: input must have at least 2 dimensions.");
  TORCH_CHECK(other.dim() >= 2, "torch.ormqr: other must have at least 2 dimensions.");
  const int64_t side = left ? -2 : -1;
  TORCH_CHECK(tau.size(-1) == std::min(other.size(side), input.size(-1)), "torch.ormqr: tau.shape[-1] must be equal to ",
              "min(other.shape[", side, "], input.shape[-1])");
  TORCH_CHECK(other.size(side) == input.size(-2), "torch.ormqr: other.shape[", side,
              "] must be equal to input.shape[-2]");
  TORCH_CHECK(tau.size(-1) <= input.size(-1), "torch.ormqr: tau.shape[-1] must be less than or equal to input.shape[-1]");
  TORCH_CHECK(input.dim() - tau.dim() == 1, "torch.ormqr: Expected tau to have one dimension less than input, but got tau.ndim equal to ",
              tau.dim(), " and input.ndim is equal to ", input.dim());
  TORCH_CHECK(input.dim() == other.dim(), "torch.ormqr: Expected other to have the same number of dimensions as input, but got other.ndim equal to ",
              other.dim(), " and input.ndim is equal to ", input.dim());
  const auto batch = batch_of(input.sizes());
  TORCH_CHECK(tau.sizes().slice(0, tau.dim() - 1).equals(batch),
              "torch.ormqr: Expected batch dimensions of tau to be equal to input.shape[:-2], but got ",
              tau.sizes().slice(0, tau.dim() - 1));
  TORCH_CHECK(other.sizes().slice(0, other.dim() - 2).equals(batch),
              "torch.ormqr: Expected batch dimensions of other to be equal to input.shape[:-2], but got ",
              other.sizes().slice(0, other.dim() - 2));
  TORCH_CHECK(tau.scalar_type() == input.scalar_type(),
              "torch.ormqr: Expected input and tau to have the same dtype, but input has dtype", input.scalar_type(),
              " and tau has dtype ", tau.scalar_type());
  TORCH_CHECK(other.scalar_type() == input.scalar_type(),
              "torch.ormqr: Expected input and other to have the same dtype, but input has dtype", input.scalar_type(),
              " and other has dtype ", other.scalar_type());
  check_same_device({&input, &tau, &other, &out});
  auto C = fortran_copy(other, other.sizes(), other.scalar_type());
  const int64_t k = tau.size(-1);
  if (C.numel() && k) {
    auto a = fortran_copy(input, input.sizes(), input.scalar_type());
    auto t = contiguous(tau);
    const int64_t m = C.size(-2), n = C.size(-1), rows = input.size(-2), cols = input.size(-1), count = batch_count(C);
    AT_DISPATCH_FLOATING_TYPES(C.scalar_type(), "ormqr", [&] {
      const scalar_t* ap = a.const_data_ptr<scalar_t>();
      const scalar_t* tp = t.const_data_ptr<scalar_t>();
      scalar_t* c = C.data_ptr<scalar_t>();
      launch_on(C, "aten::ormqr", [=] {
        with_workspace<scalar_t>(count, [&](int64_t i, scalar_t* work, int lwork) {
          int info = 0;
          ormqr<scalar_t>(left ? 'L' : 'R', transpose ? 'T' : 'N', m, n, k, ap + i * rows * cols, ld(rows),
                          tp + i * k, c + i * m * n, ld(m), work, lwork, &info);
        });
      });
    });
  }
  assign(out, C, "ormqr");
  return out;
}

at::Tensor& linalg_householder_product_out(const at::Tensor& input, const at::Tensor& tau, at::Tensor& out) {
  TORCH_CHECK(input.dim() >= 2, "torch.linalg.householder_product: input must have at least 2 dimensions.");
  TORCH_CHECK(input.size(-2) >= input.size(-1),
              "torch.linalg.householder_product: input.shape[-2] must be greater than or equal to input.shape[-1]");
  TORCH_CHECK(input.size(-1) >= tau.size(-1),
              "torch.linalg.householder_product: input.shape[-1] must be greater than or equal to tau.shape[-1]");
  TORCH_CHECK(input.dim() - tau.dim() == 1,
              "torch.linalg.householder_product: Expected tau to have one dimension less than input, but got tau.ndim equal to ",
              tau.dim(), " and input.ndim is equal to ", input.dim());
  const auto batch = batch_of(input.sizes());
  TORCH_CHECK(tau.sizes().slice(0, tau.dim() - 1).equals(batch),
              "torch.linalg.householder_product: Expected batch dimensions of tau to be equal to input.shape[:-2], but got ",
              tau.sizes().slice(0, tau.dim() - 1));
  TORCH_CHECK(tau.scalar_type() == input.scalar_type(), "torch.linalg.householder_product: tau dtype ",
              tau.scalar_type(), " does not match input dtype ", input.scalar_type());
  check_same_device({&input, &tau, &out});
  auto Q = fortran_copy(input, input.sizes(), input.scalar_type());
  orgqr_batch(Q, contiguous(tau));
  assign(out, Q, "torch.linalg.householder_product", /*castable=*/true);
  return out;
}

std::tuple<at::Tensor&, at::Tensor&> linalg_qr_out(const at::Tensor& A, c10::string_view mode, at::Tensor& Q,
                                                   at::Tensor& R) {
  at::native::checkIsMatrix(A, "linalg.qr");
  at::native::checkFloatingOrComplex(A, "linalg.qr");
  check_same_device({&A, &Q, &R});
  auto [compute_q, reduced] = at::native::_parse_qr_mode(mode);
  const int64_t m = A.size(-2), n = A.size(-1), k = std::min(m, n);
  const auto batch = batch_of(A.sizes());
  // geqrf: R above the diagonal, the reflectors below it and in tau.
  auto QR = fortran_copy(A, A.sizes(), A.scalar_type());
  auto tau_sizes = batch;
  tau_sizes.push_back(k);
  auto tau = at::empty(tau_sizes, A.options());
  if (QR.numel()) {
    const int64_t count = batch_count(QR);
    AT_DISPATCH_FLOATING_TYPES(QR.scalar_type(), "geqrf", [&] {
      scalar_t* a = QR.data_ptr<scalar_t>();
      scalar_t* t = tau.data_ptr<scalar_t>();
      launch_on(QR, "aten::linalg_qr", [=] {
        with_workspace<scalar_t>(count, [&](int64_t i, scalar_t* work, int lwork) {
          int info = 0;
          geqrf<scalar_t>(m, n, a + i * m * n, ld(m), t + i * k, work, lwork, &info);
        });
      });
    });
  }
  // R is k x n, or m x n in complete mode; Q is m x k, or m x m in complete mode, or empty in "r" mode.
  auto r = QR.narrow(-2, 0, (reduced || !compute_q) ? k : m).triu();
  assign(R, r, "linalg.qr");
  if (!compute_q) {
    assign(Q, at::empty({0}, A.options()), "linalg.qr");
    return {Q, R};
  }
  const int64_t q_cols = reduced ? k : m;
  // The reflectors in Q's first columns; in complete mode orgqr fills any further ones.
  auto q = fortran_empty(with_matrix(batch, m, q_cols), A.options());
  const int64_t kept = std::min(q_cols, n);
  if (q.numel() && kept) device_copy(q.narrow(-1, 0, kept), QR.narrow(-1, 0, kept));
  orgqr_batch(q, tau);
  assign(Q, q, "linalg.qr");
  return {Q, R};
}

at::Tensor linalg_matrix_exp(const at::Tensor& self) {
  at::native::squareCheckInputs(self, "linalg.matrix_exp");
  at::native::checkFloatingOrComplex(self, "linalg.matrix_exp");
  auto a = contiguous(self);
  auto out = at::empty(self.sizes(), self.options());
  if (out.numel() == 0) return out;
  const int64_t n = self.size(-1), count = batch_count(self);
  AT_DISPATCH_FLOATING_TYPES(self.scalar_type(), "matrix_exp", [&] {
    const scalar_t* x = a.const_data_ptr<scalar_t>();
    scalar_t* y = out.data_ptr<scalar_t>();
    launch_on(out, "aten::linalg_matrix_exp", [=] {
      // Scaling and squaring around a degree-18 Taylor polynomial, in double
      // for every dtype: 2^-s A has a 1-norm of at most 1.09 (CPU's bound
      // for its degree-18 approximation), where the truncation error is below
      // double's rounding.
      const int64_t nn = n * n;
      std::vector<double> A(nn), P(nn), T(nn);
      for (int64_t b = 0; b < count; ++b) {
        double norm = 0;
        for (int64_t j = 0; j < n; ++j) {
          double col = 0;
          for (int64_t i = 0; i < n; ++i) col += std::abs(static_cast<double>(x[b * nn + i * n + j]));
          norm = std::max(norm, col);
        }
        scalar_t* res = y + b * nn;
        if (!std::isfinite(norm)) {  // NaN or inf in, NaN out, as on CPU
          std::fill(res, res + nn, std::numeric_limits<scalar_t>::quiet_NaN());
          continue;
        }
        const int squarings = std::max(0, static_cast<int>(std::ceil(std::log2(norm / 1.090863719290036))));
        const double scale = std::ldexp(1.0, -squarings);
        for (int64_t i = 0; i < nn; ++i) A[i] = static_cast<double>(x[b * nn + i]) * scale;
        // Horner: P = I + A/k (I + A/(k+1) (...)), k = 18 down to 1.
        std::fill(P.begin(), P.end(), 0.0);
        for (int64_t i = 0; i < n; ++i) P[i * n + i] = 1;
        for (int k = 18; k >= 1; --k) {
          gemm_rowmajor<double>(n, n, n, 1.0 / k, A.data(), n, false, P.data(), n, false, 0.0, T.data(), n);
          for (int64_t i = 0; i < n; ++i) T[i * n + i] += 1;
          std::swap(P, T);
        }
        for (int i = 0; i < squarings; ++i) {
          gemm_rowmajor<double>(n, n, n, 1.0, P.data(), n, false, P.data(), n, false, 0.0, T.data(), n);
          std::swap(P, T);
        }
        for (int64_t i = 0; i < nn; ++i) res[i] = static_cast<scalar_t>(P[i]);
      }
    });
  });
  return out;
}

// The cross product along `dim`, from device elementwise ops.
at::Tensor& linalg_cross_out(const at::Tensor& self, const at::Tensor& other, int64_t dim, at::Tensor& out) {
  // CPU's order: its meta function's shape checks (the dim as given), then its kernel's dtype check.
  TORCH_CHECK(self.dim() == other.dim(), "linalg.cross: inputs must have the same number of dimensions.");
  TORCH_CHECK(self.size(dim) == 3 && other.size(dim) == 3, "linalg.cross: inputs dimension ", dim,
              " must have length 3. Got ", self.size(dim), " and ", other.size(dim));
  const auto sizes = at::infer_size(self.sizes(), other.sizes());
  dim = at::maybe_wrap_dim(dim, static_cast<int64_t>(sizes.size()));
  TORCH_CHECK(self.scalar_type() == other.scalar_type(), "linalg.cross: expected both inputs to have the same dtype, ",
              "but input has dtype ", self.scalar_type(), " and other has dtype ", other.scalar_type());
  check_same_device({&self, &other, &out});
  check_no_overlap(out, {&self, &other});
  auto a = [&](int64_t i) { return self.narrow(dim, i, 1); };
  auto b = [&](int64_t i) { return other.narrow(dim, i, 1); };
  prepare_out(out, sizes, self.scalar_type(), self, "linalg_cross");
  return at::cat_out(out, {a(1) * b(2) - a(2) * b(1), a(2) * b(0) - a(0) * b(2), a(0) * b(1) - a(1) * b(0)}, dim);
}

// gesdd, as CPU's linalg.svd runs it: U and Vh as column-major batches ([*, m, m or k], [*, n or k, n]), S [*, k];
// an empty matrix has the identity as its full U and Vh. Non-convergence raises as CPU's.
std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> linalg_svd_U(const at::Tensor& A, bool full_matrices,
                                                               bool compute_uv, std::optional<c10::string_view> driver,
                                                               at::Tensor& U, at::Tensor& S, at::Tensor& Vh) {
  at::native::checkIsMatrix(A, "linalg.svd");
  at::native::checkFloatingOrComplex(A, "linalg.svd");
  TORCH_CHECK(!driver.has_value(), "torch.linalg.svd: keyword argument `driver=` is only supported on CUDA inputs "
              "with cuSOLVER backend.");
  check_same_device({&A, &U, &S, &Vh});
  if (A.is_complex()) {  // LAPACK's cgesdd/zgesdd in the op library, as CPU runs them
    in_library("aten::_linalg_svd", {A}, "linalg.svd", [full_matrices, compute_uv](const std::vector<at::Tensor>& in) {
      return results(at::_linalg_svd(in[0], full_matrices, compute_uv));
    }, U, S, Vh);
    return {U, S, Vh};
  }
  const int64_t m = A.size(-2), n = A.size(-1), k = std::min(m, n), u_cols = full_matrices ? m : k,
                vh_rows = full_matrices ? n : k;
  const auto batch = batch_of(A.sizes());
  auto s_sizes = batch;
  s_sizes.push_back(k);
  auto u = compute_uv ? fortran_empty(with_matrix(batch, m, u_cols), A.options()) : at::empty({0}, A.options());
  auto vh = compute_uv ? fortran_empty(with_matrix(batch, vh_rows, n), A.options()) : at::empty({0}, A.options());
  auto s = at::empty(s_sizes, A.options());
  auto info = at::empty(batch, A.options().dtype(at::kInt));
  if (info.numel()) kernels::zero_(info);
  if (A.numel() == 0) {
    for (auto* t : {&u, &vh}) {
      if (compute_uv && full_matrices && t->numel()) {
        kernels::zero_(*t);
        t->diagonal(0, -2, -1).fill_(1);
      }
    }
  } else {
    auto a = fortran_copy(A, A.sizes(), A.scalar_type());
    const char jobz = compute_uv ? (full_matrices ? 'A' : 'S') : 'N';
    const int64_t count = batch_count(A);
    AT_DISPATCH_FLOATING_TYPES(A.scalar_type(), "aten::_linalg_svd", [&] {
      scalar_t* ap = a.data_ptr<scalar_t>();
      scalar_t* sp = s.data_ptr<scalar_t>();
      scalar_t* up = compute_uv ? u.data_ptr<scalar_t>() : nullptr;
      scalar_t* vp = compute_uv ? vh.data_ptr<scalar_t>() : nullptr;
      int* status = info.data_ptr<int>();
      launch_on(A, "aten::_linalg_svd", [=] {
        std::vector<int> iwork(8 * k);
        with_workspace<scalar_t>(count, [&](int64_t i, scalar_t* work, int lwork) {
          gesdd<scalar_t>(jobz, m, n, ap + i * m * n, ld(m), sp + i * k, up ? up + i * m * u_cols : nullptr, ld(m),
                          vp ? vp + i * vh_rows * n : nullptr, ld(vh_rows), work, lwork, iwork.data(), status + i);
        });
      });
    });
  }
  assign(U, u, "linalg.svd");
  assign(S, s, "linalg.svd");
  assign(Vh, vh, "linalg.svd");
  at::_linalg_check_errors(info, "linalg.svd", A.dim() == 2);
  return {U, S, Vh};
}

// syevd, as CPU's linalg.eigh runs it: ascending eigenvalues [*, n] and, with compute_v, the eigenvectors as a
// column-major batch (syevd overwrites its copy of A with them). Non-convergence raises as CPU's.
std::tuple<at::Tensor&, at::Tensor&> linalg_eigh_eigenvalues(const at::Tensor& A, c10::string_view UPLO, bool compute_v,
                                                             at::Tensor& eigenvalues, at::Tensor& eigenvectors) {
  at::native::squareCheckInputs(A, "linalg.eigh");
  at::native::checkUplo(UPLO);
  check_same_device({&A, &eigenvalues, &eigenvectors});
  if (A.is_complex()) {  // LAPACK's cheevd/zheevd in the op library, as CPU runs them
    in_library("aten::_linalg_eigh", {A}, "linalg.eigh", [uplo = std::string(UPLO), compute_v](
                                                             const std::vector<at::Tensor>& in) {
      return results(at::_linalg_eigh(in[0], uplo, compute_v));
    }, eigenvalues, eigenvectors);
    return {eigenvalues, eigenvectors};
  }
  const int64_t n = A.size(-1);
  auto values_sizes = batch_of(A.sizes());
  values_sizes.push_back(n);
  auto w = at::empty(values_sizes, A.options());
  auto a = fortran_copy(A, A.sizes(), A.scalar_type());
  auto info = at::empty(batch_of(A.sizes()), A.options().dtype(at::kInt));
  if (info.numel()) kernels::zero_(info);
  if (A.numel()) {
    const char jobz = compute_v ? 'V' : 'N', uplo = std::toupper(static_cast<unsigned char>(UPLO[0]));
    const int64_t count = batch_count(A);
    AT_DISPATCH_FLOATING_TYPES(A.scalar_type(), "aten::_linalg_eigh", [&] {
      scalar_t* ap = a.data_ptr<scalar_t>();
      scalar_t* wp = w.data_ptr<scalar_t>();
      int* status = info.data_ptr<int>();
      launch_on(A, "aten::_linalg_eigh", [=] {
        scalar_t work_size = 0;
        int iwork_size = 0;
        syevd<scalar_t>(jobz, uplo, n, ap, ld(n), wp, &work_size, -1, &iwork_size, -1, status);
        std::vector<scalar_t> work(std::max<int64_t>(1, static_cast<int64_t>(work_size)));
        std::vector<int> iwork(std::max(1, iwork_size));
        for (int64_t i = 0; i < count; ++i) {
          syevd<scalar_t>(jobz, uplo, n, ap + i * n * n, ld(n), wp + i * n, work.data(), work.size(), iwork.data(),
                          iwork.size(), status + i);
        }
      });
    });
  }
  assign(eigenvalues, w, "linalg.eigh");
  assign(eigenvectors, compute_v ? a : at::empty({0}, A.options()), "linalg.eigh");
  at::_linalg_check_errors(info, "linalg.eigh", A.dim() == 2);
  return {eigenvalues, eigenvectors};
}

}  // namespace rbln::kernels
