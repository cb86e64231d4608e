// Indexing along one dim or the flattened tensor: index_select, index_copy,
// take, put_, masked_select/masked_scatter_, repeat_interleave, and embedding's
// renorm and backward (kernels/indexing/Gather.cpp has gather, scatter and index/index_put_).
// Index values live in device memory, so they are checked inside the kernel;
// a bad index surfaces at the next synchronizing call, as on CUDA.
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/core/DimVector.h>
#include <c10/util/StringUtil.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "generated/RBLNNativeFunctions.h"
#include "kernels/common/Common.h"
#include "runtime/observability/RBLNObserve.h"

namespace rbln::kernels {
namespace {

int64_t prod(at::IntArrayRef sizes, int64_t begin, int64_t end) {
  int64_t p = 1;
  for (int64_t i = begin; i < end; ++i) p *= sizes[i];
  return p;
}

// Reads index i of a contiguous int32/int64 index on the device.
inline int64_t index_at(const void* data, bool is_long, int64_t i) {
  return is_long ? static_cast<const int64_t*>(data)[i] : static_cast<const int32_t*>(data)[i];
}

void check_index(const at::Tensor& index, const char* op) {
  TORCH_CHECK(index.dim() <= 1, op, "(): Index is supposed to be a vector");
  TORCH_CHECK(index.scalar_type() == at::kLong || index.scalar_type() == at::kInt, op,
              "(): Expected dtype int32/int64 for index");
}

}  // namespace

at::Tensor& index_select_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, at::Tensor& out) {
  check_index(index, "index_select");
  check_same_device({&self, &index, &out});
  check_no_overlap(out, {&self, &index});
  dim = at::maybe_wrap_dim(dim, self.dim());
  auto sizes = self.sizes().vec();
  int64_t n = index.numel();
  int64_t dim_size = self.dim() == 0 ? 1 : self.size(dim);
  if (self.dim() > 0) sizes[dim] = n;
  else TORCH_CHECK(n == 1, "index_select(): Index to scalar can have only 1 value, got ", n, " value(s)");
  prepare_out(out, sizes, self.scalar_type(), self, "index_select");
  if (out.numel() == 0) return out;
  // A strided self (a view, such as a paged KV cache whose blocks are selected) is read in place: making it
  // contiguous first would copy all of it for the few rows selected.
  const bool strided = !self.is_contiguous();
  auto idx = contiguous(index);
  const int64_t ndim = self.dim(), element = self.element_size();
  int64_t outer = ndim == 0 ? 1 : prod(self.sizes(), 0, dim);
  int64_t inner_elements = ndim == 0 ? 1 : prod(self.sizes(), dim + 1, ndim);
  int64_t inner = inner_elements * element;
  write_contiguous(out, [&](const at::Tensor& target) {
    auto* dst = static_cast<char*>(target.data_ptr());
    const auto* s = static_cast<const char*>(self.const_data_ptr());
    const void* ip = idx.const_data_ptr();
    bool is_long = idx.scalar_type() == at::kLong;
    // self's shape in inline storage: no allocation per call
    launch_on(target, "aten::index_select", [=, sizes = at::DimVector(self.sizes()),
                                             strides = at::DimVector(self.strides())] {
      for (int64_t i = 0; i < n; ++i) {
        auto k = index_at(ip, is_long, i);
        if (k < 0 || k >= dim_size) throw std::out_of_range("index out of range in self");
      }
      // The element offset of row r's element j in a strided self.
      auto offset = [&](int64_t o, int64_t k, int64_t j) {
        int64_t off = k * strides[dim];
        for (int64_t d = dim - 1; d >= 0; --d) {
          off += (o % sizes[d]) * strides[d];
          o /= sizes[d];
        }
        for (int64_t d = ndim - 1; d > dim; --d) {
          off += (j % sizes[d]) * strides[d];
          j /= sizes[d];
        }
        return off;
      };
      // A strided self is copied in runs: its trailing dims that are laid out contiguously (a KV cache's head
      // dim) are one memcpy each.
      int64_t run = 1;
      for (int64_t d = ndim - 1; d > dim && strides[d] == run; --d) run *= sizes[d];
      at::parallel_for(0, outer * n, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(inner, 1)),
                       [&](int64_t b, int64_t e) {
                         for (int64_t r = b; r < e; ++r) {
                           int64_t o = r / n, i = r % n;
                           auto k = index_at(ip, is_long, i);
                           if (!strided) {
                             std::memcpy(dst + r * inner, s + (o * dim_size + k) * inner, inner);
                             continue;
                           }
                           for (int64_t j = 0; j < inner_elements; j += run) {
                             std::memcpy(dst + r * inner + j * element, s + offset(o, k, j) * element, run * element);
                           }
                         }
                       });
    });
  });
  return out;
}


at::Tensor& index_copy_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                           at::Tensor& out) {
  // CPU's index_copy meta checks, in its order and exception types.
  dim = at::maybe_wrap_dim(dim, self.dim());
  check_no_overlap(out, {&index, &source});
  TORCH_CHECK_INDEX(index.dim() < 2, "index_copy_(): Index should have dimension 1 or 0 (got ", index.dim(), ")");
  int64_t n = index.numel();
  TORCH_CHECK_INDEX(source.dim() != 0 || n == 1,
                    "index_copy_(): When source is scalar, index should have one element (got ", n, ")");
  TORCH_CHECK_INDEX(source.dim() == self.dim() || source.dim() == 0 || self.dim() == 0,
                    "index_copy_(): When source and destination are not scalars, their dimensionality must match. ",
                    "Source dimensionality (", source.dim(), "), destination dimensionality (", self.dim(), ")");
  TORCH_CHECK(index.scalar_type() == at::kLong, "index_copy_(): Expected a long tensor for index, but got ",
              index.scalar_type());
  TORCH_CHECK(self.scalar_type() == source.scalar_type(),
              "index_copy_(): self and source expected to have the same dtype, but got (self) ", self.scalar_type(),
              " and (source) ", source.scalar_type());
  check_same_device({&self, &index, &source, &out});
  auto self_slice = self.sizes().vec(), source_slice = source.sizes().vec();
  if (!self_slice.empty()) self_slice.erase(self_slice.begin() + dim);
  if (!source_slice.empty()) source_slice.erase(source_slice.begin() + dim);
  TORCH_CHECK(self_slice == source_slice, "index_copy_(): Source/destination tensor must have same slice shapes. ",
              "Destination slice shape: ", c10::Join(" ", self_slice), " at dimension ", dim,
              " and source slice shape: ", c10::Join(" ", source_slice), " at dimension 0.");
  int64_t src_dim_size = source.dim() == 0 ? 1 : source.size(dim);
  TORCH_CHECK_INDEX(n == src_dim_size, "index_copy_(): Number of indices (", n,
                    ") should be equal to source.size(dim) (", src_dim_size, ")");
  if (!out.is_same(self)) {
    prepare_out(out, self.sizes(), self.scalar_type(), self, "index_copy");
    device_copy(out, self);
  }
  if (n == 0 || out.numel() == 0) return out;
  auto src = contiguous(source);
  auto idx = contiguous(index);
  int64_t dim_size = self.dim() == 0 ? 1 : self.size(dim);
  int64_t outer = self.dim() == 0 ? 1 : prod(self.sizes(), 0, dim);
  int64_t inner = (self.dim() == 0 ? 1 : prod(self.sizes(), dim + 1, self.dim())) * self.element_size();
  write_contiguous(out, [&](const at::Tensor& target) {
    if (!target.is_same(out)) device_copy(target, out);
    auto* dst = static_cast<char*>(target.data_ptr());
    const auto* s = static_cast<const char*>(src.const_data_ptr());
    const auto* ip = idx.const_data_ptr<int64_t>();
    launch_on(target, "aten::index_copy", [=] {
      for (int64_t i = 0; i < n; ++i) {
        if (ip[i] < 0 || ip[i] >= dim_size) {
          throw std::out_of_range("index_copy_(): index " + std::to_string(ip[i]) + " is out of bounds for dimension " +
                                  std::to_string(dim) + " with size " + std::to_string(dim_size));
        }
      }
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t i = 0; i < n; ++i) std::memcpy(dst + (o * dim_size + ip[i]) * inner, s + (o * n + i) * inner, inner);
      }
    });
  });
  return out;
}

at::Tensor& embedding_renorm_(at::Tensor& self, const at::Tensor& indices, double max_norm, double norm_type) {
  TORCH_CHECK(self.dim() == 2, "embedding_renorm_(): expected self to be 2-D, got ", self.dim(), "-D");
  TORCH_CHECK(indices.scalar_type() == at::kLong || indices.scalar_type() == at::kInt,
              "embedding_renorm_(): Expected dtype int32/int64 for indices");
  check_same_device({&self, &indices});
  auto idx = contiguous(indices.to(at::kLong));
  int64_t n = idx.numel(), rows = self.size(0), dim = self.size(1);
  write_contiguous(self, [&](const at::Tensor& target) {
    if (!target.is_same(self)) device_copy(target, self);
    RBLN_DISPATCH_FLOATING(self.scalar_type(), "embedding_renorm_", [&] {
      auto* w = target.data_ptr<scalar_t>();
      const auto* ip = idx.const_data_ptr<int64_t>();
      launch_on(target, "aten::embedding_renorm_", [=] {
        std::vector<int64_t> unique(ip, ip + n);
        std::sort(unique.begin(), unique.end());
        unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
        for (auto r : unique) {
          if (r < 0 || r >= rows) throw std::out_of_range("embedding_renorm_(): index out of range in self");
          scalar_t* row = w + r * dim;
          double norm = 0;
          for (int64_t j = 0; j < dim; ++j) {
            double v = std::abs(static_cast<double>(row[j]));
            norm += norm_type == 1 ? v : (norm_type == 2 ? v * v : std::pow(v, norm_type));
          }
          norm = norm_type == 1 ? norm : (norm_type == 2 ? std::sqrt(norm) : std::pow(norm, 1.0 / norm_type));
          // As CPU: the norm is a tensor of the row's dtype, and `row *= scale` takes the scale in that dtype
          // (TensorIterator casts the scalar to the common dtype) and multiplies in opmath.
          norm = static_cast<double>(static_cast<scalar_t>(norm));
          if (norm > max_norm) {
            using opmath_t = at::opmath_type<scalar_t>;
            const auto scale = static_cast<opmath_t>(static_cast<scalar_t>(max_norm / (norm + 1e-7)));
            for (int64_t j = 0; j < dim; ++j) row[j] = static_cast<scalar_t>(static_cast<opmath_t>(row[j]) * scale);
          }
        }
      });
    });
  });
  return self;
}

// grad_weight[indices[i]] += grad_output[i] (rows in index order, so sums are
// deterministic), skipping padding_idx; optionally scaled by 1 / frequency.
at::Tensor embedding_dense_backward(const at::Tensor& grad_output, const at::Tensor& indices, c10::SymInt num_weights,
                                    c10::SymInt padding_idx, bool scale_grad_by_freq) {
  TORCH_CHECK(indices.scalar_type() == at::kLong || indices.scalar_type() == at::kInt,
              "embedding_backward: Expected dtype int32/int64 for indices, got ", indices.scalar_type());
  check_same_device({&grad_output, &indices});
  const int64_t rows = num_weights.expect_int(), pad = padding_idx.expect_int(), n = indices.numel();
  const int64_t dim = grad_output.numel() == 0 ? grad_output.size(-1) : grad_output.numel() / std::max<int64_t>(n, 1);
  auto grad_weight = at::empty({rows, dim}, grad_output.options());
  auto idx = contiguous(indices.to(at::kLong)), go = contiguous(grad_output);
  RBLN_DISPATCH_FLOATING(grad_output.scalar_type(), "embedding_dense_backward", [&] {
    using opmath = at::opmath_type<scalar_t>;
    const int64_t* ip = idx.const_data_ptr<int64_t>();
    const scalar_t* gp = go.const_data_ptr<scalar_t>();
    scalar_t* wp = grad_weight.data_ptr<scalar_t>();
    launch_on(grad_weight, "aten::embedding_dense_backward", [=] {
      std::vector<opmath> acc(rows * dim, opmath(0));
      std::vector<int64_t> counts(scale_grad_by_freq ? rows : 0, 0);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t r = ip[i];
        TORCH_CHECK(r >= 0 && r < rows, "embedding_backward: index ", r, " is out of range for ", rows, " rows");
        if (scale_grad_by_freq) ++counts[r];
      }
      for (int64_t i = 0; i < n; ++i) {
        const int64_t r = ip[i];
        if (r == pad) continue;
        const opmath scale = scale_grad_by_freq ? opmath(1) / static_cast<opmath>(counts[r]) : opmath(1);
        for (int64_t j = 0; j < dim; ++j) acc[r * dim + j] += static_cast<opmath>(gp[i * dim + j]) * scale;
      }
      for (int64_t k = 0; k < rows * dim; ++k) wp[k] = static_cast<scalar_t>(acc[k]);
    });
  });
  return grad_weight;
}

at::Tensor masked_select(const at::Tensor& self, const at::Tensor& mask) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_select: expected BoolTensor for mask");
  check_same_device({&self, &mask});
  auto shape = at::infer_size(self.sizes(), mask.sizes());
  // The output size depends on the mask: read it back (CUDA syncs here too),
  // then gather the selected elements on the device.
  const HostSync sync(SyncKind::kDataDependent);
  auto host_mask = mask.expand(shape).to(at::kCPU).contiguous();
  const bool* m = host_mask.const_data_ptr<bool>();
  std::vector<int64_t> picked;
  for (int64_t i = 0; i < host_mask.numel(); ++i) {
    if (m[i]) picked.push_back(i);
  }
  auto index = at::empty({static_cast<int64_t>(picked.size())}, host_mask.options().dtype(at::kLong));
  std::copy(picked.begin(), picked.end(), index.data_ptr<int64_t>());
  at::Tensor out;
  return kernels::index_select_out(contiguous(self.expand(shape)).reshape({-1}), 0, index.to(self.device()), out);
}

// Writes source's leading elements, in order, where the mask (broadcast to
// self) is true; serial, as each position depends on the count before it.
at::Tensor& masked_scatter_(at::Tensor& self, const at::Tensor& mask, const at::Tensor& source) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_scatter_ only supports boolean masks, but got mask with dtype ",
              mask.scalar_type());
  TORCH_CHECK(self.scalar_type() == source.scalar_type(),
              "masked_scatter_: expected self and source to have same dtypes but got ", self.scalar_type(), " and ",
              source.scalar_type());
  check_same_device({&self, &mask, &source});
  if (self.numel() == 0) return self;
  auto m = contiguous(mask.expand(self.sizes()));
  auto src = contiguous(source);
  const int64_t n = self.numel(), available = source.numel(), size = self.element_size();
  write_contiguous(self, [&](const at::Tensor& target) {
    if (!target.is_same(self)) device_copy(target, self);
    auto* dst = static_cast<char*>(target.data_ptr());
    const auto* s = static_cast<const char*>(src.const_data_ptr());
    const bool* mp = m.const_data_ptr<bool>();
    launch_on(target, "aten::masked_scatter_", [=] {
      int64_t taken = 0;
      for (int64_t i = 0; i < n; ++i) {
        if (!mp[i]) continue;
        TORCH_CHECK(taken < available, "masked_scatter_: expected source to have at least as many elements as ",
                    "ones in mask, but source has ", available);
        std::memcpy(dst + i * size, s + taken++ * size, size);
      }
    });
  });
  return self;
}

namespace {

// Checks the flat indices of take/put_ on the device (negative ones count from the end).
inline int64_t flat_index(int64_t i, int64_t numel) {
  if (i < -numel || i >= numel) {
    throw std::out_of_range("out of range: tried to access index " + std::to_string(i) + " on a tensor of " +
                            std::to_string(numel) + " elements.");
  }
  return i < 0 ? i + numel : i;
}

}  // namespace

// out[i] = self.flatten()[index[i]], shaped like index.
at::Tensor take(const at::Tensor& self, const at::Tensor& index) {
  TORCH_CHECK(index.scalar_type() == at::kLong, "take(): Expected a long tensor for index, but got ",
              index.scalar_type());
  check_same_device({&self, &index});
  auto out = at::empty(index.sizes(), self.options());
  const int64_t n = index.numel(), numel = self.numel(), size = self.element_size();
  TORCH_CHECK_INDEX(numel > 0 || n == 0, "take(): tried to take from an empty tensor");
  if (n == 0) return out;
  auto src = contiguous(self), idx = contiguous(index);
  const auto* s = static_cast<const char*>(src.const_data_ptr());
  const auto* ip = idx.const_data_ptr<int64_t>();
  auto* dst = static_cast<char*>(out.data_ptr());
  launch_on(out, "aten::take", [=] {
    for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * size, s + flat_index(ip[i], numel) * size, size);
  });
  return out;
}

// self.flatten()[index[i]] = source[i] (or += with accumulate), in index order.
at::Tensor& put_(at::Tensor& self, const at::Tensor& index, const at::Tensor& source, bool accumulate) {
  TORCH_CHECK(index.scalar_type() == at::kLong, "put_(): Expected a long tensor for index, but got ",
              index.scalar_type());
  TORCH_CHECK(self.scalar_type() == source.scalar_type(), "put_(): self and source expected to have the same dtype, ",
              "but got self.dtype = ", self.scalar_type(), " and source.dtype = ", source.scalar_type());
  TORCH_CHECK_INDEX(index.numel() == source.numel(), "put_(): Expected source and index to have the same number of ",
                    "elements, but got source.numel() = ", source.numel(), ", index.numel() = ", index.numel());
  check_same_device({&self, &index, &source});
  check_no_overlap(self, {&index, &source});
  const int64_t n = index.numel(), numel = self.numel();
  TORCH_CHECK_INDEX(numel > 0 || n == 0, "put_(): Tried to put elements into an empty tensor");
  if (n == 0) return self;
  auto src = contiguous(source), idx = contiguous(index);
  write_contiguous(self, [&](const at::Tensor& target) {
    if (!target.is_same(self)) device_copy(target, self);
    RBLN_DISPATCH_ALL(self.scalar_type(), "put_", [&] {
      auto* dst = target.data_ptr<scalar_t>();
      const auto* sp = src.const_data_ptr<scalar_t>();
      const auto* ip = idx.const_data_ptr<int64_t>();
      launch_on(target, "aten::put_", [=] {
        for (int64_t i = 0; i < n; ++i) {
          scalar_t& d = dst[flat_index(ip[i], numel)];
          d = accumulate ? static_cast<scalar_t>(d + sp[i]) : sp[i];
        }
      });
    });
  });
  return self;
}

at::Tensor repeat_interleave_Tensor(const at::Tensor& repeats, std::optional<c10::SymInt> output_size) {
  TORCH_CHECK(repeats.dim() == 1, "repeat_interleave only accept 1D vector as repeat");
  TORCH_CHECK(repeats.scalar_type() == at::kLong || repeats.scalar_type() == at::kInt,
              "repeats has to be Long or Int tensor");
  // The output size depends on the values: read them back (CUDA syncs here too).
  const HostSync sync(SyncKind::kDataDependent);
  auto host = repeats.to(at::kCPU, at::kLong).contiguous();
  const auto* r = host.const_data_ptr<int64_t>();
  int64_t total = 0;
  for (int64_t i = 0; i < host.numel(); ++i) {
    TORCH_CHECK(r[i] >= 0, "repeats can not be negative");
    total += r[i];
  }
  if (output_size) {
    TORCH_CHECK(output_size->expect_int() == total, "allocated size does not match required size");
  }
  auto indices = at::empty({total}, host.options());
  auto* out = indices.data_ptr<int64_t>();
  for (int64_t i = 0, k = 0; i < host.numel(); ++i) {
    for (int64_t j = 0; j < r[i]; ++j) out[k++] = i;
  }
  return indices.to(repeats.device(), repeats.scalar_type());
}

}  // namespace rbln::kernels
