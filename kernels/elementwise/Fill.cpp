// Fills and selections: fill_, zero_, index_fill_, masked_fill_, where, and the ranges arange and linspace.
#include <ATen/AccumulateType.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/TensorIterator.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/maximum.h>
#include <ATen/ops/minimum.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <type_traits>

#include "generated/RBLNNativeFunctions.h"
#include "kernels/common/Common.h"
#include "kernels/common/Dispatch.h"
#include "kernels/elementwise/Elementwise.h"
#include "kernels/elementwise/Functors.h"
#include "kernels/vec/VecKernels.h"

namespace rbln::kernels {
namespace {

template <class C>
struct select_value {  // masked_fill: mask ? value : x
  C value;
  C operator()(C x, C mask) const { return mask ? value : x; }
};

template <class C>
struct select {  // where: cond ? a : b
  C operator()(C cond, C a, C b) const { return cond ? a : b; }
};

// float32 values under a bool mask: the vector select (a value of stride 0 is one value).
bool vec_select(const std::array<char*, 4>& p, const std::array<int64_t, 4>& s, int64_t n, int scalar) {
  if (s[0] != sizeof(float) || s[1] != sizeof(bool)) return false;
  for (int i = 2; i < 4; ++i) {
    if (s[i] == 0) scalar |= 1 << (i - 2);
    else if (s[i] != sizeof(float)) return false;
  }
  vec::table().select_f32(reinterpret_cast<const bool*>(p[1]), reinterpret_cast<const float*>(p[2]),
                          reinterpret_cast<const float*>(p[3]), reinterpret_cast<float*>(p[0]), n, scalar);
  return true;
}

}  // namespace

template <>
struct vec_op<select<float>> {  // where: operands (out, cond, a, b)
  static constexpr int kind = 3;
  static bool run(const select<float>&, const std::array<char*, 4>& p, const std::array<int64_t, 4>& s, int64_t n,
                  const std::array<at::ScalarType, 4>& t) {
    const bool floats = t[0] == at::kFloat && t[2] == at::kFloat && t[3] == at::kFloat;
    return floats && t[1] == at::kBool && vec_select(p, s, n, 0);
  }
};
template <>
struct vec_op<select_value<float>> {  // masked_fill_: operands (out, self, mask), the value in the functor
  static constexpr int kind = 3;
  static bool run(const select_value<float>& f, const std::array<char*, 3>& p, const std::array<int64_t, 3>& s,
                  int64_t n, const std::array<at::ScalarType, 3>& t) {
    if (t[0] != at::kFloat || t[1] != at::kFloat || t[2] != at::kBool) return false;
    return vec_select({p[0], p[2], const_cast<char*>(reinterpret_cast<const char*>(&f.value)), p[1]},
                      {s[0], s[2], 0, s[1]}, n, 0);
  }
};

namespace {

at::Scalar scalar_of(const at::Tensor& value, const char* op) {
  TORCH_CHECK(value.dim() == 0, op, " only supports a 0-dimensional value tensor, but got tensor with ",
              value.dim(), " dimension(s).");
  return value.item();
}

}  // namespace

at::Tensor& fill_Scalar(at::Tensor& self, const at::Scalar& value) {
  // CPU's checked conversion: a value the dtype cannot hold (1e6 in float16 or float8, 300 in int8) raises.
  RBLN_DISPATCH_ALL_AND_COMPLEX32_AND_FLOAT8(self.scalar_type(), "fill_", [&] { (void)value.to<scalar_t>(); });
  if (self.is_non_overlapping_and_dense() && self.numel() > 0) {
    // Dense memory (any strides, no gaps): fill the storage range directly, as
    // CPU's fill_ does for its fast cases, with no TensorIterator.
    RBLN_DISPATCH_ALL_AND_COMPLEX32_AND_FLOAT8(self.scalar_type(), "fill_", [&] {
      const auto v = static_cast<scalar_t>(functors::fill<scalar_t>(value)());
      auto* p = self.data_ptr<scalar_t>();
      const int64_t n = self.numel();
      launch_on(self, "aten::fill_", [p, n, v] {
        if (n < kGrainSize) {
          std::fill_n(p, n, v);
          return;
        }
        at::parallel_for(0, n, kGrainSize, [&](int64_t b, int64_t e) { std::fill_n(p + b, e - b, v); });
      });
    });
    return self;
  }
  auto iter = at::TensorIteratorConfig()
                  .set_check_mem_overlap(false)
                  .check_all_same_dtype(false)
                  .add_output(self)
                  .resize_outputs(false)
                  .build();
  RBLN_DISPATCH_ALL_AND_COMPLEX32_AND_FLOAT8(self.scalar_type(), "fill_", [&] {
    launch_elementwise<scalar_t, 1>(iter, "aten::fill_", functors::fill<scalar_t>(value));
  });
  return self;
}

// A CPU `self` lands here when only `value` is on the device: fill on the CPU.
at::Tensor& fill_Tensor(at::Tensor& self, const at::Tensor& value) {
  auto v = scalar_of(value, "fill_");
  return self.is_cpu() ? self.fill_(v) : fill_Scalar(self, v);
}

at::Tensor& zero_(at::Tensor& self) { return fill_Scalar(self, 0); }

// Fills the slices self.select(dim, i) for each i in index (negative i counts
// from the end); the indices are checked on the device, as CPU checks them.
at::Tensor& index_fill_int_Scalar(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Scalar& value) {
  // CPU's checks, in CPU's order and exception types.
  TORCH_CHECK_INDEX(index.scalar_type() == at::kLong, "index_fill_(): Expected dtype int64 for index.");
  check_same_device({&self, &index});
  at::assert_no_overlap(self, index);
  dim = at::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
  TORCH_CHECK(index.dim() <= 1, "Index has to be a vector/scalar");
  const int64_t n = index.numel();
  if (n == 0 || self.numel() == 0) return self;
  const int64_t dim_size = self.dim() == 0 ? 1 : self.size(dim);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= self.size(d);
  for (int64_t d = dim + 1; d < self.dim(); ++d) inner *= self.size(d);
  auto idx = contiguous(index);
  write_contiguous(self, [&](const at::Tensor& target) {
    if (!target.is_same(self)) device_copy(target, self);
    RBLN_DISPATCH_ALL(self.scalar_type(), "index_fill_", [&] {
      const auto v = static_cast<scalar_t>(functors::fill<scalar_t>(value)());
      auto* p = target.data_ptr<scalar_t>();
      const auto* ip = idx.const_data_ptr<int64_t>();
      launch_on(target, "aten::index_fill_", [=] {
        for (int64_t i = 0; i < n; ++i) {
          if (ip[i] < -dim_size || ip[i] >= dim_size) throw std::out_of_range(index_out_of_bounds(ip[i], dim, dim_size));
        }
        for (int64_t o = 0; o < outer; ++o) {
          for (int64_t i = 0; i < n; ++i) {
            const int64_t k = ip[i] < 0 ? ip[i] + dim_size : ip[i];
            std::fill_n(p + (o * dim_size + k) * inner, inner, v);
          }
        }
      });
    });
  });
  return self;
}

at::Tensor& index_fill_int_Tensor(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& value) {
  return index_fill_int_Scalar(self, dim, index, scalar_of(value, "index_fill_"));
}

// Zeros with ones on the main diagonal, written through a strided view of it.
at::Tensor& eye_m_out(c10::SymInt n_, c10::SymInt m_, at::Tensor& out) {
  const int64_t n = n_.expect_int(), m = m_.expect_int();
  TORCH_CHECK(n >= 0, "n must be greater or equal to 0, got ", n);
  TORCH_CHECK(m >= 0, "m must be greater or equal to 0, got ", m);
  at::native::resize_output(out, {n, m});
  fill_Scalar(out, 0);
  if (n > 0 && m > 0) {
    auto diagonal = out.as_strided({std::min(n, m)}, {out.stride(0) + out.stride(1)}, out.storage_offset());
    fill_Scalar(diagonal, 1);
  }
  return out;
}
at::Tensor& eye_out(c10::SymInt n, at::Tensor& out) { return eye_m_out(n, n, out); }

at::Tensor& masked_fill_Scalar(at::Tensor& self, const at::Tensor& mask, const at::Scalar& value) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_fill_ only supports boolean masks, but got mask with dtype ",
              mask.scalar_type());
  check_same_device({&self, &mask});
  auto iter = at::TensorIteratorConfig()
                  .set_check_mem_overlap(false)
                  .check_all_same_dtype(false)
                  .resize_outputs(false)
                  .add_output(self)
                  .add_const_input(self)
                  .add_const_input(mask)
                  .build();
  RBLN_DISPATCH_ALL_AND_COMPLEX(self.scalar_type(), "masked_fill_", [&] {
    using C = at::opmath_type<scalar_t>;
    launch_elementwise<scalar_t, 3>(iter, "aten::masked_fill_", select_value<C>{value.to<C>()});
  });
  return self;
}

at::Tensor& masked_fill_Tensor(at::Tensor& self, const at::Tensor& mask, const at::Tensor& value) {
  auto v = scalar_of(value, "masked_fill_");
  return self.is_cpu() ? self.masked_fill_(mask, v) : masked_fill_Scalar(self, mask, v);
}

at::Tensor& where_self_out(const at::Tensor& condition, const at::Tensor& self, const at::Tensor& other,
                           at::Tensor& out) {
  auto dtype = at::native::result_type(self, other);
  auto device = condition.device().type() == kRBLN ? condition.device()
                : self.device().type() == kRBLN  ? self.device()
                                                 : other.device();
  // 0-dim CPU operands (Python scalars) move to the device, as on CUDA.
  auto prepare = [&](const at::Tensor& t, at::ScalarType type) {
    auto moved = (t.dim() == 0 && t.is_cpu()) ? t.to(device) : t;
    return moved.scalar_type() == type ? moved : moved.to(type);
  };
  TORCH_CHECK(!out.defined() || out.scalar_type() == dtype, "Expected out type to be ", dtype, " but got ",
              out.scalar_type());
  TORCH_CHECK(condition.scalar_type() == at::kBool || condition.scalar_type() == at::kByte,
              "where expected condition to be a boolean tensor, but got a tensor with dtype ",
              condition.scalar_type());
  auto cond = prepare(condition, at::kBool);
  auto a = prepare(self, dtype);
  auto b = prepare(other, dtype);
  check_same_device({&cond, &a, &b});
  // The functional's result, on `device` (the first device tensor's, as CUDA's out_device): the iterator sizes it.
  if (!out.defined()) out = at::empty({0}, a.options());
  auto iter = at::TensorIteratorConfig()
                  .check_all_same_dtype(false)
                  .add_output(out)
                  .add_const_input(cond)
                  .add_const_input(a)
                  .add_const_input(b)
                  .build();
  RBLN_DISPATCH_ALL_AND_COMPLEX32_AND_FLOAT8(dtype, "where", [&] {
    launch_elementwise<scalar_t, 4>(iter, "aten::where.self", select<at::opmath_type<scalar_t>>());
  });
  return out;
}

at::Tensor& arange_start_out(const at::Scalar& start, const at::Scalar& end, const at::Scalar& step,
                             at::Tensor& out) {
  RBLN_DISPATCH_NUMERIC(out.scalar_type(), "arange", [&] {
    // CPU's arithmetic exactly: accumulate type values, its size formula per dtype.
    using acc_t = at::acc_type<scalar_t, false>;
    auto xstart = start.to<acc_t>(), xend = end.to<acc_t>(), xstep = step.to<acc_t>();
    TORCH_CHECK(!step.equal(0), "step must be nonzero");
    // A step that is nonzero but truncates to zero in the result's type: CPU's ValueError.
    TORCH_CHECK_VALUE(xstep > 0 || xstep < 0, "step must be nonzero");
    TORCH_CHECK(std::isfinite(static_cast<double>(xstart)) && std::isfinite(static_cast<double>(xend)),
                "unsupported range: ", xstart, " -> ", xend);
    TORCH_CHECK((xstep > 0 && xend >= xstart) || (xstep < 0 && xend <= xstart),
                "upper bound and lower bound inconsistent with step sign");
    double size_d;
    if constexpr (std::is_same_v<scalar_t, int64_t>) {
      int64_t sgn = (xstep > 0) - (xstep < 0);
      size_d = std::ceil((xend - xstart + xstep - sgn) / xstep);
    } else {
      size_d = std::ceil(static_cast<double>(end.to<double>() - start.to<double>()) / step.to<double>());
    }
    TORCH_CHECK(size_d >= 0 && size_d <= static_cast<double>(std::numeric_limits<int64_t>::max()),
                "invalid size, possible overflow?");
    auto size = static_cast<int64_t>(size_d);
    if (out.numel() != size) out.resize_({size});
    write_contiguous(out, [&](const at::Tensor& target) {
      auto* data = target.data_ptr<scalar_t>();
      launch_on(target, "aten::arange.start_out", [=] {
        at::parallel_for(0, size, kGrainSize, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) data[i] = static_cast<scalar_t>(xstart + static_cast<acc_t>(i) * xstep);
        });
      });
    });
  });
  return out;
}

// clamp with Scalar bounds: an integer input takes part in type promotion
// with float bounds (CPU's clamp meta), then the unary clamp functor runs.
at::Tensor& clamp_out(const at::Tensor& self, const std::optional<at::Scalar>& min,
                      const std::optional<at::Scalar>& max, at::Tensor& out) {
  auto type = self.scalar_type();
  if (!at::isFloatingType(type)) {
    at::native::ResultTypeState state = {};
    state = at::native::update_result_type_state(self, state);
    if (min) state = at::native::update_result_type_state(*min, state);
    if (max) state = at::native::update_result_type_state(*max, state);
    type = at::native::result_type(state);
    TORCH_CHECK(type == self.scalar_type() || !out.defined() || !out.is_same(self), "result type ", type,
                " can't be cast to the desired output type ", self.scalar_type());
  }
  auto input = self.scalar_type() == type ? self : self.to(type);
  auto iter = unary_iter(out, input);
  RBLN_DISPATCH_ALL(iter.common_dtype(), "clamp", [&] {
    launch_elementwise<scalar_t, 2>(iter, "aten::clamp", functors::clamp<scalar_t>(min, max));
  });
  if (!out.defined()) out = iter.output();
  return out;
}

at::Tensor& clamp_Tensor_out(const at::Tensor& self, const std::optional<at::Tensor>& min,
                             const std::optional<at::Tensor>& max, at::Tensor& out) {
  TORCH_CHECK(min || max, "torch.clamp: At least one of 'min' or 'max' must not be None");
  // clamp(x, lo, hi) = minimum(maximum(x, lo), hi): both propagate NaN, as CPU's clamp does. The three promote
  // together first, as in CPU's one iterator (a 0-dim int64 bound of a uint8 tensor does not wrap when the
  // other bound is float).
  std::vector<at::Tensor> operands{self};
  for (const auto* bound : {&min, &max}) {
    if (*bound) operands.push_back(**bound);
  }
  const auto type = at::native::result_type(operands);
  const auto as_type = [type](const at::Tensor& t) { return t.scalar_type() == type ? t : t.to(type); };
  at::Tensor result = as_type(self);
  if (min) result = at::maximum(result, as_type(*min));
  if (max) result = at::minimum(result, as_type(*max));
  if (!out.defined()) return out = result;  // the functional: the promoted result itself
  // As CPU's TensorIterator: the result casts into out's dtype.
  TORCH_CHECK(c10::canCast(result.scalar_type(), out.scalar_type()), "result type ", result.scalar_type(),
              " can't be cast to the desired output type ", out.scalar_type());
  if (!out.is_same(self)) prepare_out(out, result.sizes(), result.scalar_type(), self, "clamp", /*castable=*/true);
  device_copy(out, result);
  return out;
}

at::Tensor& linspace_out(const at::Scalar& start, const at::Scalar& end, int64_t steps, at::Tensor& out) {
  TORCH_CHECK(steps >= 0, "number of steps must be non-negative");
  if (out.numel() != steps) out.resize_({steps});
  if (steps == 0) return out;
  write_contiguous(out, [&](const at::Tensor& target) {
    RBLN_DISPATCH_NUMERIC(out.scalar_type(), "linspace", [&] {
      // CPU's formula and types: endpoints in the dtype, step from both ends.
      using step_t = std::conditional_t<std::is_integral_v<scalar_t>, double, scalar_t>;
      const scalar_t a = start.to<scalar_t>(), z = end.to<scalar_t>();
      const step_t step = steps > 1 ? (static_cast<step_t>(z) - static_cast<step_t>(a)) / static_cast<step_t>(steps - 1)
                                    : step_t(0);
      int64_t halfway = steps == 1 ? 1 : steps / 2;  // one step is `start`, as on CPU
      auto* yp = target.data_ptr<scalar_t>();
      launch_on(target, "aten::linspace", [=] {
        for (int64_t i = 0; i < steps; ++i) {
          yp[i] = static_cast<scalar_t>(i < halfway ? a + step * static_cast<step_t>(i)
                                                    : z - step * static_cast<step_t>(steps - i - 1));
        }
      });
    });
  });
  return out;
}

// CPU's tril_indices and triu_indices (TensorFactories.cpp): the row indices, then the column indices, of the
// n positions of the lower (upper) triangle, walked row by row: `next(r, c)` steps from one position to the next.
template <class Next>
at::Tensor triangle_indices(int64_t n, int64_t r, int64_t c, std::optional<at::ScalarType> dtype,
                            std::optional<at::Device> device, const char* op, const char* launch_name, Next next) {
  const auto type = dtype.value_or(at::kLong);
  TORCH_CHECK_NOT_IMPLEMENTED(type == at::kInt || type == at::kLong, "\"", op, "\" not implemented for '",
                              c10::toString(type), "'");  // CPU's index types only
  auto out = at::empty({2, n}, at::TensorOptions().dtype(type).device(device));
  if (n == 0) return out;
  AT_DISPATCH_INDEX_TYPES(type, "triangle_indices", [&] {
    auto* p = out.data_ptr<index_t>();
    launch_on(out, launch_name, [=]() mutable {
      for (int64_t i = 0; i < n; ++i) {
        p[i] = static_cast<index_t>(r);
        p[n + i] = static_cast<index_t>(c);
        next(r, c);
      }
    });
  });
  return out;
}

at::Tensor tril_indices(int64_t row, int64_t col, int64_t offset, std::optional<at::ScalarType> dtype,
                        std::optional<at::Layout> layout, std::optional<at::Device> device,
                        std::optional<bool> pin_memory) {
  at::native::check_args(row, col, layout);
  return triangle_indices(at::native::get_tril_size(row, col, offset), std::max<int64_t>(0, -offset), 0, dtype,
                          device, "tril_indices", "aten::tril_indices", [=](int64_t& r, int64_t& c) {
                            if (++c > r + offset || c >= col) ++r, c = 0;
                          });
}
at::Tensor triu_indices(int64_t row, int64_t col, int64_t offset, std::optional<at::ScalarType> dtype,
                        std::optional<at::Layout> layout, std::optional<at::Device> device,
                        std::optional<bool> pin_memory) {
  at::native::check_args(row, col, layout);
  return triangle_indices(row * col - at::native::get_tril_size(row, col, offset - 1), 0,
                          std::max<int64_t>(0, offset), dtype, device, "triu_indices", "aten::triu_indices",
                          [=](int64_t& r, int64_t& c) {
                            if (++c >= col) ++r, c = std::max<int64_t>(0, r + offset);
                          });
}

}  // namespace rbln::kernels
