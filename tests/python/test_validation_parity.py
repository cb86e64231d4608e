"""Argument checks, out= rules and error types match CPU's (CUDA's where the two differ: device checks).

Each case runs the same function on "cpu" and "rbln" and compares the exception type and first line,
or the result."""
import pytest
import torch
import torch.nn.functional as F

SAME_DEVICE = "Expected all tensors to be on the same device"


def _outcome(fn, device):
    try:
        result = fn(device)
        if isinstance(result, torch.Tensor):
            result = result.cpu()  # surfaces asynchronous kernel errors
    except Exception as e:  # noqa: BLE001  (the type is part of what is compared)
        return type(e), str(e).split("\n")[0]
    return result


def assert_same_error(fn):
    expected = _outcome(fn, "cpu")
    assert isinstance(expected, tuple), f"CPU did not raise: {expected}"
    got = _outcome(fn, "rbln")
    if isinstance(got, tuple) and got[1].startswith("aten::"):  # an asynchronous kernel error: "<op>: <CPU's message>"
        got = (got[0], got[1].split(": ", 1)[1])
    assert got == expected


def _arange(d, n=6):
    return torch.arange(float(n), device=d)


def _idx(d, *values):
    return torch.tensor(values, device=d)


# ---- out= aliasing an input: CPU's assert_no_overlap ----------------------------------------------------------
ALIASED_OUT = {
    "gather": lambda d: (lambda x: torch.gather(x, 0, _idx(d, 2, 1, 0), out=x))(_arange(d)),
    "cat": lambda d: (lambda x: torch.cat([x, x], out=x))(_arange(d)),
    "index_select": lambda d: (lambda x: torch.index_select(x, 0, _idx(d, 2, 1, 0), out=x))(_arange(d)),
    "take": lambda d: (lambda x: torch.take(x, _idx(d, 2, 1, 0), out=x))(_arange(d)),
    "masked_select": lambda d: (lambda x: torch.masked_select(x, x > 2, out=x))(_arange(d)),
    "kthvalue": lambda d: (lambda x: torch.kthvalue(x, 2, out=(x, torch.empty(0, dtype=torch.long, device=d))))(
        _arange(d)),
    "cross": lambda d: (lambda x: torch.cross(x, x.flip(1), dim=1, out=x))(_arange(d).view(2, 3)),
    "index_add": lambda d: (lambda x: torch.index_add(x.clone(), 0, _idx(d, 2, 1, 0), x[:3], out=x))(_arange(d)),
    "index_copy": lambda d: (lambda x: torch.index_copy(x.clone(), 0, _idx(d, 2, 1, 0), x[:3], out=x))(_arange(d)),
    "scatter_src": lambda d: (lambda x: torch.scatter(x.clone(), 0, _idx(d, 2, 1, 0), x, out=x))(_arange(d)),
    "put_": lambda d: (lambda x: x.put_(_idx(d, 0), x[1:2]))(_arange(d)),
    "index_put_": lambda d: (lambda x: x.index_put_((_idx(d, 0, 1),), x[1:3]))(_arange(d)),
    "nonzero": lambda d: (lambda x: torch.nonzero(x, out=x))(torch.arange(6, device=d)),
    "max.dim": lambda d: (lambda x: torch.max(x.view(2, 3), 1, out=(x[:2], torch.empty(0, dtype=torch.long,
                                                                                        device=d))))(_arange(d)),
}


@pytest.mark.parametrize("name", ALIASED_OUT)
def test_out_aliasing_an_input_is_rejected_like_cpu(name, assert_device_works):
    assert_same_error(ALIASED_OUT[name])
    assert_device_works()


def test_gather_into_a_fresh_out_still_works():
    x = torch.arange(6.)
    out = torch.empty(3, device="rbln")
    torch.gather(x.rbln(), 0, torch.tensor([2, 1, 0]).rbln(), out=out)
    assert torch.equal(out.cpu(), torch.gather(x, 0, torch.tensor([2, 1, 0])))


# ---- out= of a dtype CPU casts the result to ------------------------------------------------------------------
def _bf16(d):
    return torch.arange(6., device=d).view(2, 3).to(torch.bfloat16) / 3


CASTING_OUT = [  # (the device op that runs, the call)
    ("aten::cat.out", lambda d: torch.cat([_bf16(d), _bf16(d)], out=torch.empty(0, device=d))),
    ("aten::cat.out", lambda d: torch.stack([_bf16(d), _bf16(d)], out=torch.empty(0, device=d))),
    ("aten::cat.out", lambda d: torch.hstack([_bf16(d), _bf16(d)], out=torch.empty(0, device=d))),
    ("aten::var.correction_out", lambda d: torch.var(_bf16(d), 1, out=torch.empty(0, device=d))),
    ("aten::std.correction_out",
     lambda d: torch.std(_bf16(d).float(), 1, out=torch.empty(0, dtype=torch.float64, device=d))),
    ("aten::clamp.Tensor_out", lambda d: torch.clamp(_bf16(d), torch.zeros(1, dtype=torch.bfloat16, device=d),
                                                     out=torch.empty(0, device=d))),
    ("aten::cholesky.out",
     lambda d: torch.cholesky(torch.eye(3, device=d) * 2, out=torch.empty(0, dtype=torch.float64, device=d))),
]


@pytest.mark.parametrize("op, fn", CASTING_OUT, ids=[f"{op}-{i}" for i, (op, _) in enumerate(CASTING_OUT)])
def test_out_of_a_castable_dtype_matches_cpu(op, fn):
    expected = fn("cpu")
    with torch.rbln.explain() as ex:
        got = fn("rbln")
    assert got.dtype == expected.dtype
    torch.testing.assert_close(got.cpu(), expected)
    assert op in ex.device_ops


def test_chunk_cat_into_float32_out_for_fsdp_mixed_precision():
    # FSDP2 with MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=f32) reduces through this call.
    def run(d):
        grads = [torch.arange(12., device=d).view(3, 4).to(torch.bfloat16), torch.ones(5, device=d, dtype=torch.bfloat16)]
        out = torch.empty(2, 9, device=d)
        return torch._chunk_cat(grads, 0, 2, out=out)

    torch.testing.assert_close(run("rbln").cpu(), run("cpu"))


@pytest.mark.parametrize("fn", [
    lambda d: torch.cat([_bf16(d), _bf16(d)], out=torch.empty(0, dtype=torch.long, device=d)),
    lambda d: torch.var(_bf16(d).float(), 1, out=torch.empty(0, dtype=torch.long, device=d)),
    lambda d: torch.cholesky(torch.eye(3, device=d), out=torch.empty(0, dtype=torch.long, device=d)),
    lambda d: torch.gather(_bf16(d), 0, torch.zeros(1, 3, dtype=torch.long, device=d), out=torch.empty(0, device=d)),
])
def test_out_of_a_dtype_the_result_does_not_cast_to_is_refused_like_cpu(fn):
    assert_same_error(fn)


# ---- out= through the CPU fallback ---------------------------------------------------------------------------
def test_mode_with_out_matches_cpu():
    x = torch.tensor([[1., 2., 2., 3.], [4., 4., 0., 0.]])
    values, indices = torch.empty(0, device="rbln"), torch.empty(0, dtype=torch.long, device="rbln")
    torch.mode(x.rbln(), 1, out=(values, indices))
    expected = torch.mode(x, 1)
    assert torch.equal(values.cpu(), expected.values) and torch.equal(indices.cpu(), expected.indices)


def test_fallback_writes_a_non_contiguous_out_through_its_strides():
    # As CUDA's narrow_copy: CPU's own kernel writes such an out as if it were contiguous.
    x = torch.randn(5, 5, 5)
    base = torch.zeros(5, 2, 5, 2, device="rbln")
    with torch.rbln.explain() as ex:
        torch.narrow_copy(x.rbln(), 1, 2, 2, out=base[..., 1])
    expected = torch.zeros(5, 2, 5, 2)
    expected[..., 1] = x.narrow(1, 2, 2)
    assert torch.equal(base.cpu(), expected)
    assert "aten::narrow_copy.out" in ex.fallback_ops


def test_native_batch_norm_out_fallback_updates_running_stats():
    x = torch.randn(4, 3, 5)

    def run(d):
        mean, var = torch.zeros(3, device=d), torch.ones(3, device=d)
        outs = [torch.empty(0, device=d) for _ in range(3)]
        torch.ops.aten.native_batch_norm.out(x.to(d), None, None, mean, var, True, 0.1, 1e-5,
                                             out=outs[0], save_mean=outs[1], save_invstd=outs[2])
        return [t.cpu() for t in (mean, var, *outs)]

    for got, expected in zip(run("rbln"), run("cpu")):
        torch.testing.assert_close(got, expected)


# ---- devices: as CUDA, tensors on another device are refused, CPU 0-dim tensors mix like scalars --------------
MIXED_DEVICES = {
    "fft out=cpu": lambda: torch.fft.fft(torch.randn(4).rbln(), out=torch.empty(4, dtype=torch.complex64)),
    "kthvalue out=cpu": lambda: torch.kthvalue(torch.randn(4).rbln(), 2, out=(torch.empty(0), torch.empty(0).long())),
    "searchsorted cpu values": lambda: torch.searchsorted(torch.arange(4.).rbln(), torch.tensor([1.5, 2.5])),
    "bucketize cpu boundaries": lambda: torch.bucketize(torch.tensor([1.5]).rbln(), torch.arange(4.)),
    "cdist cpu x2": lambda: torch.cdist(torch.randn(3, 2).rbln(), torch.randn(4, 2), compute_mode="donot_use_mm_for_euclid_dist"),
    "grid_sample cpu grid": lambda: F.grid_sample(torch.randn(1, 1, 3, 3).rbln(), torch.zeros(1, 2, 2, 2),
                                                  align_corners=False),
    "addbmm cpu batch": lambda: torch.addbmm(torch.zeros(2, 2).rbln(), torch.ones(3, 2, 4).rbln(), torch.ones(3, 4, 2)),
    "index_select cpu index": lambda: torch.index_select(torch.randn(4).rbln(), 0, torch.tensor([0, 1])),
    "mm cpu operand": lambda: torch.mm(torch.ones(2, 2).rbln(), torch.ones(2, 2)),
    "mse_loss cpu target": lambda: F.mse_loss(torch.ones(3).rbln(), torch.ones(3)),
    "smooth_l1_loss cpu target": lambda: F.smooth_l1_loss(torch.ones(3).rbln(), torch.ones(3)),
}


@pytest.mark.parametrize("name", MIXED_DEVICES)
def test_tensors_on_another_device_are_refused_like_cuda(name, assert_device_works):
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        MIXED_DEVICES[name]()
    assert_device_works()


def test_cpu_zero_dim_tensors_still_mix_like_scalars():
    x = torch.arange(4.)
    torch.testing.assert_close((x.rbln() * torch.tensor(2.)).cpu(), x * 2)
    torch.testing.assert_close(torch.where(x.rbln() > 1, x.rbln(), torch.tensor(0.)).cpu(), torch.where(x > 1, x, 0.))


@pytest.mark.parametrize("cpu_side", ["input", "target"])
@pytest.mark.parametrize("loss", [F.mse_loss, F.smooth_l1_loss])
def test_losses_take_a_cpu_zero_dim_operand_like_cuda(loss, cpu_side):
    # CUDA's kernels are TensorIterator ops (device_check: NoCheck): a CPU 0-dim operand is a scalar.
    x, target = torch.tensor(-6.7), torch.tensor(-7.5)
    dev = (x, target.rbln()) if cpu_side == "input" else (x.rbln(), target)
    with torch.rbln.explain() as ex:
        actual = loss(*dev)
    assert actual.device.type == "rbln" and not ex.fallback_ops, ex.fallback_reasons
    torch.testing.assert_close(actual.cpu(), loss(x, target))


def test_multilabel_soft_margin_loss_with_a_complex_target_matches_cpu():
    def run(d):
        return F.multilabel_soft_margin_loss(torch.arange(6.).view(2, 3).to(d) / 6,
                                             torch.ones(2, 3, dtype=torch.complex64, device=d))

    expected = _outcome(run, "cpu")
    got = _outcome(run, "rbln")
    if isinstance(expected, tuple):
        assert got == expected
    else:
        torch.testing.assert_close(got, expected)


# ---- exception types ------------------------------------------------------------------------------------------
EXCEPTION_TYPES = {
    "index_fill_ float index": lambda d: torch.zeros(4, 3, device=d).index_fill_(0, torch.tensor([0.], device=d), 1.),
    "index_copy_ 2-d index": lambda d: torch.zeros(4, 3, device=d).index_copy_(0, _idx(d, [0]), torch.ones(1, 3, device=d)),
    "index_copy_ rank": lambda d: torch.zeros(4, 3, device=d).index_copy_(0, _idx(d, 0), torch.ones(3, device=d)),
    "put_ numel": lambda d: torch.zeros(4, device=d).put_(_idx(d, 0, 1), torch.ones(1, device=d)),
}


@pytest.mark.parametrize("name", EXCEPTION_TYPES)
def test_argument_errors_have_cpus_exception_type(name):
    assert_same_error(EXCEPTION_TYPES[name])


def test_elapsed_time_of_unrecorded_events_raises_value_error():
    start, end = torch.rbln.Event(enable_timing=True), torch.rbln.Event(enable_timing=True)
    with pytest.raises(ValueError, match="Both events must be recorded"):
        start.elapsed_time(end)


def test_set_rng_state_rejects_a_non_byte_tensor():
    state = torch.rbln.get_rng_state()
    with pytest.raises(TypeError, match="RNG state must be a torch.ByteTensor"):
        torch.rbln.set_rng_state(state.float())
    torch.rbln.set_rng_state(state)
    assert torch.equal(torch.rbln.get_rng_state(), state)


# (call, the error's type: CPU's, which is IndexError for an index out of range of take and indexing)
ASYNC_ERRORS = {
    "gather": (lambda d: torch.gather(torch.ones(3, device=d), 0, _idx(d, 5)), RuntimeError),
    "scatter": (lambda d: torch.zeros(3, device=d).scatter_(0, _idx(d, 5), torch.ones(1, device=d)), RuntimeError),
    "take": (lambda d: torch.take(torch.ones(3, device=d), _idx(d, 5)), IndexError),
    "index_add": (lambda d: torch.zeros(3, device=d).index_add_(0, _idx(d, 5), torch.ones(1, device=d)), IndexError),
    "index": (lambda d: torch.ones(3, device=d)[_idx(d, 5)], IndexError),
    "multinomial": (lambda d: torch.multinomial(torch.tensor([-1., 1.], device=d), 1), RuntimeError),
}


@pytest.mark.parametrize("name", ASYNC_ERRORS)
def test_asynchronous_kernel_errors_are_one_line_naming_the_op(name, assert_device_works):
    call, kind = ASYNC_ERRORS[name]
    with pytest.raises(Exception) as cpu:
        call("cpu")
    assert cpu.type is kind
    with pytest.raises(kind) as info:
        call("rbln").cpu()
    message = str(info.value)
    assert "\n" not in message.strip() and "Exception raised from" not in message, message
    assert message.startswith("aten::"), message
    assert_device_works()


# ---- argument checks CPU (and CUDA) make ----------------------------------------------------------------------
def _bools(d):
    return torch.tensor([True, False], device=d)


VALIDATION = {
    "batch_norm mixed weight": lambda d: F.batch_norm(torch.randn(2, 3, 4, device=d), torch.zeros(3, device=d),
                                                      torch.ones(3, device=d),
                                                      torch.ones(3, dtype=torch.float64, device=d),
                                                      torch.zeros(3, device=d), training=True),
    "batch_norm mixed running_mean": lambda d: F.batch_norm(torch.randn(2, 3, 4, device=d),
                                                            torch.zeros(3, dtype=torch.float64, device=d),
                                                            torch.ones(3, device=d), training=False),
    "instance_norm double weight": lambda d: F.instance_norm(torch.randn(2, 3, 4, device=d),
                                                             weight=torch.ones(3, dtype=torch.float64, device=d),
                                                             bias=torch.zeros(3, dtype=torch.float64, device=d)),
    "group_norm half bias": lambda d: F.group_norm(torch.randn(2, 3, 4, device=d), 3, torch.ones(3, device=d),
                                                   torch.zeros(3, dtype=torch.float16, device=d)),
    "addmv self dtype": lambda d: torch.addmv(torch.ones(3, dtype=torch.float64, device=d), torch.ones(3, 4, device=d),
                                              torch.ones(4, device=d)),
    "baddbmm self shape": lambda d: torch.baddbmm(torch.ones(2, 3, 6, device=d), torch.ones(2, 3, 4, device=d),
                                                  torch.ones(2, 4, 5, device=d)),
    "baddbmm 2-d batch1": lambda d: torch.baddbmm(torch.ones(2, 3, 5, device=d), torch.ones(3, 4, device=d),
                                                  torch.ones(2, 4, 5, device=d)),
    "baddbmm batch2 shape": lambda d: torch.baddbmm(torch.ones(2, 3, 5, device=d), torch.ones(2, 3, 4, device=d),
                                                    torch.ones(2, 5, 5, device=d)),
    "baddbmm self dtype": lambda d: torch.baddbmm(torch.ones(2, 3, 5, dtype=torch.float64, device=d),
                                                  torch.ones(2, 3, 4, device=d), torch.ones(2, 4, 5, device=d)),
    "baddbmm batch2 dtype": lambda d: torch.baddbmm(torch.ones(2, 3, 5, device=d), torch.ones(2, 3, 4, device=d),
                                                    torch.ones(2, 4, 5, dtype=torch.float64, device=d)),
    "baddbmm_ smaller self": lambda d: torch.ones(1, 3, 5, device=d).baddbmm_(torch.ones(2, 3, 4, device=d),
                                                                             torch.ones(2, 4, 5, device=d)),
    "addbmm batches": lambda d: torch.addbmm(torch.ones(3, 5, device=d), torch.ones(2, 3, 4, device=d),
                                             torch.ones(3, 4, 5, device=d)),
    "addbmm inner sizes": lambda d: torch.addbmm(torch.ones(3, 5, device=d), torch.ones(2, 3, 4, device=d),
                                                 torch.ones(2, 3, 5, device=d)),
    "addbmm self dtype": lambda d: torch.addbmm(torch.ones(3, 5, dtype=torch.float64, device=d),
                                                torch.ones(2, 3, 4, device=d), torch.ones(2, 4, 5, device=d)),
    "addbmm batch1 dtype": lambda d: torch.addbmm(torch.ones(3, 5, device=d),
                                                  torch.ones(2, 3, 4, dtype=torch.float64, device=d),
                                                  torch.ones(2, 4, 5, device=d)),
    "sub bool": lambda d: _bools(d) - _bools(d),
    "rsub bool": lambda d: torch.rsub(_bools(d), _bools(d)),
    "sub bool scalar": lambda d: _bools(d) - True,
    "dist bool": lambda d: torch.dist(_bools(d), _bools(d)),
    "pairwise_distance bool": lambda d: F.pairwise_distance(_bools(d)[None], _bools(d)[None]),
    "tanhshrink bool": lambda d: F.tanhshrink(_bools(d)),
    "triplet_margin_loss bool": lambda d: F.triplet_margin_loss(_bools(d)[None], _bools(d)[None], _bools(d)[None]),
    "lerp end dtype": lambda d: torch.lerp(torch.ones(3, device=d), torch.ones(3, dtype=torch.float64, device=d), 0.5),
    "lerp weight dtype": lambda d: torch.lerp(torch.ones(3, device=d), torch.ones(3, device=d),
                                              torch.ones(3, dtype=torch.float64, device=d)),
    "heaviside dtypes": lambda d: torch.heaviside(torch.ones(3, device=d), torch.ones(3, dtype=torch.float64, device=d)),
    "isneginf out": lambda d: torch.isneginf(torch.ones(3, device=d), out=torch.empty(3, device=d)),
    "isposinf out": lambda d: torch.isposinf(torch.ones(3, device=d), out=torch.empty(3, device=d)),
    "signbit out": lambda d: torch.signbit(torch.ones(3, device=d), out=torch.empty(3, device=d)),
    "softshrink negative lambda": lambda d: F.softshrink(torch.ones(3, device=d), -1.),
    "ormqr tau": lambda d: torch.ormqr(torch.eye(3, device=d), torch.ones(2, device=d), torch.eye(3, device=d)),
    "index_add shape": lambda d: torch.zeros(4, 3, device=d).index_add_(0, _idx(d, 0), torch.ones(1, 5, device=d)),
    "index_copy shape": lambda d: torch.zeros(4, 3, device=d).index_copy_(1, _idx(d, 0), torch.ones(3, 1, device=d)),
    "index_reduce shape": lambda d: torch.zeros(4, 3, device=d).index_reduce_(0, _idx(d, 0), torch.ones(1, 5, device=d),
                                                                              "amax"),
    "index_put empty index": lambda d: torch.zeros(4, 3, device=d).index_put_(
        (torch.tensor([], dtype=torch.long, device=d),), torch.ones(5, device=d)),
    "scatter_add src rank": lambda d: torch.zeros(4, 3, device=d).scatter_add_(
        0, torch.zeros(2, 3, dtype=torch.long, device=d), torch.ones(6, device=d)),
    "scatter_reduce src rank": lambda d: torch.zeros(4, 3, device=d).scatter_reduce_(
        0, torch.zeros(2, 3, dtype=torch.long, device=d), torch.ones(6, device=d), "sum"),
    "addr_ on 0-dim self": lambda d: torch.tensor(1., device=d).addr_(torch.ones(5, device=d), torch.ones(10, device=d)),
    "bernoulli_ p > 1": lambda d: torch.empty(3, device=d).bernoulli_(1.5),
    "bernoulli tensor p > 1": lambda d: torch.bernoulli(torch.full((3,), 1.5, device=d)),
    "cumsum into bool": lambda d: torch.cumsum(_bools(d), 0, dtype=torch.bool),
    "cumprod into bool out": lambda d: torch.cumprod(_bools(d), 0, out=torch.empty(0, dtype=torch.bool, device=d)),
    "max_pool2d kernel beyond int": lambda d: F.max_pool2d(torch.ones(1, 1, 4, 4, device=d), 2 ** 31),
    "max_pool3d padding beyond int": lambda d: F.max_pool3d(torch.ones(1, 1, 4, 4, 4, device=d), 2, padding=2 ** 31),
    "avg_pool2d stride beyond int": lambda d: F.avg_pool2d(torch.ones(1, 1, 4, 4, device=d), 2, stride=2 ** 31),
    "avg_pool3d kernel beyond int": lambda d: F.avg_pool3d(torch.ones(1, 1, 4, 4, 4, device=d), 2 ** 40),
    "reflection_pad1d empty channels": lambda d: F.pad(torch.ones(1, 0, 4, device=d), (1, 1), mode="reflect"),
    "replication_pad2d empty channels": lambda d: F.pad(torch.ones(1, 0, 3, 3, device=d), (1, 1, 1, 1),
                                                        mode="replicate"),
    "replication_pad3d empty depth": lambda d: F.pad(torch.ones(1, 2, 0, 3, 3, device=d), (1,) * 6, mode="replicate"),
    "interpolate nearest empty channels": lambda d: F.interpolate(torch.ones(1, 0, 3, device=d), size=4),
    "interpolate bilinear empty channels": lambda d: F.interpolate(torch.ones(1, 0, 3, 3, device=d), size=(4, 4),
                                                                   mode="bilinear"),
    "interpolate bicubic empty width": lambda d: F.interpolate(torch.ones(1, 2, 3, 0, device=d), size=(4, 4),
                                                               mode="bicubic"),
    "interpolate nearest3d empty depth": lambda d: F.interpolate(torch.ones(1, 2, 0, 3, 3, device=d), size=(2, 2, 2)),
    "max_pool2d empty height": lambda d: F.max_pool2d(torch.ones(1, 2, 0, 4, device=d), 2),
    "avg_pool2d unbatched empty channels": lambda d: F.avg_pool2d(torch.ones(0, 4, 4, device=d), 2),
    "adaptive_max_pool2d empty height": lambda d: F.adaptive_max_pool2d(torch.ones(1, 2, 0, 4, device=d), 2),
    "adaptive_avg_pool2d empty height": lambda d: F.adaptive_avg_pool2d(torch.ones(1, 2, 0, 4, device=d), 2),
    "adaptive_max_pool3d empty channels": lambda d: F.adaptive_max_pool3d(torch.ones(1, 0, 4, 4, 4, device=d), 2),
    "special.ndtri float16": lambda d: torch.special.ndtri(torch.ones(3, dtype=torch.float16, device=d)),
    "special.bessel_j0 bfloat16": lambda d: torch.special.bessel_j0(torch.ones(3, dtype=torch.bfloat16, device=d)),
    "special.zeta float16": lambda d: torch.special.zeta(torch.ones(3, dtype=torch.float16, device=d),
                                                         torch.ones(3, dtype=torch.float16, device=d)),
}


@pytest.mark.parametrize("name", VALIDATION)
def test_invalid_arguments_raise_like_cpu(name, assert_device_works):
    assert_same_error(VALIDATION[name])
    assert_device_works()


@pytest.mark.parametrize("weight_dtype", [torch.int64, torch.float64, torch.complex64])
def test_convolution_refuses_a_weight_of_another_dtype(weight_dtype):
    def conv(d):
        return F.conv2d(torch.randn(1, 3, 5, 5, device=d), torch.ones(4, 3, 3, 3, dtype=weight_dtype, device=d))

    cpu_error, rbln_error = _outcome(conv, "cpu"), _outcome(conv, "rbln")
    assert isinstance(rbln_error, tuple) and rbln_error[0] is cpu_error[0]
    assert "and weight type" in rbln_error[1] and "should be the same" in rbln_error[1]


def test_addbmm_in_place_resizes_a_smaller_self_like_cpu():
    """CPU's addbmm_ is not structured: a broadcastable self grows to the result, its values broadcast."""
    def grow(d):
        self = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0]], device=d)
        return self.addbmm_(torch.ones(2, 3, 4, device=d), torch.full((2, 4, 5), 0.5, device=d), beta=2)

    with torch.rbln.explain() as ex:
        got = grow("rbln")
    torch.testing.assert_close(got.cpu(), grow("cpu"))
    assert ex.device_ops.get("aten::addbmm_") == 1 and not ex.fallback_ops


def test_cumsum_of_bool_still_scans_in_int64():
    b = torch.tensor([True, False, True])
    with torch.rbln.explain() as ex:
        got = torch.cumsum(b.rbln(), 0)
    assert torch.equal(got.cpu(), torch.cumsum(b, 0))
    assert "aten::cumsum" in ex.device_ops
