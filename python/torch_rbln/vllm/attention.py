"""A paged-attention backend for vLLM on rbln: `index_put_` writes new keys and values into their cache slots, and
one call of the device kernel rbln::paged_attention (ops.yaml, kernels/nn/PagedAttention.cpp) computes every
scheduled token's attention (prefills, chunks of prefills and decoded tokens alike), reading each request's keys
and values in place through its row of the block table.

The KV cache is vLLM's `[num_blocks, num_kv_heads, block_size, 2 * head_size]` layout (keys, then values, on
the last dimension). Memory does not grow with the context beyond one score a key (docs/serving.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from vllm.v1.attention.backend import (
    AttentionBackend,
    AttentionCGSupport,
    AttentionImpl,
    AttentionMetadataBuilder,
    AttentionType,
    CommonAttentionMetadata,
)


@dataclass
class RBLNAttentionMetadata:
    """On the device: the scheduled tokens' start offsets per request, the requests' context lengths, block table
    rows and the tokens' cache slots."""
    num_actual_tokens: int
    query_start_loc: torch.Tensor  # [num_reqs + 1]
    seq_lens: torch.Tensor  # [num_reqs]
    block_table: torch.Tensor  # [num_reqs, max_blocks]
    slot_mapping: torch.Tensor  # [num_tokens]


class RBLNAttentionMetadataBuilder(AttentionMetadataBuilder[RBLNAttentionMetadata]):
    # Graphs of decode steps: the kernel reads offsets, lengths and block rows from the device at each replay.
    _cudagraph_support: ClassVar[AttentionCGSupport] = AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE

    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):  # abstract in vLLM's base class
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata,
              fast_build: bool = False) -> RBLNAttentionMetadata:
        m = common_attn_metadata
        return RBLNAttentionMetadata(
            num_actual_tokens=m.num_actual_tokens,
            query_start_loc=m.query_start_loc[: m.num_reqs + 1],
            seq_lens=m.seq_lens[: m.num_reqs],
            block_table=m.block_table_tensor[: m.num_reqs],
            slot_mapping=m.slot_mapping,
        )


class RBLNAttentionBackend(AttentionBackend):
    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float32, torch.float16, torch.bfloat16]
    forward_includes_kv_cache_update: bool = False

    @staticmethod
    def get_name() -> str:
        return "CUSTOM"

    @staticmethod
    def get_impl_cls() -> type[RBLNAttentionImpl]:
        return RBLNAttentionImpl

    @staticmethod
    def get_builder_cls() -> type[RBLNAttentionMetadataBuilder]:
        return RBLNAttentionMetadataBuilder

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        return attn_type == AttentionType.DECODER


class RBLNAttentionImpl(AttentionImpl):
    def __init__(self, num_heads, head_size, scale, num_kv_heads=None, alibi_slopes=None, sliding_window=None,
                 kv_cache_dtype="auto", logits_soft_cap=None, attn_type=AttentionType.DECODER,
                 kv_sharing_target_layer_name=None, sinks=None, **kwargs) -> None:
        if kv_cache_dtype not in ("auto", "float32", "float16", "bfloat16"):
            raise NotImplementedError(f"rbln attention: kv_cache_dtype={kv_cache_dtype!r} is not supported")
        if attn_type != AttentionType.DECODER:
            raise NotImplementedError(f"rbln attention: attn_type={attn_type!r} is not supported")
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads or num_heads
        self.sliding_window = sliding_window or 0
        self.logits_soft_cap = float(logits_soft_cap or 0.0)
        self.kv_cache_dtype = kv_cache_dtype
        # ALiBi's per-head slopes (a list from the model) and attention sinks (a per-head parameter of the layer).
        self.alibi_slopes = None if alibi_slopes is None else torch.as_tensor(alibi_slopes, dtype=torch.float32)
        self.sinks = sinks

    def do_kv_cache_update(self, layer, key, value, kv_cache, slot_mapping) -> None:
        block_size = kv_cache.shape[2]
        # A padding token's slot is -1 (vLLM's PAD_SLOT_ID, in a graph's padded batch): it writes into the null
        # block 0, which no request reads.
        slots = slot_mapping[: key.shape[0]].clamp(min=0)
        blocks, offsets = slots // block_size, slots % block_size
        kv_cache[blocks, :, offsets, : self.head_size] = key
        kv_cache[blocks, :, offsets, self.head_size :] = value

    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output, output_scale=None,
                output_block_scale=None) -> torch.Tensor:
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("rbln attention: fused output quantization is not supported")
        if attn_metadata is None:  # the profiling run
            return output.fill_(0)
        m = attn_metadata
        n = m.num_actual_tokens
        if self.alibi_slopes is not None and self.alibi_slopes.device != query.device:
            self.alibi_slopes = self.alibi_slopes.to(query.device)
        out = torch.ops.rbln.paged_attention(query[:n], kv_cache, m.block_table, m.query_start_loc, m.seq_lens,
                                             self.scale, self.sliding_window, self.logits_soft_cap,
                                             self.alibi_slopes, self.sinks)
        output[:n] = out
        return output
