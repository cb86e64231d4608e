"""How far a result is from its reference: the per-dtype tolerances and the error figures that compare
mode and the dump comparison report."""
from __future__ import annotations

import torch

# |actual - expected| <= atol + rtol * |expected|, elementwise. Looser than torch.testing's defaults: a
# kernel that sums in another order (matmul, reductions) is a few ulps off CPU and is not a finding;
# a wrong kernel usually is off by far more. float16 and bfloat16 allow two ulps.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-3, 2e-3),
    torch.bfloat16: (1e-2, 1.6e-2),
    torch.complex128: (1e-7, 1e-7),
    torch.complex64: (1e-4, 1e-4),
}


def tolerance(dtype: torch.dtype, op: str | None = None, overrides=None) -> tuple[float, float]:
    """(atol, rtol) for a result of `dtype` from `op` ("aten::mm.default"): an override for the overload,
    then for the op ("aten::mm"), then for the dtype, then the table (0, 0: exact, for integers and bool)."""
    overrides = overrides or {}
    if op is not None:
        for key in (op, op.split(".")[0]):
            if key in overrides:
                return tuple(overrides[key])
    if dtype in overrides:
        return tuple(overrides[dtype])
    return TOLERANCES.get(dtype, (0.0, 0.0))


def error(actual: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float) -> dict | None:
    """None when `actual` matches `expected` (CPU tensors of one shape; NaN matches NaN), else the figures:
    largest absolute and relative error, the index of the largest (a mismatched NaN or Inf counts as
    infinite), the two values there, how many elements are off, and the worst error over what was allowed."""
    if actual.shape != expected.shape:
        return {"mismatch": f"shape {tuple(actual.shape)} != {tuple(expected.shape)}", "ratio": float("inf"),
                "max_abs": float("inf"), "max_rel": float("inf"), "index": None, "actual": None,
                "expected": None, "count": actual.numel(), "numel": actual.numel()}
    if actual.numel() == 0:
        return None
    if _within(actual, expected, atol, rtol):
        return None  # the common case, in few passes; the figures below take a dozen
    wide = torch.complex128 if actual.is_complex() or expected.is_complex() else torch.float64
    a, e = actual.detach().to(wide), expected.detach().to(wide)
    diff = (a - e).abs()
    same = (a == e) | (a.isnan() & e.isnan())  # equal infinities too, whose difference is NaN
    diff = torch.where(same, torch.zeros_like(diff), diff.nan_to_num(nan=float("inf")))
    allowed = atol + rtol * e.abs().nan_to_num(nan=0.0, posinf=0.0)
    bad = diff > allowed
    if not bool(bad.any()):
        return None
    flat = int(diff.flatten().argmax())
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), diff.shape)) if diff.dim() else ()
    rel = diff / e.abs()
    rel = torch.where(diff == 0, torch.zeros_like(rel), rel)
    ratio = (diff / allowed) if (atol or rtol) else torch.where(bad, float("inf"), 0.0)
    return {"mismatch": None, "max_abs": float(diff.max()), "max_rel": float(rel.max()), "index": index,
            "actual": _item(a, index), "expected": _item(e, index), "count": int(bad.sum()),
            "numel": diff.numel(), "ratio": float(ratio.max())}


def _within(actual: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float) -> bool:
    """True when every element is within tolerance (a NaN or Inf anywhere: False, the caller looks closer)."""
    if actual.dtype == expected.dtype and torch.equal(actual, expected):
        return True
    if not (actual.is_floating_point() and expected.is_floating_point()):
        return False
    diff = torch.sub(actual.to(expected.dtype), expected).abs_()
    return bool(diff.le_(expected.abs().mul_(rtol).add_(atol)).all())


def _item(t: torch.Tensor, index: tuple):
    value = t[index].item()
    return value if not isinstance(value, complex) else str(value)
