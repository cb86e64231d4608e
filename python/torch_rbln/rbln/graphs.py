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

from .. import _C
from ._device import synchronize
from .memory import empty_cache
from .streams import Stream, stream

__all__ = ["RBLNGraph", "graph", "graph_pool_handle", "is_current_stream_capturing", "make_graphed_callables"]


def is_current_stream_capturing() -> bool:
    """True while graph capture is underway on the current rbln stream."""
    return _C._is_current_stream_capturing()


def graph_pool_handle() -> tuple[int, int]:
    """An opaque token naming a graph memory pool, which graphs captured with `pool=` it share."""
    return _C._graph_pool_handle()


class RBLNGraph(torch._C._acceleratorGraph):
    """An rbln graph, as `torch.cuda.CUDAGraph`: `capture_begin`/`capture_end` record the work queued on the
    current stream, `replay` queues it again as one task. `keep_graph` is accepted for CUDA's signature; an rbln
    graph needs no separate instantiation."""

    def __new__(cls, keep_graph: bool = False):
        return super().__new__(cls, keep_graph)

    def __init__(self, keep_graph: bool = False):
        super().__init__(keep_graph)
        self._generators: list[torch.Generator] = []

    def register_generator_state(self, generator: torch.Generator) -> None:
        """As torch.cuda's: random ops of the captures begun after this that draw from the state `generator`
        holds now (besides the device's default generator's, which every capture registers) draw new numbers
        each replay, from where that state stands at the replay, which each replay advances."""
        if not isinstance(generator, torch.Generator) or generator.device.type != "rbln":
            raise RuntimeError(f"RBLNGraph.register_generator_state takes an rbln torch.Generator, got {generator!r}")
        self._generators.append(generator.graphsafe_get_state())  # the state, should `generator` swap later

    def capture_begin(self, pool: tuple[int, int] | None = None, capture_error_mode: str = "global",
                      check_input_liveness: bool = False) -> None:
        """Begins capturing the current stream's work; `pool` and `capture_error_mode` as torch.cuda's."""
        if check_input_liveness:
            raise NotImplementedError("RBLNGraph: check_input_liveness relies on CUDA's liveness tracker")
        _C._set_next_capture_generators(self._generators)
        super().capture_begin(pool=pool, capture_error_mode=capture_error_mode)


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
                                                      synchronize=synchronize, empty_cache=empty_cache),
                    _C=_Namespace(torch._C, _host_emptyCache=torch.accelerator.empty_host_cache))


def _on_rbln(function):
    """torch.cuda.graphs' `function` with `torch.cuda` (and the module's own graph names) meaning rbln's."""
    namespace = dict(function.__globals__, torch=_TORCH, graph_pool_handle=graph_pool_handle, CUDAGraph=RBLNGraph)
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
