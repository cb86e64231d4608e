"""The fake (meta) functions of rbln's own operators (the `rbln::` entries of ops.yaml, defined with their kernels
in the generated registrations): the output's shape, dtype and device without computing it, so torch.compile,
torch.export and FakeTensor trace them as they trace ATen's."""
import torch


@torch.library.register_fake("rbln::paged_attention")
def _paged_attention(query, kv_cache, block_table, query_start_loc, context_lens, scale, sliding_window=0,
                     softcap=0.0, alibi_slopes=None, sinks=None):
    return torch.empty_like(query, memory_format=torch.contiguous_format)
