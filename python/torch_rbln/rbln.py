"""`torch.rbln`: the device module, shaped like `torch.cuda`."""
from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
from typing_extensions import deprecated

from . import _C, _observe

_DEVICE_TYPE = "rbln"


def _index(device: Any = None, optional: bool = True) -> int:
    """Device index from an int, a str, a torch.device or None (current)."""
    if device is None:
        return _C._current_device()
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != _DEVICE_TYPE:
        raise ValueError(f"Expected an rbln device, got {device}")
    return _C._current_device() if device.index is None else device.index


# ---- devices -----------------------------------------------------------------
def is_available() -> bool:
    return _C._device_count() > 0


def is_initialized() -> bool:
    return _C._is_initialized()


def init() -> None:
    """The runtime initializes lazily; kept for torch.cuda parity."""


def device_count() -> int:
    return _C._device_count()


def current_device() -> int:
    return _C._current_device()


def set_device(device: Any) -> None:
    index = _index(device)
    if index >= 0:
        _C._set_device(index)


class device:
    """Context manager that changes the current rbln device."""

    def __init__(self, device: Any):
        self.idx = -1 if device is None else _index(device)
        self.prev_idx = -1

    def __enter__(self):
        self.prev_idx = _C._current_device()
        if self.idx >= 0 and self.idx != self.prev_idx:
            _C._set_device(self.idx)

    def __exit__(self, *exc):
        if self.idx >= 0 and self.idx != self.prev_idx:
            _C._set_device(self.prev_idx)
        return False


class device_of(device):
    """Context manager that makes the device of `obj` (a tensor) current."""

    def __init__(self, obj):
        super().__init__(obj.get_device() if obj.device.type == _DEVICE_TYPE else -1)


def synchronize(device: Any = None) -> None:
    """Waits for all work queued on every stream of the device."""
    _C._synchronize(_index(device))


def can_device_access_peer(device: Any, peer_device: Any) -> bool:
    """Whether `device` reads `peer_device`'s memory directly: a copy between two rbln devices goes from one
    device's memory to the other's, with no staging buffer in host memory. As on CUDA, a device is not its
    own peer."""
    index, peer = _index(device), _index(peer_device)
    if not 0 <= index < device_count():
        raise AssertionError("Invalid device id")  # torch.cuda's errors
    if not 0 <= peer < device_count():
        raise AssertionError("Invalid peer device id")
    return index != peer


def set_sync_debug_mode(debug_mode: int | str) -> None:
    """0 or "default": nothing; 1 or "warn": warn on each host-blocking call (Tensor.item(), a blocking copy to
    the CPU, a stream synchronize, an op whose output size depends on data); 2 or "error": raise there.
    As on CUDA, device and event synchronize are exempt."""
    if isinstance(debug_mode, str):
        modes = {"default": 0, "warn": 1, "error": 2}
        if debug_mode not in modes:
            raise RuntimeError("invalid value of debug_mode, expected one of `default`, `warn`, `error`")
        debug_mode = modes[debug_mode]
    _C._set_sync_debug_mode(debug_mode)


def get_sync_debug_mode() -> int:
    return _C._get_sync_debug_mode()


# ---- streams and events ------------------------------------------------------
class Stream(torch.Stream):
    """An rbln stream: work queued on it runs in order, asynchronously."""

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs):
        if "stream_id" in kwargs:
            return super().__new__(cls, **kwargs)
        with globals()["device"](device):
            return super().__new__(cls, device=torch.device(_DEVICE_TYPE, _C._current_device()), priority=priority)

    def __eq__(self, other):
        return isinstance(other, torch.Stream) and super().__eq__(other)

    def __hash__(self):
        return hash((self.stream_id, self.device_index, self.device_type))

    @property
    def rbln_stream(self) -> int:
        """The driver's handle of this stream, for another library (as `cuda_stream`'s cudaStream_t)."""
        return _C._stream_handle(self.device_index, self.stream_id)


class ExternalStream(Stream):
    """Wraps a stream handle another library got from `Stream.rbln_stream`, as torch.cuda.ExternalStream wraps a
    cudaStream_t: work queued on it is ordered with that library's. `device`, if given, must be the stream's."""

    def __new__(cls, stream_ptr: int, device: Any = None, **kwargs):
        index, stream_id = _C._stream_from_handle(stream_ptr)
        if device is not None and _index(device) != index:
            raise ValueError(f"ExternalStream: the stream is on rbln:{index}, not on {device}")
        device_type = torch.accelerator.current_stream(index).device_type  # the enum value Stream takes
        return super().__new__(cls, stream_id=stream_id, device_index=index, device_type=device_type)


def get_stream_from_external(data_ptr: int, device: Any = None) -> Stream:
    """The Stream a handle from `Stream.rbln_stream` names, as torch.cuda.get_stream_from_external."""
    return ExternalStream(data_ptr, device)


def Event(enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> torch.Event:
    """An rbln event: record on a stream, wait, query, synchronize, time.

    A plain torch.Event on rbln: PyTorch's stream and event methods accept
    only that exact type, not a subclass."""
    return torch.Event(device=_DEVICE_TYPE, enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)


def _wrap(stream: torch.Stream) -> Stream:
    return Stream(stream_id=stream.stream_id, device_index=stream.device_index, device_type=stream.device_type)


def current_stream(device: Any = None) -> Stream:
    return _wrap(torch.accelerator.current_stream(_index(device)))


def default_stream(device: Any = None) -> Stream:
    s = torch.accelerator.current_stream(_index(device))
    return Stream(stream_id=0, device_index=s.device_index, device_type=s.device_type)


def set_stream(stream: torch.Stream) -> None:
    if stream is not None:
        torch.accelerator.set_stream(stream)


class StreamContext:
    """Makes `stream` current on its device inside the `with` block."""

    def __init__(self, stream: torch.Stream | None):
        self.stream = stream
        self.prev = None
        self.prev_device = -1

    def __enter__(self):
        if self.stream is None:
            return
        self.prev_device = current_device()
        if self.stream.device_index != self.prev_device:
            set_device(self.stream.device_index)
        self.prev = current_stream(self.stream.device_index)
        set_stream(self.stream)

    def __exit__(self, *exc):
        if self.stream is None:
            return False
        set_stream(self.prev)
        if self.prev_device != self.stream.device_index:
            set_device(self.prev_device)
        return False


def stream(stream: torch.Stream | None) -> StreamContext:
    return StreamContext(stream)


# ---- memory ------------------------------------------------------------------
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
    with globals()["device"](index), StreamContext(stream):
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


from torch.cuda import _memory_viz  # noqa: E402,F401  (it reads rbln snapshots as they are)

from ._memory_history import _dump_snapshot, _record_memory_history, _snapshot, memory_snapshot  # noqa: E402,F401


# ---- device info ---------------------------------------------------------------
@dataclass(frozen=True)
class _DeviceProperties:
    name: str
    total_memory: int
    index: int
    type: str = "rbln"
    emulated: bool = True


def get_device_properties(device: Any = None) -> _DeviceProperties:
    index = _index(device)
    if not 0 <= index < device_count():
        raise ValueError(f"Invalid device index rbln:{index}: there are {device_count()} RBLN devices")
    return _DeviceProperties(get_device_name(index), _C._device_capacity(index), index)


def get_device_name(device: Any = None) -> str:
    return "RBLN NPU (emulated)"


def get_device_capability(device: Any = None) -> tuple[int, int]:
    return (1, 0)


# ---- random numbers ------------------------------------------------------------
def manual_seed(seed: int) -> None:
    _C._manual_seed(current_device(), int(seed) & 0xFFFF_FFFF_FFFF_FFFF)


def manual_seed_all(seed: int) -> None:
    for i in range(device_count()):
        _C._manual_seed(i, int(seed) & 0xFFFF_FFFF_FFFF_FFFF)


def seed() -> None:
    _C._seed(current_device())


def seed_all() -> None:
    s = _C._seed(0)
    for i in range(1, device_count()):
        _C._manual_seed(i, s)


def initial_seed() -> int:
    return _C._initial_seed(current_device())


default_generators: tuple[torch.Generator, ...] = _C._default_generators()


def _is_in_bad_fork() -> bool:
    """The driver refuses work in a forked child itself (see docs/runtime.md)."""
    return False


def get_rng_state(device: Any = "rbln") -> torch.Tensor:
    return torch.frombuffer(bytearray(_C._get_rng_state(_index(device))), dtype=torch.uint8)


def set_rng_state(new_state: torch.Tensor, device: Any = "rbln") -> None:
    if new_state.dtype != torch.uint8:  # Generator.set_state's check, as torch.cuda.set_rng_state reaches it
        raise TypeError("RNG state must be a torch.ByteTensor")
    _C._set_rng_state(_index(device), bytes(new_state.to("cpu", torch.uint8).contiguous().numpy().tobytes()))


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


# ---- AMP -------------------------------------------------------------------------
def get_amp_supported_dtype() -> list[torch.dtype]:
    """Lower-precision dtypes the device runs natively (autocast's choices)."""
    return [torch.float16, torch.bfloat16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


def is_tf32_supported() -> bool:
    """float32 matmuls and convolutions compute in float32: no TF32 mode."""
    return False


has_half = True


# ---- legacy tensor types --------------------------------------------------------------
class _TensorType(type):
    """isinstance(t, torch.rbln.FloatTensor): an rbln tensor of that dtype, as torch.cuda's types check."""

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, torch.Tensor) and obj.device.type == _DEVICE_TYPE and obj.dtype == cls.dtype


class _LegacyTensor(metaclass=_TensorType):
    """torch.rbln.FloatTensor(2, 3) (uninitialized), FloatTensor([1, 2]) (data) or FloatTensor() (empty), on
    the current device, as torch.cuda.FloatTensor constructs."""

    dtype: torch.dtype

    def __new__(cls, *args):
        target = torch.device(_DEVICE_TYPE, current_device())
        if len(args) == 1 and isinstance(args[0], torch.Size):
            args = tuple(args[0])
        if not args:
            args = (0,)
        if all(isinstance(a, int) for a in args):
            return torch.empty(args, dtype=cls.dtype, device=target)
        if len(args) == 1:
            return torch.tensor(args[0], dtype=cls.dtype, device=target)
        raise TypeError(f"{cls.__name__}(): expected sizes or one sequence of data, got {args!r}")


def _tensor_type(name: str, dtype: torch.dtype) -> type:
    return _TensorType(name, (_LegacyTensor,), {"dtype": dtype, "__module__": "torch.rbln", "__qualname__": name})


BFloat16Tensor = _tensor_type("BFloat16Tensor", torch.bfloat16)
BoolTensor = _tensor_type("BoolTensor", torch.bool)
ByteTensor = _tensor_type("ByteTensor", torch.uint8)
CharTensor = _tensor_type("CharTensor", torch.int8)
DoubleTensor = _tensor_type("DoubleTensor", torch.float64)
FloatTensor = _tensor_type("FloatTensor", torch.float32)
HalfTensor = _tensor_type("HalfTensor", torch.float16)
IntTensor = _tensor_type("IntTensor", torch.int32)
LongTensor = _tensor_type("LongTensor", torch.int64)
ShortTensor = _tensor_type("ShortTensor", torch.int16)


# ---- torch.compile -----------------------------------------------------------------
_INDUCTOR_HOOKS = ("Scheduling", "PythonWrapperCodegen", "CppWrapperCodegen")


def __getattr__(name: str):
    """Inductor looks up `torch.rbln.Scheduling` and friends when it first compiles for rbln:
    the compile backend (torch_rbln/_inductor) is imported and registered then, not at import."""
    if name in _INDUCTOR_HOOKS:
        from . import _inductor

        _inductor.register()
        return getattr(_inductor, name)
    raise AttributeError(f"module 'torch.rbln' has no attribute {name!r}")


def compile_stats():
    """What torch.compile did in this process: frames compiled, rbln graphs and kernels generated,
    graph breaks and recompiles with their reasons, compile time, FX graph and AOTAutograd cache
    hits and misses (a `CompileStats`, see docs/compile.md)."""
    from ._inductor.stats import compile_stats

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


# ---- op accounting -----------------------------------------------------------------
# One line of advice per kind of problem report() shows; fallback kinds are TORCH_RBLN_DISABLE_FALLBACK's words.
_ADVICE = {
    "unlisted": "ops not in ops.yaml run on the CPU: give them a kernel (docs/porting.md) or keep them out of hot code",
    "listed": "ops ops.yaml lists as `strategy: fallback` run on the CPU by design: keep them out of the step loop",
    "dtype": "the device kernel lacks this dtype: cast to a dtype docs/supported_ops.md lists for the op",
    "item": "Tensor.item() waits for the device: keep values on the device, or read them once after the loop",
    "device_to_host": "blocking copies to the CPU wait for the device: copy less often, or non_blocking=True "
                      "into pin_memory() tensors",
    "synchronize": "explicit synchronize calls block the host: keep them for timing, out of the step loop",
    "data_dependent": "nonzero, masked_select, boolean indexing and repeat_interleave read data back to size "
                      "their output: prefer fixed-size forms (torch.where, masked_fill)",
    "device_time": "these keep the device busiest: see their shapes and streams in torch.profiler's trace "
                   "(docs/debugging.md), batch them, or torch.compile the code around them",
}
_DEVICE_TIME_ROWS = 10  # report() lists this many of the busiest ops


@dataclass
class Explanation:
    """What ran inside `explain()`: ATen overload name -> call count. A torch.compile kernel counts as
    device work under "graph <id> <aot graph>:<kernel>"; `compiled_graphs` sums its launches per graph.
    `syncs`: host-blocking calls by kind ("item", "device_to_host", "synchronize", "data_dependent");
    `fallback_sites`: op -> {"file:line": calls}, with explain(with_stack=True). `device_time`: kernel or
    copy name (an ATen overload, "Memcpy HtoD"/"DtoH"/"DtoD", a compiled kernel) -> milliseconds it ran on
    the device, from the same records as torch.profiler's device timeline. `compiled_ops`: calls of ops.yaml's
    `compile` ops that ran a compiled plan (also in `device_ops`); `compiles`: the plans they compiled inside
    (a plan loaded from memory or disk compiles nothing)."""

    device_ops: dict[str, int] = field(default_factory=dict)
    compiled_graphs: dict[str, int] = field(default_factory=dict)
    fallback_ops: dict[str, int] = field(default_factory=dict)
    fallback_reasons: dict[str, dict[str, int]] = field(default_factory=dict)
    syncs: dict[str, int] = field(default_factory=dict)
    fallback_sites: dict[str, dict[str, int]] = field(default_factory=dict)
    device_time: dict[str, float] = field(default_factory=dict)
    device_launches: dict[str, int] = field(default_factory=dict)  # the launches device_time sums
    compiled_ops: dict[str, int] = field(default_factory=dict)  # ops.yaml `compile` ops: calls that ran a plan
    compiles: dict[str, int] = field(default_factory=dict)  # their plans compiled inside (not loaded)

    def report(self) -> str:
        """A table of what cost time, most first: fallbacks by calls, then syncs, then the ops that kept the
        device busiest, with advice per kind."""
        rows: list[tuple[int, str, str]] = []
        kinds: list[str] = []
        reason_kinds = _C._fallback_reason_kinds()
        for op, calls in sorted(self.fallback_ops.items(), key=lambda kv: (-kv[1], kv[0])):
            for reason in self.fallback_reasons[op]:
                kind = reason_kinds[reason]
                kinds += [kind] if kind not in kinds else []
                rows.append((self.fallback_reasons[op][reason], f"fallback {op}", f"{reason} [{kind}]"))
            for site, n in sorted(self.fallback_sites.get(op, {}).items(), key=lambda kv: (-kv[1], kv[0])):
                rows.append((n, "", f"  at {site}"))
        for kind, calls in sorted(self.syncs.items(), key=lambda kv: (-kv[1], kv[0])):
            kinds.append(kind)
            rows.append((calls, f"sync {kind}", ""))
        busiest = sorted(self.device_time.items(), key=lambda kv: (-kv[1], kv[0]))[:_DEVICE_TIME_ROWS]
        total_ms = sum(self.device_time.values())
        for name, ms in busiest:
            share = f" ({ms / total_ms:.0%})" if total_ms else ""
            rows.append((self.device_launches[name], f"device {name}", f"{ms:.3f} ms on the device{share}"))
        kinds += ["device_time"] if busiest else []
        device_calls = sum(self.device_ops.values())
        lines = [f"torch.rbln.explain(): {device_calls} device op calls, {sum(self.fallback_ops.values())} "
                 f"CPU fallbacks, {sum(self.syncs.values())} host syncs, {total_ms:.3f} ms of device time"]
        if rows:
            width = max(len(what) for _, what, _ in rows)
            lines.append(f"{'calls':>7}  {'what':<{width}}  detail")
            lines += [f"{n:>7}  {what:<{width}}  {detail}".rstrip() for n, what, detail in rows]
            lines.append("advice:")
            lines += [f"  {kind}: {_ADVICE[kind]}" for kind in kinds]
        return "\n".join(lines)

    __str__ = report


@contextlib.contextmanager
def explain(with_stack: bool = False):
    """Counts the ops that ran on the device, those that fell back to the CPU, and the host syncs.
    with_stack=True also records where each fallback came from (the user's file:line).

        with torch.rbln.explain() as ex:
            y = model(x)
        print(ex.report())
    """
    result = Explanation()
    device_before, fallback_before, syncs_before = _C._device_op_counts(), _C._fallback_counts(), _C._sync_counts()
    compiled_before, compiles_before = _C._compiled_op_counts(), _C._compile_counts()
    if with_stack:
        _observe.capture_sites(result.fallback_sites)
    activity = _C._activity_subscribe()
    try:
        yield result
    finally:
        if with_stack:
            _observe.release_sites(result.fallback_sites)
        try:  # waits for the work queued inside, without taking a failed kernel's error (the program's own)
            records = _C._activity_take(activity)
        finally:
            _C._activity_unsubscribe(activity)
        for name, _device, _stream, begin_ns, end_ns in records:
            result.device_time[name] = result.device_time.get(name, 0.0) + (end_ns - begin_ns) / 1e6
            result.device_launches[name] = result.device_launches.get(name, 0) + 1
        for name, count in _C._device_op_counts().items():
            delta = count - device_before.get(name, 0)
            if delta:
                result.device_ops[name] = delta
                if name.startswith("graph "):
                    graph = name.rpartition(":")[0]
                    result.compiled_graphs[graph] = result.compiled_graphs.get(graph, 0) + delta
        for name, reasons in _C._fallback_counts().items():
            before = fallback_before.get(name, {})
            deltas = {r: c - before.get(r, 0) for r, c in reasons.items() if c - before.get(r, 0)}
            if deltas:
                result.fallback_reasons[name] = deltas
                result.fallback_ops[name] = sum(deltas.values())
        result.syncs.update((k, c - syncs_before[k]) for k, c in _C._sync_counts().items() if c - syncs_before[k])
        for counts, before, into in ((_C._compiled_op_counts(), compiled_before, result.compiled_ops),
                                     (_C._compile_counts(), compiles_before, result.compiles)):
            into.update((k, c - before.get(k, 0)) for k, c in counts.items() if c - before.get(k, 0))


from . import amp, memory, random, streams  # noqa: E402,F401  (torch.cuda's submodules; they import from here)
