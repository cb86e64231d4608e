"""Convolution strides under fake tensors (torch.compile, torch.export) as rbln's kernels give them.

PyTorch's fake convolution (`torch._subclasses.fake_impls.conv`) takes the memory format
of a convolution's result from `torch._C._conv_determine_backend_memory_format`, which
answers contiguous for every PrivateUse1 device (the Overrideable backend's rule) whatever
the operands. rbln's convolutions return CUDA's layout (channels_last in, channels_last
out: kernels/nn/Convolution.cpp), so for rbln operands the answer is the kernels' own rule;
every other call reaches upstream's function. torch_rbln._patches installs it, at import:
fake tensors on rbln exist without Inductor (torch.export).
"""
from __future__ import annotations

import torch

from . import _C


def on_rbln(input, weight, backend) -> bool:
    return input.device.type == "rbln"


def memory_format(input, weight, backend) -> torch.memory_format:
    return getattr(torch, _C._convolution_memory_format(input, weight))
