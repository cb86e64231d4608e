"""The performance paths against CPU: vectorized float32 kernels (exp, softmax,
log_softmax, layer_norm, row and column sums, max/min, argmax and norms)
under each CPU capability, the threaded full sum, the single-launch cat, the
dense fill_, bmm spread over the batch, parallel copies above 4 MiB, and
.item() after queued work and after a failed kernel.
Values only: nothing here times anything."""
import pytest
import torch
import torch.nn.functional as F

SIZES = [1, 15, 16, 17, 1000, 1024, 4099]  # around the vector widths (8, 16) and their multiples


def close(rbln, cpu, **kw):
    torch.testing.assert_close(rbln.cpu(), cpu, **kw)


@pytest.mark.parametrize("n", SIZES)
def test_exp_contiguous_and_strided(n):
    x = torch.randn(3, n) * 10
    close(torch.exp(x.rbln()), torch.exp(x))
    close(torch.exp(x.rbln().t()), torch.exp(x.t()))
    out = torch.empty(3, n, device="rbln")
    close(torch.exp(x.rbln(), out=out), torch.exp(x))
    special = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 88.8, -104.0, 1e-30])
    close(torch.exp(special.rbln()), torch.exp(special), equal_nan=True)


EXACT_BINARY = {  # (CPU's formula, so bit-identical): a tensor or a Python scalar second operand
    "add": lambda a, b: a + b, "add_alpha": lambda a, b: torch.add(a, b, alpha=0.3),
    "sub_alpha": lambda a, b: torch.sub(a, b, alpha=-1.7), "rsub": lambda a, b: 2.5 - a, "mul": lambda a, b: a * b,
    "mul_scalar": lambda a, b: a * 1.0000001, "div": lambda a, b: a / b, "div_scalar": lambda a, b: a / 0.7,
    "maximum": torch.maximum, "minimum": torch.minimum, "add_": lambda a, b: a.clone().add_(b, alpha=2),
    "mul_scalar_": lambda a, b: a.clone().mul_(3.0),
}
POW_EXPONENTS = [2, 3, -2, 0.5, -0.5, -1, 2.5]  # CPU's special cases, then Sleef's pow


def device_close(fn, *args, **kw):
    """fn on the CPU tensors `args` and on rbln copies of them: same values, nothing fell back."""
    with torch.rbln.explain() as ex:
        actual = fn(*[t.rbln() for t in args])
    assert not ex.fallback_ops, ex.fallback_reasons
    close(actual, fn(*args), **kw)


@pytest.mark.parametrize("n", SIZES)
def test_elementwise_vector_loops(n):
    a, b = torch.randn(2, n) * 3, torch.randn(2, n)
    a.view(-1)[0], b.view(-1)[-1] = float("nan"), -0.0
    for fn in EXACT_BINARY.values():
        device_close(fn, a, b, rtol=0, atol=0, equal_nan=True)
    for e in POW_EXPONENTS:
        device_close(lambda t: t.abs().pow(e), a, equal_nan=True)
    for fn in (torch.relu, torch.abs, torch.neg, torch.reciprocal, torch.sigmoid, F.silu, F.gelu, torch.rsqrt,
               torch.expm1, torch.log1p, torch.sinh):
        device_close(fn, a, equal_nan=True)
        device_close(fn, a.t(), equal_nan=True)  # strided: through the buffer
    device_close(torch.relu, torch.tensor([-0.0, 0.0, -1.0, float("nan")]), rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("n", SIZES + [40000])
def test_conversions_transposes_and_selects(n):
    # float32 <-> bfloat16/float16 (vector conversion, round to nearest even), a transposed matrix made
    # contiguous (blocked copy from 32768 elements), where/masked_fill under a bool mask: all exact
    x = torch.randn(3, n) * 1e3
    x[0, 0], x[-1, -1] = float("inf"), float("nan")
    exact = {"rtol": 0, "atol": 0, "equal_nan": True}
    for dtype in (torch.bfloat16, torch.float16):
        device_close(lambda t: t.to(dtype), x, **exact)
        device_close(lambda t: t.float(), x.to(dtype), **exact)
    for t in (x, x.to(torch.bfloat16), x.double(), x > 0):
        device_close(lambda u: u.t().contiguous(), t, **exact)
    y, mask = torch.randn(3, n), torch.rand(3, n) > 0.5
    device_close(torch.where, mask, x, y, **exact)
    device_close(lambda m, u: torch.where(m, u, 0.5), mask, x, **exact)
    device_close(lambda m, v: torch.where(m, -1.0, v), mask, y, **exact)
    device_close(lambda u, m: u.masked_fill(m, -2.5), x, mask, **exact)
    device_close(lambda u, m: u.clone().masked_fill_(m[0], 7.0), x, mask, **exact)  # a broadcast mask: the general loop


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("fn", [torch.softmax, torch.log_softmax], ids=["softmax", "log_softmax"])
def test_softmax_rows(fn, size):
    x = torch.randn(37, size) * 5
    close(fn(x.rbln(), -1), fn(x, -1))
    close(fn(x.rbln(), 0), fn(x, 0))  # inner != 1: the strided loop
    y = x.clone()
    y[0, 0] = float("nan")
    y[1] = -float("inf")
    close(fn(y.rbln(), -1), fn(y, -1), equal_nan=True)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_rows(n, affine):
    x = torch.randn(9, n) * 3 + 1
    w, b = (torch.randn(n), torch.randn(n)) if affine else (None, None)
    ref = torch.native_layer_norm(x, (n,), w, b, 1e-5)
    got = torch.native_layer_norm(x.rbln(), (n,), w.rbln() if affine else None, b.rbln() if affine else None, 1e-5)
    for g, r in zip(got, ref):
        close(g, r, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.int32])
def test_large_full_sum_and_mean(dtype):
    x = (torch.randn(3 << 18) * 4).to(dtype)  # 786k elements: the threaded path
    tol = {"rtol": 4e-3, "atol": 1e-2} if dtype == torch.float16 else {"rtol": 1e-5, "atol": 1e-3}  # 2 half ulps
    close(x.rbln().sum(), x.sum(), **tol)
    if dtype.is_floating_point:
        close(x.rbln().mean(), x.mean(), rtol=1e-4, atol=1e-4)
    close(x.view(3, -1).rbln().sum(1), x.view(3, -1).sum(1), **tol)
    ones = torch.ones(1 << 20)
    assert ones.rbln().sum().item() == float(1 << 20)


def test_cat_single_launch_and_general_paths():
    a, b = torch.randn(4, 3, 5), torch.randn(4, 2, 5)
    close(torch.cat([a.rbln(), b.rbln()], 1), torch.cat([a, b], 1))
    close(torch.cat([a.rbln(), a.rbln()], 0), torch.cat([a, a], 0))
    close(torch.cat([a.rbln(), b.rbln().transpose(0, 2).contiguous().transpose(0, 2)], 1), torch.cat([a, b], 1))
    close(torch.cat([a.rbln(), b.rbln().double()], 1), torch.cat([a, b.double()], 1))  # promotion: general path
    close(torch.cat([torch.empty(0).rbln(), a.rbln()], 0), torch.cat([torch.empty(0), a], 0))
    close(torch.cat([a.rbln(), torch.empty(4, 0, 5).rbln(), b.rbln()], 1), torch.cat([a, b], 1))
    x, y = torch.randn(1), torch.randn(1)
    close(torch.cat([x.rbln(), y.rbln()]), torch.cat([x, y]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bool, torch.int64])
def test_fill_dense_and_strided(dtype):
    t = torch.zeros(40000, 3, dtype=dtype, device="rbln")
    t.t().fill_(1)  # dense through a transposed view
    assert bool((t.cpu() == 1).all())
    v = torch.zeros(6, 8, dtype=dtype, device="rbln")
    v[:, ::2].fill_(True if dtype == torch.bool else 3)  # not dense: the iterator path
    ref = torch.zeros(6, 8, dtype=dtype)
    ref[:, ::2].fill_(True if dtype == torch.bool else 3)
    close(v, ref)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64])
def test_bmm_batches(dtype):
    a, b = torch.randn(7, 5, 3).to(dtype), torch.randn(7, 3, 4).to(dtype)
    close(torch.bmm(a.rbln(), b.rbln()), torch.bmm(a, b), rtol=1e-2 if dtype == torch.float16 else 1e-5, atol=1e-2)
    close(torch.bmm(a.rbln().transpose(1, 2).contiguous().transpose(1, 2), b.rbln()), torch.bmm(a, b),
          rtol=1e-2 if dtype == torch.float16 else 1e-5, atol=1e-2)


@pytest.mark.parametrize("pinned", [False, True])
def test_large_copies_split_across_threads(pinned):
    x = torch.randn(5 << 20)  # 20 MiB: 1 MiB pieces
    if pinned:
        x = x.pin_memory()
    d = x.to("rbln", non_blocking=pinned)
    e = d.clone()  # device to device
    back = torch.empty_like(x)
    if pinned:
        back = back.pin_memory()
    back.copy_(e, non_blocking=pinned)
    torch.rbln.synchronize()
    assert torch.equal(back, x)


def test_item_after_queued_work_and_after_a_failed_kernel():
    x = torch.zeros(1000, device="rbln")
    for _ in range(100):
        x.add_(1)
    assert x[999].item() == 100.0
    bad = torch.tensor([5], device="rbln")
    with pytest.raises(IndexError, match="index"):  # at the call with RBLN_LAUNCH_BLOCKING=1, else at .item()
        torch.index_select(x, 0, bad * 1000)  # out of range: fails in the kernel
        x[0].item()
    assert x[0].item() == 100.0  # the stream is usable again


@pytest.mark.parametrize("capability", ["default", "avx2"])
def test_vector_kernels_under_lower_cpu_capability(run_python, capability):
    # References in float64: CPU eager's own float32 exp under ATEN_CPU_CAPABILITY=avx2 on an AVX-512
    # machine is off by up to 1.5e-4 relative in one thread's half of the elements in about 1 run of 8
    # (measured with torch alone, torch_rbln not loaded).
    out = run_python("""
        import torch.nn.functional as F
        from torch.testing import assert_close
        x = torch.randn(13, 1029) * 4
        d = x.double()
        assert_close(torch.exp(x.rbln()).cpu(), torch.exp(d).float())
        assert_close(torch.softmax(x.rbln(), -1).cpu(), torch.softmax(d, -1).float())
        assert_close(torch.log_softmax(x.rbln(), -1).cpu(), torch.log_softmax(d, -1).float())
        assert_close(F.layer_norm(x.rbln(), (1029,)).cpu(), F.layer_norm(d, (1029,)).float(), rtol=1e-4, atol=1e-4)
        big = torch.randn(1 << 20)
        assert_close(big.rbln().sum().cpu(), big.double().sum().float(), rtol=1e-5, atol=1e-3)
        assert_close(torch.sigmoid(x.rbln()).cpu(), torch.sigmoid(d).float())
        assert_close(torch.add(x.rbln(), 1.5, alpha=0.5).cpu(), torch.add(d, 1.5, alpha=0.5).float())
        assert_close(x.rbln().pow(2.5).cpu(), d.pow(2.5).float(), equal_nan=True)
        assert_close(torch.softmax(x.rbln(), 0).cpu(), torch.softmax(d, 0).float())
        y = x.clone()
        y[3, 7] = y[5, 1000] = float("nan")  # the vector max/min propagate NaN
        for t in (x, y):  # rows and columns (widths around the vector and tile sizes)
            for dim in (0, 1):
                td = t.double()
                assert_close(t.rbln().sum(dim).cpu(), td.sum(dim).float(), rtol=1e-5, atol=1e-4, equal_nan=True)
                assert_close(t.rbln().amax(dim).cpu(), t.amax(dim), rtol=0, atol=0, equal_nan=True)
                assert_close(t.rbln().amin(dim).cpu(), t.amin(dim), rtol=0, atol=0, equal_nan=True)
                assert_close(t.rbln().argmax(dim).cpu(), t.argmax(dim), rtol=0, atol=0)
                for p in (1, 2):
                    assert_close(torch.linalg.vector_norm(t.rbln(), p, dim).cpu(),
                                 torch.linalg.vector_norm(td, p, dim).float(), rtol=1e-5, atol=1e-4, equal_nan=True)
        print(json.dumps({"ok": True}))
    """, ATEN_CPU_CAPABILITY=capability)
    assert out["ok"]


# Convolution: row-wise im2col/col2im; planes of 100+ outputs run images in
# parallel (each with its own buffer) when there are at least as many as
# threads, the bias as the gemm's starting value; smaller planes gather the
# whole batch into one gemm. Batches of 1 (one threaded gemm) and 3 (uneven).
CONV2D = [  # (in_channels, out_channels, kernel, stride, padding, dilation, groups)
    (4, 6, 3, 1, 1, 1, 1),
    (4, 6, 3, 2, 1, 1, 2),
    (3, 8, 7, 2, 3, 1, 1),  # the ResNet stem
    (4, 6, 1, 1, 0, 1, 1),  # pointwise: no im2col
    (4, 6, 1, 2, 0, 1, 1),  # 1x1 with stride: strided im2col rows
    (4, 4, (2, 3), (2, 1), (3, 0), (1, 2), 4),  # padding past the kernel span, depthwise
    (2, 3, 3, 3, 2, 2, 1),
]


def conv_close(fn, cpu_args, **kw):
    with torch.rbln.explain() as ex:
        got = fn(*[a.rbln() if isinstance(a, torch.Tensor) else a for a in cpu_args], **kw)
    close(got, fn(*cpu_args, **kw), rtol=1e-4, atol=1e-4)
    assert not ex.fallback_ops, ex.fallback_reasons
    assert "aten::convolution_overrideable" in ex.device_ops


@pytest.mark.parametrize("size", [(7, 8), (19, 21)], ids=["thin", "wide"])
@pytest.mark.parametrize("batch", [1, 3, 8])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("cfg", CONV2D, ids=[str(c) for c in CONV2D])
def test_conv2d_forward(cfg, bias, batch, size):
    cin, cout, k, stride, padding, dilation, groups = cfg
    conv = torch.nn.Conv2d(cin, cout, k, stride, padding, dilation, groups, bias=bias)
    x = torch.randn(batch, cin, *size)
    conv_close(F.conv2d, (x, conv.weight.detach(), conv.bias.detach() if bias else None, stride, padding, dilation,
                          groups))


@pytest.mark.parametrize("dims", [1, 3])
def test_conv_1d_3d_forward(dims):
    fn = {1: F.conv1d, 3: F.conv3d}[dims]
    x = torch.randn(3, 4, *[7] * dims, dtype=torch.float64)
    w = torch.randn(6, 2, *[3] * dims, dtype=torch.float64)
    conv_close(fn, (x, w, torch.randn(6, dtype=torch.float64)), stride=2, padding=1, groups=2)


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("cfg", [(1, 0, 0), (2, 1, 1), (3, 2, 1)], ids=["s1", "s2", "s3"])
def test_conv_transpose2d_forward(cfg, batch):
    stride, padding, output_padding = cfg
    x, w = torch.randn(batch, 4, 5, 6), torch.randn(4, 3, 3, 3)
    conv_close(F.conv_transpose2d, (x, w, torch.randn(6)), stride=stride, padding=padding,
               output_padding=output_padding, groups=2)
    conv_close(F.conv_transpose2d, (x, torch.randn(4, 3, 1, 1)), groups=2)  # pointwise, no bias


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("batch", [1, 3])
def test_conv2d_backward(batch, transposed):
    """Input grads scatter (or gather), weight grads sum per-thread partials in a fixed order."""
    x = torch.randn(batch, 4, 8, 7, requires_grad=True)
    w = torch.randn(4, 2, 3, 3, requires_grad=True)  # [out, in/groups] or, transposed, [in, out/groups]
    b = torch.randn(4 if not transposed else 4, requires_grad=True)
    fn = F.conv_transpose2d if transposed else F.conv2d
    kw = {"stride": 2, "padding": 1, "groups": 2}
    grads = []
    for device in ("cpu", "rbln"):
        args = [t.detach().to(device).requires_grad_() for t in (x, w, b)]
        with torch.rbln.explain() as ex:
            out = fn(*args, **kw)
            out.backward(torch.linspace(-1, 1, out.numel(), device=device).view(out.shape))
        grads.append([a.grad.cpu() for a in args])
    for g_rbln, g_cpu in zip(grads[1], grads[0]):
        torch.testing.assert_close(g_rbln, g_cpu, rtol=1e-4, atol=1e-4)
    assert not ex.fallback_ops, ex.fallback_reasons
    assert "aten::convolution_backward_overrideable" in ex.device_ops


LAYOUT_CASES = {  # (input size, weight size, dtype, transposed): the library's and the column kernels' shapes
    "3x3": ((2, 16, 9, 9), (8, 16, 3, 3), torch.float32, False),
    "1x1": ((2, 16, 9, 9), (8, 16, 1, 1), torch.float32, False),
    "stem": ((2, 3, 15, 15), (8, 3, 7, 7), torch.float32, False),
    "transposed": ((2, 4, 6, 6), (4, 3, 3, 3), torch.float32, True),
    "3d": ((2, 4, 5, 5, 5), (6, 4, 3, 3, 3), torch.float32, False),
    "float64": ((2, 4, 6, 6), (6, 4, 3, 3), torch.float64, False),
    "int64": ((2, 4, 6, 6), (6, 4, 3, 3), torch.int64, False),
}


@pytest.mark.parametrize("operand", ["input", "weight"])
@pytest.mark.parametrize("case", list(LAYOUT_CASES))
def test_convolution_results_take_cudas_memory_format(case, operand):
    """A channels_last operand gives channels_last results and gradients (cuDNN's rule, which CPU's
    oneDNN shares; float64 stays contiguous as on CUDA), and torch.compile plans the same strides."""
    x_size, w_size, dtype, transposed = LAYOUT_CASES[case]
    fmt = torch.channels_last if len(x_size) == 4 else torch.channels_last_3d
    x, w = torch.randn(x_size).to(dtype), torch.randn(w_size).to(dtype)
    x, w = (x.contiguous(memory_format=fmt), w) if operand == "input" else (x, w.contiguous(memory_format=fmt))
    channels_last = any(t.is_contiguous(memory_format=fmt) and not t.is_contiguous() for t in (x, w))  # 1x1: same strides
    want = fmt if channels_last and dtype != torch.float64 else torch.contiguous_format
    xr, wr = x.rbln(), w.rbln()
    args = ([1] * (len(x_size) - 2), [1] * (len(x_size) - 2), [1] * (len(x_size) - 2), transposed,
            [0] * (len(x_size) - 2), 1)
    with torch.rbln.explain() as ex:
        out = torch.ops.aten.convolution(xr, wr, None, *args)
    assert "aten::convolution_overrideable" in ex.device_ops and not ex.fallback_ops
    assert out.is_contiguous(memory_format=want)
    expected = torch.ops.aten.convolution(x, w, None, *args)
    if dtype == torch.float32 and len(x_size) == 4:
        assert out.stride() == expected.stride()  # CPU's layout too
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-4, atol=1e-4)
    torch._dynamo.reset()  # one code object across the cases: a fresh compile each
    compiled = torch.compile(lambda a, b: torch.ops.aten.convolution(a, b, None, *args), fullgraph=True)(xr, wr)
    assert compiled.stride() == out.stride()
    torch.testing.assert_close(compiled.cpu(), expected, rtol=1e-4, atol=1e-4)
    if dtype.is_floating_point:
        grad_input, grad_weight, _ = torch.ops.aten.convolution_backward(
            torch.ones_like(out), xr, wr, None, *args, [True, True, False])
        assert grad_input.is_contiguous(memory_format=want) and grad_weight.is_contiguous(memory_format=want)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_contiguous_and_strided(n, approximate):
    """float32 erf-form gelu runs ATen's vector formula (as CPU eager does)."""
    x = torch.randn(3, n) * 4
    with torch.rbln.explain() as ex:
        got = F.gelu(x.rbln(), approximate=approximate)
        got_t = F.gelu(x.rbln().t(), approximate=approximate)
    close(got, F.gelu(x, approximate=approximate))
    close(got_t, F.gelu(x.t(), approximate=approximate))
    assert not ex.fallback_ops and "aten::gelu" in ex.device_ops
    # (not +-inf or near FLT_MAX: CPU eager returns nan at inf, and the vector erf overflows near FLT_MAX)
    special = torch.tensor([0.0, -0.0, float("nan"), 10.0, -10.0, 1e-30, -5.5, 1e4, -1e4] * 3)
    close(F.gelu(special.rbln(), approximate=approximate), F.gelu(special, approximate=approximate), equal_nan=True)


ITEM_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int16,
               torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128]


@pytest.mark.parametrize("dtype", ITEM_DTYPES, ids=str)
def test_item_reads_every_dtype(dtype):
    """.item() reads the element's bytes into a Scalar by dtype (no temporary CPU tensor)."""
    x = (torch.randn(5, dtype=torch.complex128) * 50).to(dtype) if dtype.is_complex else \
        (torch.randn(5) * 50).to(dtype)
    d = x.rbln()
    for i in range(5):
        got, want = d[i].item(), x[i].item()
        assert type(got) is type(want) and (got == want or (got != got and want != want)), (dtype, got, want)
    assert d.sum().item() == x.sum().item() or dtype.is_floating_point or dtype.is_complex


POOL = [  # (kernel, stride, padding, dilation, ceil_mode)
    (3, 2, 1, 1, False),  # the ResNet stem
    (3, 2, 1, 1, True),
    ((2, 3), (1, 2), (1, 1), (2, 1), True),
    (2, 2, 0, 1, False),
]


@pytest.mark.parametrize("cfg", POOL, ids=[str(c) for c in POOL])
def test_pool2d_windows_clipped_to_the_input(cfg):
    """Max pooling walks a row of outputs per in-bounds tap, average pooling each window's in-bounds taps: CPU's
    tap order, so CPU's indices, NaN and tie rules."""
    k, s, p, d, ceil = cfg
    x = torch.randn(3, 5, 11, 10)
    x[0, 0, 0, :4] = float("nan")
    x[1, 0, :3] = float("-inf")  # an all -inf window takes its first tap's index
    x[2, 0, ::2] = 0.5  # ties keep the first tap
    for t in (x, x.mul(4).to(torch.int32)):
        with torch.rbln.explain() as ex:
            got, idx = F.max_pool2d(t.rbln(), k, s, p, d, ceil, return_indices=True)
        want, want_idx = F.max_pool2d(t, k, s, p, d, ceil, return_indices=True)
        close(got, want, equal_nan=True)
        assert torch.equal(idx.cpu(), want_idx)
        assert "aten::max_pool2d_with_indices" in ex.device_ops and not ex.fallback_ops, ex.fallback_reasons
    if d == 1:
        for include_pad in (True, False):
            close(F.avg_pool2d(x.rbln(), k, s, p, ceil, include_pad), F.avg_pool2d(x, k, s, p, ceil, include_pad),
                  equal_nan=True)


CHANNELS_LAST_POOLS = {
    "max_pool2d": lambda t: F.max_pool2d(t, 3, 2, 1, return_indices=True),
    "avg_pool2d": lambda t: F.avg_pool2d(t, 3, 2, 1),
    "adaptive_max_pool2d": lambda t: F.adaptive_max_pool2d(t, (3, 4), return_indices=True),
    "adaptive_avg_pool2d": lambda t: F.adaptive_avg_pool2d(t, (3, 4)),
    "max_pool3d": lambda t: F.max_pool3d(t.unsqueeze(2).expand(-1, -1, 3, -1, -1).contiguous(
        memory_format=torch.channels_last_3d), 2, 1, return_indices=True),
}


@pytest.mark.parametrize("name", CHANNELS_LAST_POOLS)
def test_pooling_keeps_channels_last_as_cpu(name):
    """A channels_last input pools to channels_last results, forward and backward, as on CPU and CUDA (and as
    the meta functions torch.compile plans with say)."""
    fn = CHANNELS_LAST_POOLS[name]
    x = torch.randn(2, 6, 9, 8).contiguous(memory_format=torch.channels_last).requires_grad_()
    xd = x.detach().rbln().contiguous(memory_format=torch.channels_last).requires_grad_()
    want, got = fn(x), fn(xd)
    want, got = (want, got) if isinstance(want, tuple) else ((want,), (got,))
    for w, g in zip(want, got):
        assert g.stride() == w.stride(), (g.stride(), w.stride())
        close(g, w)
    want[0].sum().backward()
    got[0].sum().backward()
    assert xd.grad.stride() == x.grad.stride()
    close(xd.grad, x.grad)
