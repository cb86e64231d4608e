// The elementwise kernel family. A TensorIterator (built on the host, as CPU
// does, for broadcasting, type promotion, out= and in-place checks) is frozen
// into a small descriptor, and the loop runs later on the device stream.
// Inputs whose dtype differs from the compute dtype are converted while
// loaded; the common case of matching dtypes takes a typed, vectorizable loop.
#pragma once

#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/TensorIterator.h>
#include <ATen/ops/empty.h>
#include <c10/core/DynamicCast.h>
#include <c10/util/FunctionRef.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/common/Common.h"
#include "kernels/elementwise/Functors.h"
#include "kernels/vec/VecKernels.h"

namespace rbln::kernels {

// Dims stored inline in the descriptor; an iterator with more (after
// TensorIterator's coalescing: rare) keeps its shape and strides on the heap.
constexpr int64_t kInlineDims = 6;

template <size_t N>  // N operands, the output first
struct ElementwiseDesc {
  int64_t numel = 0;
  int64_t ndim = 0;
  // shape then the N operands' byte strides, kInlineDims apart; `big` when ndim > kInlineDims.
  std::array<int64_t, kInlineDims * (N + 1)> dims{};
  std::shared_ptr<const std::vector<int64_t>> big;
  std::array<char*, N> data{};
  std::array<at::ScalarType, N> dtypes{};
  std::array<bool, N> is_host_scalar{};
  // CPU 0-dim inputs, by value; aligned for complex<double>, whose loads assume it.
  alignas(16) std::array<std::array<char, 16>, N> host_scalar{};

  const int64_t* shape() const { return big ? big->data() : dims.data(); }
  const int64_t* strides(size_t i) const {
    return big ? big->data() + (i + 1) * ndim : dims.data() + (i + 1) * kInlineDims;
  }
  char* ptr(size_t i) const {
    return is_host_scalar[i] ? const_cast<char*>(host_scalar[i].data()) : data[i];
  }
};

template <size_t N>
ElementwiseDesc<N> describe(const at::TensorIteratorBase& iter) {
  TORCH_INTERNAL_ASSERT(static_cast<size_t>(iter.ntensors()) == N, "expected ", N, " operands");
  ElementwiseDesc<N> d;
  d.numel = iter.numel();
  d.ndim = iter.ndim();
  const int64_t gap = d.ndim > kInlineDims ? d.ndim : kInlineDims;
  std::vector<int64_t> heap;
  int64_t* dims = d.dims.data();
  if (d.ndim > kInlineDims) {
    heap.resize(d.ndim * (N + 1));
    dims = heap.data();
  }
  auto shape = iter.shape();
  std::copy(shape.begin(), shape.end(), dims);
  for (size_t i = 0; i < N; ++i) {
    auto s = iter.strides(i);
    int64_t* st = dims + (i + 1) * gap;
    d.dtypes[i] = iter.dtype(i);
    const auto& t = iter.tensor_base(i);
    if (i >= static_cast<size_t>(iter.noutputs()) && t.is_cpu()) {
      // A CPU scalar operand (e.g. `x + 1`): copy its value now, it may be
      // freed before the kernel runs.
      d.is_host_scalar[i] = true;
      std::memcpy(d.host_scalar[i].data(), t.const_data_ptr(), t.element_size());
      std::fill(st, st + d.ndim, 0);
    } else {
      std::copy(s.begin(), s.end(), st);
      d.data[i] = static_cast<char*>(iter.data_ptr(i));
    }
  }
  if (d.ndim > kInlineDims) d.big = std::make_shared<const std::vector<int64_t>>(std::move(heap));
  return d;
}

// A vectorized loop for contiguous, same-dtype operands of a functor:
// where contiguous_kernel<F, T>::value, run(f, in..., out, n) replaces the scalar loop.
template <class F, class T, class = void>
struct contiguous_kernel {
  static constexpr bool value = false;
};

// Float32 functors with a vector loop in the ISA table (vec::unary_f32,
// vec::binary_f32): kind 1 (unary) or 2 (binary), the table's op, whether
// this instance has one (div's rounding modes do not), and add/sub's alpha.
// Kind 3: operands of mixed dtypes (a bool mask); the specialization's
// run(f, pointers, strides, n, dtypes) returns false where it does not apply.
template <class F>
struct vec_op {
  static constexpr int kind = 0;
};
template <class F>
struct vec_defaults {  // every instance has the loop; alpha 1
  static bool applies(const F&) { return true; }
  static float alpha(const F&) { return 1.f; }
};
template <class F, vec::Unary kOp>
struct vec_unary : vec_defaults<F> {
  static constexpr int kind = 1;
  static constexpr vec::Unary op = kOp;
};
template <class F, vec::Binary kOp>
struct vec_binary : vec_defaults<F> {
  static constexpr int kind = 2;
  static constexpr vec::Binary op = kOp;
};
#define RBLN_VEC_OP(functor, kind, op) \
  template <>                          \
  struct vec_op<functors::functor<float>> : vec_##kind<functors::functor<float>, vec::op> {};
RBLN_VEC_OP(neg, unary, Unary::kNeg)
RBLN_VEC_OP(abs, unary, Unary::kAbs)
RBLN_VEC_OP(relu, unary, Unary::kRelu)
RBLN_VEC_OP(sigmoid, unary, Unary::kSigmoid)
RBLN_VEC_OP(silu, unary, Unary::kSilu)
RBLN_VEC_OP(exp, unary, Unary::kExp)
RBLN_VEC_OP(tanh, unary, Unary::kTanh)
RBLN_VEC_OP(sin, unary, Unary::kSin)
RBLN_VEC_OP(cos, unary, Unary::kCos)
RBLN_VEC_OP(tan, unary, Unary::kTan)
RBLN_VEC_OP(asin, unary, Unary::kAsin)
RBLN_VEC_OP(acos, unary, Unary::kAcos)
RBLN_VEC_OP(atan, unary, Unary::kAtan)
RBLN_VEC_OP(sinh, unary, Unary::kSinh)
RBLN_VEC_OP(cosh, unary, Unary::kCosh)
RBLN_VEC_OP(log, unary, Unary::kLog)
RBLN_VEC_OP(log2, unary, Unary::kLog2)
RBLN_VEC_OP(log10, unary, Unary::kLog10)
RBLN_VEC_OP(log1p, unary, Unary::kLog1p)
RBLN_VEC_OP(exp2, unary, Unary::kExp2)
RBLN_VEC_OP(expm1, unary, Unary::kExpm1)
RBLN_VEC_OP(erf, unary, Unary::kErf)
RBLN_VEC_OP(sqrt, unary, Unary::kSqrt)
RBLN_VEC_OP(rsqrt, unary, Unary::kRsqrt)
RBLN_VEC_OP(reciprocal, unary, Unary::kReciprocal)
template <>
struct vec_op<functors::gelu<float>> : vec_unary<functors::gelu<float>, vec::Unary::kGelu> {
  static bool applies(const functors::gelu<float>& f) { return !f.tanh_approx; }  // the erf form
};
RBLN_VEC_OP(mul, binary, Binary::kMul)
RBLN_VEC_OP(maximum, binary, Binary::kMaximum)
RBLN_VEC_OP(minimum, binary, Binary::kMinimum)
RBLN_VEC_OP(pow, binary, Binary::kPow)
#undef RBLN_VEC_OP
template <>
struct vec_op<functors::add<float>> : vec_binary<functors::add<float>, vec::Binary::kAdd> {
  static float alpha(const functors::add<float>& f) { return f.alpha; }
};
template <>
struct vec_op<functors::sub<float>> : vec_binary<functors::sub<float>, vec::Binary::kSub> {
  static float alpha(const functors::sub<float>& f) { return f.alpha; }
};
template <>
struct vec_op<functors::div<float>> : vec_binary<functors::div<float>, vec::Binary::kDiv> {
  static bool applies(const functors::div<float>& f) { return f.mode == functors::div<float>::kTrue; }
};

// Runs f's vector loop when it has one and the operands fit it: unary ops
// any strides (strided ones through a buffer), binary ops a contiguous output
// and inputs that are contiguous or one broadcast value (stride 0). False
// when the caller must loop itself.
template <class F, size_t N>
bool run_vec_op(const F& f, const std::array<char*, N>& p, const std::array<int64_t, N>& s, int64_t n) {
  using V = vec_op<F>;
  if constexpr ((V::kind != 1 && V::kind != 2) || V::kind != static_cast<int>(N) - 1) {
    return false;
  } else if constexpr (V::kind == 1) {
    if (!V::applies(f)) return false;
    auto unary = [](const float* x, float* y, int64_t m) {
      if (!vec::vml_f32(V::op, x, y, m)) vec::table().unary_f32(V::op, x, y, m);
    };
    if (s[0] == sizeof(float) && s[1] == sizeof(float)) {
      unary(reinterpret_cast<const float*>(p[1]), reinterpret_cast<float*>(p[0]), n);
      return true;
    }
    // strided: through a buffer of contiguous chunks, as CPU's VML loop does
    constexpr int64_t kChunk = 512;
    float in[kChunk], out[kChunk];
    for (int64_t k0 = 0; k0 < n; k0 += kChunk) {
      const int64_t m = std::min(kChunk, n - k0);
      for (int64_t k = 0; k < m; ++k) in[k] = *reinterpret_cast<const float*>(p[1] + (k0 + k) * s[1]);
      unary(in, out, m);
      for (int64_t k = 0; k < m; ++k) *reinterpret_cast<float*>(p[0] + (k0 + k) * s[0]) = out[k];
    }
    return true;
  } else {
    if (!V::applies(f) || s[0] != sizeof(float)) return false;
    int scalar = 0;
    for (size_t i = 1; i < N; ++i) {
      if (s[i] == 0 && V::kind == 2) scalar |= 1 << (i - 1);
      else if (s[i] != sizeof(float)) return false;
    }
    vec::table().binary_f32(V::op, reinterpret_cast<const float*>(p[1]), reinterpret_cast<const float*>(p[2]),
                            reinterpret_cast<float*>(p[0]), n, V::alpha(f), scalar);
    return true;
  }
}

namespace detail {

template <class C, class T>
C load(const char* p) {
  return static_cast<C>(*reinterpret_cast<const T*>(p));
}

// A kernel's loop over one row: the operands' pointers and strides, and the row's length.
template <size_t N>
using RowFn = c10::function_ref<void(const std::array<char*, N>&, const std::array<int64_t, N>&, int64_t)>;

// Runs a kernel's rows over [begin, end) of the flattened iteration space.
template <size_t N>
void for_range(const ElementwiseDesc<N>& d, int64_t begin, int64_t end, RowFn<N> inner) {
  const int64_t ndim = d.ndim;
  const int64_t* shape = d.shape();
  std::array<const int64_t*, N> strides;
  for (size_t i = 0; i < N; ++i) strides[i] = d.strides(i);
  c10::SmallVector<int64_t, kInlineDims> index(std::max<int64_t>(ndim, 1), 0);
  int64_t rem = begin;
  for (int64_t dim = 0; dim < ndim; ++dim) {
    index[dim] = rem % shape[dim];
    rem /= shape[dim];
  }
  std::array<char*, N> base;
  std::array<int64_t, N> inner_stride;
  for (size_t i = 0; i < N; ++i) inner_stride[i] = ndim ? strides[i][0] : 0;
  int64_t pos = begin;
  while (pos < end) {
    for (size_t i = 0; i < N; ++i) {
      base[i] = d.ptr(i);
      for (int64_t dim = 0; dim < ndim; ++dim) base[i] += index[dim] * strides[i][dim];
    }
    int64_t count = std::min(end - pos, ndim ? shape[0] - index[0] : int64_t(1));
    inner(base, inner_stride, count);
    pos += count;
    if (ndim == 0) break;
    index[0] = 0;
    for (int64_t dim = 1; dim < ndim; ++dim) {
      if (++index[dim] < shape[dim]) break;
      index[dim] = 0;
    }
  }
}

// Every row of the iteration space, split over the intra-op threads when it is large: the same code for every
// functor (its rows arrive through a function_ref), so each kernel instantiates only its row loop.
template <size_t N>
void for_rows(const ElementwiseDesc<N>& d, RowFn<N> inner) {
  if (d.numel < kGrainSize) {
    for_range(d, 0, d.numel, inner);
  } else {
    at::parallel_for(0, d.numel, kGrainSize, [&](int64_t b, int64_t e) { for_range(d, b, e, inner); });
  }
}

}  // namespace detail

// The type a functor computes in: its own C (T itself for abs of float8), else T's opmath type.
template <class F, class T, class = void>
struct compute_type {
  using type = at::opmath_type<T>;
};
template <class F, class T>
struct compute_type<F, T, std::void_t<typename F::C>> {
  using type = typename F::C;
};

// Applies f elementwise. T is the compute dtype's C++ type; f receives
// opmath values (float for half/bfloat16) and returns opmath or bool.
template <class T, size_t N, class F, size_t... I>
void run_elementwise(const ElementwiseDesc<N>& d, const F& f, std::index_sequence<I...>) {
  using C = typename compute_type<F, T>::type;
  using R = std::invoke_result_t<F, decltype((void)I, C())...>;
  using Out = std::conditional_t<std::is_same_v<R, C>, T, R>;
  bool typed = d.dtypes[0] == c10::CppTypeToScalarType<Out>::value;
  for (size_t i = 1; i < N; ++i) typed = typed && d.dtypes[i] == c10::CppTypeToScalarType<T>::value;

  auto inner = [&](const std::array<char*, N>& p, const std::array<int64_t, N>& s, int64_t n) {
    if constexpr (vec_op<F>::kind == 3 && std::is_same_v<T, float>) {
      if (vec_op<F>::run(f, p, s, n, d.dtypes)) return;
    }
    if (typed) {
      if constexpr (std::is_same_v<T, float> && std::is_same_v<Out, float>) {
        if (run_vec_op(f, p, s, n)) return;
      }
      bool contiguous = s[0] == sizeof(Out);
      for (size_t i = 1; i < N; ++i) contiguous = contiguous && s[i] == sizeof(T);
      if (contiguous) {
        auto* out = reinterpret_cast<Out*>(p[0]);
        if constexpr (contiguous_kernel<F, T>::value && std::is_same_v<Out, T>) {
          contiguous_kernel<F, T>::run(f, reinterpret_cast<const T*>(p[I + 1])..., out, n);
          return;
        }
        for (int64_t k = 0; k < n; ++k) {
          out[k] = static_cast<Out>(f(static_cast<C>(reinterpret_cast<const T*>(p[I + 1])[k])...));
        }
        return;
      }
      for (int64_t k = 0; k < n; ++k) {
        *reinterpret_cast<Out*>(p[0] + k * s[0]) =
            static_cast<Out>(f(detail::load<C, T>(p[I + 1] + k * s[I + 1])...));
      }
      return;
    }
    // The result rounds to the compute dtype before the cast into another out= dtype, as CPU's
    // TensorIterator computes into a temporary of the compute dtype (half + half into float32 overflows).
    const auto dtypes = d.dtypes;  // a local copy: the stores below could alias d for all the compiler knows
    for (int64_t k = 0; k < n; ++k) {
      c10::cast_and_store<Out>(dtypes[0], p[0] + k * s[0],
                               static_cast<Out>(f(c10::fetch_and_cast<C>(dtypes[I + 1], p[I + 1] + k * s[I + 1])...)));
    }
  };
  detail::for_rows<N>(d, inner);
}

// bfloat16 fmod and remainder split as CPU's vectorized loop (see fmod_bf16).
template <template <class> class F, bool kRemainder>
struct fmod_bf16_kernel {
  static constexpr bool value = true;
  static void run(const F<c10::BFloat16>&, const c10::BFloat16* a, const c10::BFloat16* b, c10::BFloat16* out,
                  int64_t n) {
    vec::table().fmod_bf16(a, b, out, n, kRemainder);
  }
};
template <>
struct contiguous_kernel<functors::fmod<c10::BFloat16>, c10::BFloat16> : fmod_bf16_kernel<functors::fmod, false> {};
template <>
struct contiguous_kernel<functors::remainder<c10::BFloat16>, c10::BFloat16>
    : fmod_bf16_kernel<functors::remainder, true> {};

// Functors whose CPU kernel has a separate loop for a reduced-precision tensor and one broadcast value that
// takes float16/bfloat16 only (F::kReducedFloatScalarKernel names it): a float8 tensor there raises its error.
template <class F, class = void>
struct reduced_float_scalar_kernel : std::false_type {};
template <class F>
struct reduced_float_scalar_kernel<F, std::void_t<decltype(F::kReducedFloatScalarKernel)>> : std::true_type {};

template <class F, class = void>
struct exact_host_scalar : std::false_type {};
template <class F>
struct exact_host_scalar<F, std::void_t<decltype(F::kExactHostScalar)>> : std::bool_constant<F::kExactHostScalar> {};

// Functors whose float16/bfloat16 arithmetic, like CPU's, depends on whether
// the second input is one value broadcast (TensorIterator::is_scalar).
template <class F, class = void>
struct has_scalar_divisor : std::false_type {};
template <class F>
struct has_scalar_divisor<F, std::void_t<decltype(std::declval<F&>().scalar_divisor)>> : std::true_type {};

// Queues f over the iterator on the current stream of the output's device.
template <class T, size_t N, class F>
void launch_elementwise(const at::TensorIteratorBase& iter, const char* name, F f) {
  if constexpr (N == 3 && reduced_float_scalar_kernel<F>::value) {
    constexpr auto dtype = c10::CppTypeToScalarType<T>::value;
    TORCH_CHECK_NOT_IMPLEMENTED(!(at::isFloat8Type(dtype) && iter.is_scalar(2)), '"', F::kReducedFloatScalarKernel,
                                "\" not implemented for '", c10::toString(dtype), "'");
  }
  if (iter.numel() == 0) return;
  auto device = iter.device(0).index();
  auto d = describe<N>(iter);
  if constexpr (N == 3 && has_scalar_divisor<F>::value) f.scalar_divisor = iter.is_scalar(2);
  // Host scalars take the compute dtype, as CPU's type promotion does
  // (`half_tensor + 0.1` adds half(0.1)), except for functors that, like CPU's
  // mul and div, use the scalar's full value (`half_tensor * 1e5` must not
  // overflow): those keep it unless T holds it exactly.
  for (size_t i = 1; i < N; ++i) {
    if (!d.is_host_scalar[i]) continue;
    using C = at::opmath_type<T>;
    auto exact = c10::fetch_and_cast<C>(d.dtypes[i], d.host_scalar[i].data());
    T value = static_cast<T>(exact);
    if (exact_host_scalar<F>::value && static_cast<C>(value) != exact) continue;
    std::memcpy(d.host_scalar[i].data(), &value, sizeof(T));
    d.dtypes[i] = c10::CppTypeToScalarType<T>::value;
  }
  launch(device, name, [d = std::move(d), f]() {
    run_elementwise<T>(d, f, std::make_index_sequence<N - 1>());
  });
}

// When every input is a CPU scalar (torch.add(2., 3., out=x)), the device
// kernel still needs one operand it can run on: the first input moves.
inline at::Tensor on_out_device(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b) {
  if (out.defined() && !out.is_cpu() && a.is_cpu() && b.is_cpu()) return a.to(out.device());
  return a;
}

// Iterator builders, one per family named in ops.yaml. They build exactly the
// iterators CPU builds, so shapes, promotion and errors match CPU.
inline at::TensorIterator unary_iter(at::Tensor& out, const at::Tensor& a) {
  return at::TensorIterator::unary_op(out, a);
}
// As unary, but a complex input gives its real dtype (abs), as CPU's unary_op_impl_with_complex_to_float.
inline at::TensorIterator unary_real_iter(at::Tensor& out, const at::Tensor& a) {
  if (!a.is_complex() || (out.defined() && out.is_complex() && !out.is_same(a))) {
    return at::TensorIterator::unary_op(out, a);
  }
  TORCH_CHECK(!out.is_same(a), "In-place abs is not supported for complex tensors.");
  const auto real = c10::toRealValueType(a.scalar_type());
  if (!out.defined()) out = at::empty({0}, a.options().dtype(real));
  TORCH_CHECK(at::canCast(real, out.scalar_type()), "result type ", real, " can't be cast to the desired output type ",
              out.scalar_type());
  return at::TensorIteratorConfig().set_check_mem_overlap(true).check_all_same_dtype(false).add_output(out)
      .add_const_input(a).build();
}
// CPU's threshold: no overlap check (the op is idempotent, so an output that overlaps itself is fine, as an
// expanded tensor thresholded in place), and an out= of any dtype the result casts to safely.
inline at::TensorIterator threshold_iter(at::Tensor& out, const at::Tensor& a) {
  return at::TensorIteratorConfig().set_check_mem_overlap(false).add_output(out).add_const_input(a)
      .allow_cpu_scalars(true).promote_inputs_to_common_dtype(true).cast_common_dtype_to_outputs(true)
      .enforce_safe_casting_to_output(true).build();
}
inline at::TensorIterator unary_float_iter(at::Tensor& out, const at::Tensor& a) {
  return at::TensorIterator::unary_float_op(out, a);
}
// As unary_float, but a complex input gives its real dtype (angle), as CPU's
// unary_op_impl_with_complex_to_float promoting integers to float.
inline at::TensorIterator unary_float_real_iter(at::Tensor& out, const at::Tensor& a) {
  return a.is_complex() ? unary_real_iter(out, a) : unary_float_iter(out, a);
}
inline at::TensorIterator binary_iter(at::Tensor& out, const at::Tensor& a, const at::Tensor& b) {
  return at::TensorIterator::binary_op(out, on_out_device(out, a, b), b);
}
inline at::TensorIterator binary_float_iter(at::Tensor& out, const at::Tensor& a, const at::Tensor& b) {
  return at::TensorIterator::binary_float_op(out, on_out_device(out, a, b), b);
}
inline at::TensorIterator compare_iter(at::Tensor& out, const at::Tensor& a, const at::Tensor& b) {
  return at::TensorIterator::comparison_op(out, on_out_device(out, a, b), b);
}
inline at::TensorIterator ternary_iter(at::Tensor& out, const at::Tensor& a, const at::Tensor& b,
                                       const at::Tensor& c) {
  return at::TensorIteratorConfig()
      .set_check_mem_overlap(true)
      .allow_cpu_scalars(true)
      .promote_inputs_to_common_dtype(true)
      .cast_common_dtype_to_outputs(true)
      .enforce_safe_casting_to_output(true)
      .add_output(out)
      .add_const_input(a)
      .add_const_input(b)
      .add_const_input(c)
      .build();
}
// Bool result from any input dtype (logical_not).
inline at::TensorIterator logical_iter(at::Tensor& out, const at::Tensor& a) {
  if (!out.defined()) out = at::empty({0}, a.options().dtype(at::kBool));
  return at::TensorIteratorConfig().check_all_same_dtype(false).add_output(out).add_const_input(a).build();
}

}  // namespace rbln::kernels
