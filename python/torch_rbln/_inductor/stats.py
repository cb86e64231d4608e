"""`torch.rbln.compile_stats()`: what torch.compile did in this process, from Dynamo's and Inductor's own records."""
from __future__ import annotations

import collections
from dataclasses import dataclass, field

from torch._dynamo.utils import counters, get_compilation_metrics

# Graphs and kernels whose code was generated for rbln (not read from a cache); the wrapper counts them.
generated = collections.Counter()


@dataclass(frozen=True)
class CompileStats:
    frames_compiled: int  # Dynamo frame compiles; each recompile is one more
    graphs_generated: int  # rbln graphs whose code Inductor generated (a cache hit generates none)
    kernels_generated: int  # their C++ kernels
    graph_breaks: dict[str, int] = field(default_factory=dict)  # reason -> count
    recompiles: list[str] = field(default_factory=list)  # the guard failures that caused them
    compile_time_s: float = 0.0  # Dynamo's whole-frame compile time, summed
    fx_graph_cache_hits: int = 0
    fx_graph_cache_misses: int = 0
    aot_autograd_cache_hits: int = 0
    aot_autograd_cache_misses: int = 0
    graph_captures: int = 0  # mode="reduce-overhead": rbln graphs captured (one per input signature)
    graph_replays: int = 0  # calls served by replaying one


def compile_stats() -> CompileStats:
    metrics = get_compilation_metrics()
    return CompileStats(
        frames_compiled=sum(1 for m in metrics if m.fail_reason is None and m.graph_op_count is not None),
        graphs_generated=generated["graphs"],
        kernels_generated=generated["kernels"],
        graph_breaks=dict(counters["graph_break"]),
        recompiles=[m.recompile_reason for m in metrics if m.recompile_reason],
        compile_time_s=sum(m.entire_frame_compile_time_s or 0.0 for m in metrics),
        fx_graph_cache_hits=counters["inductor"]["fxgraph_cache_hit"],
        fx_graph_cache_misses=counters["inductor"]["fxgraph_cache_miss"],
        aot_autograd_cache_hits=counters["aot_autograd"]["autograd_cache_hit"],
        aot_autograd_cache_misses=counters["aot_autograd"]["autograd_cache_miss"],
        graph_captures=generated["graph_captures"],
        graph_replays=generated["graph_replays"],
    )
