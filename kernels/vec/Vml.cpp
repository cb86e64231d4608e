// The MKL VML routines CPU eager runs for float32 tanh, sin, exp, log, ... on
// contiguous data (ATen/cpu/vml.h), called the same way: same results bit for
// bit, same speed. libtorch_cpu carries and exports them where torch was
// built with MKL; elsewhere every op takes the Vectorized loop.
#include <ATen/Config.h>

#include <algorithm>
#include <climits>

#include "kernels/vec/VecKernels.h"

// The ops CPU routes through VML for float (ATen/cpu/vml.h), as (Unary, VML name).
#define RBLN_VML_OPS(X)                                                                                    \
  X(kAcos, Acos) X(kAsin, Asin) X(kAtan, Atan) X(kCos, Cos) X(kErf, Erf) X(kExp, Exp) X(kLog, Ln)          \
  X(kLog10, Log10) X(kLog2, Log2) X(kSin, Sin) X(kSqrt, Sqrt) X(kTan, Tan) X(kTanh, Tanh)

#if AT_MKL_ENABLED()
extern "C" {  // LP64 MKL, as ATen assumes (MKL_INT is int)
#define RBLN_VML_DECLARE(op, name) void vms##name(int n, const float* a, float* r, long long mode);
RBLN_VML_OPS(RBLN_VML_DECLARE)
#undef RBLN_VML_DECLARE
}
#endif

namespace rbln::kernels::vec {

bool vml_f32(Unary op, const float* x, float* y, int64_t n) {
#if AT_MKL_ENABLED()
  using Fn = void (*)(int, const float*, float*, long long);
  Fn fn = nullptr;
  switch (op) {
#define RBLN_VML_CASE(op, name) \
  case Unary::op:               \
    fn = vms##name;             \
    break;
    RBLN_VML_OPS(RBLN_VML_CASE)
#undef RBLN_VML_CASE
    default: return false;
  }
  constexpr long long kMode = 0x2 | 0x140000 | 0x100;  // VML_HA | VML_FTZDAZ_OFF | VML_ERRMODE_IGNORE
  for (int64_t i = 0; i < n; i += INT_MAX) {
    const int64_t m = std::min<int64_t>(INT_MAX, n - i);
    fn(static_cast<int>(m), x + i, y + i, kMode);
  }
  return true;
#else
  (void)op, (void)x, (void)y, (void)n;
  return false;
#endif
}

}  // namespace rbln::kernels::vec
