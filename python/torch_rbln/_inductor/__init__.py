"""torch.compile for rbln: Inductor's C++ kernels, launched on the rbln stream.

Registered lazily, the first time Inductor looks for the rbln backend
(`torch.rbln.Scheduling`, see torch_rbln/rbln/_compile.py) or `backend="rbln"` is used,
because importing Inductor costs seconds. docs/compile.md explains the design.
"""
from __future__ import annotations

import threading

import torch
from torch._dynamo.device_interface import register_interface_for_device
from torch._inductor import config
from torch._inductor.codegen.common import register_backend_for_device, register_device_op_overrides
from torch._inductor.codegen.cpp import CppScheduling
from torch._inductor.custom_graph_pass import CustomGraphModulePass

from .. import _patches
from .._compiled_ops import backend_version
from .cpp_wrapper import RBLNCppWrapperCodegen
from .device_interface import RBLNInterface
from .pooling import use_rbln_max_pool
from .wrapper import RBLNDeviceOpOverrides, RBLNWrapperCodegen

_DEVICE_TYPE = "rbln"


class BackendVersion(CustomGraphModulePass):
    """rbln's post-grad pass (max pooling, pooling.py), whose uuid() Inductor hashes into every FX graph cache key."""

    version = backend_version()

    def __call__(self, gm: torch.fx.GraphModule) -> None:
        if not config.cpp_wrapper:  # the compile strategy's plans call no Python ops
            use_rbln_max_pool(gm)

    def uuid(self) -> str:
        return f"torch_rbln-inductor-{self.version}"


Scheduling = CppScheduling
PythonWrapperCodegen = RBLNWrapperCodegen
CppWrapperCodegen = RBLNCppWrapperCodegen  # for the compile strategy's plans; torch.compile(cpp_wrapper=True) is not supported (docs/compile.md)

_lock = threading.Lock()
_registered = False


def register() -> None:
    """Registers the rbln device with Dynamo and Inductor (idempotent, thread-safe)."""
    global _registered
    with _lock:
        if _registered:
            return
        register_interface_for_device(_DEVICE_TYPE, RBLNInterface)
        for index in range(torch.rbln.device_count()):
            register_interface_for_device(f"{_DEVICE_TYPE}:{index}", RBLNInterface)
        register_device_op_overrides(_DEVICE_TYPE, RBLNDeviceOpOverrides())
        register_backend_for_device(_DEVICE_TYPE, Scheduling, PythonWrapperCodegen, CppWrapperCodegen,
                                    device_custom_pass=BackendVersion())
        _patches.install("inductor")  # upstream_patches.py's answers
        _registered = True
