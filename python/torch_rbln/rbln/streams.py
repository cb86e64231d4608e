"""`torch.rbln.streams`, as `torch.cuda.streams`: streams, events and the current stream."""
from __future__ import annotations

from typing import Any

import torch

from .. import _C
from ._device import _DEVICE_TYPE, _index, current_device, set_device
from ._device import device as _on_device

__all__ = ["Event", "ExternalStream", "Stream", "StreamContext", "current_stream", "default_stream",
           "get_stream_from_external", "set_stream", "stream"]


class Stream(torch.Stream):
    """An rbln stream: work queued on it runs in order, asynchronously."""

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs):
        if "stream_id" in kwargs:
            return super().__new__(cls, **kwargs)
        with _on_device(device):
            return super().__new__(cls, device=torch.device(_DEVICE_TYPE, _C._current_device()), priority=priority)

    def __eq__(self, other):
        return isinstance(other, torch.Stream) and super().__eq__(other)

    def __hash__(self):
        return hash((self.stream_id, self.device_index, self.device_type))

    @property
    def rbln_stream(self) -> int:
        """The driver's handle of this stream, for another library (as `cuda_stream`'s cudaStream_t)."""
        return _C._stream_handle(self.device_index, self.stream_id)


class ExternalStream(Stream):
    """Wraps a stream handle another library got from `Stream.rbln_stream`, as torch.cuda.ExternalStream wraps a
    cudaStream_t: work queued on it is ordered with that library's. `device`, if given, must be the stream's."""

    def __new__(cls, stream_ptr: int, device: Any = None, **kwargs):
        index, stream_id = _C._stream_from_handle(stream_ptr)
        if device is not None and _index(device) != index:
            raise ValueError(f"ExternalStream: the stream is on rbln:{index}, not on {device}")
        device_type = torch.accelerator.current_stream(index).device_type  # the enum value Stream takes
        return super().__new__(cls, stream_id=stream_id, device_index=index, device_type=device_type)


def get_stream_from_external(data_ptr: int, device: Any = None) -> Stream:
    """The Stream a handle from `Stream.rbln_stream` names, as torch.cuda.get_stream_from_external."""
    return ExternalStream(data_ptr, device)


def Event(enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> torch.Event:
    """An rbln event: record on a stream, wait, query, synchronize, time.

    A plain torch.Event on rbln: PyTorch's stream and event methods accept
    only that exact type, not a subclass."""
    return torch.Event(device=_DEVICE_TYPE, enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)


def _wrap(stream: torch.Stream) -> Stream:
    return Stream(stream_id=stream.stream_id, device_index=stream.device_index, device_type=stream.device_type)


def current_stream(device: Any = None) -> Stream:
    return _wrap(torch.accelerator.current_stream(_index(device)))


def default_stream(device: Any = None) -> Stream:
    s = torch.accelerator.current_stream(_index(device))
    return Stream(stream_id=0, device_index=s.device_index, device_type=s.device_type)


def set_stream(stream: torch.Stream) -> None:
    if stream is not None:
        torch.accelerator.set_stream(stream)


class StreamContext:
    """Makes `stream` current on its device inside the `with` block."""

    def __init__(self, stream: torch.Stream | None):
        self.stream = stream
        self.prev = None
        self.prev_device = -1

    def __enter__(self):
        if self.stream is None:
            return
        self.prev_device = current_device()
        if self.stream.device_index != self.prev_device:
            set_device(self.stream.device_index)
        self.prev = current_stream(self.stream.device_index)
        set_stream(self.stream)

    def __exit__(self, *exc):
        if self.stream is None:
            return False
        set_stream(self.prev)
        if self.prev_device != self.stream.device_index:
            set_device(self.prev_device)
        return False


def stream(stream: torch.Stream | None) -> StreamContext:
    return StreamContext(stream)
