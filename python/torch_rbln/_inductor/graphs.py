"""`torch.compile(mode="reduce-overhead")` on rbln: Inductor's compiled callables replayed from rbln graphs.

Inductor's cudagraph trees serve CUDA only (torch 2.13 checks `is_cuda` throughout), so the rbln backend wraps the
callable compile_fx returns: per input signature (shapes, strides, dtypes, devices, other arguments) it runs one
warm-up call, captures one call into an RBLNGraph with static copies of the inputs, and from then on copies new
inputs into those and replays. Parameters, tensors marked static (`torch._dynamo.mark_static_address`) and inputs the
call mutates (a KV cache: Hugging Face's static cache is created inside the compiled forward, so it is not marked)
are used in place; a later call with another tensor in a mutated input's place copies it in and the result back
out. Outputs are the graph's static tensors, overwritten by the next replay, as with CUDA graphs. A call that needs
autograd or has inputs off rbln runs the compiled callable without a graph.
"""
from __future__ import annotations

import torch

from .stats import generated


def _is_static(t: torch.Tensor) -> bool:
    return isinstance(t, torch.nn.Parameter) or hasattr(t, "_dynamo_static_input_type")


def _signature(args) -> tuple:
    return tuple((tuple(a.shape), a.stride(), a.dtype, a.device, a.requires_grad) if isinstance(a, torch.Tensor)
                 else (type(a), a) for a in args)


class _Entry:
    """One captured call: its graph, static inputs (None where an argument is not a tensor), which of them the
    call mutates, and its outputs."""

    def __init__(self, call, args, mutated: list[bool]):
        self.mutated = mutated
        self.static_inputs = [None if not isinstance(a, torch.Tensor) else a if _is_static(a) or m else a.clone()
                              for a, m in zip(args, mutated)]
        self.graph = torch.rbln.RBLNGraph()
        call_args = [s if s is not None else a for s, a in zip(self.static_inputs, args)]
        with torch.rbln.graph(self.graph):
            self.outputs = call(call_args)
        generated["graph_captures"] += 1

    def replay(self, args):
        moved = [static is not None and static.data_ptr() != a.data_ptr() for static, a in zip(self.static_inputs, args)]
        for static, a, m in zip(self.static_inputs, args, moved):
            if m:
                static.copy_(a)
        self.graph.replay()
        for static, a, m, mutated in zip(self.static_inputs, args, moved, self.mutated):
            if m and mutated:
                a.copy_(static)
        generated["graph_replays"] += 1
        return self.outputs


class GraphedCallable:
    """Inductor's compiled callable (`fn`), replayed from an rbln graph per input signature."""

    def __init__(self, fn):
        self.fn = fn
        self.entries: dict[tuple, _Entry] = {}

    def __call__(self, *args):
        # Called as fn is: with the arguments, or (Dynamo's flattening wrapper) with one list of them.
        boxed = len(args) == 1 and isinstance(args[0], list)
        flat = list(args[0]) if boxed else list(args)
        if not self._graphable(flat):
            return self.fn(*args)
        call = (lambda a: self.fn(list(a))) if boxed else (lambda a: self.fn(*a))
        key = _signature(flat)
        if key not in self.entries:
            return self._first_call(key, flat, call)
        return self.entries[key].replay(flat)

    def _graphable(self, args) -> bool:
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        return (bool(tensors) and all(t.device.type == "rbln" for t in tensors)
                and not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors)))

    def _first_call(self, key, args, call):
        # Warm-up on a side stream, as torch.cuda's recipe: lazy initialization stays out of the capture.
        versions = [a._version if isinstance(a, torch.Tensor) else None for a in args]
        side = torch.rbln.Stream()
        side.wait_stream(torch.rbln.current_stream())
        with torch.rbln.stream(side):
            out = call(args)
        torch.rbln.current_stream().wait_stream(side)
        mutated = [v is not None and a._version != v for a, v in zip(args, versions)]
        self.entries[key] = _Entry(call, args, mutated)
        return out
