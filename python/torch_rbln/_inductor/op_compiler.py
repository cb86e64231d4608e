"""The miss path of the `compile` strategy: one ATen op, traced through its decomposition and compiled.

runtime/compiled/RBLNCompiledOps.cpp calls `compile_op` (with the GIL, once per new
plan) for an ops.yaml entry with `strategy: compile`. The op's decomposition
is traced with every input size symbolic and each size its own symbol, so one
plan serves every shape of the same ranks; Inductor compiles it with the rbln
C++ wrapper (cpp_wrapper.py) into a shared object the runtime loads and runs
without Python. docs/compile.md describes the strategy.
"""
from __future__ import annotations

import re
import shutil

import torch
from torch._decomp import get_decompositions
from torch._inductor import config
from torch._inductor.compile_fx import compile_fx_inner
from torch._inductor.decomposition import select_decomp_table
from torch._inductor.lowering import lowerings
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.func import functionalize
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

from . import register
from .cpp_wrapper import CompileRefused, compiling


def _overload(name: str, overload: str) -> torch._ops.OpOverload:
    namespace, op = name.split("::")
    return getattr(getattr(getattr(torch.ops, namespace), op), overload or "default")


def _decompositions(op: torch._ops.OpOverload) -> dict:
    """Inductor's own table (what torch.compile decomposes), and the op's decomposition in torch._decomp
    unless Inductor lowers the op itself."""
    table = dict(select_decomp_table())
    if op not in lowerings:
        table.update(get_decompositions([op]))
    return table


def _functional(gm: torch.fx.GraphModule, fakes: list[torch.Tensor]) -> torch.fx.GraphModule:
    """The graph without mutations, as Inductor takes it: a decomposition that writes into a buffer it made
    (complex's `result.real = real`) is traced once more, through functionalization."""
    if not any(isinstance(n.target, torch._ops.OpOverload) and n.target._schema.is_mutable for n in gm.graph.nodes):
        return gm
    return make_fx(functionalize(gm), tracing_mode="symbolic")(*fakes)


_DISPATCHER_CALL = re.compile(r'aoti_torch_call_dispatcher\("([\w:]+)", "(\w*)"')


def _check_dispatcher_calls(source: str, op: torch._ops.OpOverload) -> None:
    """The ops a plan calls back through the dispatcher must have rbln kernels, and must not be the op itself."""
    for name, overload in set(_DISPATCHER_CALL.findall(source)):
        if name == op._schema.name and overload == op._schema.overload_name:
            raise CompileRefused(f"{op} has no decomposition or lowering: the plan would call the op itself")
        if not torch._C._dispatch_has_kernel_for_dispatch_key(name, "PrivateUse1"):
            raise CompileRefused(f"the plan needs {name}, which has no rbln kernel")


def _fake_inputs(tensors: list[torch.Tensor], dynamic: bool) -> list[torch.Tensor]:
    """Fake copies of the inputs: every size its own symbol (duck sizing off, so sizes equal by chance
    stay separate and one plan serves every shape of the ranks), or the sizes themselves."""
    fake_mode = FakeTensorMode(shape_env=ShapeEnv(duck_shape=False))
    if not dynamic:
        return [fake_mode.from_tensor(t, static_shapes=True) for t in tensors]
    return [fake_mode.from_tensor(t, symbolic_context=StatelessSymbolicContext(
        dynamic_sizes=[DimDynamic.DYNAMIC] * t.dim())) for t in tensors]


def compile_op(name: str, overload: str, args: list, path: str) -> tuple[str, str]:
    """Compiles `name.overload(*args)` for args' dtypes, ranks and non-tensor values into a plan at `path`.

    Returns ("ok", ""), ("invalid", message) when the op's own shape rules reject the inputs (the caller
    runs CPU's kernel, which raises CPU's error), or ("failed", message) when no plan can be made.
    A plan is for any sizes of the inputs' ranks where the op traces with symbolic sizes, else for these sizes.
    """
    register()
    op = _overload(name, overload)
    schema = op._schema.arguments
    positions = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]

    def call(*tensors):
        values = list(args)
        for i, t in zip(positions, tensors):
            values[i] = t
        positional = [v for a, v in zip(schema, values) if not a.kwarg_only]
        out = op(*positional, **{a.name: v for a, v in zip(schema, values) if a.kwarg_only})
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)

    traceable = []
    for dynamic in (True, False):
        fakes = _fake_inputs([args[i] for i in positions], dynamic)
        try:
            with fakes[0].fake_mode if fakes else FakeTensorMode():
                call(*fakes)
            traceable.append(fakes)
        except Exception as e:
            error = e
    if not traceable:  # the op's shape rules: CPU's kernel gives the user its own error
        return "invalid", f"{type(error).__name__}: {error}"
    failure = ""
    for fakes in traceable:  # symbolic sizes first; these sizes where the trace or the compile needs them
        try:
            gm = _functional(make_fx(call, decomposition_table=_decompositions(op), tracing_mode="symbolic")(*fakes),
                             fakes)
            with compiling(name), config.patch(cpp_wrapper=True, fx_graph_cache=False):
                compiled = compile_fx_inner(gm, fakes, cpp_wrapper=True)
            _check_dispatcher_calls(compiled.source_code, op)
            entry = compiled.current_callable.__globals__["inductor_entry"]
            shutil.copyfile(entry.__self__.__file__, path)
            return "ok", ""
        except Exception as e:
            failure = failure or f"{type(e).__name__}: {e}".splitlines()[0]
    return "failed", failure
