"""Profiles a small MLP training step on rbln and draws what the tools saw (docs/debugging.md).

Writes, into the directory given (default: the current one):
- trace.json: torch.profiler's Chrome trace (open it in https://ui.perfetto.dev or chrome://tracing);
- trace.svg: the same trace drawn: host ops on top, one track per rbln stream below, an arrow
  from each launch to its kernel;
- snapshot.pickle: a memory snapshot with history (drop it on https://pytorch.org/memory_viz);
- memory.svg: allocated rbln memory over the snapshot's trace.

    python examples/profile_demo.py docs/images
"""
import html
import json
import os
import sys

import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile

import torch_rbln  # noqa: F401


def train_step(model, opt, x, y):
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()


def svg(width, height, body):
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'font-family="monospace" font-size="11">\n<rect width="100%" height="100%" fill="white"/>\n'
            + "\n".join(body) + "\n</svg>\n")


def draw_trace(events, width=1200):
    """Host ops (depth by nesting) and device kernels per stream, with launch -> kernel arrows."""
    spans = [e for e in events if e.get("ph") == "X" and "dur" in e]
    ops = [e for e in spans if e.get("cat") == "cpu_op"]
    launches = [e for e in spans if e["name"] in ("rblnLaunchKernel", "rblnMemcpyAsync")]
    work = [e for e in spans if e.get("cat") in ("kernel", "gpu_memcpy")]
    t0 = min(e["ts"] for e in ops + work)
    t1 = max(e["ts"] + e["dur"] for e in ops + work)
    x = lambda t: 150 + (t - t0) / (t1 - t0) * (width - 170)  # noqa: E731
    body, row = [], 20
    ops.sort(key=lambda e: (e["ts"], -e["dur"]))
    stack, depth = [], {}
    for e in ops:
        while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
            stack.pop()
        depth[id(e)] = min(len(stack), 5)
        stack.append(e)
    body.append(f'<text x="5" y="{row + 12}">host: ops</text>')
    for e in ops:
        y = row + depth[id(e)] * 16
        body.append(f'<rect x="{x(e["ts"]):.1f}" y="{y}" width="{max(x(e["ts"] + e["dur"]) - x(e["ts"]), 0.5):.1f}" '
                    f'height="14" fill="#9ecae1" stroke="#3182bd" stroke-width="0.3"><title>{html.escape(e["name"])}'
                    f'</title></rect>')
    launch_row = row + 6 * 16 + 4
    body.append(f'<text x="5" y="{launch_row + 10}">host: launches</text>')
    for e in launches:
        body.append(f'<rect x="{x(e["ts"]):.1f}" y="{launch_row}" width="1.5" height="12" fill="#fd8d3c"/>')
    streams = sorted({(e["pid"], e["tid"]) for e in work})
    track_y = {s: launch_row + 40 + i * 22 for i, s in enumerate(streams)}
    for (pid, tid), y in track_y.items():
        body.append(f'<text x="5" y="{y + 12}">rbln:{pid} stream {tid}</text>')
    for e in work:
        y = track_y[(e["pid"], e["tid"])]
        color = "#74c476" if e["cat"] == "kernel" else "#bcbddc"
        body.append(f'<rect x="{x(e["ts"]):.1f}" y="{y}" width="{max(x(e["ts"] + e["dur"]) - x(e["ts"]), 0.5):.1f}" '
                    f'height="16" fill="{color}" stroke="#31a354" stroke-width="0.3"><title>{html.escape(e["name"])}'
                    f'</title></rect>')
    starts = {e["id"]: e for e in events if e.get("ph") == "s"}
    for end in (e for e in events if e.get("ph") == "f"):
        start = starts.get(end["id"])
        if start and (end["pid"], end["tid"]) in track_y:
            body.append(f'<line x1="{x(start["ts"]):.1f}" y1="{launch_row + 12}" x2="{x(end["ts"]):.1f}" '
                        f'y2="{track_y[(end["pid"], end["tid"])]}" stroke="#999" stroke-width="0.4"/>')
    height = max(track_y.values()) + 40
    body.append(f'<text x="150" y="{height - 12}">{(t1 - t0) / 1000:.2f} ms: {len(ops)} ops, {len(launches)} '
                f'launches, {len(work)} device kernels and copies</text>')
    return svg(width, height, body)


def draw_memory(trace, baseline, width=1200, height=300):
    """Requested bytes in use (from `baseline`, when recording began) after each alloc and free_completed."""
    points, current = [], baseline
    for e in trace:
        if e["action"] == "alloc":
            current += e["size"]
        elif e["action"] == "free_completed":
            current -= e["size"]
        else:
            continue
        points.append(current)
    peak = max(points + [1])
    x = lambda i: 60 + i / max(len(points) - 1, 1) * (width - 80)  # noqa: E731
    y = lambda v: height - 30 - v / peak * (height - 60)  # noqa: E731
    line = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(points))
    body = [f'<polyline points="{line}" fill="none" stroke="#3182bd" stroke-width="1.2"/>',
            f'<text x="5" y="{y(peak) + 4:.1f}">{peak / 2**20:.1f} MiB</text>',
            f'<text x="5" y="{height - 26}">0</text>',
            f'<text x="60" y="{height - 8}">allocated rbln memory over {len(points)} allocations and frees '
            f'in one training step (torch.rbln.memory._snapshot()["device_traces"])</text>']
    return svg(width, height, body)


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 256)).to("rbln")
    opt = torch.optim.AdamW(model.parameters())
    x, y = torch.randn(64, 256, device="rbln"), torch.randn(64, 256, device="rbln")
    train_step(model, opt, x, y)  # warm-up: optimizer state, allocator cache
    torch.rbln.synchronize()  # else the profile opens while the device still runs the warm-up's kernels

    baseline = torch.rbln.memory_stats()["requested_bytes.all.current"]
    torch.rbln.memory._record_memory_history(max_entries=100_000)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], profile_memory=True) as prof:
        train_step(model, opt, x, y)
        torch.rbln.synchronize()
    torch.rbln.memory._dump_snapshot(os.path.join(out_dir, "snapshot.pickle"))
    snapshot = torch.rbln.memory._snapshot()
    torch.rbln.memory._record_memory_history(enabled=None)

    trace_path = os.path.join(out_dir, "trace.json")
    prof.export_chrome_trace(trace_path)
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    with open(os.path.join(out_dir, "trace.svg"), "w") as f:
        f.write(draw_trace(events))
    with open(os.path.join(out_dir, "memory.svg"), "w") as f:
        f.write(draw_memory(snapshot["device_traces"][0], baseline))
    print(prof.key_averages().table(sort_by="device_time_total", row_limit=12))
    print(f"wrote {trace_path}, trace.svg, snapshot.pickle and memory.svg in {out_dir}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
