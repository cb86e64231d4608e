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


class _Entry:
    """One captured call: its graph, static inputs (None where an argument is not a tensor), which of them the
    call mutates, and its outputs."""

    def __init__(self, call, args, mutated: list[bool]):
        static_inputs = [None if not isinstance(a, torch.Tensor) else a if _is_static(a) or m else a.clone()
                         for a, m in zip(args, mutated)]
        # (index, static tensor, mutated) per tensor argument: what replay checks.
        self.tensors = [(i, t, m) for i, (t, m) in enumerate(zip(static_inputs, mutated)) if t is not None]
        self.graph = torch.rbln.RBLNGraph()
        call_args = [t if t is not None else a for t, a in zip(static_inputs, args)]
        with torch.rbln.graph(self.graph):
            self.outputs = call(call_args)
        generated["graph_captures"] += 1

    def replay(self, args):
        moved = [(args[i], t, m) for i, t, m in self.tensors
                 if args[i] is not t and args[i].data_ptr() != t.data_ptr()]
        for a, static, _ in moved:
            static.copy_(a)
        self.graph.replay()
        for a, static, mutated in moved:
            if mutated:
                a.copy_(static)
        generated["graph_replays"] += 1
        return self.outputs


class GraphedCallable:
    """Inductor's compiled callable (`fn`), replayed from an rbln graph per input signature."""

    def __init__(self, fn):
        self.fn = fn
        self.entries: dict[tuple, _Entry | None] = {}  # None: this signature runs without a graph

    def __call__(self, *args):
        # Called as fn is: with the arguments, or (Dynamo's flattening wrapper) with one list of them.
        boxed = len(args) == 1 and isinstance(args[0], list)
        flat = list(args[0]) if boxed else args
        # Dynamo's guards fix the inputs' dtypes, devices and requires_grad: shapes and other arguments vary.
        key = (torch.is_grad_enabled(), *(a.shape if isinstance(a, torch.Tensor) else a for a in flat))
        try:
            entry = self.entries.get(key, self)
        except TypeError:  # an unhashable argument
            return self.fn(*args)
        if entry is None:
            return self.fn(*args)
        if entry is not self:
            return entry.replay(flat)
        if not self._graphable(flat):
            self.entries[key] = None
            return self.fn(*args)
        call = (lambda a: self.fn(list(a))) if boxed else (lambda a: self.fn(*a))
        return self._first_call(key, flat, call)

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
