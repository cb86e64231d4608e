"""Regressions from the error-parity fuzz: inputs that crashed, hung or silently differed from CPU.

Each case compares rbln with CPU (the error's type and message, or the result's values and dtype) and,
where a device kernel is involved, asserts that it ran on the device."""
import math
import warnings

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


# ---- pooling arguments beyond int: CPU's overflow error, not a hang -----------------------------------

BIG = 2**40
POOL_OVERFLOWS = {
    "avg_pool2d kernel": lambda x: F.avg_pool2d(x[0], (2, BIG), 1),
    "avg_pool2d stride": lambda x: F.avg_pool2d(x[0], 2, BIG),
    "avg_pool2d padding": lambda x: F.avg_pool2d(x[0], 2, 1, BIG),
    "avg_pool1d kernel": lambda x: F.avg_pool1d(x[0][0], BIG, 1),
    "avg_pool1d stride": lambda x: F.avg_pool1d(x[0][0], 2, BIG),
    "avg_pool3d kernel": lambda x: F.avg_pool3d(x[1], (2, 2, BIG), 1),
    "avg_pool3d stride": lambda x: F.avg_pool3d(x[1], 2, BIG),
    "max_pool2d kernel": lambda x: F.max_pool2d(x[0], (2, BIG), 1),
    "max_pool2d stride": lambda x: F.max_pool2d(x[0], 2, BIG),
    "max_pool2d dilation": lambda x: F.max_pool2d(x[0], 2, 1, 0, BIG),
    "max_pool2d padding": lambda x: F.max_pool2d(x[0], 2, 1, BIG),
    "max_pool3d kernel": lambda x: F.max_pool3d(x[1], (2, 2, BIG), 1),
    "max_pool3d stride": lambda x: F.max_pool3d(x[1], 2, BIG),
    "max_pool3d dilation": lambda x: F.max_pool3d(x[1], 2, 1, 0, (1, BIG, 1)),
    "max_pool1d stride": lambda x: F.max_pool1d(x[0][0], 2, BIG, return_indices=True),
}


@pytest.mark.parametrize("name", POOL_OVERFLOWS)
def test_pooling_arguments_beyond_int_raise_like_cpu(name, assert_device_works):
    x = (torch.randn(1, 1, 4, 4), torch.randn(1, 1, 4, 4, 4))
    _assert_raises_like_cpu(lambda a, b: POOL_OVERFLOWS[name]((a, b)), *x)
    assert_device_works()


def test_max_pool1d_kernel_beyond_int_raises_the_overflow_error():
    # CPU's own max_pool1d loops over the whole window (it hangs); CUDA's goes through max_pool2d, as here.
    with pytest.raises(RuntimeError, match="value cannot be converted to type int without overflow"):
        F.max_pool1d(torch.randn(1, 1, 4).rbln(), BIG, 1)


@pytest.mark.parametrize("pool", ["avg", "max"])
def test_pooling_window_far_larger_than_the_input_is_not_walked_tap_by_tap(pool):
    # A (2, 2**30) window with padding 2**29 fits in int: CPU clips it to the input, and so must rbln
    # (forward and backward) instead of visiting 2**31 taps per output.
    x = torch.randn(1, 2, 4, 4, generator=torch.Generator().manual_seed(1), requires_grad=True)
    fn = ((lambda t: F.avg_pool2d(t, (2, 2**30), 1, (0, 2**29), count_include_pad=False)) if pool == "avg"
          else (lambda t: F.max_pool2d(t, (2, 2**30), 1, (0, 2**29))))
    expected = fn(x)
    expected.sum().backward()
    xd = x.detach().rbln().requires_grad_()
    op = "aten::avg_pool2d" if pool == "avg" else "aten::max_pool2d_with_indices"
    with torch.rbln.explain() as ex:  # returns in milliseconds; visiting every tap took minutes
        actual = fn(xd)
        actual.sum().backward()
        torch.rbln.synchronize()
    assert op in ex.device_ops and not ex.fallback_ops, ex.fallback_reasons
    torch.testing.assert_close(actual.detach().cpu(), expected.detach())
    torch.testing.assert_close(xd.grad.cpu(), x.grad)


@pytest.mark.parametrize("fn", [lambda x: F.adaptive_avg_pool2d(x, (2, BIG)),
                                lambda x: F.adaptive_max_pool2d(x, (2, BIG)),
                                lambda x: F.adaptive_avg_pool1d(x[0], BIG)])
def test_adaptive_pooling_to_an_impossible_size_raises(fn, assert_device_works):
    x = torch.randn(1, 1, 4, 4)
    with pytest.raises(RuntimeError):  # CPU: its allocator's error; rbln: the device's OutOfMemoryError
        fn(x)
    with pytest.raises(torch.OutOfMemoryError):
        fn(x.rbln())
    assert_device_works()


# ---- pooling checks in CPU's order: window arguments, rank, each dim's output size, then the shape ------

def _x(*shape):
    return torch.randn(shape, generator=torch.Generator().manual_seed(len(shape)))


A = torch.ops.aten
E = torch.empty
POOL_CHECKS = {  # name: (input, call); the error of the first rule the call breaks
    "max_pool1d negative padding before the empty batch": (
        E(0, 1, 49), lambda t: F.max_pool1d(t, 2, 50, -1, return_indices=True)),
    "max_pool1d padding past half the kernel": (_x(1, 1, 9), lambda t: F.max_pool1d(t, 2, 1, 2, return_indices=True)),
    "max_pool2d negative padding before the 3-d shape": (
        E(0, 1, 49), lambda t: F.max_pool2d(t, (3, 2), 50, -1, return_indices=True)),
    "max_pool2d padding past half the kernel before the shape": (
        E(0, 1, 49), lambda t: F.max_pool2d(t, 2, 50, 4, return_indices=True)),
    "max_pool2d padding past half the dilated kernel": (_x(1, 4, 4), lambda t: F.max_pool2d(t, 3, 1, 2, dilation=2)),
    "max_pool2d dilation without taps": (_x(1, 4, 4), lambda t: F.max_pool2d(t, 3, 1, 1, dilation=0)),
    "max_pool2d zero stride": (_x(1, 4, 4), lambda t: F.max_pool2d(t, 2, 0)),
    "max_pool2d negative stride": (_x(1, 4, 4), lambda t: F.max_pool2d(t, 2, -1)),
    "max_pool2d zero kernel": (_x(1, 4, 4), lambda t: F.max_pool2d(t, 0, 1)),
    "max_pool2d output too small": (_x(1, 1, 1), lambda t: F.max_pool2d(t, 2)),
    "max_pool2d 2-d input": (_x(4, 4), lambda t: A.max_pool2d_with_indices(t, [2])),
    "max_pool2d 5-d channels_last_3d input": (
        _x(1, 2, 2, 2, 2).to(memory_format=torch.channels_last_3d), lambda t: A.max_pool2d_with_indices(t, [1])),
    "max_pool2d three kernel sizes": (_x(1, 4, 4), lambda t: A.max_pool2d_with_indices(t, [1, 1, 1])),
    "max_pool2d kernel beyond int before the padding's length": (
        _x(1, 4, 4), lambda t: A.max_pool2d_with_indices(t, [2**33, 1], [1], [0, 0, 0])),
    "max_pool3d negative padding before the empty batch": (
        E(0, 1, 49, 50), lambda t: F.max_pool3d(t, (3, 2, 2), 50, -1, return_indices=True)),
    "max_pool3d unbatched empty planes": (E(0, 1, 2, 10), lambda t: F.max_pool3d(t, 1)),
    "max_pool3d unbatched empty width": (E(1, 2, 2, 0), lambda t: F.max_pool3d(t, 1)),
    "max_pool3d 4-d channels_last input": (
        _x(1, 2, 2, 2).to(memory_format=torch.channels_last), lambda t: A.max_pool3d_with_indices(t, [1])),
    "max_pool3d two dilations": (_x(1, 3, 3, 3), lambda t: A.max_pool3d_with_indices(t, [1], [1], [0], [1, 1])),
    "max_pool3d output too small": (_x(1, 3, 3, 3), lambda t: F.max_pool3d(t, 5)),
    "avg_pool2d 1-d input": (_x(243), lambda t: F.avg_pool2d(t, 3, 1, 1, True, False, 2)),
    "avg_pool2d 0-d input": (torch.tensor(1.5), lambda t: F.avg_pool2d(t, (4, 4), (2, 3), 1, True, False, 2)),
    "avg_pool2d 2-d input": (_x(3, 3), lambda t: F.avg_pool2d(t, 3, 1, 1)),
    "avg_pool2d zero divisor before the rank": (_x(3), lambda t: F.avg_pool2d(t, 1, divisor_override=0)),
    "avg_pool2d negative padding": (_x(1, 3, 3), lambda t: F.avg_pool2d(t, 3, 1, -1)),
    "avg_pool2d unbatched empty planes": (E(0, 3, 3), lambda t: F.avg_pool2d(t, 3)),
    "avg_pool3d kernel larger than the input": (_x(1, 2, 4, 4, 4), lambda t: F.avg_pool3d(
        t, 6, stride=1, padding=1, ceil_mode=True, count_include_pad=False, divisor_override=2)),
    "avg_pool3d kernel deeper than the unbatched input": (_x(2, 4, 4, 4), lambda t: F.avg_pool3d(t, (5, 2, 2), 1)),
    "avg_pool3d 3-d input before the divisor": (_x(4, 4, 4), lambda t: F.avg_pool3d(t, 2, divisor_override=0)),
    "avg_pool3d zero divisor": (_x(1, 4, 4, 4), lambda t: F.avg_pool3d(t, 2, divisor_override=0)),
    "avg_pool3d empty channels": (E(1, 0, 4, 4, 4), lambda t: F.avg_pool3d(t, 2)),
    "avg_pool3d padding past half the kernel": (_x(1, 4, 4, 4), lambda t: F.avg_pool3d(t, 2, 1, 2)),
    "avg_pool3d two kernel sizes": (_x(1, 3, 3, 3), lambda t: A.avg_pool3d(t, [1, 1])),
    "adaptive_max_pool1d negative size": (_x(1, 1, 1), lambda t: F.adaptive_max_pool1d(t, -1)),
    "adaptive_max_pool2d no size": (_x(1, 2, 3, 4), lambda t: F.adaptive_max_pool2d(t, ())),
    "adaptive_max_pool2d negative size": (_x(1, 1, 1, 1), lambda t: F.adaptive_max_pool2d(t, (-1, 0))),
    "adaptive_max_pool2d unbatched negative size": (_x(2, 3, 3), lambda t: F.adaptive_max_pool2d(t, (2, -3))),
    "adaptive_max_pool2d 2-d input": (_x(2, 2), lambda t: A.adaptive_max_pool2d(t, [1, 1])),
    "adaptive_max_pool2d empty channels before the size": (E(2, 0, 2, 2), lambda t: A.adaptive_max_pool2d(t, [])),
    "adaptive_max_pool3d no size": (_x(1, 2, 3, 4), lambda t: F.adaptive_max_pool3d(t, ())),
    "adaptive_max_pool3d negative size": (_x(1, 1, 1, 1, 1), lambda t: F.adaptive_max_pool3d(t, (-1, 0, 2))),
    "adaptive_max_pool3d 3-d input": (_x(2, 2, 2), lambda t: A.adaptive_max_pool3d(t, [1, 1, 1])),
    "_adaptive_avg_pool2d no size before the rank": (_x(2), lambda t: A._adaptive_avg_pool2d(t, [])),
    "_adaptive_avg_pool2d 1-d input": (_x(2), lambda t: A._adaptive_avg_pool2d(t, [1, 1])),
    "_adaptive_avg_pool3d 1-d input": (_x(2), lambda t: A._adaptive_avg_pool3d(t, [1, 1, 1])),
}


@pytest.mark.parametrize("name", POOL_CHECKS)
def test_pooling_checks_run_in_cpus_order(name, assert_device_works):
    x, fn = POOL_CHECKS[name]
    _assert_raises_like_cpu(fn, x)
    assert_device_works()


POOL_RESULTS = {  # name: (input, call, device op); calls CPU's checks let through
    "max_pool2d empty batch": (E(0, 2, 3, 3), lambda t: F.max_pool2d(t, 2, return_indices=True),
                               "aten::max_pool2d_with_indices"),
    "max_pool2d padding at half the dilated kernel": (
        _x(1, 3, 3), lambda t: F.max_pool2d(t, 2, 1, 1, 2, return_indices=True), "aten::max_pool2d_with_indices"),
    "max_pool3d empty batch": (E(0, 1, 1, 2, 10), lambda t: F.max_pool3d(t, 1, return_indices=True),
                               "aten::max_pool3d_with_indices"),
    "avg_pool3d empty batch": (E(0, 2, 3, 3, 3), lambda t: F.avg_pool3d(t, 2), "aten::avg_pool3d"),
    "_adaptive_avg_pool2d empty channels": (E(2, 0, 3, 3), lambda t: A._adaptive_avg_pool2d(t, [1, 1]),
                                            "aten::_adaptive_avg_pool2d"),
    "_adaptive_avg_pool2d unbatched empty planes": (E(0, 3, 3), lambda t: A._adaptive_avg_pool2d(t, [1, 2]),
                                                    "aten::_adaptive_avg_pool2d"),
    "adaptive_max_pool2d empty output": (_x(1, 2, 3, 3), lambda t: F.adaptive_max_pool2d(t, (0, 2), True),
                                         "aten::adaptive_max_pool2d"),
    "adaptive_max_pool2d unbatched empty planes": (E(0, 2, 2), lambda t: F.adaptive_max_pool2d(t, (1, 2), True),
                                                   "aten::adaptive_max_pool2d"),
}


@pytest.mark.parametrize("name", POOL_RESULTS)
def test_pooling_calls_cpu_accepts_run_on_the_device(name):
    x, fn, op = POOL_RESULTS[name]
    _assert_same(_on_device(fn, x, ops={op}), fn(x))


# ---- where CPU's kernels differ from CUDA's, rbln does what CUDA does ---------------------------------

BOOL_CONVS = {
    "conv3d": ((1, 1, 4, 4, 4), (1, 1, 1, 1, 1), lambda x, w: F.conv3d(x, w, padding="same")),
    "conv_transpose1d": ((1, 3, 4), (3, 3, 3), lambda x, w: F.conv_transpose1d(x, w, stride=2, output_padding=1)),
}


@pytest.mark.parametrize("name", BOOL_CONVS)
def test_convolution_of_a_bool_input_checks_the_weight_type_as_cuda(name, assert_device_works):
    # CPU's slow kernels raise NotImplementedError for bool; CUDA's cuDNN path first checks that input and
    # weight types agree (Convolution.cpp's check_input_same_type_as_parameters), a RuntimeError.
    x_shape, w_shape, conv = BOOL_CONVS[name]
    x, w = torch.ones(x_shape, dtype=torch.bool), _x(*w_shape)
    with pytest.raises(NotImplementedError, match="not implemented for 'Bool'"):
        conv(x, w)
    with pytest.raises(RuntimeError, match=r"^Input type \(rblnBoolType\) and weight type \(rblnFloatType\) "
                                           r"should be the same$"):
        conv(x.rbln(), w.rbln())
    assert_device_works()


def test_max_unpool_of_int64_runs_on_the_device_as_cuda():
    # CPU's kernel takes floating types only; CUDA's takes every type (MaxUnpooling.cu).
    x = torch.tensor([[[[7, -3], [8, 2]]]])
    indices = torch.tensor([[[[0, 3], [9, 14]]]])
    with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
        F.max_unpool2d(x, indices, 2)
    out = _on_device(lambda a, i: F.max_unpool2d(a, i, 2), x, indices, ops={"aten::max_unpool2d"})
    assert out.dtype == torch.int64
    assert torch.equal(out, F.max_unpool2d(x.double(), indices, 2).long())


def test_pixel_unshuffle_of_an_empty_input_has_cudas_shape():
    # CPU's kernel returns an empty input unchanged; CUDA runs the composite (PyTorch's reference), which
    # reshapes it.
    import torch._refs.nn.functional as refs

    x = torch.empty(1, 1, 6, 0)
    assert F.pixel_unshuffle(x, 3).shape == (1, 1, 6, 0)
    assert F.pixel_unshuffle(x.rbln(), 3).shape == refs.pixel_unshuffle(x, 3).shape == (1, 9, 2, 0)


# ---- nonzero and everything built on it, with permuted and strided masks -----------------------------

def _masks():
    g = torch.Generator().manual_seed(3)
    base = torch.rand(4, 6, 5, generator=g) > 0.5
    return {
        "transposed": torch.tensor([[1.0, 0.0], [1.0, 1.0]]).t(),
        "permuted 3-d": base.permute(2, 0, 1),
        "strided": base[::2, 1::2],
        "expanded": (torch.rand(1, 5, generator=g) > 0.5).expand(4, 5),
        "channels_last": (torch.rand(2, 3, 4, 5, generator=g) > 0.5).contiguous(memory_format=torch.channels_last),
    }


MASKS = _masks()


@pytest.mark.parametrize("mask", MASKS)
def test_nonzero_argwhere_and_where_follow_logical_order(mask):
    m = MASKS[mask]
    for fn in (torch.nonzero, torch.argwhere, lambda t: torch.nonzero(t, as_tuple=True), lambda t: torch.where(t)):
        _assert_same(_on_device(fn, m, ops={"aten::nonzero"}), fn(m))


@pytest.mark.parametrize("mask", MASKS)
def test_mask_indexing_follows_logical_order(mask):
    m = MASKS[mask] != 0
    x = torch.arange(m.numel(), dtype=torch.float32).reshape(m.shape)
    _assert_same(_on_device(lambda a, b: a[b], x, m, ops={"aten::index.Tensor"}), x[m])
    _assert_same(_on_device(torch.masked_select, x, m, ops={"aten::masked_select"}), torch.masked_select(x, m))
    values = torch.arange(int(m.sum()), dtype=torch.float32) + 100

    def put(a, b, v, accumulate):
        a = a.clone()
        a.index_put_((b,), v, accumulate=accumulate)
        return a

    for accumulate in (False, True):
        _assert_same(_on_device(put, x, m, values, accumulate, ops={"aten::_index_put_impl_"}),
                     put(x, m, values, accumulate))

    def scatter(a, b, v):
        return a.clone().masked_scatter_(b, v)

    _assert_same(_on_device(scatter, x, m, values, ops={"aten::masked_scatter_"}), scatter(x, m, values))


def test_uint8_mask_indexing_warns_as_cpu():
    """CPU's deprecation warning, once for each uint8 mask of an index or index_put_ (none for bool masks)."""
    counts = {}
    for device in ("cpu", "rbln"):
        x = torch.arange(6.0, device=device)
        mask = torch.tensor([1, 0, 1, 0, 1, 0], dtype=torch.uint8, device=device)
        with warnings.catch_warnings(record=True) as caught, torch.rbln.explain() as ex:
            warnings.simplefilter("always")
            picked = x[mask]
            x[mask.bool()]
            x.index_put_((mask,), torch.full((3,), -1.0, device=device))
        assert not ex.fallback_ops, ex.fallback_reasons
        counts[device] = [str(w.message).split(" (Triggered internally")[0] for w in caught
                          if "uint8 is now deprecated" in str(w.message)]
        assert picked.cpu().tolist() == [0.0, 2.0, 4.0] and x.cpu().tolist() == [-1.0, 1.0, -1.0, 3.0, -1.0, 5.0]
    assert counts["rbln"] == counts["cpu"] and len(counts["cpu"]) == 2


# ---- isin: NaN is never found --------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
@pytest.mark.parametrize("invert", [False, True])
def test_isin_never_finds_nan(dtype, invert):
    elements = torch.tensor([NAN, 1.0, 2.0, -INF, NAN], dtype=dtype)
    for test in ([2.0, 1.0], [NAN, 1.0], [NAN], [-INF, NAN, 5.0]):
        t = torch.tensor(test, dtype=dtype)
        _assert_same(_on_device(torch.isin, elements, t, invert=invert, ops={"aten::isin.Tensor_Tensor"}),
                     torch.isin(elements, t, invert=invert))


# ---- layer norm: CPU's shape checks, and float16/bfloat16 input with float32 parameters ---------------

LN_ERRORS = {
    "weight shape": lambda: (torch.randn(2, 4096), [4096], torch.ones(2), None),
    "bias shape": lambda: (torch.randn(2, 4096), [4096], None, torch.ones(2)),
    "weight rank": lambda: (torch.randn(2, 4), [4], torch.ones(1, 4), None),
    "empty normalized_shape": lambda: (torch.randn(2, 4), [], None, None),
    "input shape": lambda: (torch.randn(2, 4), [3], None, None),
    "input rank": lambda: (torch.randn(4), [2, 4], None, None),
    "float32 input, float16 weight": lambda: (torch.randn(2, 4), [4], torch.ones(4, dtype=torch.float16), None),
    "float64 input, float32 weight": lambda: (torch.randn(2, 4, dtype=torch.float64), [4], torch.ones(4), None),
    "float16 input, float32 weight, float16 bias": lambda: (torch.randn(2, 4, dtype=torch.float16), [4],
                                                            torch.ones(4), torch.zeros(4, dtype=torch.float16)),
}


@pytest.mark.parametrize("case", LN_ERRORS)
def test_layer_norm_rejects_what_cpu_rejects(case, assert_device_works):
    x, shape, w, b = LN_ERRORS[case]()
    _assert_raises_like_cpu(lambda x, w, b: torch.native_layer_norm(x, shape, w, b, 1e-5), x, w, b)
    assert_device_works()


@pytest.mark.parametrize("shape", [(2, 0), (0, 3)])
def test_layer_norm_of_empty_rows_matches_cpu(shape):
    x = torch.randn(shape)
    fn = lambda t: torch.native_layer_norm(t, shape[-1:], None, None, 1e-5)  # noqa: E731
    _assert_same(_on_device(fn, x, ops={"aten::native_layer_norm"}), fn(x))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("params", ["weight and bias", "weight", "bias"])
def test_layer_norm_takes_reduced_input_with_float32_parameters(dtype, params):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(3, 5, 8, generator=g).to(dtype).requires_grad_()
    w = (torch.randn(5, 8, generator=g) + 1).requires_grad_() if "weight" in params else None
    b = torch.randn(5, 8, generator=g).requires_grad_() if "bias" in params else None
    expected = torch.native_layer_norm(x, [5, 8], w, b, 1e-5)
    leaves = [t for t in (x, w, b) if t is not None]
    dev = [t.detach().rbln().requires_grad_() for t in leaves]
    dx, dw, db = dev[0], dev[1] if w is not None else None, dev[-1] if b is not None else None
    with torch.rbln.explain() as ex:
        actual = torch.native_layer_norm(dx, [5, 8], dw, db, 1e-5)
    assert "aten::native_layer_norm" in ex.device_ops and not ex.fallback_ops, ex.fallback_reasons
    # output in the input's dtype, mean and rstd in float32: CPU's (and CUDA's) mixed mode
    _assert_same(tuple(t.detach().cpu() for t in actual), tuple(t.detach() for t in expected), atol=1e-2, rtol=1e-2)
    if w is not None:  # (CPU's backward rejects a float32 bias without a weight)
        with torch.rbln.explain() as ex:
            grads = torch.autograd.grad(actual[0].float().square().sum(), dev)
        assert "aten::native_layer_norm_backward" in ex.device_ops and not ex.fallback_ops, ex.fallback_reasons
        expected_grads = torch.autograd.grad(expected[0].float().square().sum(), leaves)
        _assert_same(tuple(g.cpu() for g in grads), expected_grads, atol=5e-2, rtol=2e-2)
    _assert_same(F.layer_norm(x.detach().rbln(), [5, 8], _rbln(w.detach()) if w is not None else None,
                              _rbln(b.detach()) if b is not None else None).cpu(),
                 F.layer_norm(x.detach(), [5, 8], w.detach() if w is not None else None,
                              b.detach() if b is not None else None), atol=1e-2, rtol=1e-2)


# ---- all / any over dim=[]: elementwise, as on CPU ----------------------------------------------------

@pytest.mark.parametrize("op", [torch.all, torch.any])
@pytest.mark.parametrize("x", [torch.tensor([1.0, 0.0]), torch.tensor([[1.0, 0.0], [2.0, NAN]]).t(),
                               torch.tensor(0.0), torch.tensor([3, 0, 1])])
@pytest.mark.parametrize("keepdim", [False, True])
def test_all_any_over_no_dims_is_elementwise(op, x, keepdim):
    name = "aten::all" if op is torch.all else "aten::any"
    _assert_same(_on_device(op, x, dim=[], keepdim=keepdim, ops={name + ".dims"}), op(x, dim=[], keepdim=keepdim))
    out = torch.empty(0, dtype=torch.bool)
    _assert_same(_on_device(lambda t: op(t, dim=[], out=out.rbln()), x, ops={name + ".dims_out"}),
                 op(x, dim=[], out=out))
    _assert_same(_on_device(op, x, dim=(), ops={name + ".dims"}), op(x, dim=()))


# ---- result dtypes with 0-dim operands -----------------------------------------------------------------

DTYPE_PAIRS = [((), torch.float32, (), torch.float64), ((), torch.float16, (), torch.float32),
               ((), torch.bfloat16, (), torch.float16), ((3,), torch.float32, (), torch.float64),
               ((), torch.float32, (3,), torch.float64), ((3,), torch.float16, (3,), torch.float32)]
LOSSES = {
    "mse_loss": (F.mse_loss, "aten::mse_loss"),
    "mse_loss none": (lambda a, b: F.mse_loss(a, b, reduction="none"), "aten::mse_loss"),
    "mse_loss aten": (lambda a, b: torch.ops.aten.mse_loss(a, b, 1), "aten::mse_loss"),
    "smooth_l1_loss": (F.smooth_l1_loss, "aten::smooth_l1_loss"),
    "smooth_l1_loss sum": (lambda a, b: F.smooth_l1_loss(a, b, reduction="sum", beta=0.5), "aten::smooth_l1_loss"),
    "smooth_l1_loss aten": (lambda a, b: torch.ops.aten.smooth_l1_loss(a, b, 1, 1.0), "aten::smooth_l1_loss"),
    "huber_loss": (F.huber_loss, "aten::huber_loss"),
}


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("pair", DTYPE_PAIRS, ids=str)
def test_loss_result_dtype_follows_type_promotion(loss, pair):
    fn, op = LOSSES[loss]
    g = torch.Generator().manual_seed(5)
    a = torch.randn(pair[0], generator=g).to(pair[1])
    b = torch.randn(pair[2], generator=g).to(pair[3])
    _assert_same(_on_device(fn, a, b, ops={op}), fn(a, b), atol=1e-3, rtol=1e-3)


def test_loss_gradient_takes_the_input_dtype():
    a, b, grad = torch.tensor(0.5, dtype=torch.float16), torch.tensor(1.5), torch.tensor(1.0)
    smooth_l1 = lambda g, x, y, r: torch.ops.aten.smooth_l1_loss_backward(g, x, y, r, 1.0)  # noqa: E731
    for name, op in (("mse_loss_backward", torch.ops.aten.mse_loss_backward), ("smooth_l1_loss_backward", smooth_l1)):
        _assert_same(_on_device(op, grad, a, b, 1, ops={f"aten::{name}"}), op(grad, a, b, 1))


@pytest.mark.parametrize("dtypes", [(torch.float32, torch.float64), (torch.float16, torch.float32)])
def test_binary_cross_entropy_rejects_mixed_dtypes_like_cpu(dtypes, assert_device_works):
    _assert_raises_like_cpu(F.binary_cross_entropy, torch.full((3,), 0.3, dtype=dtypes[0]),
                            torch.full((3,), 0.6, dtype=dtypes[1]))
    assert_device_works()


@pytest.mark.parametrize("shapes", [((), ()), ((3,), ()), ((), (3,)), ((3,), (3,))], ids=str)
@pytest.mark.parametrize("dtypes", [(torch.float16, torch.float32), (torch.float32, torch.float16),
                                    (torch.float64, torch.float32), (torch.float32, torch.float64)], ids=str)
def test_normal_takes_the_mean_dtype(shapes, dtypes):
    mean, std = torch.zeros(shapes[0], dtype=dtypes[0]), torch.ones(shapes[1], dtype=dtypes[1])
    expected = torch.normal(mean, std)
    actual = _on_device(torch.normal, mean, std, ops={"aten::normal.Tensor_Tensor"})
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    assert torch.normal(2.0, std.rbln()).dtype == torch.normal(2.0, std).dtype
    assert torch.normal(mean.rbln(), 2.0).dtype == torch.normal(mean, 2.0).dtype


# ---- polygamma's order ----------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [2**40, 2**32 + 1, 2**32 + 2, 2**33 + 3, 0, 1, 4])
def test_polygamma_order_is_not_truncated_before_choosing_the_kernel(n):
    x = torch.tensor([0.5, 2.0, 7.0, -1.5])
    _assert_same(_on_device(torch.polygamma, n, x, ops={"aten::polygamma"}), torch.polygamma(n, x))
    _assert_same(_on_device(lambda t: t.clone().polygamma_(n), x, ops={"aten::polygamma.out"}), x.clone().polygamma_(n))


@pytest.mark.parametrize("n", [-7, -1])
def test_polygamma_negative_order_raises_like_cpu(n, assert_device_works):
    _assert_raises_like_cpu(lambda x: torch.polygamma(n, x), torch.tensor([0.5, 2.0]))
    _assert_raises_like_cpu(lambda x: torch.special.polygamma(n, x), torch.tensor([0.5, 2.0]))
    assert_device_works()


# ---- gelu and the polynomial recurrences at infinities and NaN ---------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("n", [1, 37])  # the scalar tail and the vector body
@pytest.mark.filterwarnings("ignore:TF32 acceleration on top of oneDNN")  # from mkldnn.flags() below
def test_gelu_at_infinities_and_nan(dtype, approximate, n):
    x = torch.tensor([INF, -INF, NAN, 1e30, -1e30, 3.0, 0.0] * n).to(dtype)
    # The reference is ATen's own kernel (CUDA's values): on AVX-512 machines CPU hands float32/bfloat16
    # gelu to oneDNN, whose gelu(+inf) is NaN where ATen's (and CUDA's) is inf.
    with torch.backends.mkldnn.flags(enabled=False):
        expected = F.gelu(x, approximate=approximate)
    _assert_same(_on_device(F.gelu, x, approximate=approximate, ops={"aten::gelu"}), expected)
    grad = torch.ones_like(x)
    _assert_same(_on_device(torch.ops.aten.gelu_backward, grad, x, approximate=approximate,
                            ops={"aten::gelu_backward"}),
                 torch.ops.aten.gelu_backward(grad, x, approximate=approximate))


RECURRENCES = ["chebyshev_polynomial_u", "chebyshev_polynomial_v", "chebyshev_polynomial_w",
               "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
               "shifted_chebyshev_polynomial_w", "legendre_polynomial_p", "laguerre_polynomial_l"]


@pytest.mark.parametrize("name", RECURRENCES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_polynomial_recurrences_at_nan(name, dtype):
    fn = getattr(torch.special, name)
    x = torch.tensor([NAN, 0.25, -0.5, 2.0, NAN, 0.0, 1.0], dtype=dtype)
    n = torch.tensor([3.0, 3.0, 12.0, 5.0, 100.0, 2.0, 7.0], dtype=dtype)
    actual = _on_device(fn, x, n, ops={f"aten::special_{name}"})
    # CPU returns an uninitialized variable at a NaN of order >= 2 (its recurrence stops before the first
    # step): there the NaN propagates. Everywhere else, CPU's values; orders 0 and 1 and negative ones too.
    finite = ~x.isnan()
    torch.testing.assert_close(actual[finite], fn(x, n)[finite])
    assert actual[~finite].isnan().all()
    low = torch.tensor([-1.0, 0.0, 1.0], dtype=dtype)
    _assert_same(_on_device(fn, torch.full((3,), NAN, dtype=dtype), low, ops={f"aten::special_{name}"}),
                 fn(torch.full((3,), NAN, dtype=dtype), low))


# ---- vector norms of single elements: their magnitude, as on CPU ----------------------------------------

@pytest.mark.parametrize("ord", [2**31, 2**31 - 1, -(2**31), 2**63, 1e300, 0.5, 3.5, 0, INF, -INF])
@pytest.mark.parametrize("case", ["0-d", "one element", "size-1 dim", "size-1 dims kept"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_vector_norm_of_single_elements_is_their_magnitude(ord, case, dtype):
    x = {"0-d": torch.tensor(-0.5), "one element": torch.tensor([2.0]),
         "size-1 dim": torch.tensor([[0.5], [-3.0], [0.0]]),
         "size-1 dims kept": torch.tensor([[[NAN]], [[-3.0]]])}[case]
    x = x.to(dtype)
    kwargs = {"size-1 dim": {"dim": -1}, "size-1 dims kept": {"dim": (1, 2), "keepdim": True}}.get(case, {})
    fn = lambda t: torch.linalg.vector_norm(t, ord=ord, **kwargs)  # noqa: E731
    _assert_same(_on_device(fn, x, ops={"aten::linalg_vector_norm"}), fn(x))


# ---- slogdet at NaN and Inf: CPU's sign of a NaN pivot is 0 --------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("value", [NAN, INF, -INF])
def test_slogdet_of_non_finite_matrices_matches_cpu(dtype, value):
    A = torch.randn(6, 4, 4, generator=torch.Generator().manual_seed(0), dtype=dtype)
    for b in range(6):  # the non-finite entry in every row/column position the LU meets first or last
        A[b].view(-1)[(5 * b) % 16] = value
    A[5] = value
    _assert_same(_on_device(torch.linalg.slogdet, A, ops={"aten::_linalg_slogdet.sign"}), torch.linalg.slogdet(A))


# ---- errors of the harness's NaN/Inf and int mutations ------------------------------------------------

def test_binary_cross_entropy_rejects_a_nan_input_as_cpu(assert_device_works):
    # CPU's kernel checks 0 <= x <= 1, which NaN fails; CUDA's device assert does the same.
    _assert_raises_like_cpu(F.binary_cross_entropy, torch.tensor([0.5, NAN]), torch.tensor([1.0, 0.0]))
    assert_device_works()


@pytest.mark.parametrize("fn,args,kwargs", [
    (torch.linalg.eigvals, (torch.randn(5),), {}),
    (torch.cholesky_inverse, (torch.randn(5),), {}),
    (torch.grid_sampler_2d, (torch.randn(2, 3, 5, 5), torch.randn(2, 5, 5, 0), 0, 0, False), {}),
    (torch.grid_sampler_2d, (torch.tensor(1.0), torch.randn(2, 5, 5, 2), 0, 0, False), {}),  # CPU: IndexError
    (torch.segment_reduce, (torch.tensor(1.0), "max"), {"lengths": torch.tensor([1, 2])}),
])
def test_library_ops_raise_cpus_error_where_a_meta_function_refuses(fn, args, kwargs, assert_device_works):
    # The library ops size their results with torch's meta functions, some of them Python ones with their own
    # exception types (AssertionError, ValueError) or checks in another order: where one refuses a call, CPU's
    # kernel answers it, so rbln raises CPU's error, type and message.
    _assert_raises_like_cpu(fn, *args, **kwargs)
    assert_device_works()


# ---- out= aliasing and resizing, as CPU -------------------------------------------------------------

def test_mv_into_its_own_matrix_fails_as_cpu(assert_device_works):
    # CPU's mv.out resizes out= (here the matrix itself) before its kernel reads the matrix's second dim.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # resizing a non-empty out= warns, on both
        for out_is_matrix in (True, False):
            m, v = torch.randn(5, 10), torch.randn(10)
            scalar = torch.tensor(2.0)
            if out_is_matrix:
                cpu_fn = lambda: torch.mv(m, v, out=m)  # noqa: E731
                m_r, v_r = m.rbln(), v.rbln()
                rbln_fn = lambda: torch.mv(m_r, v_r, out=m_r)  # noqa: E731
            else:
                cpu_fn = lambda: torch.mv(scalar, v, out=scalar)  # noqa: E731
                s_r, v_r = scalar.rbln(), v.rbln()
                rbln_fn = lambda: torch.mv(s_r, v_r, out=s_r)  # noqa: E731
            kind, message = _cpu_error(cpu_fn)
            assert kind is IndexError
            with pytest.raises(IndexError) as info:
                rbln_fn()
            # the dim the kernel asks for may be spelled from the end (-2 for 1)
            assert str(info.value).split(", but got")[0] == message.split(", but got")[0]
    assert_device_works()


def test_addbmm_resizes_out_without_a_warning_as_cpu():
    b1, b2, self = torch.randn(4, 5, 6), torch.randn(4, 6, 7), torch.randn(5, 7)
    expected = torch.addbmm(self, b1, b2)
    out = torch.zeros(1, device="rbln")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # CPU resizes with resize_, which does not warn
        got = _on_device(torch.addbmm, self, b1, b2, out=out, ops={"aten::addbmm.out"})
    assert got.shape == (5, 7) and out.shape == (5, 7)
    torch.testing.assert_close(got, expected)


# ---- NaN statistics of the norms, as CPU's Welford moments ------------------------------------------

@pytest.mark.parametrize("value", [INF, -INF, NAN])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_norm_statistics_of_rows_holding_inf_are_nan_as_cpu(dtype, value):
    x = torch.randn(4, 2, 40, dtype=dtype)
    # CPU's mean is NaN wherever the Inf is, except where its last vectorized Welford step meets it (then inf)
    x[1, 0, 7] = value  # the first group and row of sample 1; the others stay finite
    x[3, 1, 20] = value
    layer = torch.native_layer_norm(x, [40], None, None, 1e-5)
    group = torch.native_group_norm(x, None, None, 4, 2, 40, 2, 1e-5)
    _assert_same(_on_device(torch.native_layer_norm, x, [40], None, None, 1e-5, ops={"aten::native_layer_norm"}),
                 layer)
    _assert_same(_on_device(torch.native_group_norm, x, None, None, 4, 2, 40, 2, 1e-5,
                            ops={"aten::native_group_norm"}), group)
    assert layer[1].isnan().sum() == 2 and group[1].isnan().sum() == 2  # the test sees the NaN statistics


def test_mode_over_an_empty_dim_is_an_index_error_as_cpu(assert_device_works):
    x = torch.randn(3, 0)
    with pytest.raises(IndexError, match="Expected reduction dim 1 to have non-zero size"):
        torch.mode(x, 1)
    with pytest.raises(IndexError, match="Expected reduction dim 1 to have non-zero size"):
        torch.mode(x.rbln(), 1)
        torch.rbln.synchronize()  # checked on the device: the error reaches the next synchronizing call
    assert_device_works()
