"""`torch.rbln.amp`, as `torch.cuda.amp`: deprecated aliases of torch.amp for device_type "rbln",
with torch.cuda.amp's deprecation warnings; and the lower-precision dtypes autocast may pick on rbln
(`torch.rbln.get_amp_supported_dtype`, `is_bf16_supported`, ...)."""
from __future__ import annotations

import functools
import sys

import torch
from typing_extensions import deprecated

from ._device import is_available as _is_available

__all__ = ["amp_definitely_not_available", "autocast", "custom_bwd", "custom_fwd", "GradScaler"]


def get_amp_supported_dtype() -> list[torch.dtype]:
    """Lower-precision dtypes the device runs natively (autocast's choices)."""
    return [torch.float16, torch.bfloat16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


def is_tf32_supported() -> bool:
    """float32 matmuls and convolutions compute in float32: no TF32 mode."""
    return False


has_half = True


def amp_definitely_not_available() -> bool:
    return not _is_available()


@deprecated(
    "`torch.rbln.amp.autocast(args...)` is deprecated. Please use `torch.amp.autocast('rbln', args...)` instead.",
    category=FutureWarning,
)
class autocast(torch.amp.autocast_mode.autocast):
    """See torch.autocast; `torch.rbln.amp.autocast(args...)` is `torch.amp.autocast("rbln", args...)`."""

    if sys.version_info < (3, 13):  # before 3.13, @deprecated hides a class's signature unless __new__ is defined

        def __new__(cls, enabled: bool = True, dtype: torch.dtype = torch.float16, cache_enabled: bool = True):
            return super().__new__(cls)

        def __init_subclass__(cls):
            pass

    def __init__(self, enabled: bool = True, dtype: torch.dtype = torch.float16, cache_enabled: bool = True):
        super().__init__("rbln", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)


class GradScaler(torch.amp.GradScaler):
    """`torch.rbln.amp.GradScaler(args...)` is `torch.amp.GradScaler("rbln", args...)`."""

    @deprecated(
        "`torch.rbln.amp.GradScaler(args...)` is deprecated. "
        "Please use `torch.amp.GradScaler('rbln', args...)` instead.",
        category=FutureWarning,
    )
    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True) -> None:
        super().__init__("rbln", init_scale=init_scale, growth_factor=growth_factor, backoff_factor=backoff_factor,
                         growth_interval=growth_interval, enabled=enabled)


@deprecated(
    "`torch.rbln.amp.custom_fwd(args...)` is deprecated. "
    "Please use `torch.amp.custom_fwd(args..., device_type='rbln')` instead.",
    category=FutureWarning,
)
def custom_fwd(fwd=None, *, cast_inputs=None):
    return functools.partial(torch.amp.custom_fwd, device_type="rbln")(fwd=fwd, cast_inputs=cast_inputs)


@deprecated(
    "`torch.rbln.amp.custom_bwd(args...)` is deprecated. "
    "Please use `torch.amp.custom_bwd(args..., device_type='rbln')` instead.",
    category=FutureWarning,
)
def custom_bwd(bwd):
    return functools.partial(torch.amp.custom_bwd, device_type="rbln")(bwd)
