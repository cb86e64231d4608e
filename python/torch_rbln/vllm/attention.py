"""A paged-attention backend for vLLM on rbln: new keys and values go into their cache slots with index_put_; the
requests that decode one token share one call of the device kernel rbln::paged_attention_decode (ops.yaml,
kernels/nn/PagedAttention.cpp), which reads each request's keys and values in place through its row of the block
table; each prefill (or chunk of one) gathers its blocks and runs scaled_dot_product_attention.

The KV cache is vLLM's `[num_blocks, num_kv_heads, block_size, 2 * head_size]` layout (keys, then values, on
the last dimension). Decode memory does not grow with the context beyond one score a key (docs/serving.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from vllm.v1.attention.backend import (
    AttentionBackend,
    AttentionImpl,
    AttentionMetadataBuilder,
    AttentionType,
    CommonAttentionMetadata,
)


@dataclass
class RBLNAttentionMetadata:
    num_actual_tokens: int
    # Host copies: the per-request loop slices with them (one device-to-host copy per step, not per layer).
    query_start_loc_cpu: list[int]
    seq_lens_cpu: list[int]
    block_table: torch.Tensor  # [num_reqs, max_blocks] on the device
    slot_mapping: torch.Tensor  # [num_tokens] on the device
    # The requests that decode one token, in one kernel call (None when there are none).
    decodes: DecodeBatch | None


@dataclass
class DecodeBatch:
    """On the device: the decoding requests' rows of the block table, their query positions and context lengths."""
    rows: torch.Tensor
    positions: torch.Tensor
    contexts: torch.Tensor


class RBLNAttentionMetadataBuilder(AttentionMetadataBuilder[RBLNAttentionMetadata]):
    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.block_size = kv_cache_spec.block_size

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata,
              fast_build: bool = False) -> RBLNAttentionMetadata:
        m = common_attn_metadata
        starts = m.query_start_loc_cpu[: m.num_reqs + 1].tolist()
        seq_lens = m.seq_lens[: m.num_reqs].tolist()
        decodes = [i for i in range(m.num_reqs) if starts[i + 1] - starts[i] == 1]
        return RBLNAttentionMetadata(
            num_actual_tokens=m.num_actual_tokens,
            query_start_loc_cpu=starts,
            seq_lens_cpu=seq_lens,
            block_table=m.block_table_tensor,
            slot_mapping=m.slot_mapping,
            decodes=self._decode_batch(decodes, starts, seq_lens) if decodes else None,
        )

    def _decode_batch(self, decodes: list[int], starts: list[int], seq_lens: list[int]) -> DecodeBatch:
        # One host-to-device copy per step (not per layer), queued without waiting.
        host = torch.tensor([decodes, [starts[i] for i in decodes], [seq_lens[i] for i in decodes]], pin_memory=True)
        rows, positions, contexts = host.to(self.device, non_blocking=True).unbind(0)
        return DecodeBatch(rows, positions, contexts)


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
        if alibi_slopes is not None or logits_soft_cap or sinks is not None:
            raise NotImplementedError("rbln attention: ALiBi, soft-capping and sinks are not supported yet")
        if kv_cache_dtype not in ("auto", "float32", "float16", "bfloat16"):
            raise NotImplementedError(f"rbln attention: kv_cache_dtype={kv_cache_dtype!r} is not supported")
        if attn_type != AttentionType.DECODER:
            raise NotImplementedError(f"rbln attention: attn_type={attn_type!r} is not supported")
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads or num_heads
        self.sliding_window = sliding_window
        self.kv_cache_dtype = kv_cache_dtype

    def do_kv_cache_update(self, layer, key, value, kv_cache, slot_mapping) -> None:
        block_size = kv_cache.shape[2]
        slots = slot_mapping[: key.shape[0]]
        blocks, offsets = slots // block_size, slots % block_size
        kv_cache[blocks, :, offsets, : self.head_size] = key
        kv_cache[blocks, :, offsets, self.head_size :] = value

    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output, output_scale=None,
                output_block_scale=None) -> torch.Tensor:
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("rbln attention: fused output quantization is not supported")
        if attn_metadata is None:  # the profiling run
            return output.fill_(0)
        block_size = kv_cache.shape[2]
        starts = attn_metadata.query_start_loc_cpu
        decodes = attn_metadata.decodes
        if decodes is not None:
            self._decode(query, kv_cache, attn_metadata.block_table, decodes, output)
        for i, context in enumerate(attn_metadata.seq_lens_cpu):
            start, end = starts[i], starts[i + 1]
            if end - start <= 1:  # nothing scheduled, or decoded above
                continue
            table = attn_metadata.block_table[i : i + 1, : -(-context // block_size)]
            k, v = (t[0, :, :context] for t in self._gather(kv_cache, table))
            q = query[start:end].transpose(0, 1)  # [Hq, L, D]
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=self._mask(end - start, context, q.device), scale=self.scale,
                enable_gqa=self.num_heads != self.num_kv_heads,
            )
            output[start:end] = out.transpose(0, 1)
        return output

    def _decode(self, query, kv_cache, block_table, decodes: DecodeBatch, output) -> None:
        """The requests that decode one token, in one call of the device kernel over the blocks in place."""
        out = torch.ops.rbln.paged_attention_decode(
            query.index_select(0, decodes.positions), kv_cache, block_table.index_select(0, decodes.rows),
            decodes.contexts, self.scale, self.sliding_window or 0)
        output.index_copy_(0, decodes.positions, out.to(output.dtype))

    def _gather(self, kv_cache, table: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values [R, H, blocks * block_size, D] of the blocks of `table` [R, blocks], in order."""
        count, num_blocks = table.shape
        blocks = kv_cache.index_select(0, table.reshape(-1))  # [R * blocks, H, block_size, 2D]
        kv = blocks.view(count, num_blocks, *blocks.shape[1:]).transpose(1, 2).flatten(2, 3)
        return kv[..., : self.head_size], kv[..., self.head_size :]

    def _visible(self, key_pos: torch.Tensor, query_pos: torch.Tensor) -> torch.Tensor:
        """Which keys a query sees: causal, and within the sliding window."""
        mask = key_pos <= query_pos
        if self.sliding_window is not None:
            mask &= key_pos > query_pos - self.sliding_window
        return mask

    def _mask(self, length: int, context: int, device: torch.device) -> torch.Tensor | None:
        """Causal (queries are the last `length` positions of the context) and the sliding window; None when
        every query sees every key (a decode step without a window)."""
        if length == 1 and (self.sliding_window is None or context <= self.sliding_window):
            return None
        query_pos = torch.arange(context - length, context, device=device).unsqueeze(1)
        return self._visible(torch.arange(context, device=device).unsqueeze(0), query_pos)
