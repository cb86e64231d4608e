"""rbln's answers where Inductor decides by device type with no extension point.

Each pair is a test of whether a call is about rbln (same arguments as upstream's function) and
rbln's answer, CPU's (rbln kernels are Inductor's C++ kernels). torch_rbln._patches lists them,
with why and the upstream change that would remove each, and installs them when the rbln backend
registers: every call not about rbln reaches upstream's function, so a CPU (or any other) compile
in the same process generates the same code.
"""
from __future__ import annotations

import torch
from torch._inductor import config
from torch._inductor.virtualized import V

_DEVICE_TYPE = "rbln"


# torch._inductor.utils.get_current_backend: upstream returns config.cuda_backend ("triton") for an unknown device.
def for_rbln_device(device_type: str | None = None) -> bool:
    return (device_type or V.graph.get_current_device_or_throw().type) == _DEVICE_TYPE


def cpp_backend(device_type: str | None = None) -> str:
    return config.cpu_backend


# torch._inductor.scheduler.BaseSchedulerNode.is_cpu: upstream compares the device type to "cpu".
def node_on_rbln(node) -> bool:
    device = node.get_device()
    return device is not None and device.type == _DEVICE_TYPE


def runs_cpu_kernels(node) -> bool:
    return True


# torch._inductor.codegen.cpp_utils.DEVICE_TO_ATEN: no PrivateUse1 entry upstream.
def aten_device(device_type: str) -> str:
    return "at::kPrivateUse1"


# torch._inductor.codegen.cpp_utils.DEVICE_TO_INT: cpu and cuda only upstream.
def device_type_int(device_type: str) -> int:
    return int(torch._C._autograd.DeviceType.PrivateUse1)  # aoti_torch_device_type_privateuse1()


# torch._inductor.codecache._get_cpp_wrapper_header: upstream names the header after the device type.
def rbln_wrapper_header(device: str, aot_mode: bool = False) -> bool:
    return device.split(":", maxsplit=1)[0] == _DEVICE_TYPE


def cpu_wrapper_header(device: str, aot_mode: bool = False) -> str:
    from torch._inductor import codecache

    return codecache._get_cpp_wrapper_header("cpu", aot_mode)


# torch._inductor.graph.GraphLowering.decide_layout_opt: CPU's answer for a graph with a convolution on rbln.
def _convolution_on_rbln(node) -> bool:
    if node.op != "call_function" or node.target is not torch.ops.aten.convolution.default:
        return False
    value = getattr(node.args[0], "meta", {}).get("val")
    return isinstance(value, torch.Tensor) and value.device.type == _DEVICE_TYPE


def convolves_on_rbln(gm, *, is_inference: bool) -> bool:
    return any(_convolution_on_rbln(node) for node in gm.graph.nodes)


def cpu_layout_opt(gm, *, is_inference: bool) -> bool:
    return config.layout_optimization and (
        config.force_layout_optimization or (torch.backends.mkldnn.enabled and torch.backends.mkldnn.is_available()))
