"""rbln::paged_attention (kernels/nn/PagedAttention.cpp), the device kernel of vLLM's attention on rbln: each
request's query tokens (the last tokens of its context: a prefill, a chunk of one, one decoded token) over its
context's keys and values, read in place through its row of the block table, against float64 causal attention
over the same keys and values gathered on the CPU."""
import math

import pytest
import torch

import torch_rbln  # noqa: F401

G = torch.Generator().manual_seed(0)
BLOCK, HEAD = 16, 32
TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def paged_case(contexts, heads, kv_heads, dtype, queries=None, num_blocks=24):
    """Queries (queries[r] tokens of request r, 1 each by default: decoding), a KV cache in vLLM's layout (a
    permuted view, as vLLM allocates it: its last dim contiguous), block tables that take each request's blocks
    from a shuffled pool, the query start offsets and the context lengths."""
    queries = queries or [1] * len(contexts)
    max_blocks = max(-(-c // BLOCK) for c in contexts) + 1
    storage = torch.randn(num_blocks, BLOCK, kv_heads, 2 * HEAD, generator=G).to(dtype)
    kv_cache = storage.permute(0, 2, 1, 3)  # [blocks, kv_heads, block_size, 2 * head_size]
    pool = torch.randperm(num_blocks, generator=G)
    table = torch.zeros(len(contexts), max_blocks, dtype=torch.int32)
    for r, c in enumerate(contexts):
        n = -(-c // BLOCK)
        table[r, :n] = pool[:n]
        pool = pool.roll(-n)
    query = torch.randn(sum(queries), heads, HEAD, generator=G).to(dtype)
    starts = torch.tensor([0] + queries, dtype=torch.int32).cumsum(0).int()
    return query, kv_cache, table, starts, torch.tensor(contexts, dtype=torch.int32)


def reference(query, kv_cache, table, starts, contexts, scale, window=0, softcap=0.0, slopes=None, sinks=None):
    """float64 causal attention of each request's query tokens (its context's last) over its gathered context (the
    last `window` keys up to each token if set), with ALiBi (slope * (key position - query position) added to the
    scores) and sinks (one more logit per head in the softmax, with no value) if given."""
    out = torch.empty(query.shape, dtype=torch.float64)
    group = query.shape[1] // kv_cache.shape[1]
    for r, c in enumerate(contexts.tolist()):
        kv = kv_cache[table[r, : -(-c // BLOCK)].long()].double()  # [n, kv_heads, block, 2 * head]
        kv = kv.transpose(0, 1).flatten(1, 2)[:, :c]  # [kv_heads, c, 2 * head]
        k, v = kv[..., :HEAD].repeat_interleave(group, 0), kv[..., HEAD:].repeat_interleave(group, 0)
        start, end = starts[r].item(), starts[r + 1].item()
        for t in range(start, end):
            last = c - end + t  # the token's position in the context
            first = max(0, last + 1 - window) if window else 0
            scores = torch.einsum("hd,htd->ht", query[t].double(), k[:, first:last + 1]) * scale
            if softcap:
                scores = softcap * torch.tanh(scores / softcap)
            if slopes is not None:
                scores = scores + slopes.double()[:, None] * (torch.arange(first, last + 1) - last).double()
            if sinks is not None:
                scores = torch.cat([scores, sinks.double()[:, None]], -1)
            weights = scores.softmax(-1)[:, : last + 1 - first]
            out[t] = torch.einsum("ht,htd->hd", weights, v[:, first:last + 1])
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("window,softcap", [(0, 0.0), (20, 0.0), (0, 5.0)], ids=["causal", "window", "softcap"])
@pytest.mark.parametrize("queries", [None, [1, 17, 8, 1, 5]], ids=["decode", "prefill-chunks-and-decode"])
def test_paged_attention_matches_float64_on_the_device(dtype, window, softcap, queries):
    # Requests of 1 to 64 keys: whole prefills (17 of 17), chunks (8 of 40, 5 of 5 after none), decoded tokens.
    query, kv_cache, table, starts, contexts = paged_case([1, 17, 40, 64, 5], heads=8, kv_heads=2, dtype=dtype,
                                                          queries=queries)
    scale = 1 / math.sqrt(HEAD)
    with torch.rbln.explain() as ex:
        out = torch.ops.rbln.paged_attention(query.rbln(), kv_cache.rbln(), table.rbln(), starts.rbln(),
                                             contexts.rbln(), scale, window, softcap)
        result = out.cpu()
    assert out.device.type == "rbln" and result.dtype == dtype and result.shape == query.shape
    assert ex.device_ops.get("rbln::paged_attention") == 1 and not ex.fallback_ops
    expected = reference(query, kv_cache, table, starts, contexts, scale, window, softcap)
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(result.double(), expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("alibi,sinks", [(True, False), (False, True), (True, True)], ids=["alibi", "sinks", "both"])
def test_alibi_slopes_and_attention_sinks_match_float64(dtype, alibi, sinks):
    # vLLM's ALiBi models pass per-head slopes, gpt-oss-style models a per-head sink logit (a parameter, bfloat16).
    query, kv_cache, table, starts, contexts = paged_case([1, 17, 40, 64, 5], heads=8, kv_heads=2, dtype=dtype,
                                                          queries=[1, 17, 8, 1, 5])
    slopes = 2.0 ** -torch.arange(1, 9, dtype=torch.float32) if alibi else None
    sink = torch.randn(8, generator=G).to(dtype) * 3 if sinks else None
    scale = 1 / math.sqrt(HEAD)
    with torch.rbln.explain() as ex:
        out = torch.ops.rbln.paged_attention(query.rbln(), kv_cache.rbln(), table.rbln(), starts.rbln(),
                                             contexts.rbln(), scale, 0, 0.0,
                                             None if slopes is None else slopes.rbln(),
                                             None if sink is None else sink.rbln()).cpu()
    assert ex.device_ops.get("rbln::paged_attention") == 1 and not ex.fallback_ops
    expected = reference(query, kv_cache, table, starts, contexts, scale, slopes=slopes, sinks=sink)
    torch.testing.assert_close(out.double(), expected, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])
    with pytest.raises(RuntimeError, match=r"expected alibi_slopes \[8\]"):
        torch.ops.rbln.paged_attention(query.rbln(), kv_cache.rbln(), table.rbln(), starts.rbln(), contexts.rbln(),
                                       scale, 0, 0.0, torch.ones(3, device="rbln"), None)


def test_one_request_one_key_and_int64_tables():
    """A context of one key returns its value whatever the scores; int64 tables, offsets and lengths read the same."""
    case = paged_case([1, 33], heads=4, kv_heads=4, dtype=torch.float32)
    query, kv_cache, table = case[:3]
    out = torch.ops.rbln.paged_attention(*(t.long().rbln() if t.dtype == torch.int32 else t.rbln() for t in case),
                                         0.125).cpu()
    assert torch.equal(out[0], kv_cache[table[0, 0].long(), :, 0, HEAD:])  # [heads, head_size]
    torch.testing.assert_close(out.double(), reference(*case, 0.125), rtol=1e-5, atol=1e-5)


def test_a_padded_batch_gives_padding_tokens_zeros():
    """vLLM pads a replayed graph's batch to its captured size: the padding requests have no query tokens and no
    context (block table rows of the null block 0), and the query tokens after the last request's are padding.
    The real tokens attend as without padding; the padding tokens' outputs are zeros."""
    query, kv_cache, table, starts, contexts = paged_case([5, 20], heads=4, kv_heads=2, dtype=torch.float32)
    padded = (torch.cat([query, torch.randn(2, 4, HEAD, generator=G)]), kv_cache,
              torch.cat([table, torch.zeros(2, table.shape[1], dtype=torch.int32)]),
              torch.tensor([0, 1, 2, 2, 2], dtype=torch.int32), torch.tensor([5, 20, 0, 0], dtype=torch.int32))
    out = torch.ops.rbln.paged_attention(*(t.rbln() for t in padded), 0.125).cpu()
    torch.testing.assert_close(out[:2].double(), reference(query, kv_cache, table, starts, contexts, 0.125),
                               rtol=1e-5, atol=1e-5)
    assert torch.equal(out[2:], torch.zeros(2, 4, HEAD))


@pytest.mark.parametrize("case,error,message", [
    ("dtype", NotImplementedError, "not implemented for 'Int'"),
    ("last_dim", RuntimeError, "must be 2 \\* head_size"),
    ("heads", RuntimeError, "not a multiple of"),
    ("starts", RuntimeError, "expected query_start_loc \\[3\\]"),
    ("device", RuntimeError, "Expected all tensors to be on the same device"),
])
def test_bad_arguments_raise_before_the_launch(case, error, message):
    query, kv_cache, table, starts, contexts = (t.rbln() for t in paged_case([3, 20], heads=4, kv_heads=2,
                                                                             dtype=torch.float32))
    if case == "dtype":
        query = query.int()
    elif case == "last_dim":
        kv_cache = kv_cache[..., :-1]
    elif case == "heads":
        query = query[:, :3]
    elif case == "starts":
        starts = starts[:2]
    else:
        table = table.cpu()
    with pytest.raises(error, match=message):
        torch.ops.rbln.paged_attention(query, kv_cache, table, starts, contexts, 0.5)


@pytest.mark.parametrize("case,message", [("context", "context length 99 of request 1"),
                                          ("short_context", "context length 2 of request 1 is not in \\[3, "),
                                          ("starts", "query_start_loc must run from 0 to at most the 4 query tokens"),
                                          ("block", "block 1000 of request 0 is out of bounds")])
def test_bad_table_values_fail_at_the_next_synchronizing_call_and_the_device_goes_on(case, message):
    """Offsets, lengths and block numbers are device data: checked in the kernel, the error reaches the next
    synchronizing call, as a device-side assert's does on CUDA, and the device keeps working."""
    query, kv_cache, table, starts, contexts = paged_case([3, 20], heads=4, kv_heads=2, dtype=torch.float32,
                                                          queries=[1, 3])
    if case == "context":
        contexts[1] = 99
    elif case == "short_context":
        contexts[1] = 2  # fewer keys than its 3 query tokens
    elif case == "starts":
        starts[2] = 5
    else:
        table[0, 0] = 1000
    out = torch.ops.rbln.paged_attention(query.rbln(), kv_cache.rbln(), table.rbln(), starts.rbln(), contexts.rbln(),
                                         0.5)
    with pytest.raises(RuntimeError, match=message):
        out.cpu()
    good = paged_case([7], heads=2, kv_heads=1, dtype=torch.float32, queries=[4])
    again = torch.ops.rbln.paged_attention(*(t.rbln() for t in good), 0.5).cpu()
    torch.testing.assert_close(again.double(), reference(*good, 0.5), rtol=1e-5, atol=1e-5)


def test_compiled_and_fake_tensors_trace_the_operator():
    """Its fake function gives torch.compile (one graph, no break) and FakeTensor the output's shape and dtype."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    case = paged_case([9, 30], heads=4, kv_heads=2, dtype=torch.float32, queries=[9, 2])
    attention = torch.compile(lambda *t: torch.ops.rbln.paged_attention(*t, 0.25, 8) * 2, fullgraph=True)
    with torch.rbln.explain() as ex:
        out = attention(*(t.rbln() for t in case)).cpu()
    assert ex.device_ops.get("rbln::paged_attention") == 1 and not ex.fallback_ops
    torch.testing.assert_close(out.double(), 2 * reference(*case, 0.25, 8), rtol=1e-5, atol=1e-5)
    on_device = [t.rbln() for t in case]
    with FakeTensorMode() as mode:
        fake = torch.ops.rbln.paged_attention(*(mode.from_tensor(t) for t in on_device), 0.25)
    assert fake.shape == case[0].shape and fake.dtype == torch.float32 and fake.device.type == "rbln"
