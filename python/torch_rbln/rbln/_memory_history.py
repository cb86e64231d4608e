"""Memory history and snapshots of the rbln caching allocator, in torch.cuda.memory's format, so that
`torch.cuda._memory_viz` (trace_plot, segment_plot, segsum) and https://pytorch.org/memory_viz read them."""
from __future__ import annotations

import pickle
import sys
from typing import Any

from .. import _C

_RECORD = {None: 0, "state": 1, "all": 2}
_CONTEXT = {None: 0, "state": 1, "alloc": 2, "all": 3}
_STACKS = {"python": False, "all": True}


def _record_memory_history(
    enabled: str | bool | None = "all",
    context: str | bool | None = "all",
    stacks: str = "all",
    max_entries: int = sys.maxsize,
    device: Any = None,
    clear_history: bool = False,
    **legacy: Any,
) -> None:
    """Starts (or with `enabled=None` stops) recording the allocator's history, as
    torch.cuda.memory._record_memory_history: `enabled` "state" keeps the stack of each live
    allocation, "all" also a trace of every action (up to `max_entries`); `context` says which
    actions keep stacks ("state", "alloc", "all"); `stacks` "python" or "all" (with C++ frames).
    Every rbln device records. The legacy form `(enabled: bool, record_context=True,
    trace_alloc_max_entries=1, trace_alloc_record_context=False, record_context_cpp=False)` works too."""
    if isinstance(enabled, bool):
        record_context = legacy.get("record_context", context if isinstance(context, bool) else True)
        max_entries = legacy.get("trace_alloc_max_entries", 1)
        trace_context = legacy.get("trace_alloc_record_context", False)
        stacks = "all" if legacy.get("record_context_cpp", False) else "python"
        enabled = ("all" if max_entries > 1 else "state") if enabled else None
        context = ("all" if trace_context else "state") if record_context else None
    elif legacy:
        raise TypeError(f"_record_memory_history() got unexpected keyword arguments {sorted(legacy)}")
    for name, value, allowed in (("enabled", enabled, _RECORD), ("context", context, _CONTEXT), ("stacks", stacks, _STACKS)):
        if value not in allowed:
            raise ValueError(f"{name} must be one of {list(allowed)}, got {value!r}")
    if max_entries < 0:
        raise ValueError(f"max_entries must be non-negative, got {max_entries}")
    _C._record_memory_history(_RECORD[enabled], _CONTEXT[context], _STACKS[stacks], max_entries, clear_history)


def _snapshot(device: Any = None) -> dict[str, Any]:
    """The allocator's state: `segments` (every device's, with their blocks and the stacks that
    allocated them) and `device_traces` (one list of actions per device), as torch.cuda.memory._snapshot."""
    return _C._memory_snapshot()


def _dump_snapshot(filename: str = "dump_snapshot.pickle") -> None:
    """Pickles `_snapshot()` to `filename`, for https://pytorch.org/memory_viz."""
    with open(filename, "wb") as f:
        pickle.dump(_snapshot(), f)


def memory_snapshot() -> list[dict[str, Any]]:
    """The segments of every rbln device, as torch.cuda.memory_snapshot."""
    return _snapshot()["segments"]
