// The device's matrix engine: the BLAS libtorch carries. Shared by the
// matmul and convolution kernels.
#pragma once

#include <ATen/Config.h>
#include <c10/util/complex.h>

#include <cstdint>
#include <type_traits>

extern "C" void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                       const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
                       const float* beta, float* c, const int* ldc);
extern "C" void dgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                       const double* alpha, const double* a, const int* lda, const double* b, const int* ldb,
                       const double* beta, double* c, const int* ldc);
extern "C" void cgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                       const c10::complex<float>* alpha, const c10::complex<float>* a, const int* lda,
                       const c10::complex<float>* b, const int* ldb, const c10::complex<float>* beta,
                       c10::complex<float>* c, const int* ldc);
extern "C" void zgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                       const c10::complex<double>* alpha, const c10::complex<double>* a, const int* lda,
                       const c10::complex<double>* b, const int* ldb, const c10::complex<double>* beta,
                       c10::complex<double>* c, const int* ldc);

#if AT_MKL_ENABLED()
extern "C" int MKL_Set_Num_Threads_Local(int threads);  // mkl_service.h's C entry; returns the previous setting
#endif

namespace rbln::kernels {

// BLAS on the calling thread alone for a scope: MKL threads even a 256 x 16 matrix-vector product over the
// worker's team, and waking a parked thread costs more than such a product (tens of microseconds).
class SerialBlas {
 public:
#if AT_MKL_ENABLED()
  SerialBlas() : previous_(MKL_Set_Num_Threads_Local(1)) {}
  ~SerialBlas() { MKL_Set_Num_Threads_Local(previous_); }
  SerialBlas(const SerialBlas&) = delete;
  SerialBlas& operator=(const SerialBlas&) = delete;

 private:
  int previous_;
#endif
};


// Row-major C[n, p] = alpha * op(A)[n, k] @ op(B)[k, p] + beta * C, where
// op(X) is X or, when the flag is set, the transpose of the stored X, as a
// plain loop: each dot product summed in order in the compute type C (CPU's
// own loop for integers and for small batched products). beta == 0 ignores C.
template <class T, class C = T>
void gemm_plain(int64_t n, int64_t k, int64_t p, C alpha, const T* a, int64_t lda, bool ta, const T* b, int64_t ldb,
                bool tb, C beta, T* c, int64_t ldc) {
  for (int64_t r = 0; r < n; ++r)
    for (int64_t col = 0; col < p; ++col) {
      C acc = 0;
      for (int64_t j = 0; j < k; ++j) {
        const C av = static_cast<C>(ta ? a[j * lda + r] : a[r * lda + j]);
        acc += av * static_cast<C>(tb ? b[col * ldb + j] : b[j * ldb + col]);
      }
      T& out = c[r * ldc + col];
      out = static_cast<T>(beta == C(0) ? alpha * acc : static_cast<C>(out) * beta + alpha * acc);
    }
}

// The same product on the matrix engine for float, double and their complex
// types (BLAS), the plain loop for integers.
template <class T>
void gemm_rowmajor(int64_t n, int64_t k, int64_t p, T alpha, const T* a, int64_t lda, bool ta, const T* b,
                   int64_t ldb, bool tb, T beta, T* c, int64_t ldc) {
  // Row-major C = A @ B is column-major C^T = B^T @ A^T.
  int m_ = p, n_ = n, k_ = k, lb = ldb, la = lda, lc = ldc;
  char opb = tb ? 't' : 'n', opa = ta ? 't' : 'n';
  if constexpr (std::is_same_v<T, float>) sgemm_(&opb, &opa, &m_, &n_, &k_, &alpha, b, &lb, a, &la, &beta, c, &lc);
  else if constexpr (std::is_same_v<T, double>) dgemm_(&opb, &opa, &m_, &n_, &k_, &alpha, b, &lb, a, &la, &beta, c, &lc);
  else if constexpr (std::is_same_v<T, c10::complex<float>>) cgemm_(&opb, &opa, &m_, &n_, &k_, &alpha, b, &lb, a, &la, &beta, c, &lc);
  else if constexpr (std::is_same_v<T, c10::complex<double>>) zgemm_(&opb, &opa, &m_, &n_, &k_, &alpha, b, &lb, a, &la, &beta, c, &lc);
  else gemm_plain<T>(n, k, p, alpha, a, lda, ta, b, ldb, tb, beta, c, ldc);
}

}  // namespace rbln::kernels
