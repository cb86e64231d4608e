"""Where torch's Python code picks a behaviour by device type, rbln takes the
one its kernels support, as the matching CPU path would (torch_rbln._patches installs them)."""

import torch

# The chunked linear_cross_entropy picks its accumulation per device type: float16/bfloat16
# accumulate in float32 only where a mixed-precision matmul exists (CPU, recent CUDA), with a
# per-(device, dtype) policy table. rbln's matmul widens float16/bfloat16 to float32 on the host
# as CPU's does, so rbln takes CPU's entries and float32 sums instead of input-dtype sums.


def low_precision_on_rbln(dtype, device) -> bool:
    return device is not None and device.type == "rbln" and dtype in (torch.float16, torch.bfloat16)


def float32_accumulation(dtype, device) -> torch.dtype:
    return torch.float32


def cpu_auto_default(key):
    """The policy table's CPU entry for an ("rbln", dtype) key."""
    from torch.nn.modules import linear_cross_entropy_options as options

    return options._AUTO_DEFAULTS[("cpu", key[1])]
