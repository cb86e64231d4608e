"""The places where Inductor decides by device type with no extension point.

Each replacement answers exactly as upstream does for every device but rbln, so
a CPU (or any other) compile in the same process generates the same code; for
rbln it gives CPU's answer (rbln kernels are Inductor's C++ kernels).
Installed once, under a lock, when the rbln backend registers. docs/compile.md
lists them with the upstream change that would remove each.
"""
from __future__ import annotations

import threading

import torch
from torch._inductor import graph, scheduler, utils
from torch._inductor.codegen import common, cpp_utils
from torch._inductor.virtualized import V

_DEVICE_TYPE = "rbln"
_lock = threading.Lock()
_installed = False


def _current_device_type(device_type: str | None) -> str:
    return device_type or V.graph.get_current_device_or_throw().type


def _convolves_on_rbln(node) -> bool:
    if node.op != "call_function" or node.target is not torch.ops.aten.convolution.default:
        return False
    value = getattr(node.args[0], "meta", {}).get("val")
    return isinstance(value, torch.Tensor) and value.device.type == _DEVICE_TYPE


def install() -> None:
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True

        # utils.get_current_backend returns config.cuda_backend ("triton") for any device it does not
        # know, and codegen then skips the C++ dtype fixes (KeyError: None on torch.where with int64).
        upstream_backend = utils.get_current_backend

        def get_current_backend(device_type: str | None = None) -> str:
            if _current_device_type(device_type) == _DEVICE_TYPE:
                return utils.config.cpu_backend
            return upstream_backend(device_type)

        utils.get_current_backend = common.get_current_backend = get_current_backend

        # BaseSchedulerNode.is_cpu() keeps the loop reordering that Inductor has validated only for
        # SIMD kernels away from C++ kernels; on rbln nodes it said "not cpu" and softmax crashed.
        upstream_is_cpu = scheduler.BaseSchedulerNode.is_cpu

        def is_cpu(self) -> bool:
            device = self.get_device()
            return (device is not None and device.type == _DEVICE_TYPE) or upstream_is_cpu(self)

        scheduler.BaseSchedulerNode.is_cpu = is_cpu

        # The C++ wrapper spells a device argument of an op it calls back through the dispatcher (the
        # `device=` of the `empty` that `complex` lowers to) from this table, which lists no
        # PrivateUse1 device: "rbln not found in DEVICE_TO_ATEN". One entry more; the others are unchanged.
        cpp_utils.DEVICE_TO_ATEN.setdefault(_DEVICE_TYPE, "at::kPrivateUse1")

        # GraphLowering.decide_layout_opt turns a graph with convolutions to channels_last always on CPU
        # with oneDNN and by a FLOP heuristic tuned for GPUs elsewhere. rbln's convolutions are oneDNN's
        # and return channels_last for channels_last operands (_convolution_layout.py): CPU's answer.
        upstream_decide_layout_opt = graph.GraphLowering.decide_layout_opt

        def decide_layout_opt(gm, *, is_inference: bool) -> bool:
            if any(_convolves_on_rbln(node) for node in gm.graph.nodes):
                return graph.config.layout_optimization and (
                    graph.config.force_layout_optimization
                    or (torch.backends.mkldnn.enabled and torch.backends.mkldnn.is_available()))
            return upstream_decide_layout_opt(gm, is_inference=is_inference)

        graph.GraphLowering.decide_layout_opt = staticmethod(decide_layout_opt)
