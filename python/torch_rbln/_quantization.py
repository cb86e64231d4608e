"""Quantized inference on rbln: the answers of the patches listed in torch_rbln/_patches.py (docs/quantization.md)."""
from __future__ import annotations

import threading

import torch

from torch_rbln import _patches

HARDWARE_CHECK = "torchao.quantization.quant_api._check_hardware_support"


# ---- torch: out_dtype(mm, int32, int8, int8), what torchao's int8 matmul calls ----------------------------------
def rbln_operands(op, output_dtype, args) -> bool:
    return any(isinstance(a, torch.Tensor) and a.device.type == "rbln" for a in args)


def int_mm_on_rbln(op, output_dtype, args) -> bool:
    """Whether out_dtype runs the product as torch._int_mm: upstream's conditions, with rbln in CUDA's place."""
    return (op is torch.ops.aten.mm.default and output_dtype == torch.int32 and len(args) == 2
            and all(a.dtype == torch.int8 and a.device.type == "rbln" for a in args))


# ---- torchao ------------------------------------------------------------------------------------------------------
def float8_hardware_check(granularities) -> None:
    """rbln's torch._scaled_mm takes per-tensor and per-row scales (tests/python/test_quantized_mm.py); other
    granularities (1x128 by 128x128 blocks, torchao's Triton kernel) get torchao's own check and its error."""
    from torchao.quantization.granularity import PerRow, PerTensor

    for kind in (PerTensor, PerRow):
        if all(isinstance(g, kind) for g in granularities):
            return None
    return _patches.originals[HARDWARE_CHECK](granularities)


TILE_PACKED_FROM_HP = ("torchao.quantization.quantize_.workflows.int4.int4_tile_packed_to_4d_tensor"
                       ".Int4TilePackedTo4dTensor.from_hp")
_packing = threading.local()  # packing.depth > 0: this thread runs torchao's from_hp for a weight on rbln


def rbln_weight(hp_tensor, *args, **kwargs) -> bool:
    return isinstance(hp_tensor, torch.Tensor) and hp_tensor.device.type == "rbln"


def tile_packed_from_hp(hp_tensor, *args, **kwargs):
    """torchao's Int4TilePackedTo4dTensor.from_hp with its CUDA capability question answered (tinygemm_capability):
    it packs with rbln's _convert_weight_to_int4pack, CUDA's layout (kernels/quantized/Int4Tinygemm.cpp)."""
    _packing.depth = getattr(_packing, "depth", 0) + 1
    try:
        return _patches.originals[TILE_PACKED_FROM_HP](hp_tensor, *args, **kwargs)
    finally:
        _packing.depth -= 1


def packing_for_rbln(*args, **kwargs) -> bool:
    return getattr(_packing, "depth", 0) > 0


def tinygemm_capability(*args, **kwargs) -> tuple[int, int]:
    return (8, 0)  # sm80: what torchao requires of CUDA for its tinygemm int4 kernels
