"""`torch.rbln.explain()`: op accounting (device ops, CPU fallbacks, host syncs, device time) over a block."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from .. import _C, _observe

__all__ = ["Explanation", "explain"]

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
