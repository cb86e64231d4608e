// The dtype dispatch of the kernels that move values without arithmetic of their own (the copy, fills,
// selections, any/all, index_put): Common.h's dtypes, the float8 ones and the bare unsigned ones, which CPU moves
// the same way.
#pragma once

#include <ATen/Dispatch_v2.h>

#define RBLN_DISPATCH_ALL_AND_COMPLEX32_AND_FLOAT8(TYPE, NAME, ...)                                        \
  AT_DISPATCH_V2(TYPE, NAME, AT_WRAP(__VA_ARGS__), AT_EXPAND(AT_ALL_TYPES_AND_COMPLEX), at::kHalf,        \
                 at::kBFloat16, at::kBool, at::kComplexHalf, AT_EXPAND(AT_FLOAT8_TYPES),                     \
                 AT_EXPAND(AT_BAREBONES_UNSIGNED_TYPES))
