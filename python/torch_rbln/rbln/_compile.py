"""`torch.rbln`'s torch.compile side: the hooks Inductor looks up, compile statistics, and the cache of
compiled-op plans (ops.yaml's `compile` strategy)."""
from __future__ import annotations

from .. import _C

__all__ = ["clear_compiled_op_cache", "compile_stats", "compiled_op_cache_info", "set_compiled_op_cache_limits"]

_INDUCTOR_HOOKS = ("Scheduling", "PythonWrapperCodegen", "CppWrapperCodegen")


def _inductor_hook(name: str):
    """Inductor looks up `torch.rbln.Scheduling` and friends when it first compiles for rbln:
    the compile backend (torch_rbln/_inductor) is imported and registered then, not at import.
    It is the package's module `__getattr__` (torch_rbln/rbln/__init__.py)."""
    if name in _INDUCTOR_HOOKS:
        from .. import _inductor

        _inductor.register()
        return getattr(_inductor, name)
    raise AttributeError(f"module 'torch.rbln' has no attribute {name!r}")


def compile_stats():
    """What torch.compile did in this process: frames compiled, rbln graphs and kernels generated,
    graph breaks and recompiles with their reasons, compile time, FX graph and AOTAutograd cache
    hits and misses (a `CompileStats`, see docs/compile.md)."""
    from .._inductor.stats import compile_stats

    return compile_stats()


def compiled_op_cache_info() -> dict[str, int]:
    """The cache of compiled-op plans (ops.yaml's `compile` strategy): plans and bytes loaded, their bounds,
    hits, misses, plans loaded from disk and plans evicted (least recently used first)."""
    return _C._plan_cache_info()


def set_compiled_op_cache_limits(max_plans: int | None = None, max_bytes: int | None = None) -> None:
    """Bounds the plans kept loaded (default 512 plans, 256 MiB); the plans on disk stay."""
    _C._set_plan_cache_limits(max_plans or 0, max_bytes or 0)


def clear_compiled_op_cache() -> None:
    """Unloads every plan (after the device finishes the work they queued) and forgets failed compiles."""
    _C._clear_plan_cache()
