"""The CUDA column: the dtypes an OpInfo entry supports on CUDA beyond CPU's (`dtypesIfCUDA`), run on rbln.

CPU has no kernel for these dtypes, so the reference is CPU's result in the nearest dtype CPU supports
(REFERENCE), rounded to the tested dtype: each sample is made on rbln in the tested dtype, its tensors of
that dtype are cast to the reference dtype for CPU, and the two results are compared in the reference dtype
with the tested dtype's tolerance (complex32: see tolerance_of). The function variant only; the status per (entry, dtype) is its worst
sample's, as in the sweep.
"""
from __future__ import annotations

import time

import torch
from torch.utils import _pytree as pytree

from torch_rbln.testing import TOLERANCES, opinfo_samples

# The dtypes CPU computes a CUDA-only dtype's reference in, nearest first.
REFERENCE = {
    torch.complex32: (torch.complex64, torch.complex128),
    torch.float16: (torch.float32, torch.float64),
    torch.bfloat16: (torch.float32, torch.float64),
    torch.float32: (torch.float64,),
    torch.float64: (torch.float32,),
    torch.complex64: (torch.complex128,),
    torch.complex128: (torch.complex64,),
    **{d: (torch.int64, torch.float64) for d in (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32)},
    torch.int64: (torch.float64,),
}
# The tolerance of a dtype without its own in TOLERANCES: its real counterpart's.
_TOLERANCE_OF = {torch.complex32: torch.float16, torch.complex64: torch.float32}


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def cases(op) -> list[tuple[torch.dtype, torch.dtype | None]]:
    """(CUDA-only dtype, the dtype CPU's reference is computed in, or None where CPU supports none)."""
    cpu = op.supported_dtypes("cpu")
    extra = sorted(set(op.supported_dtypes("cuda")) - set(cpu), key=str)
    return [(d, next((r for r in REFERENCE.get(d, ()) if r in cpu), None)) for d in extra]


def tolerance_of(op, dtype: torch.dtype) -> dict:
    """The dtype's tolerance; for complex32, the entry's own where PyTorch's complex32 reference test (which
    compares with the op's complex64 result, as this column does) overrides it, as for the convolutions. A
    float16 FFT computes in complex32 (on CUDA too: torch.fft takes it as complex32), so it takes its op's
    complex32 tolerance."""
    if dtype == torch.complex32 or (dtype == torch.float16 and op.name.startswith("fft.")):
        c32 = torch.complex32
        for decorator in op.get_decorators("TestCommon", "test_complex_half_reference_testing", "cuda", c32, {}):
            if c32 in getattr(decorator, "d", {}):
                return {"atol": decorator.d[c32].atol, "rtol": decorator.d[c32].rtol}
    return TOLERANCES.get(_TOLERANCE_OF.get(dtype, dtype), {})


def _compare(actual, expected, dtype: torch.dtype, ref: torch.dtype, tolerance: dict) -> None:
    flat_a, spec_a = pytree.tree_flatten(actual)
    flat_e, spec_e = pytree.tree_flatten(expected)
    assert spec_a == spec_e, f"result structure {spec_a} != CPU's {spec_e}"
    for a, e in zip(flat_a, flat_e):
        if not isinstance(a, torch.Tensor):
            assert a == e, f"{a!r} != CPU's {e!r}"
            continue
        a = a.cpu()
        # The reference rounded to the result's dtype (a CUDA-only dtype stays a CUDA-only dtype), then both in
        # a dtype CPU compares in.
        common = ref if a.dtype == dtype else a.dtype
        if a.dtype == dtype:
            e = e.to(dtype)
        # A complex32 op's real results (hfft's, angle's) are float16: the op's tolerance holds for them too.
        own = a.dtype in (dtype, _TOLERANCE_OF.get(dtype))
        torch.testing.assert_close(a.to(common), e.to(common), equal_nan=True, check_dtype=False,
                                   **(tolerance if own else TOLERANCES.get(a.dtype, {})))


def run_sample(fn, sample, dtype: torch.dtype, ref: torch.dtype, tolerance: dict):
    """(status, fallback ops, what failed) of one sample made on rbln in `dtype`."""
    def to_reference(t):
        return t.cpu().to(ref) if t.dtype == dtype else t.cpu()

    cpu_sample = sample.transform(lambda t: to_reference(t) if isinstance(t, torch.Tensor) else t)
    if "device" in cpu_sample.kwargs:
        cpu_sample.kwargs["device"] = "cpu"
    try:
        expected = fn(cpu_sample.input, *cpu_sample.args, **cpu_sample.kwargs)
    except Exception:
        return "skipped", {}, None  # the reference dtype's own shape rules reject it: no reference
    with torch.rbln.explain() as ex:
        try:
            with torch.device("rbln"):  # a factory's default device, as the sweep runs it
                actual = fn(sample.input, *sample.args, **sample.kwargs)
            torch.rbln.synchronize()
        except Exception as e:
            return "error", ex.fallback_ops, f"rbln raised {type(e).__name__}: {e}"
    try:
        _compare(actual, expected, dtype, ref, tolerance)
    except Exception as e:
        return "mismatch", ex.fallback_ops, str(e)
    return ("fallback" if ex.fallback_ops else "device"), ex.fallback_ops, None


def cuda_sweep(ops, opinfo_name, skip_reason, describe, max_seconds_per_case: float) -> list[dict]:
    order = ["mismatch", "error", "fallback", "device", "skipped"]
    results = []
    for op in ops:
        name = opinfo_name(op)
        for dtype, ref in cases(op):
            row = {"op": name, "variant": "cuda", "dtype": dtype_name(dtype),
                   "reference_dtype": dtype_name(ref) if ref else None}
            reason = skip_reason(op)
            if reason or ref is None:
                results.append({**row, "status": "skipped", "reason": reason or "CPU supports no reference dtype"})
                continue
            try:
                samples = list(opinfo_samples(op, "rbln", dtype, requires_grad=False))
            except Exception as e:
                results.append({**row, "status": "error",
                                "detail": [f"making samples on rbln failed: {type(e).__name__}: {str(e)[:200]}"]})
                continue
            status, fallbacks, detail, count, start = "skipped", {}, None, 0, time.perf_counter()
            tolerance = tolerance_of(op, dtype)
            for sample in samples:
                s, f, why = run_sample(op.op, sample, dtype, ref, tolerance)
                count += s != "skipped"
                for k, v in f.items():
                    fallbacks[k] = fallbacks.get(k, 0) + v
                if order.index(s) < order.index(status):
                    status = s
                    detail = f"{describe(sample)}: {' '.join(str(why).split())}"[:400] if why else None
                if time.perf_counter() - start > max_seconds_per_case:
                    break
            row.update(status=status, samples=count, fallback_ops=sorted(fallbacks))
            if status == "skipped":
                row["reason"] = "CPU raised on every sample in the reference dtype"
            if detail and status in ("mismatch", "error"):
                row["detail"] = [detail]
            results.append(row)
    return results
