"""Device-op implementations of the Triton kernels vLLM's model runner launches, registered through vLLM's
kernel dispatcher (Platform.register_triton_kernel_overrides): rbln runs no Triton."""
from __future__ import annotations

import torch


def compute_slot_mapping(num_tokens, max_num_tokens, query_start_loc, positions, block_table, block_table_stride,
                         slot_mapping, KV_CACHE_BLOCK_SIZE, TOTAL_CP_WORLD_SIZE, TOTAL_CP_RANK,
                         CP_KV_CACHE_INTERLEAVE_SIZE, PAD_ID, BLOCK_SIZE) -> None:
    """vllm.v1.worker.block_table.ComputeSlotMappingKernel.kernel: each scheduled token's KV-cache slot (its
    request's block for its position, times the block size, plus the offset in the block); PAD_ID after."""
    if TOTAL_CP_WORLD_SIZE != 1:
        raise NotImplementedError("rbln: context parallelism is not supported")
    tokens = torch.arange(num_tokens, device=positions.device, dtype=query_start_loc.dtype)
    requests = torch.searchsorted(query_start_loc[1:], tokens, right=True)
    pos = positions[:num_tokens]
    blocks = block_table[requests, pos // KV_CACHE_BLOCK_SIZE].to(torch.int64)
    slot_mapping[:num_tokens] = blocks * KV_CACHE_BLOCK_SIZE + pos % KV_CACHE_BLOCK_SIZE
    slot_mapping[num_tokens:max_num_tokens] = PAD_ID


OVERRIDES = {"vllm.v1.worker.block_table.ComputeSlotMappingKernel.kernel": compute_slot_mapping}
