// Attention over a paged KV cache (vLLM's layout), read in place: each request's query tokens (the last tokens of
// its context: a prefill, a chunk of one, or one decoded token) attend causally to the keys and values of its
// context through its row of the block table, with no gather of the blocks and memory that does not grow with
// the context beyond one score a key.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "generated/RBLNNativeFunctions.h"
#include "kernels/common/Common.h"
#include "kernels/nn/AttentionMath.h"

namespace rbln::kernels {
namespace {
constexpr char op[] = "rbln::paged_attention";

template <class I>
int64_t read_index(const void* base, int64_t i) {
  return static_cast<int64_t>(static_cast<const I*>(base)[i]);
}

// One (query token, head): two passes over its keys (scores, then the weighted values), in float. ALiBi adds
// slope * (key position - query position) to a score (after soft-capping, as vLLM's kernels); a sink is one more
// logit in the softmax's denominator with no value (-inf: none).
template <class T>
void attend(const float* q, const T* cache, int64_t block_stride, int64_t token_stride, int64_t head_size,
            const std::vector<int64_t>& blocks, int64_t block_size, int64_t first, int64_t context, float scale,
            float softcap, float slope, float sink, std::vector<float>& scores, float* acc, float* row, T* out) {
  scores.resize(context - first);
  float max_score = sink;
  for (int64_t t = first; t < context; ++t) {
    const T* k = cache + blocks[t / block_size] * block_stride + (t % block_size) * token_stride;
    float s = head_dot(q, as_float(k, head_size, row), head_size) * scale;
    if (softcap > 0.f) s = softcap * std::tanh(s / softcap);
    s += slope * static_cast<float>(t - (context - 1));
    scores[t - first] = s;
    max_score = std::max(max_score, s);
  }
  float total = sink == -std::numeric_limits<float>::infinity() ? 0.f : std::exp(sink - max_score);
  for (float& s : scores) total += (s = std::exp(s - max_score));
  std::fill(acc, acc + head_size, 0.f);
  for (int64_t t = first; t < context; ++t) {
    const T* v = cache + blocks[t / block_size] * block_stride + (t % block_size) * token_stride + head_size;
    head_axpy(scores[t - first], as_float(v, head_size, row), acc, head_size);
  }
  for (int64_t d = 0; d < head_size; ++d) out[d] = static_cast<T>(acc[d] / total);
}
}  // namespace

at::Tensor paged_attention(const at::Tensor& query, const at::Tensor& kv_cache, const at::Tensor& block_table,
                           const at::Tensor& query_start_loc, const at::Tensor& context_lens, double scale,
                           int64_t sliding_window, double softcap, const std::optional<at::Tensor>& alibi_slopes,
                           const std::optional<at::Tensor>& sinks) {
  TORCH_CHECK(query.dim() == 3, op, ": expected query [tokens, heads, head_size], got ", query.sizes());
  TORCH_CHECK(kv_cache.dim() == 4, op, ": expected kv_cache [blocks, kv_heads, block_size, 2 * head_size], got ",
              kv_cache.sizes());
  TORCH_CHECK(kv_cache.scalar_type() == query.scalar_type(), op, ": kv_cache has dtype ", kv_cache.scalar_type(),
              ", query ", query.scalar_type());
  const int64_t tokens = query.size(0), heads = query.size(1), head_size = query.size(2);
  const int64_t requests = context_lens.numel(), kv_heads = kv_cache.size(1), block_size = kv_cache.size(2);
  TORCH_CHECK(kv_cache.size(3) == 2 * head_size, op, ": kv_cache's last dim must be 2 * head_size (", 2 * head_size,
              "), got ", kv_cache.size(3));
  TORCH_CHECK(kv_heads > 0 && heads % kv_heads == 0, op, ": ", heads, " query heads are not a multiple of ", kv_heads,
              " kv heads");
  TORCH_CHECK(kv_cache.stride(3) == 1, op, ": kv_cache's last dim must be contiguous");
  for (const auto* index : {&block_table, &query_start_loc, &context_lens})
    TORCH_CHECK(index->scalar_type() == at::kInt || index->scalar_type() == at::kLong, op,
                ": block_table, query_start_loc and context_lens must be int32 or int64, got ", index->scalar_type());
  TORCH_CHECK(context_lens.dim() == 1, op, ": expected context_lens [requests], got ", context_lens.sizes());
  TORCH_CHECK(query_start_loc.dim() == 1 && query_start_loc.size(0) == requests + 1, op,
              ": expected query_start_loc [", requests + 1, "], got ", query_start_loc.sizes());
  TORCH_CHECK(block_table.dim() == 2 && block_table.size(0) == requests, op, ": expected block_table [", requests,
              ", max_blocks], got ", block_table.sizes());
  // Per-head ALiBi slopes and sinks, as float32 on the device.
  auto per_head = [&](const std::optional<at::Tensor>& t, const char* name) {
    if (!t.has_value() || !t->defined()) return at::Tensor();
    TORCH_CHECK(t->dim() == 1 && t->size(0) == heads, op, ": expected ", name, " [", heads, "], got ", t->sizes());
    TORCH_CHECK(at::isFloatingType(t->scalar_type()), op, ": ", name, " must be floating point, got ",
                t->scalar_type());
    return *t;
  };
  const at::Tensor slopes_in = per_head(alibi_slopes, "alibi_slopes"), sinks_in = per_head(sinks, "sinks");
  check_same_device({&query, &kv_cache, &block_table, &query_start_loc, &context_lens, &slopes_in, &sinks_in});
  auto out = at::empty(query.sizes(), query.options());
  if (out.numel() == 0) return out;
  const auto q = query.contiguous(), table = block_table.contiguous();
  const auto slopes = slopes_in.defined() ? slopes_in.to(at::kFloat).contiguous() : slopes_in;
  const auto sink_logits = sinks_in.defined() ? sinks_in.to(at::kFloat).contiguous() : sinks_in;
  const float* slope_p = slopes.defined() ? slopes.const_data_ptr<float>() : nullptr;
  const float* sink_p = sink_logits.defined() ? sink_logits.const_data_ptr<float>() : nullptr;
  const auto starts = query_start_loc.contiguous(), lens = context_lens.contiguous();
  const int64_t max_blocks = table.size(1), num_blocks = kv_cache.size(0);
  const int64_t block_stride = kv_cache.stride(0), head_stride = kv_cache.stride(1), token_stride = kv_cache.stride(2);
  auto reader = [](const at::Tensor& t) {
    const void* p = t.const_data_ptr();
    const bool int32 = t.scalar_type() == at::kInt;
    return [p, int32](int64_t i) { return int32 ? read_index<int32_t>(p, i) : read_index<int64_t>(p, i); };
  };
  const auto table_at = reader(table), start_at = reader(starts), length_at = reader(lens);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, query.scalar_type(), op, [&] {
    const scalar_t* qp = q.const_data_ptr<scalar_t>();
    const scalar_t* cache = kv_cache.const_data_ptr<scalar_t>();
    scalar_t* op_out = out.data_ptr<scalar_t>();
    launch_on(out, op, [=] {
      // Each request's tokens, context and blocks, checked before any is read (an error reaches the next
      // synchronizing call, as a device-side assert's does); then each token's request and position.
      auto fail = [](const std::string& what) { throw std::runtime_error(what); };
      std::vector<std::vector<int64_t>> blocks(requests);
      // Tokens after the last request's are padding (vLLM pads a graph's batch to its captured size): zeros.
      std::vector<int64_t> request_of(tokens, -1), position_of(tokens);
      if (start_at(0) != 0 || start_at(requests) > tokens)
        fail("query_start_loc must run from 0 to at most the " + std::to_string(tokens) + " query tokens");
      for (int64_t r = 0; r < requests; ++r) {
        const int64_t start = start_at(r), end = start_at(r + 1), context = length_at(r);
        if (end < start || end > tokens) fail("query_start_loc is not ascending at request " + std::to_string(r));
        if (context < end - start || context > max_blocks * block_size)
          fail("context length " + std::to_string(context) + " of request " + std::to_string(r) + " is not in [" +
               std::to_string(end - start) + ", " + std::to_string(max_blocks * block_size) + "]");
        for (int64_t b = 0; b < (context + block_size - 1) / block_size; ++b) {
          const int64_t block = table_at(r * max_blocks + b);
          if (block < 0 || block >= num_blocks)
            fail("block " + std::to_string(block) + " of request " + std::to_string(r) + " is out of bounds for " +
                 std::to_string(num_blocks) + " blocks");
          blocks[r].push_back(block);
        }
        for (int64_t t = start; t < end; ++t) {  // the query tokens are the context's last
          request_of[t] = r;
          position_of[t] = context - end + t;
        }
      }
      const int64_t group = heads / kv_heads;
      at::parallel_for(0, tokens * heads, 1, [&](int64_t lo, int64_t hi) {
        std::vector<float> scores, qf(head_size), acc(head_size), row(head_size);
        for (int64_t item = lo; item < hi; ++item) {
          const int64_t t = item / heads, h = item % heads, r = request_of[t], last = position_of[t];
          if (r < 0) {
            std::fill_n(op_out + item * head_size, head_size, scalar_t(0));
            continue;
          }
          const int64_t first = sliding_window > 0 ? std::max<int64_t>(0, last + 1 - sliding_window) : 0;
          for (int64_t d = 0; d < head_size; ++d) qf[d] = static_cast<float>(qp[item * head_size + d]);
          attend(qf.data(), cache + (h / group) * head_stride, block_stride, token_stride, head_size, blocks[r],
                 block_size, first, last + 1, static_cast<float>(scale), static_cast<float>(softcap),
                 slope_p ? slope_p[h] : 0.f, sink_p ? sink_p[h] : -std::numeric_limits<float>::infinity(), scores,
                 acc.data(), row.data(), op_out + item * head_size);
        }
      });
    });
  });
  return out;
}

}  // namespace rbln::kernels
