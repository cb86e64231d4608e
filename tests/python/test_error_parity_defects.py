"""Regressions from the error-parity fuzz: inputs that crashed, hung or silently differed from CPU.

Each case compares rbln with CPU (the error's type and message, or the result's values and dtype) and,
where a device kernel is involved, asserts that it ran on the device."""
import math
import time

import pytest
import torch
import torch.nn.functional as F

NAN, INF = math.nan, math.inf


def _rbln(x):
    return x.rbln() if isinstance(x, torch.Tensor) else x


def _cpu_error(fn, *args, **kwargs):
    with pytest.raises(Exception) as info:
        fn(*args, **kwargs)
    return info.type, str(info.value)


def _assert_raises_like_cpu(fn, *args, **kwargs):
    """fn raises on rbln what it raises on CPU: the same exception type and message."""
    kind, message = _cpu_error(fn, *args, **kwargs)
    with pytest.raises(kind) as info:
        fn(*[_rbln(a) for a in args], **{k: _rbln(v) for k, v in kwargs.items()})
        torch.rbln.synchronize()
    assert str(info.value) == message


def _on_device(fn, *args, ops, **kwargs):
    """fn's result on rbln (moved to the CPU), checking that `ops` ran on the device without a fallback."""
    with torch.rbln.explain() as ex:
        out = fn(*[_rbln(a) for a in args], **kwargs)
        out = tuple(o.cpu() for o in out) if isinstance(out, (tuple, list)) else out.cpu()
    assert not ex.fallback_ops, ex.fallback_reasons
    assert set(ops) <= set(ex.device_ops), sorted(ex.device_ops)
    return out


def _assert_same(actual, expected, **tol):
    if isinstance(expected, (tuple, list)):
        for a, e in zip(actual, expected, strict=True):
            _assert_same(a, e, **tol)
        return
    assert actual.dtype == expected.dtype
    torch.testing.assert_close(actual, expected, equal_nan=True, **tol)


# ---- lu_solve: pivots out of range are a device-side error, not a wild write --------------------------

@pytest.mark.parametrize("pivots", [[2**31 - 1, 2, 3], [53, 2, 3], [1, 1000, 3], [0, 2, 3], [1, -4, 3]])
def test_lu_solve_rejects_pivots_out_of_range(pivots, assert_device_works):
    LU, _ = torch.linalg.lu_factor(torch.randn(3, 3, generator=torch.Generator().manual_seed(0)))
    piv, B = torch.tensor(pivots, dtype=torch.int32), torch.randn(3, 4)
    _, message = _cpu_error(torch.linalg.lu_solve, LU, piv, B)
    with torch.rbln.explain() as ex:
        X = torch.linalg.lu_solve(LU.rbln(), piv.rbln(), B.rbln())  # queued: the pivots are read on the device
    assert "aten::linalg_lu_solve.out" in ex.device_ops
    with pytest.raises(RuntimeError) as info:
        X.cpu()
    assert "aten::linalg_lu_solve" in str(info.value) and message in str(info.value)
    good = torch.linalg.lu_factor(torch.randn(3, 3) + 3 * torch.eye(3))
    torch.testing.assert_close(torch.linalg.lu_solve(good[0].rbln(), good[1].rbln(), B.rbln()).cpu(),
                               torch.linalg.lu_solve(*good, B))
    assert_device_works()


# ---- pinned memory: a failed allocation is CUDA's out-of-memory error ----------------------------------

def test_failed_pinned_allocation_raises_out_of_memory(assert_device_works):
    with pytest.raises(torch.OutOfMemoryError, match="pinned host memory"):
        torch.empty(2**40, dtype=torch.uint8, pin_memory=True)
    x = torch.arange(8.0).pin_memory()  # still usable
    assert x.is_pinned()
    torch.testing.assert_close(x.rbln(non_blocking=True).cpu(), torch.arange(8.0))
    assert_device_works()


# ---- convolution with a stride past the input ---------------------------------------------------------

@pytest.mark.parametrize("dims", [1, 2, 3])
@pytest.mark.parametrize("stride", [2**63 - 1, 2**40, 5])
def test_convolution_with_a_huge_stride_matches_cpu(dims, stride):
    gen = torch.Generator().manual_seed(dims)
    x = torch.randn(1, 3, *[4] * dims, generator=gen, requires_grad=True)
    w = torch.randn(2, 3, *[3] * dims, generator=gen, requires_grad=True)
    conv = [F.conv1d, F.conv2d, F.conv3d][dims - 1]
    expected = conv(x, w, stride=stride, padding=2)
    xd, wd = x.detach().rbln().requires_grad_(), w.detach().rbln().requires_grad_()
    with torch.rbln.explain() as ex:
        actual = conv(xd, wd, stride=stride, padding=2)
        actual.sum().backward()
    assert {"aten::convolution_overrideable", "aten::convolution_backward_overrideable"} <= set(ex.device_ops)
    assert not ex.fallback_ops, ex.fallback_reasons
    expected.sum().backward()
    torch.testing.assert_close(actual.detach().cpu(), expected.detach(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(xd.grad.cpu(), x.grad)
    torch.testing.assert_close(wd.grad.cpu(), w.grad, atol=1e-5, rtol=1e-5)
