"""The rbln DeviceInterface: how Dynamo and Inductor query and drive the device."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch._dynamo.device_interface import DeviceInterface

from .. import _C


@dataclass(frozen=True)
class RBLNCompileProperties:
    """What Inductor's heuristics read: compiled kernels split work over the host threads."""

    multi_processor_count: int
    total_memory: int


class RBLNInterface(DeviceInterface):
    device = torch.rbln.device
    Event = torch.Event  # torch.rbln.Event is a factory of plain torch.Event, which Dynamo traces
    Stream = torch.rbln.Stream

    class Worker:
        @staticmethod
        def set_device(device: int) -> None:
            torch.rbln.set_device(device)

        @staticmethod
        def current_device() -> int:
            return torch.rbln.current_device()

        @staticmethod
        def get_device_properties(device: torch.types.Device = None) -> RBLNCompileProperties:
            return RBLNInterface.get_device_properties(device)

    current_device = staticmethod(torch.rbln.current_device)
    set_device = staticmethod(torch.rbln.set_device)
    device_count = staticmethod(torch.rbln.device_count)
    is_available = staticmethod(torch.rbln.is_available)
    stream = staticmethod(torch.rbln.stream)
    current_stream = staticmethod(torch.rbln.current_stream)
    set_stream = staticmethod(torch.rbln.set_stream)
    synchronize = staticmethod(torch.rbln.synchronize)
    is_bf16_supported = staticmethod(torch.rbln.is_bf16_supported)
    memory_allocated = staticmethod(torch.rbln.memory_allocated)

    @staticmethod
    def maybe_exchange_device(device: int) -> int:
        previous = torch.rbln.current_device()
        if device >= 0 and device != previous:
            torch.rbln.set_device(device)
        return previous

    exchange_device = maybe_exchange_device

    @staticmethod
    def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
        torch.rbln.set_stream(torch.rbln.Stream(stream_id=stream_id, device_index=device_index, device_type=device_type))

    @staticmethod
    def get_raw_stream(device_idx: int) -> int:
        return torch.rbln.current_stream(device_idx).stream_id

    @classmethod
    def get_device_properties(cls, device: torch.types.Device = None) -> RBLNCompileProperties:
        index = torch.rbln.get_device_properties(device).index
        return RBLNCompileProperties(torch.get_num_threads(), _C._device_capacity(index))

    @staticmethod
    def get_compute_capability(device: torch.types.Device = None) -> str:
        return ""  # no Triton: kernels are C++ (the value only feeds Triton's choices)

    @staticmethod
    def is_triton_capable(device: torch.types.Device = None) -> bool:
        return False

    @staticmethod
    def raise_if_triton_unavailable(device: torch.types.Device = None) -> None:
        raise RuntimeError("rbln compiles through Inductor's C++ backend, not Triton")



get_raw_stream = RBLNInterface.get_raw_stream
