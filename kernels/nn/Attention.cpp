// Fused scaled dot product attention. The emulated device's fused kernel is
// CPU's flash-attention kernel, run through the op library (kernels/library/Library.h),
// and scaled_dot_product_attention takes it for exactly the inputs CPU takes
// its flash kernel for (the others take the math path on device ops, as on
// CPU), so attention gives CPU's values; a query of one token (a decode step)
// has a kernel of its own, equal to CPU's to float rounding. A vendor's choice
// function names the inputs its own fused kernel accepts.
#include <ATen/Dispatch.h>
#include <ATen/ExpandUtils.h>
#include <ATen/Parallel.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <type_traits>
#include <vector>

#include "generated/RBLNNativeFunctions.h"
#include "kernels/common/Common.h"
#include "kernels/library/Library.h"
#include "kernels/linalg/Blas.h"
#include "kernels/nn/AttentionMath.h"
#include "kernels/vec/VecKernels.h"

namespace at::native {
// Exported by libtorch_cpu (ATen/native/transformers/attention.cpp), declared by no header.
int64_t _fused_sdp_choice_cpp(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                              const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                              std::optional<double> scale, bool enable_gqa);
}  // namespace at::native

namespace rbln::kernels {
namespace {

using Tensors = std::vector<at::Tensor>;

// CPU's backend choice (its checks of shapes, strides, dtypes, dropout, masks and the
// user's sdpa_kernel settings), with the device's fused kernel where CPU has flash.
int64_t choose_sdp_backend(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                           const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                           std::optional<double> scale, bool enable_gqa) {
  auto choice = at::native::_fused_sdp_choice_cpp(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa);
  return choice == static_cast<int64_t>(at::SDPBackend::flash_attention) ? static_cast<int64_t>(at::SDPBackend::overrideable)
                                                                           : choice;
}

// The output's layout as the op's meta function gives it (what torch.compile plans
// with): query's own when the shapes agree, else query's dimension order.
at::Tensor empty_like_layout(const at::Tensor& query, at::IntArrayRef sizes) {
  if (query.sizes() == sizes) return at::empty_like(query);
  std::vector<int64_t> order(sizes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return query.stride(a) > query.stride(b); });
  std::vector<int64_t> strides(sizes.size());
  int64_t stride = 1;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    strides[*it] = stride;
    stride *= sizes[*it];
  }
  return at::empty_strided(sizes, strides, query.options());
}

std::optional<at::Tensor> optional_of(const at::Tensor& t) { return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt; }

// A decode step's attention: one query token a (batch, head), no dropout, no causal flag, an additive mask in the
// query's dtype or none, rows contiguous. CPU's flash kernel spends most of such a call setting up its blocks
// (about 8 us of a 10 us call for 4 heads over 256 keys); these go to decode_attention. Other inputs (and shapes
// CPU refuses, with its errors) take CPU's kernel.
bool is_decode(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& bias,
               double dropout_p, bool is_causal) {
  const auto dtype = q.scalar_type();
  if (dropout_p != 0 || is_causal || q.size(2) != 1 || k.size(2) == 0) return false;
  if ((dtype != at::kFloat && dtype != at::kHalf && dtype != at::kBFloat16) || k.scalar_type() != dtype ||
      v.scalar_type() != dtype)
    return false;
  for (const auto* t : {&k, &v}) {
    if (t->size(0) != q.size(0) || t->size(1) != q.size(1) || t->size(2) != k.size(2)) return false;
  }
  if (k.size(3) != q.size(3) || q.stride(3) != 1 || k.stride(3) != 1 || v.stride(3) != 1) return false;
  return !bias.defined() ||
         (bias.scalar_type() == dtype && at::is_expandable_to(bias.sizes(), {q.size(0), q.size(1), 1, k.size(2)}));
}

// Per (batch, head): scores = q.K^T * scale + mask and out = softmax(scores) V, the products on the matrix engine
// in float (half-precision rows converted first), the softmax in vector lanes, the logsumexp from the softmax's
// largest probability. CPU's results where every key is masked (zeros, logsumexp 0).
void decode_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& bias,
                      double scale, const at::Tensor& out, const at::Tensor& logsumexp) {
  const int64_t batch = q.size(0), heads = q.size(1), keys = k.size(2), size = q.size(3), value_size = v.size(3);
  const at::Tensor mask = bias.defined() ? bias.expand({batch, heads, 1, keys}) : at::Tensor();
  const auto qs = q.strides().vec(), ks = k.strides().vec(), vs = v.strides().vec(), os = out.strides().vec();
  const auto ms = mask.defined() ? mask.strides().vec() : std::vector<int64_t>(4, 0);
  // Heads in parallel only by the hundred thousand multiply-adds: waking a worker thread costs tens of microseconds.
  const auto grain = std::max<int64_t>(1, (int64_t(1) << 18) / (keys * (size + value_size)));
  const vec::Table* lanes = &vec::table();
  float* lse = logsumexp.data_ptr<float>();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, q.scalar_type(), "decode_attention", [&] {
    const scalar_t *qp = q.const_data_ptr<scalar_t>(), *kp = k.const_data_ptr<scalar_t>();
    const scalar_t* vp = v.const_data_ptr<scalar_t>();
    const scalar_t* mp = mask.defined() ? mask.const_data_ptr<scalar_t>() : nullptr;
    scalar_t* op = out.data_ptr<scalar_t>();
    launch_on(out, "aten::_scaled_dot_product_fused_attention_overrideable", [=] {
      constexpr bool in_place = std::is_same_v<scalar_t, float>;
      at::parallel_for(0, batch * heads, grain, [&](int64_t lo, int64_t hi) {
        const SerialBlas serial;  // one head's products are small
        std::vector<float> scores(keys), query(size), acc(value_size);
        std::vector<float> key_rows(in_place ? 0 : keys * size), value_rows(in_place ? 0 : keys * value_size);
        for (int64_t item = lo; item < hi; ++item) {
          const int64_t b = item / heads, h = item % heads;
          const scalar_t *kh = kp + b * ks[0] + h * ks[1], *vh = vp + b * vs[0] + h * vs[1];
          const float *kf, *vf;
          int64_t k_ld, v_ld;
          if (in_place) {  // (the dispatch's cases are not templates: every branch compiles for every type)
            kf = reinterpret_cast<const float*>(kh), vf = reinterpret_cast<const float*>(vh), k_ld = ks[2], v_ld = vs[2];
          } else {
            for (int64_t t = 0; t < keys; ++t) {
              as_float(kh + t * ks[2], size, key_rows.data() + t * size);
              as_float(vh + t * vs[2], value_size, value_rows.data() + t * value_size);
            }
            kf = key_rows.data(), vf = value_rows.data(), k_ld = size, v_ld = value_size;
          }
          const float* qf = as_float(qp + b * qs[0] + h * qs[1], size, query.data());
          gemm_rowmajor<float>(1, size, keys, static_cast<float>(scale), qf, size, false, kf, k_ld, true, 0.f,
                               scores.data(), keys);
          int64_t top = 0;
          for (int64_t t = 0; t < keys; ++t) {
            if (mp) scores[t] += static_cast<float>(mp[b * ms[0] + h * ms[1] + t * ms[3]]);
            if (scores[t] > scores[top]) top = t;
          }
          scalar_t* oh = op + b * os[0] + h * os[1];
          const float max_score = scores[top];
          if (max_score == -std::numeric_limits<float>::infinity()) {
            for (int64_t d = 0; d < value_size; ++d) oh[d * os[3]] = scalar_t(0);
            lse[item] = 0.f;
            continue;
          }
          lanes->softmax_rows_f32(scores.data(), scores.data(), 1, keys, false);
          gemm_rowmajor<float>(1, keys, value_size, 1.f, scores.data(), keys, false, vf, v_ld, false, 0.f, acc.data(),
                               value_size);
          for (int64_t d = 0; d < value_size; ++d) oh[d * os[3]] = static_cast<scalar_t>(acc[d]);
          lse[item] = max_score - std::log(scores[top]);
        }
      });
    });
  });
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor, at::Tensor, at::Tensor>
sdpa_fused(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
           const std::optional<at::Tensor>& attn_bias, double dropout_p, bool is_causal, bool return_debug_mask,
           std::optional<double> scale) {
  const at::Tensor bias = attn_bias.value_or(at::Tensor());
  check_same_device({&query, &key, &value, &bias});
  TORCH_CHECK(query.dim() == 4 && key.dim() == 4 && value.dim() == 4,
              "_scaled_dot_product_fused_attention_overrideable: the device's fused kernel takes 4-d "
              "(batch, heads, sequence, embedding) query, key and value");
  TORCH_CHECK(!return_debug_mask, "_scaled_dot_product_fused_attention_overrideable: no debug mask on rbln");
  const int64_t batch = query.size(0), heads = query.size(1), length = query.size(2);
  auto out = empty_like_layout(query, {batch, heads, length, value.size(-1)});
  auto logsumexp = at::empty({batch, heads, length}, query.options().dtype(at::toOpMathType(query.scalar_type())));
  if (is_decode(query, key, value, bias, dropout_p, is_causal)) {
    decode_attention(query, key, value, bias, scale.value_or(1.0 / std::sqrt(static_cast<double>(query.size(3)))), out,
                     logsumexp);
  } else {
    launch_library("aten::_scaled_dot_product_flash_attention_for_cpu", {query, key, value, bias}, {out, logsumexp},
                   [=](const Tensors& in) {
                     auto [o, lse] = at::_scaled_dot_product_flash_attention_for_cpu(
                         in[0], in[1], in[2], dropout_p, is_causal, optional_of(in[3]), scale);
                     return Tensors{o, lse};
                   });
  }
  // No dropout, so no random state: the seed and offset are host zeros, as CUDA's flash gives outside graph capture.
  auto no_state = [] { return at::zeros({}, at::kLong); };
  return {out, logsumexp, at::Tensor(), at::Tensor(), length, key.size(2), no_state(), no_state(), at::Tensor()};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> sdpa_fused_backward(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& attn_bias, std::array<bool, 4> grad_input_mask, const at::Tensor& out,
    const at::Tensor& logsumexp, const at::Tensor& cum_seq_q, const at::Tensor& cum_seq_k, c10::SymInt max_q,
    c10::SymInt max_k, double dropout_p, bool is_causal, const at::Tensor& philox_seed,
    const at::Tensor& philox_offset, std::optional<double> scale) {
  check_same_device({&grad_out, &query, &key, &value, &attn_bias, &out, &logsumexp});
  // CPU's flash backward has no mask gradient; scaled_dot_product_attention takes
  // the math path when the mask requires grad, as CPU does.
  TORCH_CHECK(!grad_input_mask[3],
              "_scaled_dot_product_fused_attention_overrideable_backward: the fused kernel has no attn_bias gradient");
  auto grad_query = at::empty_like(query), grad_key = at::empty_like(key), grad_value = at::empty_like(value);
  launch_library("aten::_scaled_dot_product_flash_attention_for_cpu_backward",
                 {grad_out, query, key, value, out, logsumexp, attn_bias}, {grad_query, grad_key, grad_value},
                 [=](const Tensors& in) {
                   auto [gq, gk, gv] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
                       in[0], in[1], in[2], in[3], in[4], in[5], dropout_p, is_causal, optional_of(in[6]), scale);
                   return Tensors{gq, gk, gv};
                 });
  return {grad_query, grad_key, grad_value, at::Tensor()};
}

}  // namespace rbln::kernels

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &rbln::kernels::choose_sdp_backend)
}  // namespace at::native
