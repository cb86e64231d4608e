"""Results that equal CPU's bit for bit: float32 kernels whose rounding follows CPU's own algorithm,
and the NaN, signed-zero and infinity rules of the binary functors."""
import pytest
import torch


def _exact(fn, *args, ops):
    expected = fn(*args)
    with torch.rbln.explain() as ex:
        actual = fn(*[a.rbln() for a in args])
    torch.testing.assert_close(actual.cpu(), expected, rtol=0, atol=0, equal_nan=True)
    assert not ex.fallback_ops, ex.fallback_reasons
    assert ops <= set(ex.device_ops), sorted(ex.device_ops)


def _randn(seed, *shape, scale=1.0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * scale


def test_hermite_polynomials_round_like_cpus_fused_build():
    x = _randn(0, 400, scale=3)
    n = torch.randint(0, 60, (400,), generator=torch.Generator().manual_seed(1)).float()
    _exact(torch.special.hermite_polynomial_h, x, n, ops={"aten::special_hermite_polynomial_h"})
    _exact(torch.special.hermite_polynomial_he, x, n, ops={"aten::special_hermite_polynomial_he"})


def test_small_batched_products_sum_in_cpus_order():
    # below 400 multiply-adds per product CPU's bmm runs its own loop, not BLAS
    a, b = _randn(2, 6, 3, 9, scale=30), _randn(3, 6, 9, 4, scale=30)
    _exact(torch.bmm, a, b, ops={"aten::bmm"})
    _exact(lambda p, q: torch.bmm(p.transpose(1, 2), q.transpose(1, 2)), _randn(4, 6, 9, 3), _randn(5, 6, 4, 9),
           ops={"aten::bmm"})
    _exact(lambda p, q: torch.cdist(p, q, compute_mode="use_mm_for_euclid_dist"), _randn(6, 2, 2, 3, 2, scale=5),
           _randn(7, 2, 2, 4, 2, scale=5), ops={"aten::bmm"})


def test_vml_math_equals_cpus():
    # tanh, sin, exp, log, ... run the MKL VML routines CPU eager calls, in place and out= too
    x = _randn(6, 3, 1001, scale=4)
    x.view(-1)[:6] = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e-40])
    unit, pos = x.clamp(-1, 1), x.abs()
    for fn, arg in ((torch.tanh, x), (torch.sin, x), (torch.cos, x), (torch.tan, x), (torch.exp, x),
                    (torch.erf, x), (torch.atan, x), (torch.asin, unit), (torch.acos, unit), (torch.log, pos),
                    (torch.log2, pos), (torch.log10, pos), (torch.sqrt, pos)):
        _exact(fn, arg, ops={f"aten::{fn.__name__}"})
    _exact(lambda t: torch.tanh(t, out=torch.empty_like(t)), x, ops={"aten::tanh.out"})
    _exact(lambda t: t.clone().tanh_(), x, ops={"aten::tanh_"})


def test_column_sums_follow_cpus_cascade():
    # CPU's outer sum: 8-wide vector groups of 4 cascaded, the rest split four ways; small and large,
    # below and above 8 columns, a middle dim
    for seed, shape, dim in ((7, (5, 6), 0), (8, (3, 18), 0), (9, (200, 50), 0), (10, (1000, 33), 0),
                             (11, (8199, 20), 0), (12, (4, 37, 300), 1), (13, (16384, 70), 0)):
        _exact(lambda t: t.sum(dim), _randn(seed, *shape, scale=3), ops={"aten::sum.dim_IntList"})
        _exact(lambda t: t.mean(dim), _randn(seed, *shape, scale=3), ops={"aten::mean.dim"})


def test_row_sums_follow_cpus_inner_sum():
    # CPU's serial inner sum (8-wide vectors, four-way cascade, leftovers, then the lanes): rows of every
    # length around the vector width, below CPU's parallel threshold of 32768 elements
    for seed, (rows, n) in enumerate(((3, 1), (5, 7), (4, 8), (6, 9), (3, 37), (2, 1000), (1, 4099), (7, 3000))):
        x = _randn(20 + seed, rows, n, scale=3)
        _exact(lambda t: t.sum(-1), x, ops={"aten::sum.dim_IntList"})
        _exact(lambda t: t.sum(), x, ops={"aten::sum.dim_IntList"})


SPECIAL = [0.0, -0.0, 1.5, -2.0, float("inf"), -float("inf"), float("nan")]
BINARY_FUNCTORS = {"maximum": "aten::maximum", "minimum": "aten::minimum", "fmax": "aten::fmax", "fmin": "aten::fmin",
                   "atan2": "aten::atan2", "hypot": "aten::hypot", "copysign": "aten::copysign.Tensor",
                   "xlogy": "aten::xlogy.Tensor", "logaddexp": "aten::logaddexp"}
MIN_MAX = ["maximum", "minimum", "fmax", "fmin"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("name", BINARY_FUNCTORS)
def test_binary_functors_special_values(name, dtype):
    # Every pair of special values, contiguous (float32 maximum/minimum: the vector loop) and at stride 2 (the functor).
    a = torch.tensor(SPECIAL).repeat_interleave(len(SPECIAL)).to(dtype)
    b = torch.tensor(SPECIAL).repeat(len(SPECIAL)).to(dtype)
    fn = getattr(torch, name)
    for x, y in ((a, b), (torch.stack([a, a], -1)[:, 0], torch.stack([b, b], -1)[:, 0])):
        expected = fn(x, y)
        with torch.rbln.explain() as ex:
            actual = fn(x.rbln(), y.rbln()).cpu()
        assert not ex.fallback_ops and BINARY_FUNCTORS[name] in ex.device_ops, ex.fallback_reasons
        torch.testing.assert_close(actual, expected, equal_nan=True)
        if name not in MIN_MAX:  # which zero a tie of 0.0 and -0.0 gives, CPU's own vector and scalar loops differ on
            numbers = ~expected.isnan()
            assert torch.equal(actual[numbers].signbit(), expected[numbers].signbit()), (x, y, actual, expected)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool])
@pytest.mark.parametrize("name", MIN_MAX)
def test_min_max_functors_integral(name, dtype):
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randint(-5, 5, (64,), generator=g).to(dtype) for _ in range(2))
    _exact(getattr(torch, name), a, b, ops={BINARY_FUNCTORS[name]})

