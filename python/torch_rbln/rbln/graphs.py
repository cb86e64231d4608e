"""`torch.rbln.graphs`, as `torch.cuda.graphs`: capture work queued on an rbln stream once and replay it with
one call (docs/graphs.md).

`RBLNGraph` is torch's accelerator graph (`torch._C._acceleratorGraph`, which creates the rbln
`at::GraphImplInterface` of runtime/graphs/) with `torch.cuda.CUDAGraph`'s signatures. `graph` and
`make_graphed_callables` are torch.cuda's own code, run with `torch.cuda` meaning rbln's graph names (see
`_on_rbln`): their semantics (warm-up on a side stream, static inputs and outputs, capture order, shared pool)
stay torch's rather than a copy of them.
"""
from __future__ import annotations

import types
from typing import Any

import torch
from torch.cuda import graphs as _cuda_graphs
from torch.utils._cuda_debug import _CUDAGraphInputLivenessTracker, _TensorTrackingMode
from torch.utils._pytree import tree_iter

from .. import _C
from ._device import synchronize
from .memory import empty_cache
from .streams import Event, Stream, current_stream, stream

__all__ = ["RBLNGraph", "graph", "graph_pool_handle", "is_current_stream_capturing", "make_graphed_callables"]


def is_current_stream_capturing() -> bool:
    """True while graph capture is underway on the current rbln stream."""
    return _C._is_current_stream_capturing()


def graph_pool_handle() -> tuple[int, int]:
    """An opaque token naming a graph memory pool, which graphs captured with `pool=` it share."""
    return _C._graph_pool_handle()


def _on_device(values: object) -> bool:
    return any(isinstance(v, torch.Tensor) and v.device.type == "rbln" for v in tree_iter(values))


class _InputTracking(_TensorTrackingMode):
    """torch.cuda's tracking of a capture's inputs (torch/utils/_cuda_debug.py), for ops that run on rbln."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if is_current_stream_capturing() and _on_device([args, kwargs]):
            for v in tree_iter([args, kwargs]):  # as CUDA's: device tensors and pinned host ones
                if isinstance(v, torch.Tensor) and v.data_ptr() != 0 and (
                        v.device.type == "rbln" or (v.is_cpu and v.is_pinned())):
                    self._tracker.track_external_input(v)
            for v in tree_iter(out):
                if isinstance(v, torch.Tensor) and v.device.type == "rbln":
                    self._tracker.mark_internal_output(v)
        return out


class _InputLivenessTracker(_CUDAGraphInputLivenessTracker):
    """torch.cuda's check_input_liveness: a replay raises, with the tensor's creation and deletion tracebacks,
    when an input the capture read from outside the graph's pool has been freed."""

    def start(self) -> None:
        self._dispatch_mode = _InputTracking(self)
        self._dispatch_mode.__enter__()

    def check_alive(self, capture_pool) -> None:
        try:
            super().check_alive(capture_pool)
        except RuntimeError as e:
            raise RuntimeError(str(e).replace("CUDA graph", "RBLN graph", 1)) from None

    def _get_memory_snapshot(self, capture_pool):
        if self._memory_snapshot is None:
            self._memory_snapshot = [segment for segment in torch.rbln.memory_snapshot()
                                     if tuple(segment["segment_pool_id"]) == tuple(capture_pool)]
        return self._memory_snapshot


class RBLNGraph(torch._C._acceleratorGraph):
    """An rbln graph, as `torch.cuda.CUDAGraph`: `capture_begin`/`capture_end` record the work queued on the
    current stream, `replay` queues it again as one task. `keep_graph` is accepted for CUDA's signature; an rbln
    graph needs no separate instantiation."""

    def __new__(cls, keep_graph: bool = False):
        return super().__new__(cls, keep_graph)

    def __init__(self, keep_graph: bool = False):
        super().__init__(keep_graph)
        self._generators: list[torch.Generator] = []
        self._tracker: _InputLivenessTracker | None = None

    def register_generator_state(self, generator: torch.Generator) -> None:
        """As torch.cuda's: random ops of the captures begun after this that draw from the state `generator`
        holds now (besides the device's default generator's, which every capture registers) draw new numbers
        each replay, from where that state stands at the replay, which each replay advances."""
        if not isinstance(generator, torch.Generator) or generator.device.type != "rbln":
            raise RuntimeError(f"RBLNGraph.register_generator_state takes an rbln torch.Generator, got {generator!r}")
        self._generators.append(generator.graphsafe_get_state())  # the state, should `generator` swap later

    def capture_begin(self, pool: tuple[int, int] | None = None, capture_error_mode: str = "global",
                      check_input_liveness: bool = False) -> None:
        """Begins capturing the current stream's work; `pool`, `capture_error_mode` and `check_input_liveness`
        as torch.cuda's."""
        self._stop_tracking()
        _C._set_next_capture_generators(self._generators)
        super().capture_begin(pool=pool, capture_error_mode=capture_error_mode)
        if check_input_liveness:
            self._tracker = _InputLivenessTracker()
            self._tracker.start()

    def capture_end(self) -> None:
        try:
            super().capture_end()
        finally:
            if self._tracker is not None:
                self._tracker.stop()

    def replay(self) -> None:
        if self._tracker is not None:
            self._tracker.check_alive(self.pool())
        super().replay()

    def reset(self) -> None:
        self._stop_tracking()
        super().reset()

    def __del__(self) -> None:
        try:
            self._stop_tracking()
        except Exception:
            pass  # never raise under garbage collection

    def _stop_tracking(self) -> None:
        tracker, self._tracker = self._tracker, None
        if tracker is not None:
            tracker.stop()


class _Namespace(types.ModuleType):
    """`base` with some attributes replaced: the `torch` the functions _on_rbln rebinds see."""

    def __init__(self, base: Any, **replaced: Any):
        super().__init__(base.__name__)
        self._base = base
        self.__dict__.update(replaced)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._base, name)


# torch.cuda's graph names as rbln's (`graph` once defined below); torch._C._host_emptyCache, which CUDA builds
# have, as the accelerator's.
_TORCH = _Namespace(torch, cuda=types.SimpleNamespace(CUDAGraph=RBLNGraph, Stream=Stream, stream=stream,
                                                      current_stream=current_stream, Event=Event,
                                                      synchronize=synchronize, empty_cache=empty_cache),
                    _C=_Namespace(torch._C, _host_emptyCache=torch.accelerator.empty_host_cache))


def _on_rbln(function, **names: Any):
    """torch.cuda.graphs' `function` (or another module's using torch.cuda's graphs, streams and events) with
    `torch.cuda` (and the module's own graph names, and `names`) meaning rbln's."""
    namespace = dict(function.__globals__, torch=_TORCH, graph_pool_handle=graph_pool_handle, CUDAGraph=RBLNGraph,
                     **names)
    rebound = types.FunctionType(function.__code__, namespace, function.__name__, function.__defaults__,
                                 function.__closure__)
    rebound.__kwdefaults__ = function.__kwdefaults__
    rebound.__doc__ = function.__doc__
    return rebound


class graph(_cuda_graphs.graph):
    """Context manager that captures the rbln work of its block into `cuda_graph` (an RBLNGraph), as
    `torch.cuda.graph` (same arguments: `pool`, `stream`, `capture_error_mode`). An error raised inside the
    block is the one that propagates; the capture it invalidated ends without masking it."""

    default_capture_stream: Stream | None = None
    __init__ = _on_rbln(_cuda_graphs.graph.__init__)
    __enter__ = _on_rbln(_cuda_graphs.graph.__enter__)

    def __exit__(self, *exc_info: Any) -> None:
        try:
            self.cuda_graph.capture_end()
        except RuntimeError:
            if exc_info[0] is None:
                raise
        finally:
            self.stream_ctx.__exit__(*exc_info)


_TORCH.cuda.graph = graph
make_graphed_callables = _on_rbln(_cuda_graphs.make_graphed_callables)
