// Indexing by index tensors: gather and the scatter family along one dim,
// index_add, advanced indexing (index, index_put_), nonzero and isin.
//
// Every kernel walks the positions of one tensor (the index, or the source)
// and maps each to an offset in another by replacing one coordinate with an
// index value. Writes into the destination run serially in that order, so
// accumulations are deterministic.
#include <ATen/MemoryOverlap.h>
#include <ATen/ExpandUtils.h>
#include <ATen/NumericUtils.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/ne.h>
#include <ATen/native/Resize.h>

#include <sstream>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "generated/RBLNNativeFunctions.h"
#include "kernels/common/Common.h"
#include "kernels/common/Dispatch.h"
#include "kernels/common/Positions.h"
#include "runtime/observability/RBLNObserve.h"

namespace rbln::kernels {
namespace {

int64_t offset_of(const std::vector<int64_t>& m, const std::vector<int64_t>& strides, int64_t dim, int64_t at) {
  int64_t off = 0;
  for (size_t d = 0; d < m.size(); ++d) off += (static_cast<int64_t>(d) == dim ? at : m[d]) * strides[d];
  return off;
}

// Runs on the stream (`wrap`: negative indices count from the end). An index out of range raises what CPU
// raises: IndexError for advanced indexing and index_add (`index_error`: std::out_of_range, the driver's index
// error), RuntimeError for gather and scatter.
int64_t checked_index(int64_t i, int64_t size, int64_t dim, bool wrap, bool index_error) {
  if (wrap && i < 0) i += size;
  if (i >= 0 && i < size) return i;
  if (index_error) throw std::out_of_range(index_out_of_bounds(i, dim, size));
  throw std::runtime_error(index_out_of_bounds(i, dim, size));
}

// A contiguous int64 copy of an int32/int64 index (an empty index may have any dtype, as on CPU).
at::Tensor long_index(const at::Tensor& index, const char* op) {
  if (index.numel() == 0) return at::empty(index.sizes(), index.options().dtype(at::kLong));
  TORCH_CHECK(index.scalar_type() == at::kLong || index.scalar_type() == at::kInt, op,
              "(): Expected dtype int32/int64 for index");
  return contiguous(index.to(at::kLong));
}

void check_index_rank(const at::Tensor& self, const at::Tensor& index, const char* what) {
  TORCH_CHECK(std::max<int64_t>(index.dim(), 1) == std::max<int64_t>(self.dim(), 1),
              "Index tensor must have the same number of dimensions as ", what, " tensor");
}

// CPU's scatter_shape_check: index no larger than self apart from `dim`, nor than src; src of index's rank.
void check_scatter_shape(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src) {
  if (index.numel() == 0) return;
  check_index_rank(self, index, "self");
  // In CPU's order: a src of fewer dims raises the IndexError of its size(d).
  auto size = [](const at::Tensor& t, int64_t d) { return t.dim() == 0 ? int64_t{1} : t.size(d); };
  const int64_t dims = std::max<int64_t>(self.dim(), 1);
  bool wrong = false;
  for (int64_t d = 0; d < dims && !wrong; ++d) wrong = d != dim && size(index, d) > size(self, d);
  for (int64_t d = 0; src.defined() && d < dims && !wrong; ++d) wrong = size(index, d) > size(src, d);
  if (!src.defined()) {
    TORCH_CHECK(!wrong, "Expected index ", index.sizes(), " to be no larger than self ", self.sizes(),
                " apart from dimension ", dim);
    return;
  }
  TORCH_CHECK(std::max<int64_t>(src.dim(), 1) == std::max<int64_t>(index.dim(), 1),
              "Index tensor must have the same number of dimensions as src tensor");
  TORCH_CHECK(!wrong, "Expected index ", index.sizes(), " to be no larger than self ", self.sizes(),
              " apart from dimension ", dim, " and to be no larger size than src ", src.sizes());
}

// CPU's index_func_meta_impl checks for index_add and index_reduce (`func`).
void check_index_func(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                      const char* func) {
  TORCH_CHECK(index.dim() <= 1, func, "_(): Index is supposed to be a vector");
  TORCH_CHECK(index.scalar_type() == at::kLong || index.scalar_type() == at::kInt, func,
              "_(): Expected dtype int32/int64 for index but got: ", index.scalar_type());
  TORCH_CHECK(self.scalar_type() == source.scalar_type(), func, "_(): self (", self.scalar_type(), ") and source (",
              source.scalar_type(), ") must have the same scalar type");
  // A 0-dim source holds one index's worth; otherwise source.size(dim) (IndexError on a 0-dim source), as CPU.
  const int64_t len = source.dim() == 0 && index.numel() == 1 ? 1 : source.size(dim);
  TORCH_CHECK(index.numel() == len, func, "_(): Number of indices (", index.numel(),
              ") should be equal to source.size(dim): (", len, "), for dim: ", dim);
  auto self_sizes = self.sizes().vec(), source_sizes = source.sizes().vec();
  if (source.dim() != 0 && self.dim() != 0) {
    self_sizes.erase(self_sizes.begin() + dim);
    source_sizes.erase(source_sizes.begin() + dim);
  }
  TORCH_CHECK(self_sizes == source_sizes, "source tensor shape must match self tensor shape, excluding the specified "
              "dimension. Got self.shape = ", self.sizes(), " source.shape = ", source.sizes());
}

enum class Combine { kSet, kAdd, kMul, kMean, kMax, kMin };

Combine combine_of(c10::string_view reduce, bool two) {
  if (!two) {
    if (reduce == "add") return Combine::kAdd;
    if (reduce == "multiply") return Combine::kMul;
    TORCH_CHECK(false, "reduce argument must be either add or multiply, got ", reduce);
  }
  if (reduce == "sum") return Combine::kAdd;
  if (reduce == "prod") return Combine::kMul;
  if (reduce == "mean") return Combine::kMean;
  if (reduce == "amax") return Combine::kMax;
  if (reduce == "amin") return Combine::kMin;
  TORCH_CHECK(false, "reduce argument must be either sum, prod, mean, amax or amin, got ", reduce);
}

// out <- self, then for each position m of `index` (shape `walk`): out[m, dim -> index(m)] (op)= src[m].
// src is a tensor or, when undefined, the scalar `value`; index_at(m) is the index value for m.
template <class IndexAt>
void scatter_into(const at::Tensor& self, int64_t dim, const std::vector<int64_t>& walk, IndexAt index_at,
                  const at::Tensor& src, const at::Scalar& value, Combine op, bool include_self, at::Tensor& out,
                  const char* name, bool index_error) {
  prepare_out(out, self.sizes(), self.scalar_type(), self, name);
  auto work = out.is_contiguous() ? out : at::empty(out.sizes(), out.options());
  if (!work.is_same(self)) device_copy(work, self);
  if (!walk.empty() && std::all_of(walk.begin(), walk.end(), [](int64_t s) { return s > 0; })) {
    const Geometry dst(work);
    const Geometry from = src.defined() ? Geometry(src) : dst;
    const int64_t dim_size = dst.sizes[dim];
    RBLN_DISPATCH_ALL(self.scalar_type(), "scatter", [&] {
      using opmath = at::opmath_type<scalar_t>;
      scalar_t* o = work.data_ptr<scalar_t>();
      const scalar_t* s = src.defined() ? src.const_data_ptr<scalar_t>() : nullptr;
      const scalar_t v = value.to<scalar_t>();
      const int64_t numel = dst.numel();
      launch_on(work, name, [=] {
        std::vector<int64_t> count(op == Combine::kMean ? numel : 0, include_self ? 1 : 0);
        std::vector<char> touched(include_self ? 0 : numel, 0);
        for_each_position(walk, [&](const std::vector<int64_t>& m) {
          const int64_t at = checked_index(index_at(m), dim_size, dim, false, index_error);
          const int64_t o_off = offset_of(m, dst.strides, dim, at);
          const scalar_t x = s ? s[offset_of(m, from.strides, -1, 0)] : v;
          if (op == Combine::kSet) {
            o[o_off] = x;
            return;
          }
          if (!include_self && !touched[o_off]) {  // the first contribution replaces self's value
            touched[o_off] = 1;
            o[o_off] = x;
          } else {
            const opmath a = static_cast<opmath>(o[o_off]), b = static_cast<opmath>(x);
            o[o_off] = static_cast<scalar_t>(op == Combine::kAdd || op == Combine::kMean ? a + b
                                             : op == Combine::kMul                       ? a * b
                                             : op == Combine::kMax ? (std::isnan(static_cast<double>(a)) || a > b ? a : b)
                                                                   : (std::isnan(static_cast<double>(a)) || a < b ? a : b));
          }
          if (op == Combine::kMean) ++count[o_off];
        });
        if (op != Combine::kMean) return;
        for (int64_t i = 0; i < numel; ++i) {
          if (count[i] <= 1) continue;
          if constexpr (std::is_integral_v<scalar_t>) {
            o[i] = static_cast<scalar_t>(std::floor(static_cast<double>(o[i]) / static_cast<double>(count[i])));
          } else {
            o[i] = static_cast<scalar_t>(static_cast<opmath>(o[i]) / static_cast<opmath>(count[i]));
          }
        }
      });
    });
  }
  if (!work.is_same(out)) device_copy(out, work);
}

at::Tensor& scatter_dim(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                        const at::Scalar& value, Combine op, bool include_self, at::Tensor& out, const char* name) {
  check_same_device({&self, &index, &src, &out});
  check_no_overlap(out, {&index, &src});
  dim = at::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
  auto idx = long_index(index, "scatter");
  if (src.defined())
    TORCH_CHECK(src.scalar_type() == self.scalar_type(), "scatter(): Expected self.dtype to be equal to src.dtype");
  check_scatter_shape(self, dim, idx, src);
  const int64_t* ip = idx.numel() ? idx.const_data_ptr<int64_t>() : nullptr;
  const Geometry ig(idx);
  std::vector<int64_t> strides(ig.sizes.size(), 1);
  for (int64_t d = static_cast<int64_t>(strides.size()) - 2; d >= 0; --d) strides[d] = strides[d + 1] * ig.sizes[d + 1];
  scatter_into(self, dim, idx.numel() ? ig.sizes : std::vector<int64_t>{},
               [ip, strides](const std::vector<int64_t>& m) { return ip[offset_of(m, strides, -1, 0)]; }, src, value,
               op, include_self, out, name, /*index_error=*/false);
  return out;
}

}  // namespace

at::Tensor& gather_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, bool /*sparse_grad*/,
                       at::Tensor& out) {
  check_same_device({&self, &index, &out});
  dim = at::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
  auto idx = long_index(index, "gather");
  if (idx.numel() > 0) {
    check_index_rank(self, idx, "input");
    const Geometry s(self), i(idx);
    for (size_t d = 0; d < i.sizes.size(); ++d)
      TORCH_CHECK(static_cast<int64_t>(d) == dim || i.sizes[d] <= s.sizes[d], "Size does not match at dimension ", d,
                  " expected index ", idx.sizes(), " to be no larger than self ", self.sizes(), " apart from dimension ",
                  dim);
  }
  check_no_overlap(out, {&self, &index});
  prepare_out(out, idx.sizes(), self.scalar_type(), self, "gather");
  if (idx.numel() == 0) return out;
  write_contiguous(out, [&](const at::Tensor& target) {
    const Geometry s(self), i(idx);
    const char* sp = static_cast<const char*>(self.const_data_ptr());
    char* op = static_cast<char*>(target.data_ptr());
    const int64_t* ip = idx.const_data_ptr<int64_t>();
    const int64_t size = self.element_size(), dim_size = s.sizes[dim];
    launch_on(target, "aten::gather", [=] {
      int64_t n = 0;
      for_each_position(i.sizes, [&](const std::vector<int64_t>& m) {
        const int64_t at = checked_index(ip[n], dim_size, dim, false, false);
        std::memcpy(op + n * size, sp + offset_of(m, s.strides, dim, at) * size, size);
        ++n;
      });
    });
  });
  return out;
}

at::Tensor& scatter_src_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                            at::Tensor& out) {
  return scatter_dim(self, dim, index, src, 0, Combine::kSet, true, out, "aten::scatter");
}
at::Tensor& scatter_value_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Scalar& value,
                              at::Tensor& out) {
  return scatter_dim(self, dim, index, at::Tensor(), value, Combine::kSet, true, out, "aten::scatter");
}
at::Tensor& scatter_reduce_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                               c10::string_view reduce, at::Tensor& out) {
  return scatter_dim(self, dim, index, src, 0, combine_of(reduce, false), true, out, "aten::scatter");
}
at::Tensor& scatter_value_reduce_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                                     const at::Scalar& value, c10::string_view reduce, at::Tensor& out) {
  return scatter_dim(self, dim, index, at::Tensor(), value, combine_of(reduce, false), true, out, "aten::scatter");
}
at::Tensor& scatter_add_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                            at::Tensor& out) {
  return scatter_dim(self, dim, index, src, 0, Combine::kAdd, true, out, "aten::scatter_add");
}
at::Tensor& scatter_reduce_two_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                                   const at::Tensor& src, c10::string_view reduce, bool include_self,
                                   at::Tensor& out) {
  return scatter_dim(self, dim, index, src, 0, combine_of(reduce, true), include_self, out, "aten::scatter_reduce");
}

at::Tensor& index_add_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                          const at::Scalar& alpha, at::Tensor& out) {
  check_same_device({&self, &index, &source, &out});
  check_no_overlap(out, {&index, &source});
  dim = at::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
  check_index_func(self, dim, index, source, "index_add");
  const Geometry src_geo(source);
  auto idx = contiguous(index.to(at::kLong));
  // Scale the source on the device first (alpha == 1 skips it).
  const at::Tensor scaled = alpha.toComplexDouble() == 1.0 ? source : at::mul(source, alpha);
  const int64_t* ip = idx.numel() ? idx.const_data_ptr<int64_t>() : nullptr;
  const int64_t d = dim;
  scatter_into(self, dim, source.numel() ? src_geo.sizes : std::vector<int64_t>{},
               [ip, d](const std::vector<int64_t>& m) { return ip[m[d]]; }, scaled, 0, Combine::kAdd, true, out,
               "aten::index_add", /*index_error=*/true);
  return out;
}

// index_reduce is scatter_reduce with the index broadcast along `dim` over source.
at::Tensor& index_reduce_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                             c10::string_view reduce, bool include_self, at::Tensor& out) {
  TORCH_CHECK(reduce == "prod" || reduce == "mean" || reduce == "amax" || reduce == "amin",
              "index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got ", reduce, ".");
  dim = at::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
  check_index_func(self, dim, index, source, "index_reduce");
  check_same_device({&self, &index, &source, &out});
  check_no_overlap(out, {&index, &source});
  if (!out.is_same(self)) {
    prepare_out(out, self.sizes(), self.scalar_type(), self, "index_reduce");
    device_copy(out, self);
  }
  std::vector<int64_t> shape(source.dim(), 1);  // a 0-dim source takes a 0-dim index
  if (source.dim() > 0) shape[dim] = index.numel();
  auto spread = index.to(at::kLong).reshape(shape).expand(source.sizes());
  return scatter_reduce_two_out(out, dim, spread, source, reduce, include_self, out);
}

namespace {

// max_unpool: each input value goes to its pooling index in its output plane
// (of the trailing `dims`), the rest zero; a later duplicate index wins, as on CPU.
at::Tensor max_unpool(const at::Tensor& self, const at::Tensor& indices, at::IntArrayRef output_size, int64_t dims,
                      const char* op) {
  TORCH_CHECK(indices.scalar_type() == at::kLong, "elements in indices should be type int64 but got: ",
              indices.scalar_type());
  TORCH_CHECK(static_cast<int64_t>(output_size.size()) == dims, "There should be exactly ", dims,
              " elements in output_size, but got ", output_size.size(), " elements.");
  TORCH_CHECK(self.dim() == dims + 1 || self.dim() == dims + 2, "Input to ", op, " should be a ", dims + 1, "d or ",
              dims + 2, "d Tensor, but got a tensor with ", self.dim(), " dimensions.");
  TORCH_CHECK(self.sizes() == indices.sizes(), "Expected shape of indices to be same as that of the input tensor (",
              self.sizes(), ") but got indices tensor with shape: ", indices.sizes());
  for (int64_t d = 1; d < self.dim(); ++d) {
    TORCH_CHECK(self.size(d) > 0, op, "(): Expected input to have non-zero size for non-batch dimensions, but got ",
                self.sizes(), " with dimension ", d, " being empty.");
  }
  check_same_device({&self, &indices});
  std::vector<int64_t> sizes(self.sizes().begin(), self.sizes().end() - dims);
  sizes.insert(sizes.end(), output_size.begin(), output_size.end());
  auto out = at::empty(sizes, self.options());
  fill_Scalar(out, 0);
  if (self.numel() == 0) return out;
  int64_t out_plane = 1;
  for (auto s : output_size) out_plane *= s;
  const int64_t in_plane = self.numel() / (out.numel() / std::max<int64_t>(out_plane, 1));
  const int64_t planes = self.numel() / in_plane, size = self.element_size();
  auto x = contiguous(self), idx = contiguous(indices);
  const auto* src = static_cast<const char*>(x.const_data_ptr());
  const auto* ip = idx.const_data_ptr<int64_t>();
  auto* dst = static_cast<char*>(out.data_ptr());
  launch_on(out, op, [=] {
    for (int64_t p = 0; p < planes; ++p) {
      for (int64_t i = 0; i < in_plane; ++i) {
        const int64_t k = ip[p * in_plane + i];
        TORCH_CHECK(k >= 0 && k < out_plane, "Found an invalid max index: ", k, " (output volumes are of size ",
                    out_plane, ")");
        std::memcpy(dst + (p * out_plane + k) * size, src + (p * in_plane + i) * size, size);
      }
    }
  });
  return out;
}

}  // namespace

at::Tensor max_unpool2d(const at::Tensor& self, const at::Tensor& indices, c10::SymIntArrayRef output_size) {
  return max_unpool(self, indices, C10_AS_INTARRAYREF_SLOW(output_size), 2, "max_unpooling2d");
}
at::Tensor max_unpool3d(const at::Tensor& self, const at::Tensor& indices, c10::SymIntArrayRef output_size,
                        at::IntArrayRef stride, at::IntArrayRef padding) {
  TORCH_CHECK(stride.size() == 3 && padding.size() == 3, "max_unpool3d: stride and padding must have 3 elements, got ",
              stride.size(), " and ", padding.size());
  for (int64_t d = 0; d < 3; ++d) {
    TORCH_CHECK(stride[d] > 0, "strides should be greater than zero, but got stride: ", stride);
  }
  return max_unpool(self, indices, C10_AS_INTARRAYREF_SLOW(output_size), 3, "max_unpooling3d");
}


at::Tensor& nonzero_out(const at::Tensor& self, at::Tensor& out) {
  if (!out.defined()) out = at::empty({0}, self.options().dtype(at::kLong));  // the functional overload's result
  TORCH_CHECK(out.scalar_type() == at::kLong, "nonzero: Expected out tensor to have scalar type Long but got scalar type",
              out.scalar_type());
  check_same_device({&self, &out});
  check_no_overlap(out, {&self});
  // The result's size depends on the data: the mask is read back (CUDA syncs here too).
  const HostSync sync(SyncKind::kDataDependent);
  // Read in row-major order: ne keeps a permuted input's layout.
  auto mask = at::ne(self, 0).cpu().contiguous();
  const bool* m = mask.const_data_ptr<bool>();
  const Geometry g(self);
  const int64_t ndim = self.dim();
  std::vector<int64_t> coords;
  int64_t n = 0;
  for_each_position(g.sizes, [&](const std::vector<int64_t>& pos) {
    if (m[n++]) coords.insert(coords.end(), pos.begin(), pos.begin() + ndim);
  });
  const int64_t found = ndim ? static_cast<int64_t>(coords.size()) / ndim : static_cast<int64_t>(m[0]);
  auto host = at::empty({found, ndim}, mask.options().dtype(at::kLong));
  std::copy(coords.begin(), coords.end(), host.data_ptr<int64_t>());
  at::native::resize_output(out, {found, ndim});
  if (out.numel()) out.copy_(host);
  return out;
}

at::Tensor& isin_Tensor_Tensor_out(const at::Tensor& elements, const at::Tensor& test_elements, bool /*assume_unique*/,
                                   bool invert, at::Tensor& out) {
  check_same_device({&elements, &test_elements});
  const auto type = at::promote_types(elements.scalar_type(), test_elements.scalar_type());
  auto convert = [&](const at::Tensor& t) {
    if (t.scalar_type() == type) return contiguous(t);
    auto copy = at::empty(t.sizes(), t.options().dtype(type));
    device_copy(copy, t);
    return copy;
  };
  auto x = convert(elements), test = convert(test_elements);
  prepare_out(out, elements.sizes(), at::kBool, elements, "isin");
  if (out.numel() == 0) return out;
  write_contiguous(out, [&](const at::Tensor& target) {
    RBLN_DISPATCH_ALL(type, "isin", [&] {
      const scalar_t* xp = x.const_data_ptr<scalar_t>();
      const scalar_t* tp = test.numel() ? test.const_data_ptr<scalar_t>() : nullptr;
      bool* op = target.data_ptr<bool>();
      const int64_t n = x.numel(), m = test.numel();
      launch_on(target, "aten::isin", [=] {
        std::vector<scalar_t> sorted;  // NaN is never found, so it is left out
        for (int64_t j = 0; j < m; ++j)
          if (!at::_isnan(tp[j])) sorted.push_back(tp[j]);
        std::sort(sorted.begin(), sorted.end());
        for (int64_t i = 0; i < n; ++i)  // binary_search would find NaN, equal to everything under <
          op[i] = (!at::_isnan(xp[i]) && std::binary_search(sorted.begin(), sorted.end(), xp[i])) != invert;
      });
    });
  });
  return out;
}


namespace {

// Advanced indexing, as CPU lays it out: masks become index tensors, indices
// broadcast together, and indexed dims that are not adjacent move to the front.
struct Indexing {
  at::Tensor src;                    // self, permuted when the indexed dims moved
  std::vector<at::Tensor> index;     // contiguous int64 index tensors, in src dim order from `first`
  std::vector<int64_t> index_shape;  // their broadcast shape
  int64_t first = 0;                 // first indexed dim of src
  std::vector<int64_t> result_shape;
};

Indexing make_indexing(const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices) {
  std::vector<at::Tensor> per_dim;
  for (const std::optional<at::Tensor>& opt : indices) {
    if (!opt || !opt->defined()) {
      per_dim.emplace_back();
      continue;
    }
    const at::Tensor& index = *opt;
    TORCH_CHECK_INDEX(index.device() == self.device() || index.is_cpu(), "indices should be either on cpu or on the "
                      "same device as the indexed tensor (", self.device(), ")");
    if (index.scalar_type() == at::kBool || index.scalar_type() == at::kByte) {
      if (index.scalar_type() == at::kByte) {  // CPU's warning (ATen's expandTensors), once per uint8 mask
        TORCH_WARN("indexing with dtype torch.uint8 is now deprecated, please use a dtype torch.bool instead.");
      }
      for (int64_t j = 0; j < index.dim(); ++j) {
        const int64_t d = static_cast<int64_t>(per_dim.size()) + j;
        TORCH_CHECK_INDEX(d < self.dim() && index.size(j) == self.size(d), "The shape of the mask ", index.sizes(),
                          " at index ", j, " does not match the shape of the indexed tensor ", self.sizes(),
                          " at index ", d);
      }
      at::Tensor where;
      kernels::nonzero_out(index.to(self.device()), where);
      for (int64_t j = 0; j < index.dim(); ++j) per_dim.push_back(where.select(1, j));
    } else {
      TORCH_CHECK_INDEX(index.scalar_type() == at::kLong || index.scalar_type() == at::kInt,
                        "tensors used as indices must be long, int, byte or bool tensors");
      per_dim.push_back(index.to(self.device(), at::kLong));
    }
  }
  TORCH_CHECK_INDEX(static_cast<int64_t>(per_dim.size()) <= self.dim(), "too many indices for tensor of dimension ",
                    self.dim(), " (got ", per_dim.size(), ")");
  per_dim.resize(self.dim());
  std::vector<at::Tensor> defined;
  for (const auto& t : per_dim)
    if (t.defined()) defined.push_back(t);
  Indexing ix;
  if (defined.empty()) {  // only None/Ellipsis indices: every element, in place
    ix.src = self;
    ix.result_shape = self.sizes().vec();
    return ix;
  }
  try {
    ix.index_shape = defined[0].sizes().vec();
    for (const auto& t : defined) ix.index_shape = at::infer_size(ix.index_shape, t.sizes());
  } catch (const std::exception&) {
    std::ostringstream shapes;
    for (const auto& t : defined) shapes << t.sizes() << " ";
    TORCH_CHECK_INDEX(false, "shape mismatch: indexing tensors could not be broadcast together with shapes ",
                      shapes.str());
  }
  // Adjacent indexed dims stay in place; otherwise they move to the front.
  std::vector<int64_t> order, positions;
  for (int64_t d = 0; d < self.dim(); ++d)
    if (per_dim[d].defined()) positions.push_back(d);
  const bool adjacent = positions.back() - positions.front() + 1 == static_cast<int64_t>(positions.size());
  if (adjacent) {
    for (int64_t d = 0; d < self.dim(); ++d) order.push_back(d);
    ix.first = positions.front();
  } else {
    order = positions;
    for (int64_t d = 0; d < self.dim(); ++d)
      if (!per_dim[d].defined()) order.push_back(d);
    ix.first = 0;
  }
  ix.src = adjacent ? self : self.permute(order);
  for (auto d : positions) {
    auto expanded = per_dim[d].expand(ix.index_shape);
    ix.index.push_back(contiguous(expanded));
  }
  const int64_t count = static_cast<int64_t>(positions.size());
  for (int64_t d = 0; d < ix.first; ++d) ix.result_shape.push_back(ix.src.size(d));
  ix.result_shape.insert(ix.result_shape.end(), ix.index_shape.begin(), ix.index_shape.end());
  for (int64_t d = ix.first + count; d < ix.src.dim(); ++d) ix.result_shape.push_back(ix.src.size(d));
  return ix;
}

// Calls f(result_position, src_offset) for every result position (row-major).
struct OffsetWalker {
  std::vector<int64_t> result_shape, src_sizes, src_strides, index_shape;
  std::vector<const int64_t*> index;
  int64_t first;

  explicit OffsetWalker(const Indexing& ix)
      : result_shape(ix.result_shape), src_sizes(ix.src.sizes().vec()), src_strides(ix.src.strides().vec()),
        index_shape(ix.index_shape), first(ix.first) {
    for (const auto& t : ix.index) index.push_back(t.const_data_ptr<int64_t>());
  }

  template <class F>
  void run(F&& f) const {
    const int64_t count = static_cast<int64_t>(index.size()), k = static_cast<int64_t>(index_shape.size());
    int64_t n = 0;
    for_each_position(result_shape, [&](const std::vector<int64_t>& r) {
      int64_t off = 0, p = 0;
      for (int64_t d = 0; d < first; ++d) off += r[d] * src_strides[d];
      for (int64_t j = 0; j < k; ++j) p = p * index_shape[j] + r[first + j];
      for (int64_t j = 0; j < count; ++j) {
        const int64_t dim = first + j;
        off += checked_index(index[j][p], src_sizes[dim], dim, true, true) * src_strides[dim];
      }
      for (size_t d = first + k; d < r.size(); ++d) off += r[d] * src_strides[d - k + count];
      f(n++, off);
    });
  }
};

}  // namespace

at::Tensor& index_Tensor_out(const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices,
                             at::Tensor& out) {
  check_no_overlap(out, {&self});
  for (const std::optional<at::Tensor> index : indices) {
    if (index) check_no_overlap(out, {&*index});
  }
  auto ix = make_indexing(self, indices);
  prepare_out(out, ix.result_shape, self.scalar_type(), self, "index");
  if (out.numel() == 0) return out;
  write_contiguous(out, [&](const at::Tensor& target) {
    OffsetWalker walk(ix);
    const char* sp = static_cast<const char*>(ix.src.const_data_ptr());
    char* op = static_cast<char*>(target.data_ptr());
    const int64_t size = self.element_size();
    launch_on(target, "aten::index", [=] {
      walk.run([&](int64_t n, int64_t off) { std::memcpy(op + n * size, sp + off * size, size); });
    });
  });
  return out;
}


at::Tensor& _index_put_impl_(at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices,
                             const at::Tensor& values, bool accumulate, bool /*unsafe*/) {
  TORCH_CHECK(values.device() == self.device() || values.dim() == 0,
              "Expected all tensors to be on the same device, but found at least two devices, ", self.device(),
              " and ", values.device(), "!");
  TORCH_CHECK(values.scalar_type() == self.scalar_type(), "Index put requires the source and destination dtypes "
              "match, got ", self.scalar_type(), " for the destination and ", values.scalar_type(), " for the source.");
  at::assert_no_overlap(self, values);  // CPU only warns about an expanded self
  auto ix = make_indexing(self, indices);
  // CPU's check, also when nothing is indexed.
  TORCH_CHECK(at::is_expandable_to(values.sizes(), ix.result_shape), "shape mismatch: value tensor of shape ",
              values.sizes(), " cannot be broadcast to indexing result of shape ", at::IntArrayRef(ix.result_shape));
  int64_t count = 1;
  for (auto s : ix.result_shape) count *= s;
  if (count == 0) return self;
  auto v = at::empty(ix.result_shape, self.options());
  device_copy(v, values.to(self.device()).expand(ix.result_shape));  // raises CPU's broadcast error
  OffsetWalker walk(ix);
  RBLN_DISPATCH_ALL_AND_COMPLEX32_AND_FLOAT8(self.scalar_type(), "index_put_", [&] {
    using opmath = at::opmath_type<scalar_t>;
    scalar_t* dp = static_cast<scalar_t*>(ix.src.data_ptr());
    const scalar_t* vp = v.const_data_ptr<scalar_t>();
    launch_on(self, "aten::_index_put_impl_", [=] {
      walk.run([&](int64_t n, int64_t off) {
        dp[off] = accumulate ? static_cast<scalar_t>(static_cast<opmath>(dp[off]) + static_cast<opmath>(vp[n])) : vp[n];
      });
    });
  });
  return self;
}

}  // namespace rbln::kernels
