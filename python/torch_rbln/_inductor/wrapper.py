"""The Python wrapper Inductor generates for an rbln graph, and its device code snippets.

Subclasses of Inductor's wrappers (of a graph and of a control-flow subgraph),
registered for "rbln". They differ from CPU's in three places only: kernels are
bound through `kernels.cpp_pybinding` (launched on the stream), kernel calls are
emitted as plain calls (Inductor's own helper refuses non-Triton kernels on
devices other than cpu and mps), and buffers are allocated on the graph's device
index, not on the current device.
"""
from __future__ import annotations

import re

import torch
from torch._guards import CompileContext
from torch._inductor import config
from torch._inductor.codegen.common import DeviceOpOverrides
from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen
from torch._inductor.virtualized import V

from .stats import generated

_DEVICE_TYPE = "rbln"
_CPU_BINDING = "async_compile.cpp_pybinding("


def graph_name() -> str:
    """The compiled graph's name in kernel names: Dynamo's compile id (frame/recompile) and AOT role."""
    context = torch._guards.TracingContext.try_get()
    role = re.search(r"inference|forward|backward", " ".join(context.aot_graph_name or ())) if context else None
    return f"graph {CompileContext.current_compile_id() or '?'}" + (f" {role[0]}" if role else "")


class _RBLNKernels:
    """What an rbln wrapper, of a graph or of a control-flow subgraph, does differently from CPU's."""

    def define_kernel(self, kernel_name, kernel_body, metadata=None, gpu=False, cpp_definition=None):
        if kernel_body.startswith(_CPU_BINDING):
            generated["kernels"] += 1
            name = f"{graph_name()}:{kernel_name}"
            kernel_body = f"rbln_cpp_pybinding(async_compile, {name!r}, " + kernel_body[len(_CPU_BINDING):]
        super().define_kernel(kernel_name, kernel_body, metadata, gpu, cpp_definition)

    def _generate_kernel_call_helper(self, kernel_name, call_args, *, device=None, triton=True, **kwargs):
        device = device or V.graph.get_current_device_or_throw()
        if device.type == _DEVICE_TYPE and not triton:
            self.writeline(self.wrap_kernel_call(kernel_name, call_args))
            return
        super()._generate_kernel_call_helper(kernel_name, call_args, device=device, triton=triton, **kwargs)

    def make_allocation(self, name, device, dtype, shape, stride, allocation_shape=None, is_pinned=False):
        line = super().make_allocation(name, device, dtype, shape, stride, allocation_shape, is_pinned)
        if device.type == _DEVICE_TYPE:
            index = device.index if device.index is not None else torch.rbln.current_device()
            line = line.replace(f"device='{_DEVICE_TYPE}'", f"device='{_DEVICE_TYPE}:{index}'", 1)
        return line


class RBLNSubgraphWrapperCodegen(_RBLNKernels, SubgraphPythonWrapperCodegen):
    pass


class RBLNWrapperCodegen(_RBLNKernels, PythonWrapperCodegen):
    @staticmethod
    def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
        if is_subgraph:
            return RBLNSubgraphWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
        generated["graphs"] += 1
        return RBLNWrapperCodegen()

    def write_header(self) -> None:
        super().write_header()
        self.imports.writeline("from torch_rbln._inductor.kernels import cpp_pybinding as rbln_cpp_pybinding")

    def generate(self, is_inference):
        self._inference = is_inference
        return super().generate(is_inference)

    def generate_after_suffix(self, result) -> None:
        super().generate_after_suffix(result)
        # mode="reduce-overhead" with the default backend: Inductor's cudagraphs skip devices other than CUDA, so
        # an rbln inference graph's `call` replays from rbln graphs itself (training graphs' saved tensors would
        # be overwritten by the next replay: those run as compiled).
        if config.triton.cudagraphs and self._inference and not V.graph.aot_mode:
            result.writeline("from torch_rbln._inductor.graphs import GraphedCallable as rbln_graphed")
            result.writeline("call = rbln_graphed(call)")


class RBLNDeviceOpOverrides(DeviceOpOverrides):
    def import_get_raw_stream_as(self, name: str) -> str:
        return f"from torch_rbln._inductor.device_interface import get_raw_stream as {name}"

    def set_device(self, device_idx: int) -> str:
        return f"torch.rbln.set_device({device_idx})"

    def synchronize(self) -> str:
        return "torch.rbln.synchronize()"

    def device_guard(self, device_idx: int) -> str:
        return f"torch.rbln.device({device_idx})"

    def cpp_kernel_type(self) -> str:  # an AOTInductor package's kernel handles: its C++ kernels, as CPU's
        return "void*"
