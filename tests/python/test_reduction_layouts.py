"""Reductions over every layout the reduction plan distinguishes (kernels/reduction/Reduce.h): rows (the last dims),
columns (leading or middle dims, read in place, a tile of columns at a time), non-adjacent dims (moved
innermost in a copy), non-contiguous inputs, size-1 and empty dims. Each result is compared with CPU and
must come from the device kernel."""
import math

import pytest
import torch

# (shape, dims): rows, columns with tiles of 128 and remainders, blocks of 4096 rows, middle dims,
# size-1 dims between reduced ones, non-adjacent dims, the full reduction
LAYOUTS = [
    ((37, 300), (1,)), ((37, 300), (0,)), ((5, 33, 130), (1,)), ((5, 33, 130), (0, 1)),
    ((5, 33, 130), (1, 2)), ((5, 33, 130), (0, 2)), ((6, 1, 7, 140), (0, 2)), ((8199, 3), (0,)),
    ((2, 8199, 20), (1,)), ((33, 17), None),
]
FLOATS = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


def _check(fn, *inputs, op, exact=False, **tol):
    expected = fn(*inputs)
    with torch.rbln.explain() as ex:
        actual = fn(*[t.rbln() for t in inputs])
    assert not ex.fallback_ops, ex.fallback_reasons
    assert op in ex.device_ops, sorted(ex.device_ops)
    if isinstance(expected, tuple):
        for a, e in zip(actual, expected):
            torch.testing.assert_close(a.cpu(), e, equal_nan=True, **({"rtol": 0, "atol": 0} if exact else tol))
    else:
        torch.testing.assert_close(actual.cpu(), expected, equal_nan=True,
                                   **({"rtol": 0, "atol": 0} if exact else tol))


def _input(shape, dtype, seed=0, nans=False):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)
    if nans and x.numel() > 10:
        x.view(-1)[torch.randperm(x.numel(), generator=torch.Generator().manual_seed(seed))[: x.numel() // 50]] = math.nan
    return x


def _sum_tol(dtype):  # CPU sums float in float (cascaded); the kernels add float blocks in double
    return {"rtol": 1e-5, "atol": 1e-4} if dtype == torch.float32 else {}


@pytest.mark.parametrize("shape,dims", LAYOUTS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_sum_mean_and_extrema(shape, dims, dtype):
    x = _input(shape, dtype)
    d = dims if dims is not None else tuple(range(len(shape)))
    _check(lambda t: t.sum(d), x, op="aten::sum.dim_IntList", **_sum_tol(dtype))
    _check(lambda t: t.mean(d, keepdim=True), x, op="aten::mean.dim", **_sum_tol(dtype))
    _check(lambda t: t.amax(d), x, op="aten::amax", exact=True)
    _check(lambda t: t.amin(d, keepdim=True), x, op="aten::amin", exact=True)
    _check(lambda t: torch.var_mean(t, d, correction=0), x, op="aten::var_mean.correction",
           **({"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {}))
    _check(lambda t: t.std(d), x, op="aten::std.correction",
           **({"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {}))
    for p in (1, 2, 3, 0, math.inf, -math.inf):
        _check(lambda t: torch.linalg.vector_norm(t, p, d), x, op="aten::linalg_vector_norm",
               **({"rtol": 1e-5, "atol": 1e-4} if dtype == torch.float32 else {}))


@pytest.mark.parametrize("shape,dims", [lc for lc in LAYOUTS if lc[1] is not None and len(lc[1]) == 1])
@pytest.mark.parametrize("dtype", (torch.float32, torch.float64, torch.bfloat16, torch.int64))
def test_values_and_first_indices(shape, dims, dtype):
    # few distinct values: ties everywhere, and the first position must win
    x = torch.randint(-3, 4, shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    (dim,) = dims
    _check(lambda t: t.max(dim), x, op="aten::max.dim", exact=True)
    _check(lambda t: t.min(dim, keepdim=True), x, op="aten::min.dim", exact=True)
    _check(lambda t: t.argmax(dim), x, op="aten::argmax", exact=True)
    _check(lambda t: t.argmin(dim), x, op="aten::argmin", exact=True)
    _check(lambda t: t.sum(dim), x, op="aten::sum.dim_IntList", exact=dtype == torch.int64)
    _check(lambda t: (t > 0).all(dim), x, op="aten::all.dim", exact=True)
    _check(lambda t: (t > 2).any(dim), x, op="aten::any.dim", exact=True)
    _check(lambda t: (t.clamp(-1, 1) * 0.5 + 1).prod(dim), x.double() if dtype == torch.int64 else x,
           op="aten::prod.dim_int")


@pytest.mark.parametrize("shape,dims", [lc for lc in LAYOUTS if lc[1] is not None and len(lc[1]) == 1])
def test_nan_wins_in_every_layout(shape, dims):
    x = _input(shape, torch.float32, seed=2, nans=True)
    (dim,) = dims
    _check(lambda t: t.amax(dim), x, op="aten::amax", exact=True)
    _check(lambda t: t.amin(dim), x, op="aten::amin", exact=True)
    _check(lambda t: t.max(dim), x, op="aten::max.dim", exact=True)  # the first NaN's index
    _check(lambda t: t.argmin(dim), x, op="aten::argmin", exact=True)
    _check(lambda t: torch.linalg.vector_norm(t, math.inf, dim), x, op="aten::linalg_vector_norm", exact=True)
    _check(lambda t: t.sum(dim), x, op="aten::sum.dim_IntList", rtol=1e-5, atol=1e-4)


def test_non_contiguous_inputs():
    x = _input((64, 96), torch.float32, seed=3)
    for fn, op in ((lambda t: t.t().sum(0), "aten::sum.dim_IntList"), (lambda t: t[:, ::3].amax(0), "aten::amax"),
                   (lambda t: t.t()[5:].var(1), "aten::var.correction"),
                   (lambda t: t.t().argmax(0), "aten::argmax")):
        _check(fn, x, op=op, rtol=1e-5, atol=1e-5)


def test_empty_and_zero_dim():
    x = torch.randn(3, 0, 5)
    _check(lambda t: t.sum(1), x, op="aten::sum.dim_IntList", exact=True)
    _check(lambda t: t.mean(1), x, op="aten::mean.dim", exact=True)  # NaN, as on CPU
    _check(lambda t: t.sum(0), x, op="aten::sum.dim_IntList", exact=True)
    _check(lambda t: torch.linalg.vector_norm(t, 2, 1), x, op="aten::linalg_vector_norm", exact=True)
    _check(lambda t: t.amax(0), x, op="aten::amax", exact=True)  # only a kept dim is empty: an empty result
    _check(lambda t: t.max(2), x, op="aten::max.dim", exact=True)
    for fn in (lambda t: t.amax(1), lambda t: t.amin((0, 1)), lambda t: t.amax(), lambda t: t.max(1),
               lambda t: t.argmax(1), lambda t: t.argmin(), lambda t: t.max()):
        with pytest.raises((RuntimeError, IndexError)) as cpu_error:
            fn(x)
        with pytest.raises(cpu_error.type) as rbln_error:
            fn(x.rbln())
        assert str(rbln_error.value).splitlines()[0] == str(cpu_error.value).splitlines()[0]
    s = torch.tensor(2.5)
    _check(lambda t: t.sum(), s, op="aten::sum.dim_IntList", exact=True)
    _check(lambda t: t.amax(0), s, op="aten::amax", exact=True)
