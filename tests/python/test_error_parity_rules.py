"""Rules behind the error-parity fuzz's later disagreements: each case is a class of inputs where rbln must
do what CPU does (or CUDA, where tensors sit on two devices), checked against CPU's outcome."""
import warnings

import pytest
import torch

from test_error_parity_defects import _assert_raises_like_cpu, _assert_same, _cpu_error, _on_device

# (entry point, the device op it counts)
BN = [(torch.native_batch_norm, "aten::native_batch_norm"),
      (lambda *a: torch._native_batch_norm_legit(*a[:5], *a[5:]), "aten::_native_batch_norm_legit"),
      (lambda x, w, b, rm, rv, training, m, eps: torch.ops.aten._batch_norm_with_update(x, w, b, rm, rv, m, eps)[:3],
       "aten::_batch_norm_with_update")]


def _bn_args(shape, channels, param=None, training=True):
    g = torch.Generator().manual_seed(0)
    n = param if param is not None else channels
    return [torch.randn(shape, generator=g), torch.randn(n, generator=g), torch.randn(n, generator=g),
            torch.randn(n, generator=g), torch.rand(n, generator=g) + 0.5, training, 0.1, 1e-5]


@pytest.mark.parametrize("bn", BN, ids=["native_batch_norm", "_native_batch_norm_legit", "_batch_norm_with_update"])
def test_batch_norm_reads_the_first_channels_of_longer_parameters(bn):
    bn, device_op = bn
    cpu_args = _bn_args([3, 2, 4], 2, param=3)
    expected = bn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in cpu_args])
    got = _on_device(bn, *cpu_args, ops=[device_op])
    _assert_same(got, expected)


def test_batch_norm_refuses_shorter_parameters_cpu_would_read_past():
    args = [a.rbln() if isinstance(a, torch.Tensor) else a for a in _bn_args([3, 2, 4], 2, param=1)]
    with pytest.raises(RuntimeError, match="weight should contain 2 elements, not 1"):
        torch.native_batch_norm(*args)


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_of_an_empty_input_as_cpu(training):
    args = _bn_args([3, 2, 0], 2, param=0, training=training)
    if training:
        _assert_raises_like_cpu(torch.native_batch_norm, *args)
    else:
        expected = torch.native_batch_norm(*args)
        _assert_same(_on_device(torch.native_batch_norm, *args, ops=["aten::native_batch_norm"]), expected)


def test_batch_norm_of_a_stride_0_input_centres_on_cpus_rounded_mean():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, generator=g).as_strided([3, 1], [0, 1])
    params = [torch.randn(1, generator=g) for _ in range(3)] + [torch.rand(1, generator=g) + 0.5]
    expected = torch.native_batch_norm(x, *[p.clone() for p in params], True, 0.0, 1e-5)
    with torch.rbln.explain() as ex:
        xr = x.rbln().as_strided([3, 1], [0, 1])  # the same values, a stride-0 layout on the device
        got = torch.native_batch_norm(xr, *[p.rbln() for p in params], True, 0.0, 1e-5)
        got = [t.cpu() for t in got]
    assert "aten::native_batch_norm" in ex.device_ops
    _assert_same(got, list(expected), rtol=0, atol=0)


# ---- CUDA's device check: an op with the default check takes no CPU tensor, 0-dim or not ------------

@pytest.mark.parametrize("op", [torch.clamp_max, torch.clamp_min, torch.igamma, torch.igammac, torch.logaddexp,
                                torch.logaddexp2, torch.nextafter])
@pytest.mark.parametrize("cpu_first", [False, True])
def test_ops_with_the_default_device_check_refuse_a_cpu_scalar_tensor(op, cpu_first):
    a, b = torch.tensor(0.5, device="rbln"), torch.tensor(0.25)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        op(*((b, a) if cpu_first else (a, b)))


@pytest.mark.parametrize("op", [torch.Tensor.clamp_min_, torch.Tensor.clamp_max_])
def test_in_place_ops_with_the_default_device_check_refuse_a_cpu_scalar_tensor(op):
    # Their out= overload (which PyTorch's composite would run) takes one; CUDA's in-place wrapper does not.
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        op(torch.tensor([0.5], device="rbln"), torch.tensor(0.25))


def test_tensor_iterator_ops_still_take_a_cpu_scalar_tensor():
    a = torch.arange(3.0, device="rbln")
    torch.testing.assert_close((a + torch.tensor(2.0)).cpu(), torch.arange(3.0) + 2)
    b = torch.tensor([4, 6, 9])
    with torch.rbln.explain() as ex:  # device_check: NoCheck, so the CPU 0-dim tensor is a scalar
        actual = torch.bitwise_left_shift(b.to("rbln"), torch.tensor(2))
    assert actual.device.type == "rbln"
    torch.testing.assert_close(actual.cpu(), torch.bitwise_left_shift(b, torch.tensor(2)))
    assert ex.device_ops["aten::bitwise_left_shift.Tensor"] == 1 and not ex.fallback_ops


def test_segment_reduce_wants_lengths_on_the_data_device():
    data, lengths = torch.arange(5.0), torch.tensor([0, 1, 2, 2])
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.segment_reduce(data.rbln(), "max", lengths=lengths, initial=1)
    expected = torch.segment_reduce(data, "max", lengths=lengths, initial=1)
    torch.testing.assert_close(torch.segment_reduce(data.rbln(), "max", lengths=lengths.rbln(), initial=1).cpu(),
                               expected)


# ---- argument checks in CPU's order and types ---------------------------------------------------------

@pytest.mark.parametrize("op", [
    lambda s, i, src: torch.index_add(s, 0, i, src),
    lambda s, i, src: torch.index_reduce(s, 0, i, src, "amax"),
])
def test_index_add_with_a_0_dim_source_and_many_indices_is_an_index_error(op):
    _assert_raises_like_cpu(op, torch.tensor(1.0), torch.tensor([2, 3]), torch.tensor(0.5))


@pytest.mark.parametrize("args", [(4, 2, 2), (3, 0, 0), (-4, 2, 2), (1, 6, 0), (1, -7, 2), (1, 0, 6)])
def test_narrow_copy_checks_as_cpu(args):
    _assert_raises_like_cpu(torch.narrow_copy, torch.randn(5, 5, 5), *args)


def test_narrow_copy_runs_on_the_device():
    x = torch.randn(5, 5, 5)
    got = _on_device(torch.narrow_copy, x, 1, -3, 2, ops=["aten::narrow_copy"])
    _assert_same(got, torch.narrow_copy(x, 1, -3, 2))


@pytest.mark.parametrize("op", [torch.amax, torch.amin])
def test_reductions_over_more_than_64_dims_raise_cpus_error(op):
    _assert_raises_like_cpu(op, torch.ones([1] * 65), dim=-1)


def test_roll_of_an_empty_tensor_returns_before_wrapping_dims():
    got = _on_device(torch.roll, torch.empty(0), 1, 2, ops=["aten::roll"])
    _assert_same(got, torch.roll(torch.empty(0), 1, 2))


@pytest.mark.parametrize("shape", [[5, 0], [0], [2, 0, 0]])
def test_cholesky_of_an_empty_tensor_returns_as_cpu(shape):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = torch.cholesky(torch.empty(shape))
        got = _on_device(torch.cholesky, torch.empty(shape), ops=["aten::cholesky"])
    _assert_same(got, expected)


@pytest.mark.parametrize("op", [torch.Tensor.tril_, torch.Tensor.triu_])
def test_tril_triu_in_place_on_an_expanded_tensor_as_cpu(op):
    base = torch.arange(1.0, 11.0)
    expected = op(base.clone().expand(10, 10))
    got = _on_device(lambda b: op(b.expand(10, 10)), base, ops=[f"aten::{op.__name__}"])
    _assert_same(got, expected)


def test_mv_resizes_a_wrong_sized_out_as_cpu():
    m, v = torch.randn(5, 10), torch.randn(10)
    with pytest.warns(UserWarning, match="resized"):
        expected = torch.mv(m, v, out=torch.empty(1))
    with pytest.warns(UserWarning, match="resized"):
        got = torch.mv(m.rbln(), v.rbln(), out=torch.empty(1, device="rbln"))
    _assert_same(got.cpu(), expected)


def test_normal_writes_an_out_of_another_floating_dtype():
    out = torch.empty([], dtype=torch.float64, device="rbln")
    torch.normal(torch.tensor(1.0, device="rbln"), torch.tensor(0.5, device="rbln"), out=out)
    assert out.dtype == torch.float64 and torch.isfinite(out.cpu())
    kind, _ = _cpu_error(torch.normal, torch.tensor(1.0), torch.tensor(0.5), out=torch.empty([], dtype=torch.int64))
    with pytest.raises(kind, match="not implemented for 'Long'"):
        torch.normal(torch.tensor(1.0, device="rbln"), torch.tensor(0.5, device="rbln"),
                     out=torch.empty([], dtype=torch.int64, device="rbln"))


@pytest.mark.parametrize("fn", [
    lambda out: torch.where(torch.ones(3, dtype=torch.bool), torch.ones(3), torch.ones(3), out=out),
    lambda out: torch.heaviside(torch.ones(3), torch.ones(3), out=out),
])
def test_out_dtype_refused_as_cpu(fn):
    _assert_raises_like_cpu(fn, torch.empty(3, dtype=torch.float64))


@pytest.mark.parametrize("args", [(0, 64, 0.5), (0, 64, 0), (0, 10, -1)])
def test_arange_errors_as_cpu(args):
    _assert_raises_like_cpu(lambda out: torch.arange(*args, out=out), torch.empty(0, dtype=torch.int64))


def test_linalg_cross_names_the_dim_as_given():
    _assert_raises_like_cpu(torch.linalg.cross, torch.randn(5, 3), torch.randn(5, 1))


def test_det_with_out_aliasing_the_input_reshapes_it_first_as_cpu():
    op = torch.linalg.det
    a = torch.randn(5, 5, generator=torch.Generator().manual_seed(0))
    a = a @ a.T
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kind, _ = _cpu_error(lambda x: op(x, out=x), a.clone())
        with pytest.raises(kind):
            x = a.rbln()
            op(x, out=x)
            torch.rbln.synchronize()


@pytest.mark.parametrize("op", [torch.special.chebyshev_polynomial_u, torch.special.hermite_polynomial_h])
def test_polynomials_in_float16_are_not_implemented_as_on_cpu_and_cuda(op):
    x = torch.randn(5).half()
    kind, _ = _cpu_error(op, x, torch.tensor(0.8))
    with pytest.raises(kind):
        op(x.rbln(), torch.tensor(0.8, device="rbln"))


@pytest.mark.parametrize("device", ["cpu", "rbln"])
def test_multinomial_resizes_out_without_a_warning_as_cpu(device):
    out = torch.empty(1, dtype=torch.int64, device=device)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.multinomial(torch.tensor([1.0, 5.0, 2.0], device=device), 3, out=out)
    assert out.shape == (3,)


@pytest.mark.parametrize("op", [torch.logical_and, torch.logical_or, torch.logical_xor])
def test_logical_ops_with_a_cpu_self_fail_cudas_device_check(op):
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        op(torch.tensor(1.0), torch.tensor(0.0, device="rbln"))
    torch.testing.assert_close(op(torch.tensor([1.0, 0.0], device="rbln"), torch.tensor(1.0)).cpu(),
                               op(torch.tensor([1.0, 0.0]), torch.tensor(1.0)))


# ---- norm with a dtype: CPU's dtype checks (norm.dtype_out runs on the device) --------------------------

@pytest.mark.parametrize("dtype", [torch.int64, torch.float16])
@pytest.mark.parametrize("out", [False, True])
def test_norm_with_a_dtype_checks_it_as_cpu(dtype, out):
    norm = torch.ops.aten.norm
    if out:
        _assert_raises_like_cpu(lambda x, o: norm.dtype_out(x, 2, [0], False, dtype=dtype, out=o), torch.randn(3, 4),
                                torch.empty(0, dtype=dtype))
    else:
        _assert_raises_like_cpu(lambda x: norm.ScalarOpt_dim_dtype(x, 2, [0], False, dtype=dtype), torch.randn(3, 4))
    _assert_raises_like_cpu(lambda x: torch.linalg.vector_norm(x, dtype=dtype), torch.randn(3, 4))


def test_norm_dtype_out_runs_on_the_device():
    x, o = torch.randn(3, 4), torch.empty(0, dtype=torch.float64)
    got = _on_device(lambda x, o: torch.ops.aten.norm.dtype_out(x, 2, [1], True, dtype=torch.float64, out=o), x, o,
                     ops=["aten::norm.dtype_out"])
    _assert_same(got, torch.ops.aten.norm.dtype_out(x, 2, [1], True, dtype=torch.float64, out=o.clone()))


# ---- add/sub's alpha: CPU's checks for the compute dtype ---------------------------------------------------

@pytest.mark.parametrize("op", [torch.add, torch.sub])
@pytest.mark.parametrize("dtype, alpha", [(torch.bool, 1.1), (torch.bool, 1j), (torch.int64, 2.5), (torch.int64, 1j),
                                          (torch.float32, 1j), (torch.float32, True), (torch.int32, False)])
def test_alpha_is_checked_for_the_compute_dtype(op, dtype, alpha):
    a = torch.ones(3, dtype=dtype)
    if op is torch.sub and dtype is torch.bool:
        pytest.skip("sub refuses bool tensors before it reads alpha; tested in test_error_parity_defects.py")
    _assert_raises_like_cpu(op, a, a, alpha=alpha)


def test_a_valid_alpha_still_computes_on_the_device():
    a = torch.tensor([True, False])
    assert torch.equal(_on_device(torch.add, a, a, alpha=True, ops=["aten::add.Tensor"]), torch.add(a, a, alpha=True))
    x = torch.arange(4.0)
    assert torch.equal(_on_device(torch.add, x, x, alpha=2.5, ops=["aten::add.Tensor"]), torch.add(x, x, alpha=2.5))


# ---- an out= of another dtype: computed in the inputs' dtype, then cast (TensorIterator's temporary) -------

@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_out_of_a_wider_dtype_gets_the_result_rounded_to_the_compute_dtype(dtype):
    a, b = torch.tensor([60000.0, 1.0, 3.0], dtype=dtype), torch.tensor([5984.0, 1e-3, 1.0 / 3], dtype=dtype)
    for fn in (lambda x, y, out: torch.add(x, y, out=out), lambda x, y, out: torch.mul(x, y, out=out),
               lambda x, y, out: torch.atan2(x, y, out=out), lambda x, y, out: torch.exp(x, out=out)):
        expected = fn(a, b, torch.empty(3))
        with torch.rbln.explain() as ex:
            out = torch.empty(3, device="rbln")
            fn(a.rbln(), b.rbln(), out)
        assert not ex.fallback_ops, ex.fallback_reasons
        assert torch.equal(out.cpu(), expected), (out.cpu(), expected)


# ---- an index out of range is an IndexError, as CPU's, also when a kernel finds it on the stream -----------

@pytest.mark.parametrize("x, index, fn", [
    (torch.arange(4.0), torch.tensor([5]), lambda x, i: x[i]),
    (torch.zeros(0, 3), torch.tensor([0]), lambda x, i: x[i]),
    (torch.arange(4.0), torch.tensor([7]), lambda x, i: x.index_fill(0, i, 1.0)),
    (torch.arange(4.0), torch.tensor([9]), lambda x, i: torch.take(x, i)),
    (torch.randn(3, 4), torch.tensor([5]), lambda x, i: torch.nn.functional.embedding(i, x)),
    (torch.randn(2, 3), torch.tensor([0, 7]), lambda x, i: torch.nn.functional.nll_loss(x, i)),
], ids=["index", "index_size0", "index_fill", "take", "embedding", "nll_loss"])
def test_index_out_of_range_is_an_index_error(x, index, fn):
    with pytest.raises(IndexError):
        fn(x, index)
    with pytest.raises(IndexError):
        fn(x.rbln(), index.rbln()).cpu()
        torch.rbln.synchronize()
    torch.testing.assert_close((x.rbln() + 1).cpu(), x + 1)  # the device is usable after


def test_gather_and_scatter_out_of_range_stay_runtime_errors_as_on_cpu():
    x, index = torch.arange(6.0).reshape(2, 3), torch.tensor([[3]])
    for fn in (lambda x, i: torch.gather(x, 1, i), lambda x, i: x.scatter(1, i, 1.0)):
        kind, message = _cpu_error(fn, x, index)
        assert kind is RuntimeError
        with pytest.raises(RuntimeError, match=message) as info:
            fn(x.rbln(), index.rbln()).cpu()
        assert not isinstance(info.value, IndexError)


# ---- enum arguments are validated before a kernel reads memory with them -----------------------------------

@pytest.mark.parametrize("mode", [8, -1, 2**63 - 1])
def test_grid_samplers_refuse_an_unknown_mode(mode):
    # CPU's kernels read these unchecked (garbage values); the device raises before its library runs.
    x5, g5 = torch.randn(1, 1, 2, 2, 2, device="rbln"), torch.rand(1, 2, 2, 2, 3, device="rbln")
    x4, g4 = torch.randn(1, 1, 2, 2, device="rbln"), torch.rand(1, 2, 2, 2, device="rbln")
    with pytest.raises(RuntimeError, match="expected interpolation_mode"):
        torch.grid_sampler_3d(x5, g5, mode, 0, False)
    with pytest.raises(RuntimeError, match="expected padding_mode"):
        torch.grid_sampler_3d(x5, g5, 0, mode, False)
    with pytest.raises(RuntimeError, match="expected interpolation_mode"):
        torch.grid_sampler_2d(x4, g4, mode, 0, False)
    with torch.rbln.explain() as ex:  # the valid modes still sample on the device, as CPU
        got = torch.grid_sampler_3d(x5, g5, 1, 2, True).cpu()
    assert not ex.fallback_ops
    torch.testing.assert_close(got, torch.grid_sampler_3d(x5.cpu(), g5.cpu(), 1, 2, True))


# ---- factories: CPU's dtypes, CPU's error for the others ---------------------------------------------------

@pytest.mark.parametrize("fn", [torch.tril_indices, torch.triu_indices])
def test_triangle_indices_take_cpus_dtypes(fn):
    for dtype in (torch.float32, torch.int16, torch.bool):
        kind, message = _cpu_error(fn, 4, 5, 1, dtype=dtype)
        with pytest.raises(kind) as info:
            fn(4, 5, 1, dtype=dtype, device="rbln")
        assert str(info.value) == message
    for args in [(4, 5, 0), (4, 5, -2), (5, 3, 2), (0, 3, 0), (3, 3, -5), (3, 3, 5)]:
        with torch.rbln.explain() as ex:
            got = fn(*args, dtype=torch.int32, device="rbln").cpu()
        assert not ex.fallback_ops
        assert torch.equal(got, fn(*args, dtype=torch.int32))


@pytest.mark.parametrize("fn,out", [
    (lambda x, out: torch.fft.rfft(x, out=out), (5, torch.complex128)),
    (lambda x, out: torch.fft.fft(x.to(torch.complex64), out=out), (8, torch.complex128)),
    (lambda x, out: torch.fft.irfft(x.to(torch.complex64), out=out), (14, torch.float64)),
    (lambda x, out: torch.fft.hfft(x.to(torch.complex64), out=out), (14, torch.float64)),
])
def test_fft_writes_an_out_of_a_wider_dtype_as_cpu(fn, out):
    # CPU's and CUDA's transforms copy_ their result into out=, casting it.
    x = torch.randn(8, generator=torch.Generator().manual_seed(0))
    size, dtype = out
    expected = fn(x, torch.empty(size, dtype=dtype))
    got = torch.empty(size, dtype=dtype, device="rbln")
    with torch.rbln.explain() as ex:
        fn(x.rbln(), got)
    assert not ex.fallback_ops, ex.fallback_ops
    torch.testing.assert_close(got.cpu(), expected)


@pytest.mark.parametrize("value", [-3.0, 3.0])
def test_threshold_in_place_on_an_expanded_tensor_and_into_a_wider_out_as_cpu(value):
    # CPU's threshold iterator has no overlap check (the op is idempotent) and casts into a safe out= dtype.
    x = torch.tensor([value]).expand(5)
    expected = torch.threshold_(torch.tensor([value]).expand(5), 0.5, 2.0)
    got = torch.tensor([value], device="rbln").expand(5)
    with torch.rbln.explain() as ex:
        torch.threshold_(got, 0.5, 2.0)
    assert ex.device_ops.get("aten::threshold_") == 1 and not ex.fallback_ops, (ex.device_ops, ex.fallback_ops)
    assert torch.equal(got.cpu(), expected)
    wide = torch.empty(5, dtype=torch.float64, device="rbln")
    torch.threshold(x.contiguous().rbln(), 0.5, 2.0, out=wide)
    assert torch.equal(wide.cpu(), torch.threshold(x.contiguous(), 0.5, 2.0, out=torch.empty(5, dtype=torch.float64)))


def test_clamp_promotes_its_three_operands_together_as_cpu():
    # A 0-dim int64 bound of a uint8 tensor does not wrap (to 248) when the other bound is float: CPU's one
    # iterator promotes the three to float32 first.
    x = torch.tensor([[0, 8, 3, 4], [9, 6, 1, 2]], dtype=torch.uint8)
    low, high = torch.tensor(-8), torch.tensor([[8.3, -2.3, 5.5, 3.7]])
    expected = torch.clamp(x, low, high)
    got = _on_device(torch.clamp, x, low, high, ops={"aten::clamp.Tensor"})
    _assert_same(got, expected)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_log2_at_infinities_as_cpu(dtype):
    # CPU divides log(x) by the real ln 2; a division by the complex ln 2 turns inf + 0i into inf + nan i.
    inf = float("inf")
    x = torch.tensor([complex(inf, 0), complex(-inf, 0), complex(inf, inf), complex(1, inf), 0j, 2 + 3j] * 3,
                     dtype=dtype)
    expected = torch.log2(x)
    got = _on_device(torch.log2, x, ops={"aten::log2"})
    assert torch.equal(got.real, expected.real) and torch.allclose(got.imag, expected.imag, rtol=0, atol=1e-15)


def test_a_factory_out_of_a_dtype_the_kernel_lacks_falls_back():
    # linspace's kernel computes real dtypes; complex out= runs CPU's kernel (counted), as for any entry's dtype
    # gap, instead of the kernel's "not implemented for 'ComplexFloat'".
    expected = torch.linspace(-2.0, 3.0, 7, dtype=torch.complex64)
    with torch.rbln.explain() as ex:
        got = torch.linspace(-2.0, 3.0, 7, dtype=torch.complex64, device="rbln").cpu()
    assert "aten::linspace.out" in ex.fallback_ops
    torch.testing.assert_close(got, expected)
