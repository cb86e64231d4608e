"""python -m conformance [--slice] [--ops NAME ...] [--dtypes ...] [--no-grad] [--merge] [--upstream] [--report PATH]

Runs every OpInfo entry's sample (and reference) inputs on CPU and on rbln with
identical inputs, through the function, method, in-place and out= variants the
OpInfo declares, and records for each (op, variant, dtype) whether it ran on the
device and matched, fell back and matched (naming the fallback ops), mismatched,
raised where CPU did not, or was skipped (with the reason).

The gradient column (variant "gradient", float32; conformance/gradients.py):
per differentiable entry, the gradients of its samples on rbln against CPU's,
and whether the backward ran on the device.

The CUDA column (variant "cuda"; conformance/cuda_dtypes.py): the dtypes an
entry supports on CUDA beyond CPU's, on rbln against CPU's result in a dtype
CPU supports.

`--upstream` runs PyTorch's own device-generic test classes instantiated for rbln
(tests/python/test_upstream.py, every op_db/module_db/optim_db entry; conformance/upstream.py)
and records them in their own section; `make conformance` runs both.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

import torch_rbln  # noqa: F401  (before torch.testing._internal)
from torch_rbln.testing import TOLERANCES, opinfo_samples, to_cpu

from .cuda_dtypes import cuda_sweep
from .gradients import grad_sweep
from .render import render_markdown


# Reflected operators whose OpInfo entries run through another op's overloads (pow.Scalar, remainder.Scalar_Tensor).
REFLECTED = {"pow": "__rpow__", "remainder": "__rmod__"}


# Differences that come from PyTorch's Python code choosing another path on rbln than on CPU, not from a kernel.
UPSTREAM_NOTES = {
    "nn.functional.linear_cross_entropy.chunked": "torch's chunked path picks its float16/bfloat16 accumulation "
    "per device type (float32 on CPU and CUDA only); torch_rbln/_policies.py gives rbln CPU's picks",
}


def ops_yaml_notes() -> dict[str, str]:
    """OpInfo name -> the notes of the ops.yaml entries that name it (known gaps and mismatches)."""
    from codegen.registry import load

    notes: dict[str, list[str]] = {}
    for e in load(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ops.yaml")):
        base = e.func.split(".")[0].rstrip("_")
        names = e.opinfo + [base, f"nn.functional.{base}", f"special.{base.removeprefix('special_')}"]
        names += [REFLECTED[base]] if base in REFLECTED else []
        for name in dict.fromkeys(names):
            if e.notes:
                notes.setdefault(name, []).append(f"{e.func}: {e.notes}")
    for name, note in UPSTREAM_NOTES.items():
        notes.setdefault(name, []).append(note)
    return {name: "; ".join(n) for name, n in notes.items()}


def ops_yaml_tolerances() -> dict[str, dict[str, dict[str, float]]]:
    """OpInfo name -> dtype -> the ops.yaml `tolerance:` of the entry that names it (summation-order-bound
    kernels), the same tolerance the generated tests use."""
    from codegen.registry import load

    out: dict[str, dict[str, dict[str, float]]] = {}
    for e in load(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ops.yaml")):
        for name in e.opinfo:
            for dtype, (atol, rtol) in e.tolerance.items():
                out.setdefault(name, {})[dtype] = {"atol": atol, "rtol": rtol}
    return out

# Every dtype an OpInfo entry lists for CPU (op.supported_dtypes("cpu")), most common first.
DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool, torch.float64, torch.int32, torch.int16,
    torch.int8, torch.uint8, torch.complex64, torch.complex128, torch.complex32, torch.uint16, torch.uint32,
    torch.uint64, torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz)}
# The dtypes the bounded slice (`make test`) judges: the common ones and one each of the small integers and complex.
SLICE_DTYPES = ("float32", "float16", "bfloat16", "int64", "bool", "int8", "complex64")
# Worst first: the status of an (op, variant, dtype) is its worst sample's.
ORDER = ["mismatch", "error", "fallback", "device"]
# Ops whose output is random or uninitialized: CPU and rbln cannot agree by value.
SKIP = {
    "random output": ("rand", "randn", "randint", "randperm", "normal", "uniform", "bernoulli", "multinomial",
                      "exponential", "geometric", "cauchy", "log_normal", "nn.functional.dropout",
                      "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout", "nn.functional.rrelu",
                      "nn.functional.dropout1d", "nn.functional.dropout2d", "nn.functional.dropout3d",
                      "nn.functional.gumbel_softmax", "dropout", "randint_like", "randn_like", "rand_like",
                      "nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d",
                      "nn.functional.multi_head_attention_forward", "svd_lowrank", "pca_lowrank"),
    # Sparse compressed (CSR/BSR) inputs: rbln has the sparse COO layout only.
    "sparse compressed layout (rbln has sparse COO only)": ("sparse.mm.reduce", "sparse.sampled_addmm"),
    "uninitialized memory": ("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
                             "empty_permuted", "torch.empty"),
}
# The bounded slice `make test` runs: common op kinds, every family, still quick.
SLICE = ("add", "mul", "div.no_rounding_mode", "abs", "exp", "sigmoid", "eq", "where", "sum", "mean", "amax",
         "softmax", "log_softmax", "mm", "bmm", "addmm", "matmul", "index_select", "cat", "masked_fill",
         "nn.functional.linear", "nn.functional.relu", "clamp", "transpose", "reshape", "cumsum", "sort")


def opinfo_name(op) -> str:
    return op.name if not op.variant_test_name else f"{op.name}.{op.variant_test_name}"


def skip_reason(name: str) -> str | None:
    for reason, names in SKIP.items():
        if name in names:
            return reason
    return None


def variants(op):
    """(variant name, callable, kwargs-adder) the OpInfo declares."""
    out = [("function", op.op)]
    if op.method_variant is not None:
        out.append(("method", op.method_variant))
    if op.inplace_variant is not None:
        out.append(("inplace", op.inplace_variant))
    if op.supports_out:
        out.append(("out", op.op))
    return out


def _clone(sample):
    return sample.transform(lambda t: t.clone() if isinstance(t, torch.Tensor) else t)


def _call(fn, sample, variant, device):
    if variant == "out":
        expected = fn(sample.input, *sample.args, **sample.kwargs)
        if not isinstance(expected, torch.Tensor):
            raise TypeError("out= check needs a single tensor result")
        out = torch.empty(0, dtype=expected.dtype, device=device)
        fn(sample.input, *sample.args, **sample.kwargs, out=out)
        return out
    return fn(sample.input, *sample.args, **sample.kwargs)


def _is_rbln(v) -> bool:
    return (isinstance(v, torch.device) and v.type == "rbln") or (isinstance(v, str) and v.split(":")[0] == "rbln")


def run_sample(fn, sample, variant, tolerance=None, cuda_supports=False):
    """Returns (status, fallback ops, what failed). The sample was made on rbln, as PyTorch's
    device tests make them, so arguments that must stay on the CPU do. `tolerance` (ops.yaml's
    for this op and dtype) replaces the dtype's default. `cuda_supports`: CUDA computes the entry in
    this dtype, so rbln computing a sample CPU's kernel has no implementation for is CUDA's behaviour."""
    cpu_sample = sample.transform(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t)
    # A device argument (a `device=` factory keyword, or Tensor.to's positional one) names rbln in the sample.
    cpu_sample.args = tuple("cpu" if _is_rbln(a) else a for a in cpu_sample.args)
    if "device" in cpu_sample.kwargs:
        cpu_sample.kwargs["device"] = "cpu"
    dev_sample = _clone(sample)
    cpu_lacks_dtype = False
    try:
        expected = _call(fn, cpu_sample, variant, "cpu")
    except Exception as e:
        expected = None
        cpu_lacks_dtype = isinstance(e, NotImplementedError) and "not implemented for" in str(e)
    with torch.rbln.explain() as ex:
        try:
            with torch.device("rbln"):
                actual = _call(fn, dev_sample, variant, "rbln")
            torch.rbln.synchronize()
        except Exception as e:
            return ("device", ex.fallback_ops, None) if expected is None else \
                ("error", ex.fallback_ops, f"rbln raised {type(e).__name__}: {e}")
    if expected is None:
        if cpu_lacks_dtype and cuda_supports:  # no CPU value to compare (the CUDA column compares values)
            return ("fallback" if ex.fallback_ops else "device"), ex.fallback_ops, None
        return "error", ex.fallback_ops, "CPU raised, rbln did not"
    if expected is NotImplemented:
        return ("device", ex.fallback_ops, None) if actual is NotImplemented else \
            ("mismatch", ex.fallback_ops, "CPU returned NotImplemented, rbln did not")
    try:
        torch.testing.assert_close(to_cpu(actual), expected, equal_nan=True,
                                   **(tolerance or TOLERANCES.get(getattr(expected, "dtype", None), {})))
    except Exception as e:
        return "mismatch", ex.fallback_ops, str(e)
    return ("fallback" if ex.fallback_ops else "device"), ex.fallback_ops, None


def describe_sample(sample, tensor) -> str:
    """A short description of a sample's inputs, for the reports: `tensor(t)` describes one tensor."""
    def one(v):
        if isinstance(v, torch.Tensor):
            return tensor(v)
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(one(x) for x in v) + "]"
        return repr(v)
    parts = [one(sample.input)] + [one(a) for a in sample.args] + [f"{k}={one(v)}" for k, v in sample.kwargs.items()]
    return "(" + ", ".join(parts) + ")"


def _describe(sample) -> str:
    return describe_sample(sample, lambda t: f"Tensor{list(t.shape)}" + (
        f" {t.layout}" if t.layout != torch.strided else "" if t.is_contiguous() else " noncontiguous"))


def sweep(ops, dtypes, max_seconds_per_case: float, seconds: dict[str, float] | None = None):
    """The forward columns; `seconds` (if given) gathers the time spent per dtype."""
    import warnings

    warnings.simplefilter("ignore")
    results = []
    seconds = {} if seconds is None else seconds
    tolerances = ops_yaml_tolerances()
    for op in ops:
        name = opinfo_name(op)
        reason = skip_reason(op.name) or skip_reason(name)
        supported = op.supported_dtypes("cpu")
        for dtype_name in dtypes:
            dtype = DTYPES[dtype_name]
            if dtype not in supported:
                continue
            started = time.perf_counter()
            try:
                results += _sweep_case(op, name, reason, dtype_name, dtype, tolerances, max_seconds_per_case)
            finally:
                seconds[dtype_name] = round(seconds.get(dtype_name, 0.0) + time.perf_counter() - started, 1)
    return results


def _sweep_case(op, name, reason, dtype_name, dtype, tolerances, max_seconds_per_case):
    """The results of one (entry, dtype): one per variant, or one skip."""
    if reason:
        return [{"op": name, "variant": "all", "dtype": dtype_name, "status": "skipped", "reason": reason}]
    try:
        samples = list(opinfo_samples(op, "rbln", dtype, requires_grad=False))
        if op.reference_inputs_func is not None:
            samples += list(opinfo_samples(op, "rbln", dtype, reference=True,
                                           requires_grad=False))[len(samples):]
    except Exception as e:  # the samples are made on rbln: a failure there is the device's
        return [{"op": name, "variant": "all", "dtype": dtype_name, "status": "error",
                 "reason": f"making samples on rbln failed: {type(e).__name__}: {str(e)[:200]}"}]
    # A sample with dropout (scaled_dot_product_attention's dropout_p) has a random output.
    samples = [s for s in samples if not s.kwargs.get("dropout_p")]
    tolerance = tolerances.get(name, {}).get(dtype_name)
    cuda_supports = dtype in op.supported_dtypes("cuda")
    results = []
    for variant, fn in variants(op):
        status, fallbacks, start, count, detail = "device", {}, time.perf_counter(), 0, None
        for sample in samples:
            try:
                s, f, why = run_sample(fn, sample, variant, tolerance, cuda_supports)
            except Exception as e:  # e.g. a sparse rbln sample that cannot even be copied back
                s, f, why = "error", {}, f"{type(e).__name__}: {e}"
            count += 1
            for k, v in f.items():
                fallbacks[k] = fallbacks.get(k, 0) + v
            if ORDER.index(s) < ORDER.index(status):
                status = s
                detail = f"sample {count - 1} {_describe(sample)}: {' '.join(str(why).split())}"[:400]
            if time.perf_counter() - start > max_seconds_per_case:
                break
        result = {"op": name, "variant": variant, "dtype": dtype_name, "status": status,
                  "samples": count, "fallback_ops": sorted(fallbacks)}
        if detail and status in ("mismatch", "error"):
            result["detail"] = [detail]
        if tolerance:
            result["tolerance"] = tolerance
        results.append(result)
    return results


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--slice", action="store_true", help="the bounded, representative slice `make test` runs")
    p.add_argument("--ops", nargs="*", help="OpInfo names to run (default: all)")
    p.add_argument("--dtypes", nargs="*", choices=list(DTYPES),
                   help="default: every dtype (the slice: SLICE_DTYPES)")
    p.add_argument("--seconds-per-case", type=float, default=20.0,
                   help="stop adding samples to one (op, variant, dtype) after this long")
    p.add_argument("--no-grad", action="store_true", help="leave out the gradient column")
    p.add_argument("--no-forward", action="store_true", help="leave out the forward columns (CPU's dtypes)")
    p.add_argument("--no-cuda", action="store_true", help="leave out the CUDA column (CUDA's dtypes beyond CPU's)")
    p.add_argument("--merge", action="store_true",
                   help="update the existing report: replace the entries this run produces, keep the others")
    p.add_argument("--upstream", nargs="?", const="full", choices=["full", "subset"],
                   help="instead of the sweep: run PyTorch's device-generic tests (tests/python/test_upstream.py; "
                        "full: every op_db/module_db/optim_db entry) and update their section of the report")
    p.add_argument("--report", default=None, help="JSON report path (default: conformance/report.json)")
    p.add_argument("--docs", default=None, help="markdown report path (default: docs/conformance.md)")
    args = p.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    suffix = "_slice" if args.slice else ""
    report = args.report or os.path.join(root, "conformance", f"report{suffix}.json")
    docs = args.docs or os.path.join(root, "docs", f"conformance{suffix}.md")
    old = {}
    if os.path.exists(report):
        with open(report) as f:
            old = json.load(f)

    if args.upstream:
        from .upstream import run as run_upstream

        meta, results = old.get("meta", {"torch": torch.__version__, "entries": 0, "seconds": 0}), old.get("results", [])
        upstream = run_upstream(args.upstream)
    else:
        from torch.testing._internal.common_methods_invocations import op_db

        wanted = set(args.ops or (SLICE if args.slice else ()))
        ops = [op for op in op_db if not wanted or opinfo_name(op) in wanted]
        meta = {"torch": torch.__version__, "entries": len(ops), "slice": args.slice}
        results = []
        if not args.no_forward:
            meta["dtype_seconds"] = {}
            dtypes = args.dtypes or list(SLICE_DTYPES if args.slice else DTYPES)
            results += sweep(ops, dtypes, args.seconds_per_case, meta["dtype_seconds"])
        if not args.no_grad:
            start = time.perf_counter()
            results += grad_sweep(ops, opinfo_name, lambda op: skip_reason(op.name) or skip_reason(opinfo_name(op)),
                                  args.seconds_per_case)
            meta["gradient_seconds"] = round(time.perf_counter() - start, 1)
        if not args.no_cuda:
            start = time.perf_counter()
            results += cuda_sweep(ops, opinfo_name, lambda op: skip_reason(op.name) or skip_reason(opinfo_name(op)),
                                  _describe, args.seconds_per_case)
            meta["cuda_seconds"] = round(time.perf_counter() - start, 1)
        if args.merge and old:
            # A re-run (op, dtype) replaces all its old variants (a skip has one, "all"); gradients and the
            # CUDA column likewise.
            def key(r):
                return r["op"], r["dtype"], r["variant"] if r["variant"] in ("gradient", "cuda") else "forward"

            produced = {key(r) for r in results}
            results = [r for r in old["results"] if key(r) not in produced] + results
            # the header's entry count and times stay those of the full sweep (a column run over every
            # entry brings its own time)
            partial = ("entries", "dtype_seconds", "gradient_seconds", "cuda_seconds") if args.ops else ("entries",)
            dtype_seconds = old["meta"].get("dtype_seconds", {})
            if "dtype_seconds" not in partial:
                dtype_seconds = {**dtype_seconds, **meta.get("dtype_seconds", {})}
            meta = {**old["meta"], **{k: v for k, v in meta.items() if k not in partial},
                    "dtype_seconds": dtype_seconds}
        if meta.get("dtype_seconds"):
            meta["seconds"] = round(sum(meta["dtype_seconds"].values()), 1)
        upstream = old.get("upstream")  # the upstream stage's results stay until it runs again
    out = {"meta": meta, "results": results}
    if upstream:
        out["upstream"] = upstream
    with open(report, "w") as f:
        json.dump(out, f, indent=1)
    with open(docs, "w") as f:
        f.write(render_markdown(meta, results, upstream, ops_yaml_notes()))
    print(open(docs).read().split("\n## Per op")[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
