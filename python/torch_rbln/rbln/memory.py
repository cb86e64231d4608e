"""`torch.rbln.memory`, as `torch.cuda.memory`: the caching allocator's statistics and controls, memory
pools, the pinned host allocator's statistics, and memory history and snapshots (_memory_history.py)."""
from __future__ import annotations

import contextlib
import os
import warnings
from typing import Any

import torch
from typing_extensions import deprecated

from torch.cuda import _memory_viz  # noqa: F401  (it reads rbln snapshots as they are)

from .. import _C
from ._device import _index
from ._device import device as _on_device
from ._memory_history import _dump_snapshot, _record_memory_history, _snapshot, memory_snapshot  # noqa: F401
from .streams import StreamContext

__all__ = ["MemPool", "OutOfMemoryError", "caching_allocator_alloc", "caching_allocator_delete",
           "caching_allocator_disabled", "caching_allocator_enable", "device_memory_used", "empty_cache",
           "get_allocator_backend", "get_per_process_memory_fraction", "host_memory_stats",
           "host_memory_stats_as_nested_dict", "list_gpu_processes", "max_memory_allocated", "max_memory_cached",
           "max_memory_reserved", "mem_get_info", "memory_allocated", "memory_cached", "memory_reserved",
           "memory_snapshot", "memory_stats", "memory_stats_as_nested_dict", "memory_summary",
           "reset_accumulated_host_memory_stats", "reset_accumulated_memory_stats", "reset_max_memory_allocated",
           "reset_max_memory_cached", "reset_peak_host_memory_stats", "reset_peak_memory_stats",
           "set_per_process_memory_fraction", "use_mem_pool"]


OutOfMemoryError = torch.OutOfMemoryError


def get_allocator_backend() -> str:
    """The caching allocator (runtime/memory/RBLNCachingAllocator.cpp); there is no pluggable one."""
    return "native"


def memory_stats(device: Any = None) -> dict[str, int]:
    return dict(sorted(_C._memory_stats(_index(device)).items()))


def memory_allocated(device: Any = None) -> int:
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device: Any = None) -> int:
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device: Any = None) -> int:
    return memory_stats(device)["reserved_bytes.all.current"]


def max_memory_reserved(device: Any = None) -> int:
    return memory_stats(device)["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device: Any = None) -> None:
    _C._reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device: Any = None) -> None:
    _C._reset_accumulated_memory_stats(_index(device))


def empty_cache() -> None:
    """Returns cached, unused device memory to the device."""
    _C._empty_cache()


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """(free, total) device memory in bytes."""
    return tuple(_C._mem_get_info(_index(device)))


def device_memory_used(device: Any = None) -> int:
    """Device memory in use, in bytes, as the driver counts it (the emulated device serves this process only)."""
    free, total = mem_get_info(device)
    return total - free


def list_gpu_processes(device: Any = None) -> str:
    """torch.cuda's printout of the processes using the device and their device memory, in its layout. The
    emulated device serves only the process that opened it: this one, once it holds device memory."""
    index = _index(device)
    used = device_memory_used(index)
    lines = [f"RBLN:{index}"]
    if used:
        lines.append(f"process {os.getpid():>10d} uses {used / (1024 * 1024):>12.3f} MB GPU memory")
    else:
        lines.append("no processes are running")
    return "\n".join(lines)


def _nested(flat: dict[str, Any]) -> dict[str, Any]:
    """{"a.b.c": v} -> {"a": {"b": {"c": v}}}: the nested form torch.cuda's *_as_nested_dict return."""
    nested: dict[str, Any] = {}
    for key, value in flat.items():
        *path, last = key.split(".")
        node = nested
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    return nested


def memory_stats_as_nested_dict(device: Any = None) -> dict[str, Any]:
    return _nested(memory_stats(device))


@deprecated("`torch.rbln.memory_cached` has been renamed to `torch.rbln.memory_reserved`", category=FutureWarning)
def memory_cached(device: Any = None) -> int:
    return memory_reserved(device)


@deprecated("`torch.rbln.max_memory_cached` has been renamed to `torch.rbln.max_memory_reserved`",
            category=FutureWarning)
def max_memory_cached(device: Any = None) -> int:
    return max_memory_reserved(device)


def reset_max_memory_allocated(device: Any = None) -> None:
    warnings.warn("torch.rbln.reset_max_memory_allocated now calls torch.rbln.reset_peak_memory_stats, "
                  "which resets /all/ peak memory stats.", FutureWarning)
    reset_peak_memory_stats(device)


def reset_max_memory_cached(device: Any = None) -> None:
    warnings.warn("torch.rbln.reset_max_memory_cached now calls torch.rbln.reset_peak_memory_stats, "
                  "which resets /all/ peak memory stats.", FutureWarning)
    reset_peak_memory_stats(device)


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    """memory_stats as torch.cuda.memory_summary lays them out (the rows this allocator keeps)."""
    index = _index(device)
    stats = memory_stats(index)

    def scaled(n: int, scale: int, prefixes: list[str], step: int, threshold: int) -> tuple[int, str]:
        """n in the unit that keeps `scale` (the row's reference) under threshold, as CUDA's summary picks it."""
        i = 0
        while i + 1 < len(prefixes) and scale >= threshold:
            n //= step
            scale /= step
            i += 1
        return n, prefixes[i]

    def size(n: int, scale: int) -> str:
        n, prefix = scaled(n, scale, ["B  ", "KiB", "MiB", "GiB", "TiB", "PiB"], 1024, 768 * 1024)
        return f"{n:6d} {prefix}"

    def count(n: int, scale: int) -> str:
        n, prefix = scaled(n, scale, [" ", "K", "M"], 1000, 750 * 1000)
        return f"{n:7d} {prefix} "

    metrics = [
        ("allocated_bytes", "Allocated memory", size),
        ("active_bytes", "Active memory", size),
        ("requested_bytes", "Requested memory", size),
        ("reserved_bytes", "Reserved memory", size),
        ("allocation", "Allocations", count),
        ("active", "Active allocs", count),
        ("segment", "Reserved segments", count),
    ]
    lines = ["=" * 75, f" {'':16} PyTorch RBLN memory summary, device ID {index:<17d} ", "-" * 75,
             f"  {'':9} RBLN OOMs: {stats['num_ooms']:<12d} | {'':6} device_malloc retries: "
             f"{stats['num_alloc_retries']:<5d}  ",
             "=" * 75, "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  "]
    for key, name, fmt in metrics:
        lines.append("-" * 75)
        pools = [("all", name)] + ([] if abbreviated else [("large_pool", "      from large pool"),
                                                            ("small_pool", "      from small pool")])
        first = None
        for pool, label in pools:
            values = [stats[f"{key}.{pool}.{m}"] for m in ("current", "peak", "allocated", "freed")]
            first = first or values  # each pool row is scaled like the "all" row, as CUDA's summary does
            cells = " | ".join(fmt(v, ref) for v, ref in zip(values, first))
            lines.append(f" {label:<21} | {cells} ")
    lines.append("=" * 75)
    return "|" + "|\n|".join(lines) + "|\n"


def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
    """Caps what the caching allocator may reserve on the device at fraction * capacity; an allocation past
    it raises torch.OutOfMemoryError, as CUDA's does."""
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    if fraction < 0 or fraction > 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    _C._set_memory_fraction(fraction, _index(device))


def get_per_process_memory_fraction(device: Any = None) -> float:
    return _C._get_memory_fraction(_index(device))


def caching_allocator_alloc(size: int, device: Any = None, stream: torch.Stream | None = None) -> int:
    """Device memory from the caching allocator, for another framework; returns its address."""
    index = _index(device)
    if stream is not None and not isinstance(stream, torch.Stream):
        raise TypeError("Invalid type for stream argument, must be `torch.rbln.Stream`")
    with _on_device(index), StreamContext(stream):
        return _C._raw_alloc(size)


def caching_allocator_delete(mem_ptr: int) -> None:
    _C._raw_delete(mem_ptr)


class MemPool:
    """A private pool of the caching allocator, as torch.cuda.MemPool: allocations inside
    `use_mem_pool(pool)` reuse only the pool's freed blocks, and no other allocation reuses them.
    Deleting the pool returns its memory (its free segments at once, the rest as its tensors are freed).
    rbln has one allocator, so `allocator` must be None; `use_on_oom` and `no_split` are not supported."""

    def __init__(self, allocator=None, use_on_oom: bool = False, no_split: bool = False):
        if allocator is not None:
            raise ValueError("torch.rbln.MemPool: rbln has no pluggable allocators; allocator must be None")
        if use_on_oom or no_split:
            raise NotImplementedError("torch.rbln.MemPool: use_on_oom and no_split are not supported")
        self._pool = _C._mem_pool_create()
        self._uses = 0

    @property
    def id(self) -> tuple[int, int]:
        return (0, self._pool)

    @property
    def allocator(self):
        return None

    def use_count(self) -> int:
        """1 for the pool itself, plus one per use_mem_pool block using it now."""
        return 1 + self._uses

    def snapshot(self) -> list[dict[str, Any]]:
        """The pool's segments, as memory_snapshot() shows them."""
        return [s for s in _C._memory_snapshot()["segments"] if tuple(s["segment_pool_id"]) == self.id]

    def __del__(self):
        if _C is not None and hasattr(self, "_pool"):  # not at interpreter exit, nor after a refused __init__
            _C._mem_pool_release(self._pool)


@contextlib.contextmanager
def use_mem_pool(pool: MemPool, device: Any = None):
    """Routes this thread's allocations on the device to `pool` inside the block, as torch.cuda.use_mem_pool."""
    index = _index(device)
    _C._mem_pool_begin(index, pool._pool)
    pool._uses += 1
    try:
        yield
    finally:
        pool._uses -= 1
        _C._mem_pool_end(index, pool._pool)


def caching_allocator_enable(value: bool = True) -> None:
    """Turns the caching off (False) or back on: off, memory a tensor frees goes back to the device as soon as
    its segment is wholly free, as torch.cuda.memory.caching_allocator_enable."""
    _C._set_caching_enabled(value)


@contextlib.contextmanager
def caching_allocator_disabled():
    """Caching off inside the block, as torch.cuda.memory.caching_allocator_disabled."""
    previous = _C._caching_enabled()
    caching_allocator_enable(False)
    try:
        yield
    finally:
        caching_allocator_enable(previous)


def host_memory_stats() -> dict[str, Any]:
    """Statistics of the pinned host allocator (pin_memory()), keyed like torch.cuda.host_memory_stats."""
    return dict(sorted(_C._host_memory_stats().items()))


def host_memory_stats_as_nested_dict() -> dict[str, Any]:
    return _nested(host_memory_stats())


def reset_accumulated_host_memory_stats() -> None:
    _C._reset_accumulated_host_memory_stats()


def reset_peak_host_memory_stats() -> None:
    _C._reset_peak_host_memory_stats()
