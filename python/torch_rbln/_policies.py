"""Where torch's Python code picks a behaviour by device type, rbln takes the
one its kernels support, as the matching CUDA or CPU path would."""

import torch


def _linear_cross_entropy_defaults() -> None:
    # The chunked linear_cross_entropy picks its accumulation per device type:
    # float16/bfloat16 accumulate in float32 only where a mixed-precision
    # matmul exists (CPU, recent CUDA), with a per-(device, dtype) policy
    # table. rbln's matmul widens float16/bfloat16 to float32 on the host as
    # CPU's does, so rbln takes CPU's entries instead of input-dtype sums.
    from torch.nn.modules import linear_cross_entropy_options as options

    for dtype in (torch.float16, torch.bfloat16):
        options._AUTO_DEFAULTS.setdefault(("rbln", dtype), options._AUTO_DEFAULTS[("cpu", dtype)])
    upstream = options.LinearCrossEntropyOptions._resolve_auto_acc_dtype

    def resolve(dtype, device):
        if device is not None and device.type == "rbln" and dtype in (torch.float16, torch.bfloat16):
            return torch.float32
        return upstream(dtype, device)

    options.LinearCrossEntropyOptions._resolve_auto_acc_dtype = staticmethod(resolve)


def install() -> None:
    _linear_cross_entropy_defaults()
