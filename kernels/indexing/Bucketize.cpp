// searchsorted and bucketize: CPU's checks and type promotion (the inline
// helpers of ATen/native/BucketizationUtils.h) and CPU's binary searches, run
// on the device, one input value per iteration.
#include <ATen/native/BucketizationUtils.h>
#include <ATen/ops/empty.h>

#include "generated/RBLNNativeFunctions.h"
#include "kernels/common/Common.h"

namespace rbln::kernels {
namespace {

// The first position in [start, end) whose value is >= v (right: > v), through `sorter` when it is given.
template <class T>
int64_t search(int64_t start, int64_t end, T v, const T* seq, const int64_t* sorter, bool right) {
  const int64_t offset = sorter ? start : 0;  // sorter indexes within its row
  while (start < end) {
    const int64_t mid = start + ((end - start) >> 1);
    const T m = sorter ? seq[sorter[mid] + offset] : seq[mid];
    if (right ? !(m > v) : !(m >= v)) start = mid + 1;
    else end = mid;
  }
  return start;
}

}  // namespace

at::Tensor& searchsorted_out(const at::Tensor& sorted_sequence, const at::Tensor& self, bool out_int32, bool right,
                             std::optional<c10::string_view> side, const std::optional<at::Tensor>& sorter_opt,
                             at::Tensor& out) {
  const at::Tensor sorter = sorter_opt.value_or(at::Tensor());
  if (!out.defined()) out = at::empty({0}, self.options().dtype(out_int32 ? at::kInt : at::kLong));
  at::native::searchsorted_pre_check(sorted_sequence, self, out, out_int32, right, side, sorter);
  prepare_out(out, self.sizes(), out.scalar_type(), self, "searchsorted");
  if (self.numel() == 0) return out;
  at::Tensor input, seq, order;
  at::native::searchsorted_maybe_trim_input_tensors(input, seq, order, self, sorted_sequence, sorter);
  input = contiguous(input.defined() ? input : self);
  seq = contiguous(seq.defined() ? seq : sorted_sequence);
  order = sorter.defined() ? contiguous(order.defined() ? order : sorter) : order;
  const bool is_right = side ? *side == "right" : right, rows = seq.dim() > 1;
  const int64_t n = input.numel(), row_in = input.dim() ? input.size(-1) : 1, row_seq = seq.size(-1);
  write_contiguous(out, [&](const at::Tensor& target) {
    RBLN_DISPATCH_NUMERIC(input.scalar_type(), "searchsorted", [&] {
      const scalar_t* xp = input.const_data_ptr<scalar_t>();
      const scalar_t* sp = seq.const_data_ptr<scalar_t>();
      const int64_t* op = order.defined() ? order.const_data_ptr<int64_t>() : nullptr;
      void* yp = target.data_ptr();
      launch_on(self, "aten::searchsorted", [=] {
        at::parallel_for(0, n, 200, [&](int64_t lo, int64_t hi) {
          for (int64_t i = lo; i < hi; ++i) {
            const int64_t start = rows ? i / row_in * row_seq : 0;
            const int64_t pos = search(start, start + row_seq, xp[i], sp, op, is_right) - start;
            if (out_int32) static_cast<int32_t*>(yp)[i] = static_cast<int32_t>(pos);
            else static_cast<int64_t*>(yp)[i] = pos;
          }
        });
      });
    });
  });
  return out;
}

at::Tensor& searchsorted_Scalar_out(const at::Tensor& sorted_sequence, const at::Scalar& self, bool out_int32,
                                    bool right, std::optional<c10::string_view> side,
                                    const std::optional<at::Tensor>& sorter, at::Tensor& out) {
  return searchsorted_out(sorted_sequence, at::native::searchsorted_scalar_tensor(self, sorted_sequence.device()),
                          out_int32, right, side, sorter, out);
}

at::Tensor& bucketize_out(const at::Tensor& self, const at::Tensor& boundaries, bool out_int32, bool right,
                          at::Tensor& out) {
  TORCH_CHECK(boundaries.dim() == 1, "boundaries tensor must be 1 dimension, but got dim(", boundaries.dim(), ")");
  return searchsorted_out(boundaries, self, out_int32, right, std::nullopt, std::nullopt, out);
}

at::Tensor bucketize_Scalar(const at::Scalar& self, const at::Tensor& boundaries, bool out_int32, bool right) {
  at::Tensor out;
  return bucketize_out(at::native::searchsorted_scalar_tensor(self, boundaries.device()), boundaries, out_int32, right,
                       out);
}

}  // namespace rbln::kernels
