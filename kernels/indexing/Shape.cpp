// Layout kernels: cat, flip, roll, the triangular masks tril/triu,
// channel_shuffle, and unfold's backward.
#include <ATen/WrapDimUtils.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>

#include <bitset>
#include <cstring>
#include <vector>

#include "generated/RBLNNativeFunctions.h"
#include "kernels/common/Common.h"
#include "kernels/common/Positions.h"

namespace rbln::kernels {
namespace {

// out <- self, then the elements outside the triangle (keep(row, col) false) set to zero.
template <class Keep>
at::Tensor& triangle_out(const at::Tensor& self, at::Tensor& out, Keep keep, const char* op, const char* name) {
  TORCH_CHECK(self.dim() >= 2, op, ": input tensor must have at least 2 dimensions");
  prepare_out(out, self.sizes(), self.scalar_type(), self, op);
  if (out.numel() == 0) return out;
  if (out.is_same(self) && !out.is_contiguous()) {
    // In place, as CPU's tril_/triu_: only the zeros are written, through self's strides, so an expanded
    // self (rows sharing memory) is taken and gives CPU's result.
    const Geometry g(out);
    const int64_t size = out.element_size();
    char* p = static_cast<char*>(out.data_ptr());
    launch_on(out, name, [=] {
      for_each_position(g.sizes, [&](const std::vector<int64_t>& m) {
        const int64_t i = m[m.size() - 2], j = m.back();
        if (keep(i, j)) return;
        int64_t offset = 0;
        for (size_t d = 0; d < m.size(); ++d) offset += m[d] * g.strides[d];
        std::memset(p + offset * size, 0, size);
      });
    });
    return out;
  }
  auto work = out.is_contiguous() ? out : at::empty(out.sizes(), out.options());
  if (!work.is_same(self)) device_copy(work, self);
  const int64_t rows = self.size(-2), cols = self.size(-1), mats = self.numel() / (rows * cols);
  const int64_t size = self.element_size();
  char* p = static_cast<char*>(work.data_ptr());
  launch_on(work, name, [=] {
    for (int64_t m = 0; m < mats; ++m)
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j)
          if (!keep(i, j)) std::memset(p + ((m * rows + i) * cols + j) * size, 0, size);
  });
  if (!work.is_same(out)) device_copy(out, work);
  return out;
}

at::Tensor roll_one(const at::Tensor& self, int64_t shift, int64_t dim) {
  const int64_t n = self.size(dim);
  const int64_t s = n == 0 ? 0 : ((shift % n) + n) % n;
  if (s == 0) {
    auto out = at::empty(self.sizes(), self.options());
    device_copy(out, self);
    return out;
  }
  return at::cat({self.narrow(dim, n - s, s), self.narrow(dim, 0, n - s)}, dim);
}

}  // namespace

at::Tensor& tril_out(const at::Tensor& self, c10::SymInt diagonal, at::Tensor& out) {
  return triangle_out(self, out, [diagonal = diagonal.expect_int()](int64_t i, int64_t j) { return j - i <= diagonal; }, "tril", "aten::tril");
}
at::Tensor& triu_out(const at::Tensor& self, c10::SymInt diagonal, at::Tensor& out) {
  return triangle_out(self, out, [diagonal = diagonal.expect_int()](int64_t i, int64_t j) { return j - i >= diagonal; }, "triu", "aten::triu");
}

at::Tensor flip(const at::Tensor& self, at::IntArrayRef dims) {
  TORCH_CHECK(self.dim() <= 64, "only tensors with up to 64 dims are supported");
  std::bitset<64> flipped;
  for (auto d : dims) {
    const auto w = at::maybe_wrap_dim(d, self.dim());
    TORCH_CHECK(!flipped[w], "dims has duplicates, original flip dims size=", dims.size(),
                ", but unique flip dims size=", flipped.count() + 1);
    flipped.set(w);
  }
  auto out = at::empty(self.sizes(), self.options());
  if (out.numel() == 0) return out;
  const Geometry g(self);
  const char* src = static_cast<const char*>(self.const_data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  const int64_t size = self.element_size();
  launch_on(out, "aten::flip", [=] {
    int64_t n = 0;
    for_each_position(g.sizes, [&](const std::vector<int64_t>& m) {
      int64_t off = 0;
      for (size_t d = 0; d < m.size(); ++d) off += (flipped[d] ? g.sizes[d] - 1 - m[d] : m[d]) * g.strides[d];
      std::memcpy(dst + (n++) * size, src + off * size, size);
    });
  });
  return out;
}

at::Tensor roll(const at::Tensor& self, c10::SymIntArrayRef shifts, at::IntArrayRef dims) {
  auto sh = C10_AS_INTARRAYREF_SLOW(shifts);
  TORCH_CHECK(!sh.empty(), "`shifts` required");
  if (dims.empty()) {
    TORCH_CHECK(sh.size() == 1, "shifts and dimensions must align. shifts: ", sh.size(), ", dims:", dims.size());
    return roll_one(self.reshape({-1}), sh[0], 0).view(self.sizes());
  }
  TORCH_CHECK(sh.size() == dims.size(), "shifts and dimensions must align. shifts: ", sh.size(), ", dims:",
              dims.size());
  if (self.numel() == 0) return self.clone();  // before the dims are wrapped, as CPU's roll returns
  at::Tensor out = self;
  for (size_t i = 0; i < dims.size(); ++i) out = roll_one(out, sh[i], at::maybe_wrap_dim(dims[i], self.dim()));
  return out;
}

// CPU's narrow_copy checks, which differ from narrow's: a positive dim out of range is a RuntimeError.
at::Tensor narrow_copy(const at::Tensor& self, int64_t dim, c10::SymInt start_, c10::SymInt length_) {
  TORCH_CHECK(self.dim() > 0, "narrow() cannot be applied to a 0-dim tensor.");
  const auto self_sizes = self.sizes();
  if (dim < 0) {
    dim = at::maybe_wrap_dim(dim, self.dim());
  } else {
    TORCH_CHECK(dim < static_cast<int64_t>(self_sizes.size()));
  }
  int64_t start = start_.expect_int();
  const int64_t length = length_.expect_int(), size = self_sizes[dim];
  TORCH_CHECK_INDEX(start >= -size && start <= size, "start out of range (expected to be in range of [", -size, ", ",
                    size, "], but got ", start, ")");
  if (start < 0) start += size;
  TORCH_CHECK(length >= 0 && start <= size - length, "start (", start, ") + length (", length,
              ") exceeds dimension size (", size, ").");
  return self.narrow(dim, start, length).clone(at::MemoryFormat::Contiguous);
}

at::Tensor channel_shuffle(const at::Tensor& self, c10::SymInt groups_) {
  const int64_t groups = groups_.expect_int();
  TORCH_CHECK(self.dim() > 2, "channel_shuffle expects input to have at least 3 dimensions, but got input with sizes ",
              self.sizes());
  TORCH_CHECK(groups > 0, "Number of groups to divide channels in must be positive. Value of groups:", groups);
  const int64_t c = self.size(1);
  TORCH_CHECK(c % groups == 0, "Number of channels must be divisible by groups. Got ", c, " channels and ", groups,
              " groups.");
  auto grouped = self.reshape({self.size(0), groups, c / groups, -1}).transpose(1, 2);
  return contiguous(grouped).view(self.sizes());
}

// grad[.., w * step + k, ..] += grad_in[.., w, .., k] over windows w in order, in opmath.
at::Tensor unfold_backward(const at::Tensor& grad_in, c10::SymIntArrayRef input_sizes_, int64_t dim, int64_t size,
                           int64_t step) {
  auto input_sizes = C10_AS_INTARRAYREF_SLOW(input_sizes_);
  dim = at::maybe_wrap_dim(dim, std::max<int64_t>(static_cast<int64_t>(input_sizes.size()), 1));
  auto grad = at::empty(input_sizes, grad_in.options());
  if (grad.numel() == 0) return grad;
  const int64_t len = input_sizes.empty() ? 1 : input_sizes[dim];
  const int64_t windows = grad_in.dim() > 0 && !input_sizes.empty() ? grad_in.size(dim) : 1;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= input_sizes[d];
  for (int64_t d = dim + 1; d < static_cast<int64_t>(input_sizes.size()); ++d) inner *= input_sizes[d];
  TORCH_CHECK(grad_in.numel() == outer * windows * inner * size, "unfold_backward: grad_in ", grad_in.sizes(),
              " does not match input ", input_sizes, " unfolded with size ", size, " and step ", step);
  auto gin = contiguous(grad_in);  // [outer, windows, inner, size]
  RBLN_DISPATCH_NUMERIC(grad_in.scalar_type(), "unfold_backward", [&] {
    using opmath = at::opmath_type<scalar_t>;
    const auto* gp = gin.const_data_ptr<scalar_t>();
    auto* out = grad.data_ptr<scalar_t>();
    launch_on(grad, "aten::unfold_backward", [=] {
      at::parallel_for(0, outer, 1, [&](int64_t lo, int64_t hi) {
        std::vector<opmath> acc(len * inner);
        for (int64_t o = lo; o < hi; ++o) {
          std::fill(acc.begin(), acc.end(), opmath(0));
          for (int64_t w = 0; w < windows; ++w)
            for (int64_t i = 0; i < inner; ++i)
              for (int64_t k = 0; k < size; ++k)
                acc[(w * step + k) * inner + i] += static_cast<opmath>(gp[((o * windows + w) * inner + i) * size + k]);
          for (int64_t j = 0; j < len * inner; ++j) out[o * len * inner + j] = static_cast<scalar_t>(acc[j]);
        }
      });
    });
  });
  return grad;
}

// 1-d empty tensors are skipped by cat, as on CPU (legacy behaviour).
static bool cat_skips(const at::Tensor& t) { return t.dim() == 1 && t.numel() == 0; }

// cat of contiguous inputs of out's dtype into a contiguous out: one launch
// copying each input's block of every outer row (no per-input views or launches).
template <class Inputs>
static bool cat_contiguous(const Inputs& inputs, int64_t dim,
                           const at::Tensor& out) {
  if (!out.is_contiguous() || out.numel() == 0) return false;
  for (const at::Tensor& t : inputs) {
    if (cat_skips(t)) continue;
    if (!t.is_contiguous() || t.scalar_type() != out.scalar_type() || t.device() != out.device()) return false;
    if (t.data_ptr() == out.data_ptr()) return false;  // overlap: let the general path raise or cope
  }
  int64_t outer = 1, inner = out.element_size();
  for (int64_t d = 0; d < dim; ++d) outer *= out.size(d);
  for (int64_t d = dim + 1; d < out.dim(); ++d) inner *= out.size(d);
  c10::SmallVector<std::pair<const char*, int64_t>, 4> blocks;  // source, bytes per outer row
  for (const at::Tensor& t : inputs) {
    if (cat_skips(t)) continue;
    if (t.numel() > 0) blocks.emplace_back(static_cast<const char*>(t.const_data_ptr()), t.size(dim) * inner);
  }
  auto* dst = static_cast<char*>(out.data_ptr());
  const int64_t row = out.size(dim) * inner;
  launch_on(out, "aten::cat", [blocks = std::move(blocks), dst, outer, row] {
    for (int64_t o = 0; o < outer; ++o) {
      char* d = dst + o * row;
      for (const auto& [src, bytes] : blocks) {
        std::memcpy(d, src + o * bytes, bytes);
        d += bytes;
      }
    }
  });
  return true;
}

namespace {

// What cat checks and computes before writing: the first joined input (null
// when every input is skipped), the wrapped dim, the output's sizes and dtype.
struct CatPlan {
  const at::Tensor* ref = nullptr;
  int64_t dim = 0;
  std::vector<int64_t> sizes{0};
  at::ScalarType dtype;
};

CatPlan plan_cat(const at::ITensorListRef& tensors, const at::MaterializedITensorListRef& inputs, int64_t dim) {
  TORCH_CHECK(!inputs.empty(), "torch.cat(): expected a non-empty list of Tensors");
  CatPlan plan;
  plan.dtype = at::native::result_type(tensors);
  for (const at::Tensor& t : inputs) {
    if (!cat_skips(t)) {
      plan.ref = &t;
      break;
    }
  }
  if (!plan.ref) return plan;
  const at::Tensor& ref = *plan.ref;
  TORCH_CHECK(ref.dim() > 0, "zero-dimensional tensor (at position 0) cannot be concatenated");
  plan.dim = at::maybe_wrap_dim(dim, ref.dim());
  plan.sizes = ref.sizes().vec();
  plan.sizes[plan.dim] = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& t = inputs[i];
    if (cat_skips(t)) continue;
    check_same_device({&ref, &t});
    TORCH_CHECK(t.dim() == ref.dim(), "Tensors must have same number of dimensions: got ", ref.dim(), " and ",
                t.dim());
    for (int64_t d = 0; d < t.dim(); ++d) {
      TORCH_CHECK(d == plan.dim || t.size(d) == ref.size(d), "Sizes of tensors must match except in dimension ",
                  plan.dim, ". Expected size ", ref.size(d), " but got size ", t.size(d), " for tensor number ", i,
                  " in the list.");
    }
    plan.sizes[plan.dim] += t.size(plan.dim);
  }
  return plan;
}

void fill_cat(const at::MaterializedITensorListRef& inputs, const CatPlan& plan, at::Tensor& out) {
  if (!plan.ref || cat_contiguous(inputs, plan.dim, out)) return;
  int64_t offset = 0;
  for (const at::Tensor& t : inputs) {
    if (cat_skips(t)) continue;
    device_copy(out.narrow(plan.dim, offset, t.size(plan.dim)), t);
    offset += t.size(plan.dim);
  }
}

}  // namespace

at::Tensor& cat_out(const at::ITensorListRef& tensors, int64_t dim, at::Tensor& out) {
  auto inputs = tensors.materialize();
  const CatPlan plan = plan_cat(tensors, inputs, dim);
  for (const at::Tensor& t : inputs) check_no_overlap(out, {&t});
  // As CPU: the inputs' result type casts into out's dtype.
  TORCH_CHECK_TYPE(!out.defined() || at::canCast(plan.dtype, out.scalar_type()),
                   "torch.cat(): input types can't be cast to the desired output type ", out.scalar_type());
  prepare_out(out, plan.sizes, plan.dtype, plan.ref ? *plan.ref : inputs[0].get(), "cat", /*castable=*/true);
  fill_cat(inputs, plan, out);
  return out;
}

}  // namespace rbln::kernels
