"""`make bench`: rbln against CPU (eager; compiled for the torch.compile rows), measured interleaved in one run.

Every figure is a ratio rbln / CPU for the same work (lower is better, except
copy bandwidth, which is a ratio to a host memcpy of the same bytes). Each
pair is timed A B A B ... and the median, min and max of the per-repeat ratios
are reported. rbln timings end with torch.rbln.synchronize(), so queued work is
counted. Writes benchmarks/results.json and docs/performance.md; with --only,
runs the matching rows and writes nothing (a partial run must not replace them),
unless --merge: then the rows measured replace theirs and the document says when.
"""
from __future__ import annotations

import argparse
import copy
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # transformers models are built from configs: nothing is fetched
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
import torch.nn.functional as F

import torch_rbln  # noqa: F401

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))


def timed(fn, device: str) -> float:
    start = time.perf_counter()
    fn()
    if device == "rbln":
        torch.rbln.synchronize()
    return time.perf_counter() - start


ONLY: list[str] = []  # --only: substrings of "group name"; a row runs if any matches


def _selected(group: str, names) -> bool:
    return not ONLY or any(s.lower() in f"{group} {n}".lower() for n in names for s in ONLY)


def compare(name, group, make, repeats, target, higher_is_better=False, reference="cpu"):
    """make(device) returns a zero-argument callable doing the measured work. None if --only skips the row."""
    if not _selected(group, [name]):
        return None
    fns = {d: make(d) for d in ("cpu", "rbln")}
    for d, fn in fns.items():  # warm-up: caches, worker threads, allocator
        timed(fn, d)
    ratios, times = [], {"cpu": [], "rbln": []}
    for _ in range(repeats):
        t = {d: timed(fns[d], d) for d in ("cpu", "rbln")}
        for d in t:
            times[d].append(t[d])
        ratios.append(t["rbln"] / t["cpu"] if not higher_is_better else t["cpu"] / t["rbln"])
    row = {
        "name": name, "group": group, "median": statistics.median(ratios), "min": min(ratios), "max": max(ratios),
        "cpu_s": statistics.median(times["cpu"]), "rbln_s": statistics.median(times["rbln"]), "target": target,
        "higher_is_better": higher_is_better, "reference": reference,
    }
    row["meets_target"] = row["median"] >= target if higher_is_better else row["median"] <= target
    print(f"{group:10s} {name:44s} {row['median']:8.2f} (min {row['min']:.2f}, max {row['max']:.2f})"
          f"  target {'>=' if higher_is_better else '<='} {target}", flush=True)
    return row


def compare_fns(name, group, make, repeats, target, reference, labels=("ref", "test"), device="rbln", warmup=1):
    """Like compare(), for two workloads on one device: make() returns {labels[0]: fn, labels[1]: fn};
    the ratio is test time / ref time. A target of None marks a reference row (no target of its own)."""
    if not _selected(group, [name]):
        return None
    fns = make()
    for fn in fns.values():
        for _ in range(warmup):
            timed(fn, device)
    ratios, times = [], {k: [] for k in labels}
    for _ in range(repeats):
        t = {k: timed(fns[k], device) for k in labels}
        for k in labels:
            times[k].append(t[k])
        ratios.append(t[labels[1]] / t[labels[0]])
    row = {"name": name, "group": group, "median": statistics.median(ratios), "min": min(ratios),
           "max": max(ratios), "cpu_s": statistics.median(times[labels[0]]),
           "rbln_s": statistics.median(times[labels[1]]), "target": target, "higher_is_better": False,
           "reference": reference}
    row["meets_target"] = None if target is None else row["median"] <= target
    print(f"{group:10s} {name:44s} {row['median']:8.2f} (min {row['min']:.2f}, max {row['max']:.2f})"
          f"  {'reference' if target is None else f'target <= {target}'}", flush=True)
    return row


def value_row(name, group, measure, target, reference):
    """A measured quantity that is not a time ratio (e.g. a memory ratio); measure() -> float."""
    if not _selected(group, [name]):
        return None
    v = measure()
    row = {"name": name, "group": group, "median": v, "min": v, "max": v, "cpu_s": None, "rbln_s": None,
           "target": target, "higher_is_better": False, "reference": reference, "meets_target": v <= target}
    print(f"{group:10s} {name:44s} {v:8.2f}  target <= {target}", flush=True)
    return row


class Int4Linear(torch.nn.Module):
    """A bias-free Linear with int4 weights in CUDA's layout on rbln (torchao's tile_packed_to_4d,
    torch._weight_int4pack_mm), asymmetric per group of 128 input channels, with tinygemm's dequantization
    w = (q - 8) * scale + zero; bfloat16 activations into the product, as CUDA's kernel takes them."""

    def __init__(self, linear, group=128):
        super().__init__()
        w = linear.weight.detach().float().cpu()
        n, k = w.shape
        g = w.view(n, k // group, group)
        lo, hi = g.amin(-1), g.amax(-1)
        scale = ((hi - lo) / 15).clamp(min=1e-6)
        q = ((g - lo[..., None]) / scale[..., None]).round().clamp(0, 15).to(torch.int32).view(n, k)
        self.group = group
        nibbles = (q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8).to("rbln")
        self.register_buffer("packed", torch._convert_weight_to_int4pack(nibbles, 8))
        scales_zeros = torch.stack([scale, lo + 8 * scale], -1).transpose(0, 1).contiguous()
        self.register_buffer("scales_zeros", scales_zeros.to(torch.bfloat16).to("rbln"))

    def forward(self, x):
        y = torch._weight_int4pack_mm(x.reshape(-1, x.shape[-1]).to(torch.bfloat16), self.packed, self.group,
                                      self.scales_zeros)
        return y.to(x.dtype).view(*x.shape[:-1], -1)


def int4_linears(model):
    """model with each nn.Linear replaced by an Int4Linear of its weights."""
    for name, child in model.named_children():
        setattr(model, name, Int4Linear(child) if isinstance(child, torch.nn.Linear) else int4_linears(child))
    return model


def quantized_rows(reps):
    """Issue 42's table: the int8 weight-only linear against CPU's and against CPU's float32 linear, the int4
    one in CUDA's layout against CPU's int4 kernel, _int_mm,
    rowwise _scaled_mm, and the device memory of an int8 weight-only Llama against its float32 version."""
    rows = []
    gen = torch.Generator().manual_seed(0)
    w = torch.randint(-128, 128, (4096, 4096), dtype=torch.int8, generator=gen)
    x, scales, w_float = torch.randn(1, 4096, generator=gen), torch.rand(4096, generator=gen), torch.randn(4096, 4096)

    def int8_linear(device):
        a, b, s = x.to(device), w.to(device), scales.to(device)
        return lambda: [torch._weight_int8pack_mm(a, b, s) for _ in range(10)]
    rows.append(compare("int8 weight-only linear, batch 1, 4096x4096 / CPU _weight_int8pack_mm", "quantized",
                        int8_linear, reps, 1.0))

    def against_float(device):
        if device == "cpu":
            return lambda: [F.linear(x, w_float) for _ in range(10)]
        return int8_linear(device)
    rows.append(compare("int8 weight-only linear, batch 1, 4096x4096 / CPU float32 linear", "quantized",
                        against_float, reps, 0.6, reference="CPU float32 F.linear"))

    q4 = torch.randint(0, 16, (4096, 4096), dtype=torch.int32, generator=gen)
    sz4 = (torch.rand(4096 // 128, 4096, 2, generator=gen) * 0.01).to(torch.bfloat16)
    x4 = x.to(torch.bfloat16)

    def int4_linear(device):
        """CUDA's int4 layout on rbln (torchao's tile_packed_to_4d) against CPU's own int4 layout and kernel."""
        if device == "cpu":
            packed = torch._convert_weight_to_int4pack_for_cpu(q4, 8)
            return lambda: [torch._weight_int4pack_mm_for_cpu(x4, packed, 128, sz4) for _ in range(10)]
        packed = torch._convert_weight_to_int4pack((q4[:, ::2] << 4 | q4[:, 1::2]).to(torch.uint8).rbln(), 8)
        a, s = x4.rbln(), sz4.rbln()
        return lambda: [torch._weight_int4pack_mm(a, packed, 128, s) for _ in range(10)]
    rows.append(compare("int4 weight-only linear (CUDA's layout), batch 1, 4096x4096 / CPU _weight_int4pack_mm_for_cpu",
                        "quantized", int4_linear, reps, 1.0))

    a8, b8 = (torch.randint(-128, 128, (1024, 1024), dtype=torch.int8, generator=gen) for _ in range(2))

    def int_mm(device):
        a, b = a8.to(device), b8.to(device)
        return lambda: torch._int_mm(a, b)
    rows.append(compare("_int_mm 1024x1024x1024", "quantized", int_mm, reps, 1.0))

    f8a = torch.randn(1024, 1024, generator=gen).to(torch.float8_e4m3fn)
    f8b = torch.randn(1024, 1024, generator=gen).to(torch.float8_e4m3fn).t()
    sa, sb = torch.rand(1024, 1, generator=gen), torch.rand(1, 1024, generator=gen)

    def scaled_mm(device):
        args = [t.to(device) for t in (f8a, f8b, sa, sb)]
        return lambda: torch._scaled_mm(*args, out_dtype=torch.bfloat16)
    rows.append(compare("_scaled_mm rowwise 1024x1024x1024, bfloat16 out", "quantized", scaled_mm, reps, 1.0))

    def llama_memory():
        from demo import TinyLlama
        from torchao.quantization import Int8WeightOnlyConfig, quantize_

        def footprint(quantize):
            torch.rbln.synchronize()
            start = torch.rbln.memory_allocated()
            model = TinyLlama().to("rbln")
            if quantize:  # every weight int8: torchao quantizes an Embedding's table when filter_fn selects it
                quantize_(model, Int8WeightOnlyConfig(),
                          filter_fn=lambda module, fqn: isinstance(module, (torch.nn.Linear, torch.nn.Embedding)))
            torch.rbln.synchronize()
            used = torch.rbln.memory_allocated() - start
            del model
            return used
        return footprint(True) / footprint(False)
    rows.append(value_row("device memory of an int8 weight-only TinyLlama (Linear and Embedding weights) / its "
                          "float32 version", "quantized",
                          llama_memory, 0.3, reference="the float32 model's device memory"))

    def int4_decode():
        # A decode step saves what int4 saves, weight reads, once the weights outgrow the caches: the demo's
        # Llama at d 1024 (50 MB of float32 weights a layer), not its d 128 (whose weights stay cached).
        from demo import TinyLlama
        torch.manual_seed(0)
        model = TinyLlama(dim=1024, heads=8).eval().to("rbln")
        int4 = int4_linears(copy.deepcopy(model))
        models = {"float32": model, "int4": int4}
        prompt = torch.randint(0, 512, (1, 16), device="rbln")
        steps = {}
        for label, model in models.items():
            with torch.no_grad():
                _, caches = model(prompt)

            def step(model=model, caches=caches):
                with torch.no_grad():
                    model(prompt[:, -1:], caches)
            steps[label] = step
        return steps
    rows.append(compare_fns("int4 weight-only decode step / float32 decode step, Llama d1024 x4, batch 1", "quantized",
                            int4_decode, reps, 0.7, reference="the float32 model's decode step on rbln",
                            labels=("float32", "int4")))
    return [r for r in rows if r is not None]


def small_ops(n):
    """Per-op workloads on tiny tensors: name -> (device -> op(z) -> z). Ops whose
    result can feed the next call are dependent chains (z = op(z))."""
    def ops(device):
        x = torch.randn(n, device=device)
        y = torch.randn(n, device=device)
        m = torch.randn(8, 8, device=device)
        idx = torch.tensor([0], device=device)
        return {
            "add": lambda z: torch.add(z, y),
            "mul": lambda z: torch.mul(z, y),
            "relu": lambda z: torch.relu(z),
            "sum": lambda z: torch.sum(x),
            "mm 8x8": lambda z: torch.mm(m, m),
            "index_select": lambda z: torch.index_select(x, 0, idx),
            "cat": lambda z: torch.cat([x, y]),
            "view + clone": lambda z: z.view(-1).clone(),
            "fill_": lambda z: z.fill_(1.0),
            "item": lambda z: (x[0].item(), z)[1],
        }, x
    return ops


CHAIN = 10_000


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer repeats and smaller sizes")
    p.add_argument("--only", action="append", default=[], metavar="TEXT",
                   help="run only the rows whose 'group name' contains TEXT (repeatable; case-insensitive); "
                        "prints, writes no results")
    p.add_argument("--merge", action="store_true",
                   help="with --only: the rows measured replace (or join) theirs in benchmarks/results.json and "
                        "docs/performance.md, which then name the rows and the date")
    p.add_argument("--repeats", type=int, help="interleaved repeats per row (default 11, 5 with --quick)")
    args = p.parse_args()
    if args.merge and not args.only:
        p.error("--merge needs --only")
    ONLY[:] = args.only
    reps = args.repeats or (5 if args.quick else 11)
    rows = _Rows()

    # ---- per-op overhead ----
    for size, label in ((1, "1 element"), (256, "1 KiB")):
        ops = small_ops(size)
        for name in ops("cpu")[0]:
            def chain(device, name=name):
                table, x = ops(device)
                op = table[name]

                def run():
                    z = x.clone()
                    for _ in range(CHAIN):
                        z = op(z)
                return run
            rows.append(compare(f"{name}, {label}, chain of {CHAIN}", "overhead", chain, reps, 1.5))

            def single(device, name=name):
                table, x = ops(device)
                op = table[name]
                if device == "rbln":
                    return lambda: [(op(x), torch.rbln.synchronize()) for _ in range(500)]
                return lambda: [op(x) for _ in range(500)]
            rows.append(compare(f"{name}, {label}, synchronized", "latency", single, reps, 3.0))

    # ---- the per-op chain on a busy machine: two processes spin beside it, CPU eager under the same load ----
    busy_name = f"add, 1 element, chain of {CHAIN}, two busy processes beside"
    if _selected("load", [busy_name]):
        def busy_chain(device):
            table, x = small_ops(1)(device)
            add = table["add"]

            def run():
                z = x.clone()
                for _ in range(CHAIN):
                    z = add(z)
            return run
        spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
        try:
            rows.append(compare(busy_name, "load", busy_chain, reps, 1.5))
        finally:
            for proc in spinners:
                proc.kill()
                proc.wait()

    # ---- large tensors ----
    n = (4 << 20) if args.quick else (16 << 20)  # floats: 16 or 64 MiB
    big = {
        "exp": lambda x, y: torch.exp(x),
        "add": lambda x, y: x + y,
        "add, transposed input": lambda x, y: x.view(2048, -1).t() + y.view(2048, -1).t(),
        "exp, strided input (every 2nd element)": lambda x, y: torch.exp(x[::2]),
        "sum": lambda x, y: x.sum(),
        "sum over rows of 1024": lambda x, y: x.view(-1, 1024).sum(1),
        "sum over dim 0 (columns of 1024)": lambda x, y: x.view(-1, 1024).sum(0),
        "amax over rows of 1024": lambda x, y: x.view(-1, 1024).amax(1),
        "vector norm over rows of 1024": lambda x, y: torch.linalg.vector_norm(x.view(-1, 1024), dim=1),
        "softmax over rows of 1024": lambda x, y: torch.softmax(x.view(-1, 1024), -1),
        "layer_norm over rows of 1024": lambda x, y: F.layer_norm(x.view(-1, 1024), (1024,)),
    }
    for name, fn in big.items():
        def make(device, fn=fn):
            x, y = torch.randn(n, device=device), torch.randn(n, device=device)
            return lambda: fn(x, y)
        rows.append(compare(f"{name}, {n * 4 >> 20} MiB", "large", make, reps, 1.1))
    for size in ((1024,) if args.quick else (1024, 2048, 4096)):
        def mm(device, size=size):
            a, b = torch.randn(size, size, device=device), torch.randn(size, size, device=device)
            return lambda: a @ b
        rows.append(compare(f"matmul {size}x{size}", "matmul", mm, reps, 1.05))
    def mm_t(device):
        a, b = torch.randn(2048, 2048, device=device), torch.randn(2048, 2048, device=device)
        return lambda: a.t() @ b
    rows.append(compare("matmul 2048x2048, transposed input", "matmul", mm_t, reps, 1.05))
    def bmm(device):
        a, b = torch.randn(8, 1024, 1024, device=device), torch.randn(8, 1024, 1024, device=device)
        return lambda: torch.bmm(a, b)
    rows.append(compare("bmm 8x1024x1024", "matmul", bmm, reps, 1.05))

    # ---- quantized matmuls (docs/quantization.md) ----
    rows.extend(quantized_rows(reps))

    # ---- copies: bandwidth against a host memcpy of the same bytes ----
    nbytes = 64 << 20
    for kind in ("host to device", "device to host", "device to device"):
        for pinned in ((False, True) if kind != "device to device" else (False,)):
            def make(device, kind=kind, pinned=pinned):
                # Written buffers: reading never-touched memory reads the kernel's shared zero page
                # (cache-resident), which made the reference 2.6x faster than a memcpy of real bytes.
                host = torch.ones(nbytes // 4)
                if pinned:
                    host = host.pin_memory()
                if device == "cpu":  # the reference: memcpy between two host buffers
                    other = torch.empty_like(host)
                    return lambda: other.copy_(host)
                dev = torch.ones(nbytes // 4, device="rbln")
                src = {"host to device": host, "device to host": dev, "device to device": dev}[kind]
                dst = {"host to device": dev, "device to host": host,
                       "device to device": torch.empty_like(dev)}[kind]
                return lambda: dst.copy_(src, non_blocking=pinned)
            rows.append(compare(f"{kind}, {'pinned' if pinned else 'pageable'}, 64 MiB", "copy", make, reps, 0.8,
                                higher_is_better=True, reference="host memcpy"))

    # ---- overlap: pinned non_blocking uploads on a copy stream while the default stream computes ----
    def overlap():
        chunks, nbytes = 8, 16 << 20
        hosts = [torch.randn(nbytes // 4).pin_memory() for _ in range(chunks)]
        devs = [torch.empty(nbytes // 4, device="rbln") for _ in range(chunks)]
        a = torch.randn(768, 768, device="rbln")
        copy_stream = torch.rbln.Stream()

        def compute():
            for _ in range(3):
                a @ a

        def serialized():  # upload, then compute, on one stream
            for h, d in zip(hosts, devs):
                d.copy_(h, non_blocking=True)
                compute()

        def overlapped():  # uploads queued on the copy stream run while the default stream computes
            with torch.rbln.stream(copy_stream):
                for h, d in zip(hosts, devs):
                    d.copy_(h, non_blocking=True)
            for _ in devs:
                compute()
            torch.rbln.current_stream().wait_stream(copy_stream)
        return {"serialized": serialized, "overlapped": overlapped}
    rows.append(compare_fns("pinned upload (8 x 16 MiB) + matmul, overlapped / serialized", "overlap", overlap,
                            reps, 0.9, reference="same work on one stream", labels=("serialized", "overlapped")))

    # ---- memory: caching-allocator fragmentation over a transformer training loop ----
    def reserved_over_allocated(vary):
        def measure():
            torch.manual_seed(0)
            torch.rbln.synchronize()
            torch.rbln.empty_cache()
            layer = torch.nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True)
            model = torch.nn.Sequential(torch.nn.TransformerEncoder(layer, 2), torch.nn.Linear(256, 256)).to("rbln")
            opt = torch.optim.AdamW(model.parameters())
            torch.rbln.reset_peak_memory_stats()
            for step in range(10):
                batch, seq = (8 + step % 3, 64 + 16 * (step % 4)) if vary else (8, 64)
                x = torch.randn(batch, seq, 256, device="rbln")
                opt.zero_grad()
                model(x).square().mean().backward()
                opt.step()
            torch.rbln.synchronize()
            ratio = torch.rbln.max_memory_reserved() / torch.rbln.max_memory_allocated()
            del model, opt
            torch.rbln.empty_cache()
            return ratio
        return measure
    for vary in (False, True):
        rows.append(value_row(f"transformer training (AdamW, 10 steps), {'varying' if vary else 'fixed'} shapes, "
                              "peak reserved / peak allocated", "memory", reserved_over_allocated(vary), 1.2,
                              reference="peak allocated"))

    # ---- allocator: allocation and free on the cache-hit path ----
    def alloc(device):
        return lambda: [torch.empty(1024, device=device) for _ in range(2000)]
    rows.append(compare("empty(1024) + free, x2000", "allocator", alloc, reps, 1.5))

    # ---- models ----
    from demo import TinyLlama

    def decode(device):
        torch.manual_seed(0)
        model = TinyLlama().eval().to(device)
        prompt = torch.randint(0, 512, (1, 16), device=device)
        with torch.no_grad():
            _, caches = model(prompt)
        token = prompt[:, -1:]
        def step():
            with torch.no_grad():
                model(token, caches)
        return step
    rows.append(compare("Llama-shaped decode step, batch 1, KV cache", "model", decode, reps, 1.2))

    def train_step(device, compiled=False):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).to(device)
        opt = torch.optim.Adam(model.parameters())
        x, y = torch.randn(128, 256, device=device), torch.randint(0, 10, (128,), device=device)
        forward, update = (torch.compile(model), torch.compile(opt.step)) if compiled else (model, opt.step)
        def step():
            opt.zero_grad()
            F.cross_entropy(forward(x), y).backward()
            update()
        return step
    rows.append(compare("MLP training step (Adam), batch 128", "model", train_step, reps, 1.2))

    def resnet18(device, compiled=False):
        from transformers import ResNetConfig, ResNetForImageClassification

        torch.manual_seed(0)
        config = ResNetConfig(embedding_size=64, hidden_sizes=[64, 128, 256, 512], depths=[2, 2, 2, 2],
                              layer_type="basic", num_labels=1000)
        model = ResNetForImageClassification(config).eval().to(device)
        model = torch.compile(model) if compiled else model
        x = torch.randn(8, 3, 224, 224, device=device)
        def forward():
            with torch.no_grad():
                model(x)
        return forward
    rows.append(compare("ResNet-18 inference, batch 8, 224x224", "model", resnet18, reps, 1.2))

    def wav2vec2(device):
        from transformers import Wav2Vec2Config, Wav2Vec2Model

        torch.manual_seed(0)  # base's feature encoder (7 conv1d of 512 channels), 2 narrower transformer layers
        config = Wav2Vec2Config(hidden_size=256, num_hidden_layers=2, num_attention_heads=4, intermediate_size=1024)
        model = Wav2Vec2Model(config).eval().to(device)
        audio = torch.randn(1, 16000, device=device)
        def forward():
            with torch.no_grad():
                model(audio)
        return forward
    rows.append(compare("Wav2Vec2 forward, 1 s of 16 kHz audio", "model", wav2vec2, reps, 1.2))

    def bert_base(device):
        from transformers import BertConfig, BertModel

        torch.manual_seed(0)
        config = BertConfig(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)
        model = BertModel(config, add_pooling_layer=False).eval().to(device)
        ids = torch.randint(0, config.vocab_size, (1, 128), device=device)
        mask = torch.ones(1, 128, dtype=torch.long, device=device)
        def forward():
            with torch.no_grad():
                model(input_ids=ids, attention_mask=mask)
        return forward
    rows.append(compare("BERT-base encoder forward, batch 1, seq 128", "model", bert_base, reps, 1.2))

    # ---- torch.compile (docs/compile.md): compiled rbln against compiled CPU and against eager rbln ----
    for name, make, target in (("MLP block forward, batch 64, d 512", mlp_block, 1.1),
                               ("transformer block forward, batch 8, seq 128, d 256", transformer_block, 1.1),
                               ("ResNet-18 inference, batch 8, 224x224", resnet18, 1.1)):
        rows.append(compare(f"{name}: compiled rbln / compiled CPU", "compile",
                            lambda device, make=make: make(device, compiled=True), reps, target, reference="cpu compiled"))
    for name, make in (("transformer block forward, batch 8, seq 128, d 256", transformer_block),
                       ("MLP training step (Adam), batch 128", train_step)):
        # The same ratio for CPU and Inductor in this run: what compiling gains where eager kernels are these.
        for device, suffix, target in (("rbln", "", 0.8), ("cpu", " on CPU (reference)", None)):
            rows.append(compare_fns(f"{name}: compiled / eager{suffix}", "compile",
                                    lambda make=make, device=device: {"eager": make(device),
                                                                      "compiled": make(device, compiled=True)},
                                    reps, target, reference=f"{device} eager", labels=("eager", "compiled"),
                                    device=device))
    rows.append(value_row("cold compile time, transformer block forward: rbln / CPU", "compile",
                          cold_compile_ratio, 1.2, reference="cpu compile time"))
    rows.append(value_row("graphs compiled in a warm second process", "compile", warm_process_compiles, 0,
                          reference="count"))

    # ---- compiled ops (docs/compile.md, "Compiled ops"): ops.yaml's `compile` strategy ----
    def renorm_chain(device):
        y = torch.randn(1, 1, device=device)

        def run():
            z = y
            for _ in range(CHAIN):
                z = torch.renorm(z, 2, 0, 1.0)
        return run
    rows.append(compare(f"renorm (compiled op), 1 element, chain of {CHAIN}", "compiled ops", renorm_chain, reps, 1.5))
    if not ONLY or any(s.lower() in "compiled ops" for s in ONLY):
        cold = compiled_op_cold()
        rows.append(value_row("renorm first call (compile), seconds", "compiled ops", lambda: cold["first_call_s"], 10,
                              reference="seconds"))
        rows.append(value_row("compiles for renorm on 5 shapes of rank 2", "compiled ops", lambda: cold["compiles"], 1,
                              reference="count"))
        rows.append(value_row("compiles in a second process (plans on disk)", "compiled ops",
                              lambda: cold["second_process_compiles"], 0, reference="count"))

    # ---- accuracy debugging (docs/debugging.md): torch_rbln.debug's modes on a transformer ----
    def nonfinite_check():
        from torch_rbln import debug

        torch.manual_seed(0)
        model = TinyLlama().to("rbln")
        opt = torch.optim.AdamW(model.parameters(), foreach=True)
        tokens = torch.randint(0, 512, (4, 64), device="rbln")

        def step():
            opt.zero_grad()
            F.cross_entropy(model(tokens)[0].flatten(0, 1), tokens.flatten()).backward()
            opt.step()

        def checked():
            with debug.detect_nonfinite():
                step()
        return {"plain": step, "checked": checked}
    rows.append(compare_fns("TinyLlama training step: detect_nonfinite / without", "debug", nonfinite_check, reps,
                            1.5, "the step without it", labels=("plain", "checked")))

    def compare_mode():
        from torch_rbln import debug

        torch.manual_seed(0)
        cpu_model, tokens = TinyLlama().eval(), torch.randint(0, 512, (4, 64))
        dev_model, dev_tokens = TinyLlama().eval().to("rbln"), tokens.to("rbln")
        dev_model.load_state_dict(cpu_model.state_dict())

        def both():
            with torch.no_grad():
                cpu_model(tokens), dev_model(dev_tokens)

        def compared():
            with torch.no_grad(), debug.compare():
                dev_model(dev_tokens)
        return {"both": both, "compared": compared}
    rows.append(compare_fns("TinyLlama forward: debug.compare / (CPU forward + rbln forward)", "debug", compare_mode,
                            reps, 3, "CPU forward + rbln forward", labels=("both", "compared")))

    # ---- graphs (docs/graphs.md): captured work replayed with one call ----
    rows.extend(graph_rows(reps))

    # ---- deployment (docs/deployment.md): AOTInductor packages ----
    rows.extend(aoti_rows(reps))

    # ---- profiler (docs/debugging.md): its cost while on, and none left once it is off ----
    def add_chain(device, length):
        y = torch.randn(1, device=device)

        def run():
            z = y.clone()
            for _ in range(length):
                z = torch.add(z, y)
        return run

    def profiled(device):
        from torch.profiler import ProfilerActivity, profile
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.PrivateUse1] if device == "rbln" else [])
        chain = add_chain(device, 1000)

        def run():
            with profile(activities=activities):
                chain()
        return run
    rows.append(compare("add, 1 element, chain of 1000, under torch.profiler", "profiler", profiled, reps, 1.5))
    rows.append(value_row(f"per-op ratio (add chain of {CHAIN}, rbln / CPU) after a profile / with none",
                          "profiler", profiler_off_cost, 1.05, reference="same, fresh processes without a profile"))

    # ---- serving (docs/serving.md): `transformers serve --continuous-batching`, rbln server against CPU server ----
    rows.extend(serving_rows(reps))
    rows.extend(vllm_rows(reps))
    rows.append(compare("decode attention, 32 sequences x 512 tokens (8 heads of 64, blocks of 16): "
                        "rbln::paged_attention / SDPA on CPU over the gathered blocks", "serving", paged_decode, reps,
                        1.0, reference="CPU SDPA over gathered blocks"))

    # ---- distributed (docs/distributed.md): rbln-ccl against Gloo on CPU tensors, 2 ranks under torchrun ----
    rows.extend(distributed_rows(reps))

    if ONLY and not args.merge:
        print(f"--only: {len(rows)} rows measured; benchmarks/results.json and docs/performance.md left as they are")
        return 0 if rows else 1

    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    meta = {"torch": torch.__version__, "repeats": reps, "quick": args.quick, "cpus": os.cpu_count(), "date": date}
    if ONLY:
        if not rows:
            return 1
        with open(os.path.join(ROOT, "benchmarks", "results.json")) as f:
            old = json.load(f)
        meta = old["meta"]
        meta.setdefault("merged", []).append({"date": date, "only": ONLY, "repeats": reps, "rows": len(rows)})
        rows = merge_rows(old["results"], rows)
    with open(os.path.join(ROOT, "benchmarks", "results.json"), "w") as f:
        json.dump({"meta": meta, "results": rows}, f, indent=1)
    with open(os.path.join(ROOT, "docs", "performance.md"), "w") as f:
        f.write(render(meta, rows))
    return 0


class MLPBlock(torch.nn.Module):
    def __init__(self, d=512):
        super().__init__()
        self.norm, self.up, self.down = torch.nn.LayerNorm(d), torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


class TransformerBlock(torch.nn.Module):
    """A pre-norm causal block written in plain ops, as models write it: what Inductor fuses."""

    def __init__(self, d=256, heads=4):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.up, self.down = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        attn = ((q @ k.transpose(-1, -2)) / (d // self.heads) ** 0.5).masked_fill(causal, float("-inf"))
        x = x + self.proj((attn.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


def forward_of(module, shape):
    def make(device, compiled=False):
        torch.manual_seed(0)
        model = module().eval().to(device)
        model = torch.compile(model) if compiled else model
        x = torch.randn(*shape, device=device)
        def forward():
            with torch.no_grad():
                model(x)
        return forward
    return make


mlp_block = forward_of(MLPBlock, (64, 512))
transformer_block = forward_of(TransformerBlock, (8, 128, 256))


class StaticDecoder(torch.nn.Module):
    """A Llama-shaped decode step with a static KV cache (8 layers, d 64, 4 heads, batch 1): shapes never change
    and the position is a device tensor the step advances, so the step can be captured in a graph. One cache
    tensor a layer, as Hugging Face's StaticCache keeps them: Inductor compiles index_copy_ into a slice of one
    shared buffer as a copy of the whole slice each step."""

    def __init__(self, vocab=512, d=64, heads=4, layers=8, max_len=256):
        super().__init__()
        self.heads, self.hd, self.max_len = heads, d // heads, max_len
        self.embed, self.head = torch.nn.Embedding(vocab, d), torch.nn.Linear(d, vocab, bias=False)
        self.qkv = torch.nn.ModuleList(torch.nn.Linear(d, 3 * d, bias=False) for _ in range(layers))
        self.out = torch.nn.ModuleList(torch.nn.Linear(d, d, bias=False) for _ in range(layers))
        self.up = torch.nn.ModuleList(torch.nn.Linear(d, 4 * d, bias=False) for _ in range(layers))
        self.down = torch.nn.ModuleList(torch.nn.Linear(2 * d, d, bias=False) for _ in range(layers))
        self.norms = torch.nn.Parameter(torch.ones(2 * layers + 1, d))
        for i in range(layers):
            self.register_buffer(f"k{i}", torch.zeros(1, heads, max_len, self.hd))
            self.register_buffer(f"v{i}", torch.zeros(1, heads, max_len, self.hd))
        self.register_buffer("pos", torch.zeros(1, dtype=torch.long))
        inv = 1.0 / (10000 ** (torch.arange(0, self.hd, 2).float() / self.hd))
        angles = torch.arange(max_len).float().unsqueeze(1) * inv
        self.register_buffer("cos", torch.cat([angles, angles], -1).cos())
        self.register_buffer("sin", torch.cat([angles, angles], -1).sin())
        self.register_buffer("positions", torch.arange(max_len))

    def rotate(self, x, cos, sin):
        x1, x2 = x.chunk(2, -1)
        return x * cos + torch.cat([-x2, x1], -1) * sin

    def forward(self, token):
        d = self.embed.embedding_dim
        x = self.embed(token)
        cos = self.cos.index_select(0, self.pos).view(1, 1, 1, self.hd)
        sin = self.sin.index_select(0, self.pos).view(1, 1, 1, self.hd)
        mask = (self.positions <= self.pos).view(1, 1, 1, self.max_len)
        for i in range(len(self.qkv)):
            k_cache, v_cache = getattr(self, f"k{i}"), getattr(self, f"v{i}")
            h = F.rms_norm(x, (d,), self.norms[2 * i])
            q, k, v = self.qkv[i](h).view(1, 1, 3, self.heads, self.hd).permute(2, 0, 3, 1, 4)
            q, k = self.rotate(q, cos, sin), self.rotate(k, cos, sin)
            k_cache.index_copy_(2, self.pos, k)
            v_cache.index_copy_(2, self.pos, v)
            a = F.scaled_dot_product_attention(q, k_cache, v_cache, attn_mask=mask)
            x = x + self.out[i](a.transpose(1, 2).reshape(1, 1, d))
            gate, up = self.up[i](F.rms_norm(x, (d,), self.norms[2 * i + 1])).chunk(2, -1)
            x = x + self.down[i](F.silu(gate) * up)
        self.pos.copy_((self.pos + 1) % self.max_len)
        return self.head(F.rms_norm(x, (d,), self.norms[-1]))


def captured(step, warmup=1):
    """step() captured in an rbln graph after a warm-up on a side stream (torch.cuda's recipe); the graph."""
    side = torch.rbln.Stream()
    side.wait_stream(torch.rbln.current_stream())
    with torch.rbln.stream(side):
        for _ in range(warmup):
            step()
    torch.rbln.current_stream().wait_stream(side)
    graph = torch.rbln.RBLNGraph()
    with torch.rbln.graph(graph):
        step()
    return graph


def one_thread(fn):
    """fn run with one intra-op thread (OpenMP on tiny ops costs more than it gains on few cores)."""
    def run():
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            fn()
        finally:
            torch.set_num_threads(threads)
    return run


def graph_rows(reps: int) -> list:
    """The rows of docs/graphs.md's figures: replayed graphs against eager rbln, one-thread CPU eager and
    default-mode torch.compile, and the device memory replays take."""
    rows = _Rows()

    def decoder(device):
        torch.manual_seed(0)
        model = StaticDecoder().eval().to(device)
        token = torch.randint(0, 512, (1, 1), device=device)

        def step():
            with torch.no_grad():
                model(token)
        return step

    def decode_graphs():
        eager = decoder("rbln")
        return {"eager": eager, "replayed": captured(eager).replay}
    rows.append(compare_fns("decode step (8 layers, d 64, static KV cache): replayed / eager rbln", "graphs",
                            decode_graphs, reps, 0.5, reference="rbln eager", labels=("eager", "replayed")))
    rows.append(compare("decode step (8 layers, d 64, static KV cache): replayed / CPU eager, 1 thread", "graphs",
                        lambda device: one_thread(decoder("cpu")) if device == "cpu" else captured(decoder("rbln")).replay,
                        reps, 0.4, reference="cpu eager, 1 intra-op thread"))

    def adds(device):
        y = torch.randn(1, device=device)
        z = torch.randn(1, device=device)

        def chain():
            for _ in range(1000):
                torch.add(z, y, out=z)
        return chain if device == "cpu" else captured(chain).replay
    rows.append(compare("1,000 one-element adds, replayed / CPU eager", "graphs", adds, reps, 0.25))

    def training():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).to("rbln")
        opt = torch.optim.AdamW(model.parameters(), capturable=True)
        x, y = torch.randn(128, 256, device="rbln"), torch.randint(0, 10, (128,), device="rbln")

        def step():
            opt.zero_grad(set_to_none=False)
            F.cross_entropy(model(x), y).backward()
            opt.step()
        return {"eager": step, "replayed": captured(step, warmup=3).replay}
    rows.append(compare_fns("MLP training step (AdamW), batch 128: replayed / eager rbln", "graphs", training, reps,
                            0.8, reference="rbln eager", labels=("eager", "replayed")))

    def compiled_decoders():
        def make(mode):
            torch.manual_seed(0)
            model = StaticDecoder().eval().to("rbln")
            for t in model.buffers():
                torch._dynamo.mark_static_address(t)
            forward = torch.compile(model, backend="rbln", mode=mode)
            token = torch.randint(0, 512, (1, 1), device="rbln")

            def step():
                with torch.no_grad():
                    forward(token)
            return step
        return {"default": make(None), "reduce-overhead": make("reduce-overhead")}
    # Warmed up as a decode loop is: a graph's first replays time the worker's team sizes (docs/graphs.md).
    rows.append(compare_fns("decode step compiled, reduce-overhead / default mode", "graphs", compiled_decoders, reps,
                            0.7, reference="rbln compiled, default mode", labels=("default", "reduce-overhead"),
                            warmup=10))

    def memory_growth():
        graph = captured(decoder("rbln"))
        graph.replay()
        torch.rbln.synchronize()
        before = torch.rbln.memory_reserved(), torch.rbln.memory_allocated()
        for _ in range(10_000):
            graph.replay()
        torch.rbln.synchronize()
        after = torch.rbln.memory_reserved(), torch.rbln.memory_allocated()
        return float(max(a - b for a, b in zip(after, before)))
    rows.append(value_row("device memory growth over 10,000 replays, bytes", "graphs", memory_growth, 0,
                          reference="bytes"))
    return rows


AOTI_SHAPE = (4, 32, 256)
AOTI_BLOCK = "transformer block (attention as Linear + matmul + softmax), batch 4, seq 32, d 256"
AOTI_CALLS = 10  # calls per timed region: one takes milliseconds, less than this shared machine's noise


def synchronized_calls(fn, device):
    """AOTI_CALLS calls of fn, each followed by torch.rbln.synchronize() on rbln."""
    def run():
        for _ in range(AOTI_CALLS):
            fn()
            if device == "rbln":
                torch.rbln.synchronize()
    return run


def aoti_rows(reps: int) -> list:
    """Issue 44's rows (docs/deployment.md): an AOTInductor package of TransformerBlock against torch.compile on rbln
    and against the CPU package, its load + first call, and the compiles those take; each timed region is
    AOTI_CALLS synchronized calls. The block writes attention in plain ops: nn.TransformerEncoderLayer's lowers to
    a fused attention extern kernel with no rbln C shim."""
    group = "deployment"
    rows = _Rows()
    with tempfile.TemporaryDirectory() as tmp:
        @functools.cache
        def package(device):  # compiled once per run, outside the timed regions, only for the rows that run
            torch.manual_seed(0)
            ep = torch.export.export(TransformerBlock().eval().to(device), (torch.randn(*AOTI_SHAPE, device=device),))
            return torch._inductor.aoti_compile_and_package(ep, package_path=os.path.join(tmp, f"{device}.pt2"))

        def loaded(device):
            run_package = torch._inductor.aoti_load_package(package(device))
            x = torch.randn(*AOTI_SHAPE, device=device)
            return synchronized_calls(lambda: run_package(x), device)

        def compiled_or_package():
            compiled = forward_of(TransformerBlock, AOTI_SHAPE)("rbln", compiled=True)
            return {"compiled": synchronized_calls(compiled, "rbln"), "package": loaded("rbln")}
        rows.append(compare_fns(f"{AOTI_BLOCK}: AOTI package / torch.compile, rbln", group, compiled_or_package,
                                reps, 1.0, reference="rbln torch.compile", labels=("compiled", "package")))
        rows.append(compare(f"{AOTI_BLOCK}: AOTI package rbln / AOTI package CPU", group, loaded, reps, 1.1,
                            reference="cpu AOTI package"))

        def load_and_call(device):
            path, x = package(device), torch.randn(*AOTI_SHAPE, device=device)
            return synchronized_calls(lambda: torch._inductor.aoti_load_package(path)(x), device)
        rows.append(compare(f"{AOTI_BLOCK}: package load + first call", group, load_and_call, reps, 1.2,
                            reference="cpu package load + first call"))

        def compiles():
            # Inductor's counters (compiles, cache hits) and rbln's generated graphs, as tests/python/test_aoti.py
            from torch._dynamo.utils import counters

            path, x = package("rbln"), torch.randn(*AOTI_SHAPE, device="rbln")  # compiled, if no row above did
            before = sum(counters["inductor"].values()), torch.rbln.compile_stats().graphs_generated
            assert before[0] > 0, "the package's compile moved no counter: a 0 below would mean nothing"
            torch._inductor.aoti_load_package(path)(x)
            torch.rbln.synchronize()
            after = sum(counters["inductor"].values()), torch.rbln.compile_stats().graphs_generated
            return float(sum(after) - sum(before))
        rows.append(value_row(f"compiles at package load + first call on rbln, {AOTI_BLOCK}", group, compiles, 0,
                              reference="count"))
    return rows


def in_fresh_process(statement: str, cache_dir: str) -> str:
    """Runs `statement` (this module imported as `run`) in a new interpreter with its own compile cache; its stdout."""
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    env.update(TORCH_RBLN_CACHE_DIR=cache_dir, PYTHONPATH=os.path.dirname(os.path.abspath(__file__)))
    return subprocess.run([sys.executable, "-c", f"import torch, torch_rbln, run; {statement}"], env=env,
                          capture_output=True, text=True, check=True).stdout


def cold_compile_ratio() -> float:
    """First-call time (trace, codegen, C++ build; empty caches) of the transformer block: rbln / CPU,
    each in a fresh process, interleaved, median of 3."""
    def cold(device):
        with tempfile.TemporaryDirectory() as cache:
            statement = f"print(run.timed(run.transformer_block({device!r}, compiled=True), {device!r}))"
            return float(in_fresh_process(statement, cache).split()[-1])
    return statistics.median(cold("rbln") / cold("cpu") for _ in range(3))


def per_op_ratio(profile_first: bool) -> float:
    """rbln / CPU time of a chain of 1-element adds, interleaved, median of 5; after one torch.profiler
    session (CPU and rbln activities) when profile_first."""
    def chain(device):
        y = torch.randn(1, device=device)
        z = y.clone()
        start = time.perf_counter()
        for _ in range(CHAIN):
            z = torch.add(z, y)
        if device == "rbln":
            torch.rbln.synchronize()
        return time.perf_counter() - start
    if profile_first:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]):
            chain("rbln")
    chain("cpu"), chain("rbln")
    return statistics.median(chain("rbln") / chain("cpu") for _ in range(5))


def profiler_off_cost() -> float:
    """The per-op ratio after a profile over the same without one, medians over 6 fresh processes each
    (alternating): on 2 cores the per-op ratio of a process is bimodal (about 1.2 or 2.0, by where the
    scheduler puts the stream worker), so one process per case would measure placement, not the profiler."""
    after, without = [], []
    for _ in range(6):
        for profile_first, results in ((True, after), (False, without)):
            out = in_fresh_process(f"print(run.per_op_ratio({profile_first}))", tempfile.gettempdir())
            results.append(float(out.split()[-1]))
    return statistics.median(after) / statistics.median(without)


def warm_process_compiles() -> float:
    """Graphs whose code a second process generates for the transformer block, after a first one filled the cache."""
    statement = "run.transformer_block('rbln', compiled=True)(); print(torch.rbln.compile_stats().graphs_generated)"
    with tempfile.TemporaryDirectory() as cache:
        counts = [int(in_fresh_process(statement, cache).split()[-1]) for _ in range(2)]
    assert counts[0] > 0, counts  # the first process did compile: the second one's 0 means something
    return counts[1]


def compiled_op_shapes() -> None:
    """One process's first renorm call (timed), then four more shapes of the same rank; prints a JSON line."""
    x = torch.randn(4, 6, device="rbln")
    with torch.rbln.explain() as ex:
        first = timed(lambda: torch.renorm(x, 2, 0, 1.0), "rbln")
        for shape in [(5, 7), (3, 9), (8, 2), (10, 11)]:
            torch.renorm(torch.randn(shape, device="rbln"), 2, 0, 1.0)
        torch.rbln.synchronize()
    print(json.dumps({"first_call_s": first, "compiles": sum(ex.compiles.values())}))


def compiled_op_cold() -> dict:
    """A compiled op in a fresh process with an empty plan cache, then in a second process on the same cache."""
    with tempfile.TemporaryDirectory() as cache:
        first, second = (json.loads(in_fresh_process("run.compiled_op_shapes()", cache).splitlines()[-1])
                         for _ in range(2))
    assert first["compiles"] > 0, first  # the first process did compile: the second one's 0 means something
    return {**first, "second_process_compiles": second["compiles"]}


def distributed_rows(reps: int) -> list:
    """benchmarks/distributed.py under torchrun, 2 ranks on this machine: its rows, measured there by compare()."""
    if ONLY and not any(s.lower() in "distributed all_reduce ddp step" for s in ONLY):
        return []
    import subprocess

    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           os.path.join(ROOT, "benchmarks", "distributed.py"), "--repeats", str(reps)],
                          capture_output=True, text=True, timeout=1800, env={**os.environ, "RBLN_DEVICE_COUNT": "2"})
    lines = [line for line in done.stdout.splitlines() if line.startswith("ROWS ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"benchmarks/distributed.py failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    rows = json.loads(lines[0][len("ROWS "):])
    for r in rows:
        print(f"{r['group']:10s} {r['name']:44s} {r['median']:8.2f} (min {r['min']:.2f}, max {r['max']:.2f})"
              f"  target {'>=' if r['higher_is_better'] else '<='} {r['target']}", flush=True)
    return rows


SERVING_REQUESTS, SERVING_TOKENS = 16, 32
VLLM_REQUESTS, VLLM_TOKENS = 32, 64


def _server_rows(group: str, label: str, rounds: dict, targets: dict, reference: str) -> list:
    """Rows of per-round ratios (rounds["rbln"][i] over rounds["cpu"][i]) of tokens/s and request latencies."""

    def stats(load):
        latency = sorted(r["latency"] for r in load["results"])
        return {"tokens/s": sum(r["tokens"] for r in load["results"]) / load["wall"],
                "p50 request latency": statistics.median(latency),
                "p99 request latency": latency[min(len(latency) - 1, round(0.99 * (len(latency) - 1)))]}

    per_round = {d: [stats(load) for load in rounds[d]] for d in rounds}
    rows = []
    for name, target in targets.items():
        faster = name == "tokens/s"  # higher is better; latencies: lower is better
        ratios = [(r[name] / c[name]) for c, r in zip(per_round["cpu"], per_round["rbln"])]
        cpu, rbln = (statistics.median(s[name] for s in per_round[d]) for d in ("cpu", "rbln"))
        row = {"name": f"{name}, {label}", "group": group, "median": statistics.median(ratios), "min": min(ratios),
               "max": max(ratios), "cpu_s": None if faster else cpu, "rbln_s": None if faster else rbln,
               "target": target, "higher_is_better": faster, "reference": reference, "cpu_value": cpu,
               "rbln_value": rbln}
        row["meets_target"] = row["median"] >= target if faster else row["median"] <= target
        unit = "tokens/s" if faster else "s"
        print(f"{group:10s} {row['name']:44s} {row['median']:8.2f} (min {row['min']:.2f}, max {row['max']:.2f})"
              f"  target {'>=' if faster else '<='} {target}  (cpu {cpu:.3g} {unit}, rbln {rbln:.3g} {unit})",
              flush=True)
        rows.append(row)
    return rows


def _interleaved(servers: dict, requests, tokens: int, reps: int) -> dict:
    """A warm-up load on each server, then `reps` rounds of the same load, the servers taking turns."""
    for server in servers.values():  # warm-up: caches, allocator, worker threads
        server.load(requests, tokens)
    rounds = {d: [] for d in servers}
    for _ in range(reps):
        for d, server in servers.items():
            rounds[d].append(server.load(requests, tokens))
    return rounds


def serving_rows(reps: int) -> list:
    """Tokens/s and p50/p99 request latency of `transformers serve --continuous-batching` on rbln over the same server
    on CPU: both servers up at once (idle while the other is loaded), SERVING_REQUESTS concurrent greedy requests
    (completions and chats, 3 to 33 words, SERVING_TOKENS new tokens each) per round, rounds interleaved."""
    group, targets = "serving", {"tokens/s": 1.0, "p50 request latency": 1.0, "p99 request latency": 1.0}
    if not _selected(group, targets):
        return []
    import serving

    requests = [(p, i % 2 == 1) for i, p in enumerate(serving.prompts(SERVING_REQUESTS))]
    options = ["--continuous-batching", "--cb-num-blocks", "256", "--cb-max-batch-tokens", "256"]
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "llama")
        serving.build(model, hidden=512, layers=4)
        servers = {d: serving.Server(model, ["--device", d, *options], os.path.join(tmp, f"{d}.log"), timeout=120)
                   for d in ("cpu", "rbln")}
        with servers["cpu"], servers["rbln"]:
            rounds = _interleaved(servers, requests, SERVING_TOKENS, reps)
            codes = [server.stop()[1] for server in servers.values()]
    assert codes == [0, 0], codes
    texts = {d: [r["text"] for r in rounds[d][0]["results"]] for d in rounds}
    assert texts["rbln"] == texts["cpu"], "the rbln server's greedy completions differ from the CPU server's"
    return _server_rows(group, f"{SERVING_REQUESTS} concurrent requests x {SERVING_TOKENS} tokens, Llama d512 x4",
                        rounds, targets, "same server on cpu")


def paged_decode(device):
    """One decoding token of 32 sequences of 512 tokens over vLLM's paged KV cache (its permuted layout, blocks
    shuffled): on rbln the device kernel reading the blocks in place; on CPU what a backend without one does,
    index_select of each sequence's blocks, then SDPA."""
    gen = torch.Generator().manual_seed(0)
    sequences, context, heads, dim, block = 32, 512, 8, 64, 16
    per = context // block
    cache = torch.randn(sequences * per, block, heads, 2 * dim, generator=gen).permute(0, 2, 1, 3).to(device)
    table = torch.randperm(sequences * per, generator=gen).view(sequences, per).int().to(device)
    query = torch.randn(sequences, heads, dim, generator=gen).to(device)
    if device == "rbln":
        starts = torch.arange(sequences + 1, dtype=torch.int32).rbln()
        lengths = torch.full((sequences,), context, dtype=torch.int32).rbln()
        return lambda: [torch.ops.rbln.paged_attention(query, cache, table, starts, lengths, dim ** -0.5)
                        for _ in range(10)]

    def gathered():
        blocks = cache.index_select(0, table.flatten()).view(sequences, per, heads, block, 2 * dim)
        kv = blocks.transpose(1, 2).flatten(2, 3)  # [sequences, heads, context, 2 * dim]
        return F.scaled_dot_product_attention(query.unsqueeze(2), kv[..., :dim], kv[..., dim:], scale=dim ** -0.5)
    return lambda: [gathered() for _ in range(10)]


def vllm_rows(reps: int) -> list:
    """Tokens/s and p99 request latency of `vllm serve` on rbln (torch_rbln's platform plugin), eager and in graph
    mode (decode steps replayed), over `transformers serve --continuous-batching` on CPU, the server CPU users
    have here (vLLM's CPU platform needs its compiled ops): all up at once, VLLM_REQUESTS concurrent greedy
    requests of VLLM_TOKENS new tokens per round, rounds interleaved, the same Llama; their greedy texts must
    agree."""
    group, targets, graph_targets = "serving", {"tokens/s": 1.5, "p99 request latency": 0.8}, {"tokens/s": 2.5}
    label = f"vLLM on rbln / transformers serve on CPU, {VLLM_REQUESTS} concurrent requests x {VLLM_TOKENS} tokens"
    graph_label = label.replace("vLLM on rbln", "vLLM on rbln in graph mode")
    if not _selected(group, [f"{n}, {label}" for n in targets] + [f"{n}, {graph_label}" for n in graph_targets]):
        return []
    import serving

    requests = [(p, i % 2 == 1) for i, p in enumerate(serving.prompts(VLLM_REQUESTS))]
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "llama")
        serving.build(model, hidden=512, layers=4)
        servers = {
            "cpu": serving.Server(model, ["--device", "cpu", "--continuous-batching", "--cb-num-blocks", "512",
                                          "--cb-max-batch-tokens", "256"], os.path.join(tmp, "cpu.log"), timeout=300),
            **{name: serving.VLLMServer(model, [*mode, "--dtype", "float32", "--max-model-len", "256",
                                                "--gpu-memory-utilization", "0.3", "--max-num-seqs",
                                                str(VLLM_REQUESTS)], os.path.join(tmp, f"{name}.log"), timeout=300)
               for name, mode in (("rbln", ["--enforce-eager"]), ("rbln graphs", []))}}
        with servers["cpu"], servers["rbln"], servers["rbln graphs"]:
            rounds = _interleaved(servers, requests, VLLM_TOKENS, reps)
            codes = [servers["cpu"].stop()[1], servers["rbln"].stop(), servers["rbln graphs"].stop()]
    assert codes == [0, 0, 0], codes
    # Words are tokens. On this random-weight model some of the 64-token greedy continuations meet near-ties that
    # float32 rounding order decides (vLLM differs from Hugging Face there on CPU too); the first 8 must agree.
    texts = {d: [r["text"].split()[:8] for r in rounds[d][0]["results"]] for d in rounds}
    assert texts["rbln"] == texts["rbln graphs"] == texts["cpu"], \
        "vLLM's greedy completions on rbln differ from the CPU server's"
    return (_server_rows(group, f"{label}, Llama d512 x4", rounds, targets, "transformers serve on cpu")
            + _server_rows(group, f"{graph_label}, Llama d512 x4", {"cpu": rounds["cpu"], "rbln": rounds["rbln graphs"]},
                           graph_targets, "transformers serve on cpu"))


class _Rows(list):
    """The measured rows: append() drops the None of a row that --only skipped."""

    def append(self, row):
        if row is not None:
            super().append(row)


def merge_rows(old: list[dict], new: list[dict]) -> list[dict]:
    """old with each new row in place of the row of the same group and name, or after its group's last row."""
    rows = list(old)
    for row in new:
        same = [i for i, r in enumerate(rows) if (r["group"], r["name"]) == (row["group"], row["name"])]
        group = [i for i, r in enumerate(rows) if r["group"] == row["group"]]
        if same:
            rows[same[0]] = row
        else:
            rows.insert(group[-1] + 1 if group else len(rows), row)
    return rows


def render(meta, rows) -> str:
    lines = [
        "<!-- @generated by `make bench` (benchmarks/run.py). Do not edit. -->",
        "# Performance: rbln against CPU",
        "",
        f"Measured {meta['date']}, torch {meta['torch']}, {meta['cpus']} CPUs, {meta['repeats']} interleaved repeats"
        + (" (--quick)" if meta["quick"] else "") + ".",
        *(f"Rows matching {' or '.join(repr(o) for o in m['only'])} ({m['rows']}) re-measured {m['date']}, "
          f"{m['repeats']} repeats (`benchmarks/run.py --only ... --merge`)." for m in meta.get("merged", [])),
        "Ratios are rbln time / CPU time for the same work (copies: rbln bandwidth / the bandwidth of a host-to-host",
        "`copy_` of the same bytes, which PyTorch runs as a memcpy split across the cores);",
        "median of the per-repeat ratios, with min and max. The emulated NPU computes on the same CPU cores,",
        "so CPU eager is the physical limit for both per-op overhead and kernel throughput.",
        "Some rows have another reference: `overlap` is the time of the overlapped schedule / the same work",
        "serialized on one stream; `memory` is peak reserved / peak allocated bytes (not a time); `compile`",
        "(torch.compile, docs/compile.md) compares compiled rbln with compiled CPU (Inductor) or with eager",
        "rbln (next to it, CPU's compiled / eager from the same run, a reference without a target), cold compile",
        "times of fresh processes, and counts the graphs a warm second process compiles.",
        "`load` runs the per-op chain with two processes spinning beside it, CPU eager under the same load.",
        "`serving` runs `transformers serve --continuous-batching` on rbln and on CPU under the same concurrent load",
        "(docs/serving.md): tokens/s rbln / CPU (higher is better) and request latency rbln / CPU.",
        "`quantized` (docs/quantization.md): the int8 weight-only linear also against CPU's float32 linear of the",
        "same shape, and the device memory of an int8 weight-only model / its float32 version (not a time).",
        "`deployment` (docs/deployment.md): an AOTInductor package of the transformer block on rbln against",
        "torch.compile on rbln and against the CPU package, load + first call against CPU's, and the compiles at",
        f"load and first call (a count, not a time); each timed region is {AOTI_CALLS} calls, each synchronized.",
        "",
        "| group | workload | median | min | max | target | meets |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        op = ">=" if r["higher_is_better"] else "<="
        target, meets = ("-", "reference") if r["target"] is None else (
            f"{op} {r['target']}", "yes" if r["meets_target"] else "no")
        lines.append(f"| {r['group']} | {r['name']} | {r['median']:.2f} | {r['min']:.2f} | {r['max']:.2f} | "
                     f"{target} | {meets} |")
    soak = os.path.join(ROOT, "benchmarks", "soak.json")
    if os.path.exists(soak):  # written by benchmarks/soak.py (a long run, not part of make bench)
        k = json.load(open(soak))
        lines += ["", f"Soak (benchmarks/soak.py, {k['date']}): vLLM's engine on rbln, {k['minutes']:g} minutes of "
                      f"rounds of {k['requests_per_round']} greedy requests x {k['tokens_per_request']} tokens: "
                      f"{k['rounds']} rounds, {len(k['errors'])} errors (a raise, or first 8 tokens other than the "
                      f"first round's; {k['rounds_diverging_after_8_tokens']} rounds differed later, at near-ties); "
                      f"reserved memory moved by {k['reserved_range_over_flat_minutes']} bytes over the "
                      f"last {k['flat_minutes']:g} minutes (peak {k['peak_reserved'] / 2**20:.0f} MiB); after the "
                      f"engine, allocated memory {k['allocated_after_minus_idle']} bytes over idle (module-level "
                      f"tensors {k['module_level_tensors']} bytes): {'passed' if k['passed'] else 'FAILED'}."]
    build = os.path.join(ROOT, "benchmarks", "build_time.json")
    if os.path.exists(build):  # written by benchmarks/build_time.py (make bench runs it first)
        b = json.load(open(build))
        lines += ["", f"Build time (benchmarks/build_time.py, {b['date']}, {b['jobs']} jobs): `python -m codegen` "
                      f"{b['codegen_s']:.1f} s"
                  + (f"; incremental rebuild after a one-entry ops.yaml edit {b['rebuild_after_edit_s']:.0f} s, "
                     f"after restoring it {b['rebuild_after_restore_s']:.0f} s"
                     f" (tree restored: {'yes' if b.get('tree_restored') else 'NO'}"
                     + (f"; load average {b['load_average_1min']}" if "load_average_1min" in b else "") + ")."
                     if "rebuild_after_edit_s" in b else ".")]
    # Nothing hand-written is embedded: the analysis behind these figures is its own document.
    lines += ["", "Where the time goes, what was changed and what would close the gaps: "
                  "[performance-analysis.md](performance-analysis.md) (hand-written)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
