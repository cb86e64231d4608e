"""Convolution strides under fake tensors (torch.compile, torch.export) as rbln's kernels give them.

PyTorch's fake convolution (`torch._subclasses.fake_impls.conv`) takes the memory format
of a convolution's result from `torch._C._conv_determine_backend_memory_format`, which
answers contiguous for every PrivateUse1 device (the Overrideable backend's rule) whatever
the operands. rbln's convolutions return CUDA's layout (channels_last in, channels_last
out: kernels/nn/Convolution.h), so the replacement answers as upstream for every other device
and, for rbln operands, with the kernels' own rule. Installed once, at import: fake tensors
on rbln exist without Inductor (torch.export). docs/compile.md lists it with the upstream
change that would remove it.
"""
from __future__ import annotations

import torch

from . import _C

_upstream = torch._C._conv_determine_backend_memory_format


def _determine_backend_memory_format(input, weight, backend):
    if input.device.type == "rbln":
        return getattr(torch, _C._convolution_memory_format(input, weight))
    return _upstream(input, weight, backend)


def install() -> None:
    torch._C._conv_determine_backend_memory_format = _determine_backend_memory_format
