"""Stream sanitizer for rbln: PyTorch's CUDA sanitizer (CSAN) on rbln streams.

For every device storage it records which streams read and wrote it, and the
event records, waits and synchronizations that order the streams. An access
not ordered after a conflicting access on another stream is a possible data
race: it is printed to stderr in CSAN's report (both ops, both streams, both
Python stack traces, where the storage was allocated) and the op raises
`SanitizerErrors`.

Enable it with ``TORCH_RBLN_SANITIZER=1`` (read when torch_rbln is imported,
so before any rbln work) or by calling :func:`enable` early in the program.
Like CSAN it is a dispatch mode: it sees the ops of the thread that enabled it
and of the autograd threads that run its backward passes.

What is reused from ``torch.cuda._sanitizer`` is its device-neutral core:
``EventHandler`` (with ``_TensorsAccessed`` and ``StreamSynchronizations``),
``ArgumentHandler``'s schema walk and ``UnsynchronizedAccessError``'s report.
What is rbln's: ops count on rbln tensors, keyed by storage, on the current
rbln stream of their device; stream ids are per device (`StreamKey`); and the
synchronization and memory events come from the runtime's trace seam
(runtime/observability/RBLNTrace.h), which buffers them while the sanitizer is enabled and
is drained around every op.
"""
from __future__ import annotations

import sys
from typing import NamedTuple

import torch
from torch.cuda import _sanitizer as _csan
from torch.utils._python_dispatch import TorchDispatchMode

from . import _C

__all__ = ["SanitizerErrors", "StreamKey", "enable", "is_enabled"]

_KINDS = _C._trace_kinds()
_STREAM_SYNC = _KINDS["stream_synchronization"]


class StreamKey(NamedTuple):
    """A stream in the sanitizer's bookkeeping (rbln stream ids are per device)."""

    device: int
    id: int

    def __str__(self):
        return f"{self.id} on rbln:{self.device}"


class SanitizerErrors(_csan.CUDASanitizerErrors):
    """Raised by the op at which the sanitizer found possible data races (`.errors`)."""


class _ArgumentHandler(_csan.ArgumentHandler):
    """CSAN's reads and writes from the op's schema, for rbln tensors, keyed by
    storage: views share their base's accesses, and storages are what the
    allocator reports."""

    def __init__(self) -> None:
        super().__init__()
        self.device: int | None = None  # of the first rbln tensor: the op runs on its current stream

    def _handle_argument(self, value, is_write, metadata_only, name=None, is_output=False):
        if not isinstance(value, torch.Tensor) or value.device.type != "rbln":
            return
        data_ptr = value.untyped_storage().data_ptr()
        if not data_ptr:  # no memory (empty, or a zero tensor): nothing to race on
            return
        if self.device is None:
            self.device = value.device.index
        if is_write:
            self.dataptrs_written.add(data_ptr)
        elif not metadata_only:
            self.dataptrs_read.add(data_ptr)
        self.tensor_aliases.setdefault(data_ptr, [])
        if name is not None:
            self.tensor_aliases[data_ptr].append(name)
        if is_output:
            self.outputs.add(data_ptr)


class _EventHandler(_csan.EventHandler):
    """CSAN's analysis, fed with the runtime's trace records."""

    def __init__(self) -> None:
        super().__init__()
        on = {
            "event_creation": lambda event, device, stream: self._handle_event_creation(event),
            "event_deletion": lambda event, device, stream: self._handle_event_deletion(event),
            "event_record": lambda event, device, stream: self._handle_event_record(event, StreamKey(device, stream)),
            "event_wait": lambda event, device, stream: self._handle_event_wait(event, StreamKey(device, stream)),
            "event_synchronization": lambda event, device, stream: self._handle_event_synchronization(event),
            "stream_creation": lambda _, device, stream: self._handle_stream_creation(StreamKey(device, stream)),
            "stream_synchronization": lambda _, device, stream: self._handle_stream_synchronization(
                StreamKey(device, stream)),
            "device_synchronization": lambda _, device, stream: self._handle_device_synchronization(device),
            "memory_allocation": lambda ptr, device, stream: self._handle_memory_allocation(ptr),
            "memory_deallocation": lambda ptr, device, stream: self._handle_memory_deallocation(ptr),
        }
        self._on = {_KINDS[name]: handler for name, handler in on.items()}

    def replay(self, records) -> None:
        for kind, handle, device, stream in records:
            self._on[kind](handle, device, stream)

    def _handle_device_synchronization(self, device: int) -> None:
        # The host waited for the streams of one device (CSAN's version: of all devices).
        for stream in [s for s in self.syncs.current_sync_states if getattr(s, "device", None) == device]:
            self.syncs.all_streams_wait_for_stream(stream)


class _SanitizerDispatchMode(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.event_handler = _EventHandler()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten.record_stream.default:  # not a kernel (CSAN skips it too)
            return func(*args, **kwargs)
        handler = self.event_handler
        handler.replay(_C._trace_drain())  # what happened since the last op, in order

        is_factory = bool(_csan.FACTORY_FUNCTION_REGEX.match(func._schema.name))
        arguments = _ArgumentHandler()
        arguments.parse_inputs(func._schema, args, kwargs, is_factory=is_factory)
        outputs = func(*args, **kwargs)
        arguments.parse_outputs(func._schema, outputs, is_factory=is_factory)

        # The op's own records come before its accesses, as in CSAN; a host wait
        # inside it (a blocking download, .item(), a copy between devices) that
        # the runtime marks as done with the op's work on its stream also follows them.
        during = _C._trace_drain()
        handler.replay(during)
        errors = []
        if arguments.device is not None:
            stream = torch.accelerator.current_stream(arguments.device)
            errors = handler._handle_kernel_launch(
                StreamKey(stream.device_index, stream.stream_id),
                arguments.dataptrs_read - arguments.dataptrs_written,
                arguments.dataptrs_written,
                arguments.outputs,
                func._schema,
                arguments.tensor_aliases,
            )
        handler.replay(r for r in during if r[0] == _STREAM_SYNC and r[1])
        if errors:
            for error in errors:
                print(error, file=sys.stderr)
            raise SanitizerErrors(errors)
        return outputs


_mode: _SanitizerDispatchMode | None = None


def enable() -> None:
    """Starts the sanitizer (as ``torch.cuda._sanitizer.enable_cuda_sanitizer()``);
    a second call does nothing. Storages and streams already in use are
    picked up when next seen, so enable it before the rbln work it should check."""
    global _mode
    if _mode is not None:
        return
    _C._trace_enable(True)
    _mode = _SanitizerDispatchMode()
    _mode.__enter__()


def is_enabled() -> bool:
    return _mode is not None
