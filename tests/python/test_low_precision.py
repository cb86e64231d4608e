"""float16/bfloat16 kernels round where CPU's do: results equal CPU's bit for bit, on the device.

CPU's reduced-precision kernels either accumulate in float and round once, or
compute in the dtype itself and round every step; each case here is one such
kernel, compared with assert_close(rtol=0, atol=0). The norms sum their statistics in
another order than CPU's vectorized float loops, which can move a rounded mean or
rstd by one step: they are compared within one rounding step of the dtype.
"""
import pytest
import torch
import torch.nn.functional as F

LOW = [torch.float16, torch.bfloat16]


def _inputs(seed, *shapes, scale=3.0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=gen) * scale for s in shapes]


def _check_exact(fn, args, dtype, ops, exact=True):
    cpu = [a.to(dtype) if a.is_floating_point() else a for a in args]
    dev = [a.rbln() for a in cpu]
    expected = fn(*cpu)
    with torch.rbln.explain() as ex:
        actual = fn(*dev)
    expected = expected if isinstance(expected, (tuple, list)) else [expected]
    actual = actual if isinstance(actual, (tuple, list)) else [actual]
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a.cpu(), e, equal_nan=True, **({"rtol": 0, "atol": 0} if exact else {}))
    assert not ex.fallback_ops, ex.fallback_reasons
    assert ops <= set(ex.device_ops), sorted(ex.device_ops)


@pytest.mark.parametrize("dtype", LOW)
def test_floor_divide_rounds_each_step_like_cpu(dtype):
    a, b = _inputs(0, (64, 33), (64, 33))
    _check_exact(torch.floor_divide, [a, b], dtype, {"aten::floor_divide"})
    _check_exact(lambda x, y: torch.div(x, y, rounding_mode="floor"), [a, b], dtype, {"aten::div.Tensor_mode"})
    # a broadcast divisor: CPU divides in float
    _check_exact(lambda x: torch.floor_divide(x, 0.7), [a], dtype, {"aten::floor_divide"})
    _check_exact(lambda x, y: torch.floor_divide(x, y[:1, :1]), [a, b], dtype, {"aten::floor_divide"})


@pytest.mark.parametrize("dtype", LOW)
def test_batch_norm_training_normalizes_with_rounded_statistics(dtype):
    x, w, b = _inputs(1, (4, 3, 5, 5), (3,), (3,))
    _check_exact(lambda x, w, b: torch.native_batch_norm(x, w, b, None, None, True, 0.1, 1e-5), [x, w, b], dtype,
                 {"aten::native_batch_norm"}, exact=False)
    _check_exact(lambda x: F.instance_norm(x), [x], dtype, {"aten::native_batch_norm"}, exact=False)


@pytest.mark.parametrize("dtype", LOW)
def test_group_norm_forward_and_backward_on_device(dtype):
    x, w, b = _inputs(2, (4, 6, 5, 7), (6,), (6,))
    _check_exact(lambda x, w, b: F.group_norm(x, 3, w, b), [x, w, b], dtype, {"aten::native_group_norm"}, exact=False)
    xs = [t.to(dtype).requires_grad_() for t in (x, w, b)]
    ds = [t.detach().rbln().requires_grad_() for t in xs]
    grad = _inputs(3, (4, 6, 5, 7))[0].to(dtype)
    F.group_norm(xs[0], 3, xs[1], xs[2]).backward(grad)
    with torch.rbln.explain() as ex:
        F.group_norm(ds[0], 3, ds[1], ds[2]).backward(grad.rbln())
    for c, d in zip(xs, ds):
        # the backward's sums run in double, CPU's in float: within a rounding step of the dtype
        torch.testing.assert_close(d.grad.cpu(), c.grad, rtol=2e-2, atol=2e-2)
    assert not ex.fallback_ops, ex.fallback_reasons
    assert {"aten::native_group_norm", "aten::native_group_norm_backward"} <= set(ex.device_ops)


def test_group_norm_float32_gradients_match_cpu():
    x, w, b, g = _inputs(4, (3, 8, 11), (8,), (8,), (3, 8, 11))
    xs = [t.clone().requires_grad_() for t in (x, w, b)]
    ds = [t.rbln().requires_grad_() for t in (x, w, b)]
    F.group_norm(xs[0], 4, xs[1], xs[2]).backward(g)
    with torch.rbln.explain() as ex:
        F.group_norm(ds[0], 4, ds[1], ds[2]).backward(g.rbln())
    for c, d in zip(xs, ds):
        torch.testing.assert_close(d.grad.cpu(), c.grad)
    assert not ex.fallback_ops, ex.fallback_reasons


@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss_sums_like_cpu(dtype, reduction):
    x, w = _inputs(5, (300, 7), (7,))
    target = torch.randint(0, 7, (300,), generator=torch.Generator().manual_seed(6))
    target[::11] = 2
    for weight in (None, w.abs()):
        args = [x, target] + ([] if weight is None else [weight])
        _check_exact(lambda x, t, *w: F.nll_loss(x, t, *w, ignore_index=2, reduction=reduction), args, dtype,
                     {"aten::nll_loss_forward"})


@pytest.mark.parametrize("dtype", LOW)
def test_adaptive_avg_pool3d_sums_in_the_dtype_like_cpu(dtype):
    (x,) = _inputs(7, (2, 3, 5, 7, 9))
    _check_exact(lambda x: F.adaptive_avg_pool3d(x, (3, 2, 4)), [x], dtype, {"aten::_adaptive_avg_pool3d"})


@pytest.mark.parametrize("dtype", LOW)
def test_addr_rounds_each_product_and_the_sum_like_cpu(dtype):
    m, v1, v2 = _inputs(8, (33, 17), (33,), (17,))
    _check_exact(lambda m, a, b: torch.addr(m, a, b, beta=0.7, alpha=1.3), [m, v1, v2], dtype, {"aten::addr"})
    _check_exact(lambda m, a, b: torch.addr(m, a, b, beta=0), [m * float("nan"), v1, v2], dtype, {"aten::addr"})


def test_addr_integer_and_bool():
    m, v1, v2 = (t.round().long() for t in _inputs(9, (5, 4), (5,), (4,)))
    _check_exact(lambda m, a, b: torch.addr(m, a, b, beta=2, alpha=3), [m, v1, v2], torch.int64, {"aten::addr"})
    _check_exact(lambda m, a, b: torch.addr(m, a, b), [m > 0, v1 > 0, v2 < 0], torch.bool, {"aten::addr"})


@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_huber_loss_rounds_each_step_like_cpu(dtype, reduction):
    a, b = _inputs(10, (40, 33), (40, 33))
    _check_exact(lambda a, b: F.huber_loss(a, b, reduction=reduction, delta=1.3), [a, b], dtype, {"aten::huber_loss"})


def test_batch_norm_with_update_backward_on_device():
    # its backward, batch_norm_backward, carries a byte workspace that must not send it to the CPU
    x, w, b, g = _inputs(11, (4, 3, 5), (3,), (3,), (4, 3, 5))
    xs = [t.clone().requires_grad_() for t in (x, w, b)]
    ds = [t.rbln().requires_grad_() for t in (x, w, b)]
    torch.ops.aten._batch_norm_with_update(*xs, torch.zeros(3), torch.ones(3), 0.1, 1e-5)[0].backward(g)
    with torch.rbln.explain() as ex:
        out = torch.ops.aten._batch_norm_with_update(*ds, torch.zeros(3).rbln(), torch.ones(3).rbln(), 0.1, 1e-5)[0]
        out.backward(g.rbln())
    for c, d in zip(xs, ds):
        torch.testing.assert_close(d.grad.cpu(), c.grad)
    assert not ex.fallback_ops, ex.fallback_reasons
    assert "aten::batch_norm_backward" in ex.device_ops


@pytest.mark.parametrize("fn,op", [(torch.fmod, "aten::fmod.Tensor"), (torch.remainder, "aten::remainder.Tensor")])
def test_bfloat16_fmod_splits_like_cpus_vector_loop(fn, op):
    # Divisors near float32's smallest normal overflow a / b: CPU's vectorized
    # (Sleef) fmod returns NaN there, its scalar tail the exact remainder.
    a, b = _inputs(4, (300,), (300,))
    b[::7] = 1.2e-38
    assert fn(a.bfloat16(), b.bfloat16()).isnan().any()  # CPU's vector loop does overflow here
    for n in (300, 64, 70):  # whole vector pairs, then tails of several lengths
        _check_exact(fn, [a[:n], b[:n]], torch.bfloat16, {op})


@pytest.mark.parametrize("dtype", LOW)
def test_nextafter_steps_to_the_neighbour_in_the_dtype(dtype):
    a, b = _inputs(5, (40,), (40,))
    _check_exact(torch.nextafter, [a, b], dtype, {"aten::nextafter"})


@pytest.mark.parametrize("dtype", LOW + [torch.float32])
@pytest.mark.parametrize("size", [(9, 11), (40, 40)])
def test_small_bilinear_outputs_weigh_corners_like_cpu(dtype, size):
    # At most 128 output rows + columns CPU weighs each corner by the product of
    # its float lambdas and adds the corners in order: equal bit for bit
    # (float16: within one rounding step, in 2 of 10,000 outputs).
    x, = _inputs(6, (2, 3, 6, 7))
    for align_corners in (False, True):
        _check_exact(lambda t: F.interpolate(t, size=size, mode="bilinear", align_corners=align_corners), [x], dtype,
                     {"aten::upsample_bilinear2d"}, exact=dtype != torch.float16)


@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("mode,size", [("bilinear", (130, 7)), ("trilinear", (3, 4, 5)), ("linear", (13,)),
                                       ("bicubic", (9, 11))])
def test_interpolation_runs_on_device_in_low_precision(dtype, mode, size):
    shape = {1: (2, 3, 6), 2: (2, 3, 6, 7), 3: (2, 3, 4, 5, 6)}[len(size)]
    x, = _inputs(6, shape)
    name = {"linear": "upsample_linear1d", "bilinear": "upsample_bilinear2d", "trilinear": "upsample_trilinear3d",
            "bicubic": "upsample_bicubic2d"}[mode]
    for align_corners in (False, True):
        _check_exact(lambda t: F.interpolate(t, size=size, mode=mode, align_corners=align_corners), [x], dtype,
                     {f"aten::{name}"}, exact=False)


def test_linear_cross_entropy_float16_accumulates_in_float32_like_cpu():
    # torch picks the chunked path's accumulation per device type; rbln takes CPU's (torch_rbln/_policies.py).
    # With float16 accumulation the input gradient differs from CPU's by 1.8e-4.
    x, w = _inputs(7, (32, 64), (50, 64), scale=1.0)
    target = torch.randint(0, 50, (32,), generator=torch.Generator().manual_seed(8))
    options = torch.nn.LinearCrossEntropyOptions(batch_chunk_size=8)
    results = []
    for device in ("cpu", "rbln"):
        xs, ws = x.half().to(device).requires_grad_(), w.half().to(device).requires_grad_()
        with torch.rbln.explain() as ex:
            loss = F.linear_cross_entropy(xs, ws, target.to(device), options=options)
            loss.backward()
        results.append((loss.detach().cpu(), xs.grad.cpu(), ws.grad.cpu()))
    assert not ex.fallback_ops, ex.fallback_reasons
    assert "aten::addmm.out" in ex.device_ops, sorted(ex.device_ops)
    (loss, gx, gw), (dev_loss, dev_gx, dev_gw) = results
    torch.testing.assert_close(dev_loss, loss, rtol=0, atol=0)
    torch.testing.assert_close(dev_gx, gx, rtol=0, atol=0)
    torch.testing.assert_close(dev_gw, gw)
