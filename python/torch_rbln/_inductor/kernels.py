"""Inductor's C++ kernels, launched on the rbln stream instead of run on the calling thread.

The kernel source is Inductor's own (CppScheduling). Only its Python binding
differs: CPU's binding calls `kernel(args...)` at once; this one copies the
arguments and hands the call to the runtime (runtime/compiled/RBLNCompiledKernels.h),
which queues it on the current stream of the buffers' device. The call is then
ordered after earlier eager work on that stream, runs with device memory
accessible (RBLN_STRICT=1), and a kernel's error surfaces at the next
synchronizing call, named "<graph>:<kernel>".
"""
from __future__ import annotations

import functools

from torch._inductor.async_compile import AsyncCompile, get_compile_threads
from torch._inductor.codecache import CppPythonBindingsCodeCache, LambdaFuture
from torch.utils._ordered_set import OrderedSet

from .. import _C

# Prepended to every kernel's arguments: the runtime's launch entry and the kernel's identity.
_LAUNCH_ARGS = ["uintptr_t", "uintptr_t"]


# The launch of one kernel call on the stream (runtime/compiled/RBLNCompiledKernels.h), shared with
# cpp_wrapper.py: a tuple of the call's arguments outlives the caller; `buffer` is any
# pointer argument, whose device the call runs on.
ENQUEUE = """
#include <tuple>
#include <type_traits>

using rbln_launch_t = void (*)(void* kernel, const void* buffer, void (*run)(void*), void* args, void (*destroy)(void*));

template <auto Kernel, class... A>
static void rbln_enqueue(rbln_launch_t launch, void* kernel_id, A... a) {
    using Args = std::tuple<A...>;
    const void* buffer = nullptr;
    ([&] { if constexpr (std::is_pointer_v<A>) if (!buffer) buffer = a; }(), ...);
    launch(kernel_id, buffer, [](void* p) { std::apply(Kernel, *static_cast<Args*>(p)); },
           new Args(a...), [](void* p) { delete static_cast<Args*>(p); });
}
"""


class RBLNKernelCodeCache(CppPythonBindingsCodeCache):
    cache = {}
    _loaded_module_names = OrderedSet()
    # Formatted by str.format (braces doubled); `kernel` is Inductor's entry, the first two arguments
    # the runtime's launch entry and the kernel's identity (_LAUNCH_ARGS).
    extra_parse_arg = ENQUEUE.replace("{", "{{").replace("}", "}}") + """
        template <class... A>
        static void rbln_enqueue_kernel(uintptr_t launch, uintptr_t kernel_id, A... a) {{
            rbln_enqueue<kernel>(reinterpret_cast<rbln_launch_t>(launch), reinterpret_cast<void*>(kernel_id), a...);
        }}
    """
    call_entry_function = "rbln_enqueue_kernel({}); Py_RETURN_NONE;"


def cpp_pybinding(async_compile: AsyncCompile, name: str, argtypes: list[str], source: str):
    """`async_compile.cpp_pybinding` for rbln: the kernel, bound to its launch and its name."""
    launch, kernel_id = _C._compiled_kernel_launcher(), _C._compiled_kernel(name)

    def bind(kernel):
        return functools.partial(kernel, launch, kernel_id)

    argtypes = _LAUNCH_ARGS + list(argtypes)
    if get_compile_threads() <= 1:
        return bind(RBLNKernelCodeCache.load_pybinding(argtypes, source))
    get_result = RBLNKernelCodeCache.load_pybinding_async(argtypes, source, submit_fn=async_compile.submit)
    return LambdaFuture(lambda: bind(get_result()))
