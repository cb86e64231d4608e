"""A paged-attention backend for vLLM written with device ops: new keys and values go into their cache slots
with index_put_; the requests that decode one token share an attention call per group of similar context
lengths over their blocks gathered with index_select (padded to the group's longest context, masked), and each
prefill (or chunk of one) runs its own.

The KV cache is vLLM's `[num_blocks, num_kv_heads, block_size, 2 * head_size]` layout (keys, then values, on
the last dimension). A request's context is gathered whole, so decode memory grows with the context length
(not with its square); a device kernel that reads the blocks in place replaces this (docs/serving.md).
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
    # The requests that decode one token when there are several, batched into one attention call per group of
    # similar context lengths (empty otherwise: each request runs its own).
    decode_groups: list[DecodeGroup]


@dataclass
class DecodeGroup:
    """Requests decoding one token whose contexts take between 2^(k-1) and 2^k blocks: `num_blocks`, the most
    any of them takes (what their gather pads to), and on the device their rows of the block table, query
    positions and context lengths."""
    num_blocks: int
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
            decode_groups=self._decode_groups(decodes, starts, seq_lens) if len(decodes) > 1 else [],
        )

    def _decode_groups(self, decodes: list[int], starts: list[int], seq_lens: list[int]) -> list[DecodeGroup]:
        # Grouped by the power of two of their block counts, so a gather pads each context to at most twice its
        # blocks (the gather is most of a decode step's device time); one host-to-device copy per step, queued
        # without waiting.
        blocks = {i: -(-seq_lens[i] // self.block_size) for i in decodes}
        by_size: dict[int, list[int]] = {}
        for i in decodes:
            by_size.setdefault((blocks[i] - 1).bit_length(), []).append(i)
        members = [by_size[k] for k in sorted(by_size)]
        order = [i for group in members for i in group]
        host = torch.tensor([order, [starts[i] for i in order], [seq_lens[i] for i in order]], pin_memory=True)
        device = host.to(self.device, non_blocking=True)
        groups, offset = [], 0
        for group in members:
            rows, positions, contexts = device[:, offset: offset + len(group)].unbind(0)
            groups.append(DecodeGroup(max(blocks[i] for i in group), rows, positions, contexts))
            offset += len(group)
        return groups


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
        batched = bool(attn_metadata.decode_groups)
        for group in attn_metadata.decode_groups:
            self._decode_batch(query, kv_cache, attn_metadata.block_table, group, output)
        for i, context in enumerate(attn_metadata.seq_lens_cpu):
            start, end = starts[i], starts[i + 1]
            if end == start or (batched and end - start == 1):
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

    def _decode_batch(self, query, kv_cache, block_table, group: DecodeGroup, output) -> None:
        """A group of requests that decode one token, in one attention call: their blocks gathered to the group's
        longest context, the keys past each request's context (and outside its window) masked."""
        k, v = self._gather(kv_cache, block_table.index_select(0, group.rows)[:, : group.num_blocks])
        q = query.index_select(0, group.positions).unsqueeze(2)  # [R, Hq, 1, D]
        key_pos = torch.arange(k.shape[2], device=query.device).view(1, 1, 1, -1)
        mask = self._visible(key_pos, group.contexts.view(-1, 1, 1, 1) - 1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale,
                                             enable_gqa=self.num_heads != self.num_kv_heads)
        output.index_copy_(0, group.positions, out.squeeze(2).to(output.dtype))

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
