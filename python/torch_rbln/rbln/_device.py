"""`torch.rbln`'s devices: count, current device, synchronization, sync debug mode and properties."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .. import _C

__all__ = ["AcceleratorError", "can_device_access_peer", "current_device", "device", "device_count", "device_of",
           "get_device_capability", "get_device_name", "get_device_properties", "get_sync_debug_mode", "init",
           "is_available", "is_initialized", "set_device", "set_sync_debug_mode", "synchronize"]

_DEVICE_TYPE = "rbln"

# torch.cuda's name for torch's class of accelerator runtime errors (a RuntimeError). The rbln driver reports a
# failed kernel, at the next synchronizing call, as a plain RuntimeError: `except AcceleratorError` does not
# catch it (docs/debugging.md, "torch.cuda API parity").
AcceleratorError = torch.AcceleratorError


def _index(device: Any = None, optional: bool = True) -> int:
    """Device index from an int, a str, a torch.device or None (current)."""
    if device is None:
        return _C._current_device()
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != _DEVICE_TYPE:
        raise ValueError(f"Expected an rbln device, got {device}")
    return _C._current_device() if device.index is None else device.index


def is_available() -> bool:
    return _C._device_count() > 0


def is_initialized() -> bool:
    return _C._is_initialized()


def init() -> None:
    """The runtime initializes lazily; kept for torch.cuda parity."""


def device_count() -> int:
    return _C._device_count()


def current_device() -> int:
    return _C._current_device()


def set_device(device: Any) -> None:
    index = _index(device)
    if index >= 0:
        _C._set_device(index)


class device:
    """Context manager that changes the current rbln device."""

    def __init__(self, device: Any):
        self.idx = -1 if device is None else _index(device)
        self.prev_idx = -1

    def __enter__(self):
        self.prev_idx = _C._current_device()
        if self.idx >= 0 and self.idx != self.prev_idx:
            _C._set_device(self.idx)

    def __exit__(self, *exc):
        if self.idx >= 0 and self.idx != self.prev_idx:
            _C._set_device(self.prev_idx)
        return False


class device_of(device):
    """Context manager that makes the device of `obj` (a tensor) current."""

    def __init__(self, obj):
        super().__init__(obj.get_device() if obj.device.type == _DEVICE_TYPE else -1)


def synchronize(device: Any = None) -> None:
    """Waits for all work queued on every stream of the device."""
    _C._synchronize(_index(device))


def can_device_access_peer(device: Any, peer_device: Any) -> bool:
    """Whether `device` reads `peer_device`'s memory directly: a copy between two rbln devices goes from one
    device's memory to the other's, with no staging buffer in host memory. As on CUDA, a device is not its
    own peer."""
    index, peer = _index(device), _index(peer_device)
    if not 0 <= index < device_count():
        raise AssertionError("Invalid device id")  # torch.cuda's errors
    if not 0 <= peer < device_count():
        raise AssertionError("Invalid peer device id")
    return index != peer


def set_sync_debug_mode(debug_mode: int | str) -> None:
    """0 or "default": nothing; 1 or "warn": warn on each host-blocking call (Tensor.item(), a blocking copy to
    the CPU, a stream synchronize, an op whose output size depends on data); 2 or "error": raise there.
    As on CUDA, device and event synchronize are exempt."""
    if isinstance(debug_mode, str):
        modes = {"default": 0, "warn": 1, "error": 2}
        if debug_mode not in modes:
            raise RuntimeError("invalid value of debug_mode, expected one of `default`, `warn`, `error`")
        debug_mode = modes[debug_mode]
    _C._set_sync_debug_mode(debug_mode)


def get_sync_debug_mode() -> int:
    return _C._get_sync_debug_mode()


@dataclass(frozen=True)
class _DeviceProperties:
    name: str
    total_memory: int
    index: int
    type: str = "rbln"
    emulated: bool = True


def get_device_properties(device: Any = None) -> _DeviceProperties:
    index = _index(device)
    if not 0 <= index < device_count():
        raise ValueError(f"Invalid device index rbln:{index}: there are {device_count()} RBLN devices")
    return _DeviceProperties(get_device_name(index), _C._device_capacity(index), index)


def get_device_name(device: Any = None) -> str:
    return "RBLN NPU (emulated)"


def get_device_capability(device: Any = None) -> tuple[int, int]:
    return (1, 0)
