"""The C++ wrapper Inductor generates for an ATen op compiled by the `compile` strategy (op_compiler.py).

A subclass of Inductor's CPU C++ wrapper, registered for "rbln". Its output is
a shared object with a small C ABI (`ABI` below) that runtime/compiled/RBLNCompiledOps.cpp
loads and calls without Python: the kernels are Inductor's own C++ kernels,
queued on the stream like torch.compile's (kernels.py); buffers are allocated
on the device through the dispatcher; the guard tells which input sizes the
plan was compiled for. It differs from CPU's wrapper in five places only: the
device code it includes, the device it allocates on, how it calls kernels, the
GIL (the caller does not hold it) and the ABI appended at the end.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import threading

import sympy
import torch
from torch._inductor.codegen.cpp_utils import cexpr
from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu
from torch._inductor.virtualized import V

from .kernels import ENQUEUE

_DEVICE_TYPE = "rbln"
ABI_VERSION = 1
# The names the runtime looks up in a plan (runtime/compiled/RBLNCompiledOps.cpp, the same numbers).
ABI = f"""
extern "C" int rbln_plan_abi_version() {{ return {ABI_VERSION}; }}
extern "C" void rbln_plan_bind(rbln_launch_t launch, void* (*intern)(const char*)) {{
    rbln_launch = launch;
    rbln_intern = intern;
}}
extern "C" void rbln_plan_run(AtenTensorHandle* inputs, AtenTensorHandle* outputs) {{
    inductor_entry_impl(inputs, outputs);
}}
"""

# An AOTInductor package finds the runtime in the process that loads it (Python's or a C++ program's):
# libtorch_rbln is already loaded there, so the package needs no path to it.
AOT_RUNTIME = """
#include <dlfcn.h>
static void* rbln_symbol(const char* name) {
    static void* const lib = dlopen("libtorch_rbln.so", RTLD_NOW | RTLD_NOLOAD);
    void* symbol = lib ? dlsym(lib, name) : nullptr;
    if (!symbol) symbol = dlsym(RTLD_DEFAULT, name);  // a program that links the runtime in
    if (!symbol) throw std::runtime_error(std::string("this package runs on rbln: load torch_rbln first (missing ") + name + ")");
    return symbol;
}
struct RBLNRuntime {
    rbln_launch_t launch = reinterpret_cast<rbln_launch_t>(rbln_symbol("rbln_launch_compiled_kernel"));
    void* (*intern)(const char*) = reinterpret_cast<void* (*)(const char*)>(rbln_symbol("rbln_aoti_kernel"));
    AOTITorchError (*constant)(AtenTensorHandle, int32_t, AtenTensorHandle*) =
        reinterpret_cast<AOTITorchError (*)(AtenTensorHandle, int32_t, AtenTensorHandle*)>(rbln_symbol("rbln_aoti_constant"));
};
static const RBLNRuntime& rbln_runtime() { static const RBLNRuntime runtime; return runtime; }
#define rbln_launch rbln_runtime().launch
#define rbln_intern rbln_runtime().intern
static AtenTensorHandle rbln_constant(AtenTensorHandle constant, int32_t device_index) {
    AtenTensorHandle on_device;
    AOTI_TORCH_ERROR_CODE_CHECK(rbln_runtime().constant(constant, device_index, &on_device));
    return on_device;
}
// An extern kernel as an rbln op (generated/c_shim_rbln_*.cpp): CPU's C shim's signature, the op through the dispatcher.
#define RBLN_SHIM(name) (reinterpret_cast<decltype(&aoti_torch_cpu_##name)>( \\
    [] { static void* const fn = rbln_symbol("aoti_torch_rbln_" #name); return fn; }()))
"""


@functools.lru_cache(maxsize=None)
def has_rbln_shim(shim: str) -> bool:
    """Whether an extern kernel is an rbln op in a package: the loaded runtime defines its C shim (generated from
    CPU's list, generated/c_shim_rbln_*.cpp), the symbol the package looks up when it runs."""
    runtime = ctypes.CDLL("libtorch_rbln.so", mode=os.RTLD_NOW | os.RTLD_NOLOAD)
    return hasattr(runtime, f"aoti_torch_{_DEVICE_TYPE}_{shim}")


# Extern kernels (views Inductor cannot express as a reinterpretation) that only build a tensor's metadata.
_METADATA_ONLY_SHIMS = frozenset({"at::_ops::view_as_real::call", "at::_ops::view_as_complex::call"})


class CompileRefused(Exception):
    """The op cannot become a plan; the message says why (the fallback's reason carries it)."""


_state = threading.local()  # the op being compiled: its name prefixes kernel names


@contextlib.contextmanager
def compiling(op_name: str):
    _state.op_name = op_name
    try:
        yield
    finally:
        del _state.op_name


def _guard_source() -> str:
    """`rbln_plan_guard(sizes)`: true when the inputs' sizes satisfy every assumption the compile made
    (which sizes are equal, which are 0 or 1, the shape rules the decomposition checked)."""
    shape_env = V.graph.sizevars.shape_env
    inputs = [V.graph.graph_inputs[name] for name in V.graph.graph_input_names]
    sizes = [(f"sizes[{i}][{j}]", V.graph.sizevars.simplify(size))
             for i, node in enumerate(inputs) for j, size in enumerate(node.get_size())]
    names: dict[sympy.Symbol, sympy.Symbol] = {}  # each symbol, as the first input size it is
    decls, checks = [], []
    for value, size in sizes:
        if isinstance(size, sympy.Symbol) and size not in names:
            names[size] = sympy.Symbol(f"size{len(names)}", integer=True)
            decls.append(f"    const int64_t {names[size]} = {value};\n")
            bounds = shape_env.var_to_range[size]
            checks += [f"{value} >= {int(bounds.lower)}"] if isinstance(bounds.lower, sympy.Integer) else []
            checks += [f"{value} <= {int(bounds.upper)}"] if isinstance(bounds.upper, sympy.Integer) else []
        else:
            checks.append(f"{value} == {cexpr(size.subs(names))}")
    for guard in shape_env.guards:
        expr = shape_env.simplify(guard.expr)
        if expr is not sympy.true:
            checks.append(cexpr(expr.subs(names)))
    return (f'extern "C" bool rbln_plan_guard(const int64_t* const* sizes) {{\n{"".join(decls)}'
            f"    return {' && '.join(f'({c})' for c in checks) or 'true'};\n}}\n")


class RBLNCppWrapperCodegen(CppWrapperCpu):
    def __init__(self):
        if not hasattr(_state, "op_name") and not V.graph.aot_mode:  # a plan, or an AOTInductor package
            raise NotImplementedError("torch.compile with cpp_wrapper=True is not supported on rbln (docs/compile.md)")
        self.device = _DEVICE_TYPE
        super().__init__()
        self.needs_vec_isa = True  # the kernels are the CPU backend's, vectorized
        self._kernels: set[str] = set()

    @staticmethod
    def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
        return RBLNCppWrapperCodegen()

    @staticmethod
    def get_device_include_path_jit(device: str) -> str:
        return CppWrapperCpu.get_device_include_path_jit("cpu" if device == _DEVICE_TYPE else device)

    @staticmethod
    def get_device_include_path_aot(device: str) -> str:
        return CppWrapperCpu.get_device_include_path_aot("cpu" if device == _DEVICE_TYPE else device)

    def write_header(self) -> None:
        super().write_header()
        self.header.splice(ENQUEUE)
        if V.graph.aot_mode:
            self.header.splice("#include <torch/csrc/inductor/aoti_torch/generated/c_shim_cpu.h>")
            self.header.splice(AOT_RUNTIME)
        else:
            self.header.splice("""
                static rbln_launch_t rbln_launch;
                static void* (*rbln_intern)(const char*);
            """)
        self.header.splice(
            "#define RBLN_KERNEL_ID(name) ([] { static void* const id = rbln_intern(name); return id; }())")

    def codegen_device(self, device):
        if device.type != _DEVICE_TYPE:
            return super().codegen_device(device)
        if getattr(_state, "constants", False):  # a package's weights load as CPU's; its runner moves them
            return super().codegen_device(torch.device("cpu"))
        self.used_cached_devices.add("privateuse1")
        # A package runs on the device index it is loaded on (its runner passes "cpu:<index>" to the model).
        return f"cached_torch_device_type_privateuse1, {'this->device_idx_' if V.graph.aot_mode else device.index or 0}"

    def _write_constants_unpacking(self):
        if not V.graph.aot_mode:
            return super()._write_constants_unpacking()
        for idx, (name, value) in enumerate(V.graph.constants.items()):  # the weights' copies on the device
            if value.device.type == _DEVICE_TYPE:
                self.prefix.writeline(f"RAIIAtenTensorHandle {name}(rbln_constant(constants_->at({idx}), this->device_idx_));")
            else:
                self.prefix.writeline(f"[[maybe_unused]] auto& {name} = constants_->at({idx});")

    def codegen_model_constructor(self):
        _state.constants = True
        try:
            super().codegen_model_constructor()
        finally:
            _state.constants = False

    def _write_input_preamble(self):
        # The plan runs inside a dispatcher call, where the thread does not hold the GIL: releasing it aborts.
        splice_jit = self.prefix.splice_jit
        self.prefix.splice_jit = lambda code, *a, **k: None if "gil_scoped_release" in str(code) else splice_jit(code, *a, **k)
        try:
            super()._write_input_preamble()
        finally:
            del self.prefix.splice_jit

    def generate_c_shim_extern_kernel_call(self, kernel, args, device, **kwargs):
        # Inductor's C shims call CPU's (or CUDA's) kernel directly, past the dispatcher: none is rbln's,
        # except for the dtype views, which read no data: CPU's shim makes the same view of device memory.
        shim = self.get_c_shim_func_name(kernel, device).removeprefix(f"aoti_torch_{_DEVICE_TYPE}_")
        if device == _DEVICE_TYPE and V.graph.aot_mode and has_rbln_shim(shim):
            self.writeline(f"AOTI_TORCH_ERROR_CODE_CHECK(RBLN_SHIM({shim})({', '.join(args)}));")
            return
        if device == _DEVICE_TYPE:
            if kernel not in _METADATA_ONLY_SHIMS:
                raise CompileRefused(f"the plan needs {kernel}, an extern kernel with no rbln C shim")
            device = "cpu"
        super().generate_c_shim_extern_kernel_call(kernel, args, device, **kwargs)

    def _define_kernel_helper(self, kernel_name, kernel_body, metadata=None, gpu=False, cpp_definition=None):
        self._kernels.add(kernel_name)
        super()._define_kernel_helper(kernel_name, kernel_body, metadata, gpu, cpp_definition)

    def wrap_kernel_call(self, name, call_args):
        if name not in self._kernels:
            return super().wrap_kernel_call(name, call_args)
        kernel_id = f'RBLN_KERNEL_ID("{getattr(_state, "op_name", "aoti")}:{name}")'
        return f"rbln_enqueue<{name}>(rbln_launch, {kernel_id}, {', '.join(call_args)});"

    def _generate_end_jit(self, result):
        result.splice(ABI)
        result.splice(_guard_source())
        self.device = "cpu"  # the plan builds as CPU code: the kernels and their headers are the CPU backend's
        try:
            super()._generate_end_jit(result)
        finally:
            self.device = _DEVICE_TYPE
