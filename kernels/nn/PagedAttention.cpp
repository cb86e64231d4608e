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
#include <utility>
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

// A block's rows from `first_row` on (`count` tokens' keys, or values) in float, with their stride: in place for
// float32, else converted row by row into `buffer` (block_size rows of head_size).
template <class T>
std::pair<const float*, int64_t> block_rows(const T* first_row, int64_t token_stride, int64_t count,
                                            int64_t head_size, float* buffer) {
  if constexpr (std::is_same_v<T, float>) return {first_row, token_stride};
  for (int64_t i = 0; i < count; ++i) as_float(first_row + i * token_stride, head_size, buffer + i * head_size);
  return {buffer, head_size};
}

// One query token's `group` heads that share a KV head: two passes over its keys, a block's run of tokens at a
// time (scores, then the weighted values), each row read once for the group (the kernel is bound by reading the
// cache), in float. ALiBi adds slope * (key position - query position) to a score (after soft-capping, as
// vLLM's kernels); a sink is one more logit in the softmax's denominator with no value. `slopes` and `sinks`
// hold the group's (null: none). `scores`, `totals`, `acc` and `rows` are the caller's scratch.
template <class T>
void attend(const float* q, int64_t group, const T* cache, int64_t block_stride, int64_t token_stride,
            int64_t head_size, const std::vector<int64_t>& blocks, int64_t block_size, int64_t first, int64_t context,
            float scale, float softcap, const float* slopes, const float* sinks, std::vector<float>& scores,
            float* totals, float* acc, float* rows, T* out) {
  const int64_t n = context - first;
  scores.resize(group * n);
  auto each_run = [&](int64_t offset, auto&& use) {  // the tokens [first, context) by runs within a block
    for (int64_t t = first; t < context;) {
      const int64_t count = std::min(context - t, block_size - t % block_size);
      const T* start = cache + blocks[t / block_size] * block_stride + (t % block_size) * token_stride + offset;
      const auto [r, stride] = block_rows(start, token_stride, count, head_size, rows);
      for (int64_t g = 0; g < group; ++g) use(g, t - first, r, stride, count);
      t += count;
    }
  };
  each_run(0, [&](int64_t g, int64_t i, const float* r, int64_t stride, int64_t count) {
    head_dots(q + g * head_size, r, stride, count, scores.data() + g * n + i, head_size);
  });
  for (int64_t g = 0; g < group; ++g) {
    float* s = scores.data() + g * n;
    const float slope = slopes ? slopes[g] : 0.f, sink = sinks ? sinks[g] : -std::numeric_limits<float>::infinity();
    float max_score = sink;
    for (int64_t i = 0; i < n; ++i) {
      float x = s[i] * scale;
      if (softcap > 0.f) x = softcap * std::tanh(x / softcap);
      x += slope * static_cast<float>(first + i - (context - 1));
      s[i] = x;
      max_score = std::max(max_score, x);
    }
    float total = sinks ? std::exp(sink - max_score) : 0.f;
    for (int64_t i = 0; i < n; ++i) total += (s[i] = std::exp(s[i] - max_score));
    totals[g] = total;
  }
  std::fill(acc, acc + group * head_size, 0.f);
  each_run(head_size, [&](int64_t g, int64_t i, const float* r, int64_t stride, int64_t count) {
    head_axpys(scores.data() + g * n + i, r, stride, count, acc + g * head_size, head_size);
  });
  for (int64_t g = 0; g < group; ++g)
    for (int64_t d = 0; d < head_size; ++d) out[g * head_size + d] = static_cast<T>(acc[g * head_size + d] / totals[g]);
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
      at::parallel_for(0, tokens * kv_heads, 1, [&](int64_t lo, int64_t hi) {
        std::vector<float> scores, totals(group), qf(group * head_size), acc(group * head_size),
            rows(block_size * head_size);
        for (int64_t item = lo; item < hi; ++item) {  // a token's heads sharing one KV head
          const int64_t t = item / kv_heads, h = item % kv_heads * group, r = request_of[t], last = position_of[t];
          const int64_t at = (t * heads + h) * head_size;
          if (r < 0) {
            std::fill_n(op_out + at, group * head_size, scalar_t(0));
            continue;
          }
          const int64_t first = sliding_window > 0 ? std::max<int64_t>(0, last + 1 - sliding_window) : 0;
          for (int64_t d = 0; d < group * head_size; ++d) qf[d] = static_cast<float>(qp[at + d]);
          attend(qf.data(), group, cache + (h / group) * head_stride, block_stride, token_stride, head_size,
                 blocks[r], block_size, first, last + 1, static_cast<float>(scale), static_cast<float>(softcap),
                 slope_p ? slope_p + h : nullptr, sink_p ? sink_p + h : nullptr, scores, totals.data(), acc.data(),
                 rows.data(), op_out + at);
        }
      });
    });
  });
  return out;
}

}  // namespace rbln::kernels
