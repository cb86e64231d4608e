"""The gradient column of the conformance sweep.

For every OpInfo entry that supports autograd in float32, each sample is made on
rbln with `requires_grad=True` (as PyTorch's gradient tests make them) and copied
to CPU as leaves with the same values. The forward runs on both (through the
OpInfo's `gradcheck_wrapper`, as `test_ops_gradients` runs it), then
`torch.autograd.grad` backpropagates the same pseudo-random grad_output through
every differentiable floating output to every input that requires grad. The
gradients must match CPU's (tolerances in `torch_rbln/testing.py`), or, where they
do not, be no further from the float64 gradient (CPU, same values) than CPU's
own float32 gradient is, plus that tolerance: the rule PyTorch's test_decomp
applies to decompositions (`op_assert_ref`), for backward formulas whose float32
rounding differs by more than the tolerance (cdist, ctc_loss, attention). Only
the ops the backward runs decide between device and fallback.
"""
from __future__ import annotations

import time

import torch

from torch_rbln.testing import TOLERANCES, opinfo_samples

DTYPE_NAME = "float32"
DTYPE = torch.float32
# Worst first, as in the forward sweep.
ORDER = ["mismatch", "error", "fallback", "device"]


def _tensors(x, out):
    """Tensors in x (nested lists, tuples, dicts), in a fixed order."""
    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, (list, tuple)):
        for v in x:
            _tensors(v, out)
    elif isinstance(x, dict):
        for v in x.values():
            _tensors(v, out)
    return out


def _sample_tensors(sample):
    return _tensors([sample.input, list(sample.args), sample.kwargs], [])


def _mirror(t: torch.Tensor, dtype=None, device="cpu") -> torch.Tensor:
    """t's storage copied to `device` and viewed with t's sizes, strides and offset, so ops
    that read storage outside the view (as_strided) see the same values, and non-contiguous
    or expanded views stay such. Always a copy, also to t's own device."""
    dtype = dtype or t.dtype
    try:
        if t.layout != torch.strided:
            raise TypeError
        n = t.untyped_storage().nbytes() // t.element_size()
        flat = torch.empty(0, dtype=t.dtype, device=t.device).set_(t.untyped_storage(), 0, (n,), (1,))
        return flat.detach().to(device, dtype, copy=True).as_strided(t.size(), t.stride(),
                                                                     t.storage_offset()).detach()
    except Exception:
        return t.detach().to(device, dtype, copy=True)


def _cpu_leaves(sample, dtype=None):
    """The sample on CPU (floating tensors in `dtype` if given): every tensor a leaf with the
    same values, geometry and requires_grad. A tensor that appears twice stays one tensor,
    so its gradients add up as on rbln."""
    memo = {}

    def leaf(t):
        if not isinstance(t, torch.Tensor):
            return t
        if id(t) not in memo:
            cast = dtype if dtype is not None and t.is_floating_point() else None
            memo[id(t)] = _mirror(t, cast).requires_grad_(t.requires_grad)
        return memo[id(t)]

    cpu = sample.transform(leaf)
    if "device" in cpu.kwargs:
        cpu.kwargs["device"] = "cpu"
    return cpu


def _differentiable(outputs):
    return [t for t in _tensors(outputs, []) if t.requires_grad and (t.is_floating_point() or t.is_complex())]


def _unique_grad_inputs(sample):
    seen, out = set(), []
    for t in _sample_tensors(sample):
        if t.requires_grad and id(t) not in seen:
            seen.add(id(t))
            out.append(t)
    return out


def _forward(op, sample):
    out = op.gradcheck_wrapper(op.op, sample.input, *sample.args, **sample.kwargs)
    return sample.output_process_fn_grad(out)


class _NotComparable(Exception):
    """CPU raised, or the sample has nothing to differentiate: the sample is not counted."""


def _cpu_grads(op, cpu_sample, seed: int):
    """CPU's gradients of the sample's differentiable outputs, for a grad_output drawn from `seed`."""
    cpu_inputs = _unique_grad_inputs(cpu_sample)
    cpu_outputs = _differentiable(_forward(op, cpu_sample))
    gen = torch.Generator().manual_seed(seed)
    # Drawn in float32 (complex64) and cast, so the float64 reference backpropagates the same values.
    grad_outputs = [torch.randn(t.shape, generator=gen, dtype=torch.complex64 if t.is_complex() else torch.float32)
                    .to(t.dtype) for t in cpu_outputs]
    return cpu_outputs, grad_outputs, torch.autograd.grad(cpu_outputs, cpu_inputs, grad_outputs, allow_unused=True)


def _no_worse_than_cpu(op, sample, seed, actual, expected) -> bool:
    """True where rbln's gradients are no further from the float64 gradients than CPU's
    float32 gradients are, plus the float32 tolerance (test_decomp's op_assert_ref rule)."""
    try:
        _, _, ref = _cpu_grads(op, _cpu_leaves(sample, torch.float64), seed)
    except Exception:
        return False
    atol = TOLERANCES[DTYPE]["atol"]
    for a, e, r in zip(actual, expected, ref):
        if a is None or e is None or r is None:
            if not (a is None and e is None):
                return False
            continue
        if a.shape != e.shape or a.numel() == 0:
            if a.shape != e.shape:
                return False
            continue
        if a.is_complex() != r.is_complex():
            return False
        a, e, r = a.cpu().to(r.dtype), e.to(r.dtype), r
        finite = torch.isfinite(r)
        if not torch.equal(torch.isfinite(a), finite) or not torch.equal(torch.isfinite(e), finite):
            return False
        if (a - r)[finite].abs().max() > (e - r)[finite].abs().max() + atol:
            return False
    return True


def _grad_sample(op, sample, seed: int):
    """Returns (status, backward fallback ops, detail, by_reference) for one sample made on rbln."""
    if isinstance(sample.kwargs.get("dropout_p"), float) and sample.kwargs["dropout_p"] > 0:
        raise _NotComparable("random: dropout_p > 0")
    cpu_sample = _cpu_leaves(sample)
    cpu_inputs = _unique_grad_inputs(cpu_sample)
    dev_inputs = _unique_grad_inputs(sample)
    if not cpu_inputs:
        raise _NotComparable("no input requires grad")
    try:
        cpu_outputs, grad_outputs, expected = _cpu_grads(op, cpu_sample, seed)
    except Exception as e:
        raise _NotComparable(f"CPU raised {type(e).__name__}") from None
    if not cpu_outputs:
        raise _NotComparable("no differentiable output")
    try:
        with torch.device("rbln"):
            dev_outputs = _differentiable(_forward(op, sample))
    except Exception as e:
        return "error", {}, f"forward raised on rbln: {type(e).__name__}: {str(e)[:160]}", False
    if len(dev_outputs) != len(cpu_outputs):
        return "mismatch", {}, f"{len(dev_outputs)} differentiable outputs on rbln, {len(cpu_outputs)} on CPU", False
    with torch.rbln.explain() as ex:
        try:
            actual = torch.autograd.grad(dev_outputs, dev_inputs, [g.to("rbln") for g in grad_outputs],
                                         allow_unused=True)
            torch.rbln.synchronize()
        except Exception as e:
            return "error", ex.fallback_ops, f"backward raised on rbln: {type(e).__name__}: {str(e)[:160]}", False
    status = "fallback" if ex.fallback_ops else "device"
    for i, (a, e) in enumerate(zip(actual, expected)):
        if a is None and e is None:
            continue
        a = torch.zeros_like(e) if a is None else a.cpu()
        e = torch.zeros_like(a) if e is None else e
        try:
            torch.testing.assert_close(a, e, equal_nan=True, **TOLERANCES[DTYPE])
        except Exception as err:
            if _no_worse_than_cpu(op, sample, seed, actual, expected):
                return status, ex.fallback_ops, "", True
            lines = str(err).strip().splitlines()
            return "mismatch", ex.fallback_ops, f"input {i}: " + " ".join(line.strip() for line in lines[:4]), False
    return status, ex.fallback_ops, "", False


def grad_entry(op, name: str, skip_reason: str | None, max_seconds: float):
    """The gradient result for one OpInfo entry (float32), or None where it is not differentiable."""
    if not op.supports_autograd or DTYPE not in op.supported_backward_dtypes("cpu") \
            or DTYPE not in op.supported_dtypes("cpu"):
        return None
    base = {"op": name, "variant": "gradient", "dtype": DTYPE_NAME}
    if skip_reason:
        return {**base, "status": "skipped", "reason": skip_reason}
    try:
        samples = opinfo_samples(op, "rbln", DTYPE, requires_grad=True)
    except Exception as e:
        return {**base, "status": "error", "reason": f"making samples on rbln failed: {type(e).__name__}: {str(e)[:200]}"}
    status, fallbacks, count, details, not_counted, by_reference = "device", {}, 0, [], set(), 0
    start = time.perf_counter()
    seed = 0
    while True:
        try:
            sample = next(samples)
        except StopIteration:
            break
        except Exception as e:
            status, details = "error", [f"making samples on rbln failed: {type(e).__name__}: {str(e)[:160]}"]
            break
        seed += 1
        try:
            s, f, detail, ref = _grad_sample(op, sample, seed)
        except _NotComparable as e:
            not_counted.add(str(e))
            continue
        except Exception as e:  # e.g. a sample that cannot even be copied back
            s, f, detail, ref = "error", {}, f"{type(e).__name__}: {str(e)[:160]}", False
        count += 1
        by_reference += ref
        for k, v in f.items():
            fallbacks[k] = fallbacks.get(k, 0) + v
        if detail and len(details) < 2:
            details.append(detail)
        if ORDER.index(s) < ORDER.index(status):
            status = s
        if time.perf_counter() - start > max_seconds:
            break
    if count == 0 and status != "error":
        return {**base, "status": "skipped",
                "reason": "no sample to compare (" + ", ".join(sorted(not_counted)) + ")" if not_counted
                else "no samples"}
    result = {**base, "status": status, "samples": count, "fallback_ops": sorted(fallbacks)}
    if by_reference:
        result["agreed_by_float64_reference"] = by_reference
    if details:
        result["detail"] = details
    return result


def grad_sweep(ops, name_of, skip_reason_of, max_seconds_per_case: float):
    import warnings

    warnings.simplefilter("ignore")
    results = []
    for op in ops:
        name = name_of(op)
        r = grad_entry(op, name, skip_reason_of(op), max_seconds_per_case)
        if r is not None:
            results.append(r)
    return results
