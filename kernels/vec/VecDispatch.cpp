// Picks the VecKernels.cpp build for the running CPU (see VecKernels.h).
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "kernels/vec/VecKernels.h"

namespace rbln::kernels::vec {
namespace {

int cpu_level() {  // 0 DEFAULT, 1 AVX2, 2 AVX512
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("fma")) {
    return 2;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 1;
#endif
  return 0;
}

int requested_level() {  // ATEN_CPU_CAPABILITY can only lower the choice
  const char* env = std::getenv("ATEN_CPU_CAPABILITY");
  if (!env) return 2;
  if (!std::strcmp(env, "default")) return 0;
  if (!std::strcmp(env, "avx2")) return 1;
  return 2;
}

}  // namespace

const Table& table() {
  static const Table* const chosen = [] {
    int level = std::min(cpu_level(), requested_level());
#ifdef RBLN_HAVE_X86_VEC
    if (level == 2) return AVX512::make_table();
    if (level == 1) return AVX2::make_table();
#endif
    (void)level;
    return DEFAULT::make_table();
  }();
  return *chosen;
}

bool avx512() {
  static const bool chosen = std::strcmp(table().capability, "AVX512") == 0;
  return chosen;
}

}  // namespace rbln::kernels::vec
