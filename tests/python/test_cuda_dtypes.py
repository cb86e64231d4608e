"""Dtypes CUDA supports and CPU does not: they run on the device, checked against CPU in a dtype CPU supports."""
import pytest
import torch

INTEGERS = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]


@pytest.mark.parametrize("dtype", INTEGERS, ids=str)
@pytest.mark.parametrize("bins,lo,hi", [(4, 0, 3), (7, 0, 10), (3, 2.7, 9.9), (5, 0, 0)])
def test_integer_histc_bins_as_cuda_does(dtype, bins, lo, hi):
    """CUDA truncates integer bounds and bins with integer arithmetic; for these ranges that is CPU's float64
    histc of the same values with the truncated bounds."""
    x = torch.randint(0 if dtype == torch.uint8 else -2, 12, (3, 41), generator=torch.Generator().manual_seed(bins),
                      dtype=dtype)
    with pytest.raises(NotImplementedError, match="histogram_cpu"):
        torch.histc(x, bins=bins, min=lo, max=hi)
    expected = torch.histc(x.double(), bins=bins, min=int(lo), max=int(hi)).to(dtype)
    with torch.rbln.explain() as ex:
        actual = torch.histc(x.rbln().t(), bins=bins, min=lo, max=hi)  # a strided input
        out = torch.empty(1, dtype=dtype, device="rbln")
        torch.histc(x.rbln(), bins=bins, min=lo, max=hi, out=out)
    assert actual.dtype == dtype and actual.device.type == "rbln"
    assert torch.equal(actual.cpu(), expected) and torch.equal(out.cpu(), expected)
    assert not ex.fallback_ops and ex.device_ops["aten::histc"] == 1 and ex.device_ops["aten::histc.out"] == 1


def test_integer_histc_counts_expert_ids_like_mixture_of_experts_routing():
    """Hugging Face's grouped-mm experts path: histc(int32 ids, bins=E, min=0, max=E-1) counts tokens per expert."""
    ids = torch.randint(0, 8, (1000,), generator=torch.Generator().manual_seed(0), dtype=torch.int32)
    counts = torch.histc(ids.rbln(), bins=8, min=0, max=7)
    assert torch.equal(counts.cpu(), torch.bincount(ids, minlength=8).int())


def test_floating_histc_matches_cpu_at_edges_nan_and_out_of_range():
    x = torch.tensor([0.0, 0.1, 0.3, 0.7, 1.0, -0.5, 1.5, float("nan"), 1 / 3, 2 / 3])
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        for bins, lo, hi in [(3, 0, 1), (10, 0, 1), (4, 0, 0), (1, -1, 2)]:
            data = x[:-3].to(dtype) if lo == hi else x.to(dtype)  # the data's range, without the NaN
            with torch.rbln.explain() as ex:
                actual = torch.histc(data.rbln(), bins=bins, min=lo, max=hi)
            assert torch.equal(actual.cpu(), torch.histc(data, bins=bins, min=lo, max=hi)), (dtype, bins)
            assert not ex.fallback_ops
    big = torch.randn(300_000, generator=torch.Generator().manual_seed(1))  # several chunks in parallel
    assert torch.equal(torch.histc(big.rbln(), bins=50).cpu(), torch.histc(big, bins=50))


@pytest.mark.parametrize("call", [
    lambda x: torch.histc(x, bins=0),
    lambda x: torch.histc(x, min=2, max=1),
    lambda x: torch.histc(x, min=float("inf"), max=1),
    lambda x: torch.histc(torch.cat([x, x.new_tensor([float("nan")])])),  # the data's range is NaN
    lambda x: torch.histc(x, out=torch.empty(3, dtype=torch.float64, device=x.device)),
], ids=["bins", "range", "finite", "nan-range", "out-dtype"])
def test_histc_errors_as_cpus_and_the_device_stays_usable(call):
    x = torch.randn(10)
    with pytest.raises(RuntimeError) as cpu_error:
        call(x)
    with pytest.raises(RuntimeError) as rbln_error:
        call(x.rbln())
    # CPU's vectorized min reduction prints x86's default NaN, whose sign bit is set, as -nan
    assert str(rbln_error.value) == str(cpu_error.value).replace("-nan", "nan")
    assert torch.equal(torch.histc(x.rbln(), bins=4).cpu(), torch.histc(x, bins=4))


def test_histc_out_on_another_device_gets_cudas_error():
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.histc(torch.randn(10, device="rbln"), out=torch.empty(0))


@pytest.mark.parametrize("fft", [lambda z: torch.fft.fft(z), lambda z: torch.fft.ifft2(z),
                                 lambda z: torch.fft.irfft(z, n=8), lambda z: torch.fft.hfft(z[:, :5], n=8)],
                         ids=["fft", "ifft2", "irfft", "hfft"])
def test_complex32_ffts_run_on_the_device_as_cuffts_do(fft):
    """CPU has no half-precision FFT (MKL and pocketfft refuse complex32); CUDA's cuFFT computes one: here in
    complex64, rounded, which is CPU's complex64 result rounded to the output's half dtype."""
    z = torch.randn(4, 8, dtype=torch.complex64, generator=torch.Generator().manual_seed(0)).to(torch.complex32)
    with pytest.raises(RuntimeError, match="doesn't support tensors of type: Half"):
        fft(z)
    expected = fft(z.to(torch.complex64))
    with torch.rbln.explain() as ex:
        actual = fft(z.rbln())
    assert actual.dtype == (torch.complex32 if expected.is_complex() else torch.float16)
    assert torch.equal(actual.cpu().to(expected.dtype), expected.to(actual.dtype).to(expected.dtype))
    assert not ex.fallback_ops and ex.device_ops


def test_complex32_fft_sizes_must_be_powers_of_two_as_on_cuda():
    z = torch.randn(4, 6, dtype=torch.complex64).to(torch.complex32).rbln()
    with pytest.raises(RuntimeError, match=r"powers of two when computing in half precision, but got a signal size "
                                           r"of\[6\]"):
        torch.fft.fft(z)
    assert torch.equal(torch.fft.fft(z[:, :4]).cpu().to(torch.complex64),
                       torch.fft.fft(z[:, :4].cpu().to(torch.complex64)).to(torch.complex32).to(torch.complex64))


FLOAT16_FFTS = {
    "fft": lambda x: torch.fft.fft(x), "ifft": lambda x: torch.fft.ifft(x, n=4, dim=0),
    "rfft": lambda x: torch.fft.rfft(x), "ihfft": lambda x: torch.fft.ihfft(x, norm="ortho"),
    "irfft": lambda x: torch.fft.irfft(x, n=8), "hfft": lambda x: torch.fft.hfft(x[:, :5], n=8),
    "fft2": lambda x: torch.fft.fft2(x), "rfft2": lambda x: torch.fft.rfft2(x), "ihfft2": lambda x: torch.fft.ihfft2(x),
    "irfft2": lambda x: torch.fft.irfft2(x, s=(4, 8)), "rfftn": lambda x: torch.fft.rfftn(x, s=(8,)),
    "ihfftn": lambda x: torch.fft.ihfftn(x, dim=(0, 1)), "hfftn": lambda x: torch.fft.hfftn(x, s=(4, 8))}


@pytest.mark.parametrize("name", FLOAT16_FFTS)
def test_float16_ffts_run_on_the_device_as_on_cuda(name):
    """torch.fft refuses float16 on every device but CUDA, whose cuFFT transforms it (power-of-two sizes): here
    as complex32, with CUDA's result dtypes, CPU's float32 values within half precision, and gradients."""
    fft = FLOAT16_FFTS[name]
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(len(name))).half()
    with pytest.raises(RuntimeError, match="Unsupported dtype Half|doesn't support tensors of type: Half"):
        fft(x)
    expected = fft(x.float())
    with torch.rbln.explain() as ex:
        actual = fft(x.rbln())
    assert actual.dtype == (torch.complex32 if expected.is_complex() else torch.float16)
    assert actual.shape == expected.shape and not ex.fallback_ops and ex.device_ops
    real = (lambda t: torch.view_as_real(t.resolve_conj()).float()) if expected.is_complex() else (lambda t: t.float())
    torch.testing.assert_close(real(actual.cpu()), real(expected), atol=1e-2, rtol=1e-2)
    leaf = x.rbln().requires_grad_()
    real(fft(leaf)).sum().backward()
    cpu_leaf = x.float().requires_grad_()
    real(fft(cpu_leaf)).sum().backward()
    assert leaf.grad.dtype == torch.float16
    torch.testing.assert_close(leaf.grad.cpu().float(), cpu_leaf.grad, atol=1e-2, rtol=1e-2)


def test_float16_fft_sizes_must_be_powers_of_two_and_other_dtypes_are_unchanged():
    x = torch.randn(3, 6)
    with pytest.raises(RuntimeError, match=r"powers of two when computing in half precision, but got a signal size "
                                           r"of\[6\]"):
        torch.fft.rfft(x.half().rbln())
    assert torch.equal(torch.fft.rfft(x.rbln()).cpu(), torch.fft.rfft(x))
    with torch.inference_mode():  # the device key without autograd's: the same composite
        assert torch.fft.rfft(x[:, :4].half().rbln()).dtype == torch.complex32


COMPLEX32_MATH = ["exp", "log", "sqrt", "rsqrt", "sin", "cos", "tan", "tanh", "atan", "sigmoid", "asin", "acos",
                  "sinh", "cosh", "asinh", "acosh", "atanh", "div"]


@pytest.mark.parametrize("name", COMPLEX32_MATH)
def test_complex32_math_runs_on_the_device_in_complex64_as_cuda_does(name):
    """CUDA computes complex32 math in complex64 (its opmath type) and rounds; CPU has no complex32 kernels."""
    g = torch.Generator().manual_seed(len(name))
    z, w = ((torch.randn(3, 40, dtype=torch.complex64, generator=g) * 0.7).to(torch.complex32) for _ in range(2))
    fn = (lambda a: a / w.t().to(a.device)) if name == "div" else getattr(torch, name)
    with torch.rbln.explain() as ex:
        actual = fn(z.rbln().t())  # a strided input
    assert actual.dtype == torch.complex32 and not ex.fallback_ops and ex.device_ops
    wide = fn(z.to(torch.complex64).rbln().t()).to(torch.complex32)  # the device's complex64 kernel, rounded
    assert torch.equal(torch.view_as_real(actual.cpu()), torch.view_as_real(wide.cpu()))
    expected = fn(z.to(torch.complex64).t())
    torch.testing.assert_close(torch.view_as_real(actual.cpu()).float(),
                               torch.view_as_real(expected.to(torch.complex32)).float(), atol=2e-3, rtol=2e-3)


COMPLEX32_MORE = {
    "add": lambda a, b: a + b * 2, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "lerp": lambda a, b: torch.lerp(a, b, b), "logaddexp": torch.logaddexp, "pow": torch.pow,
    "angle": lambda a, b: torch.angle(a), "prod": lambda a, b: torch.prod(a, 1),
    "fill": lambda a, b: a.clone().fill_(1 - 2j)}


@pytest.mark.parametrize("name", COMPLEX32_MORE)
def test_complex32_binary_math_angle_and_prod_as_on_cuda(name):
    """As the math above: complex32 in complex64, CUDA's result dtypes (angle's is float16), no fallback."""
    fn = COMPLEX32_MORE[name]
    g = torch.Generator().manual_seed(len(name))
    a, b = ((torch.randn(3, 6, dtype=torch.complex64, generator=g) * 0.7).to(torch.complex32) for _ in range(2))
    with torch.rbln.explain() as ex:
        actual = fn(a.rbln(), b.rbln())
    assert not ex.fallback_ops and ex.device_ops
    expected = fn(a.to(torch.complex64), b.to(torch.complex64))
    assert actual.dtype == (torch.complex32 if expected.is_complex() else torch.float16)
    view = (lambda t: torch.view_as_real(t).float()) if expected.is_complex() else (lambda t: t.float())
    torch.testing.assert_close(view(actual.cpu()), view(expected.to(actual.dtype)), atol=2e-3, rtol=2e-3)


def test_bool_abs_and_trace_as_on_cuda():
    """CUDA's abs takes bool (the identity) and its trace counts a bool diagonal as int64; CPU has neither."""
    b = torch.tensor([[True, False, True], [False, True, True], [True, True, False]])
    with pytest.raises(RuntimeError, match="not implemented for 'Bool'"):
        torch.abs(b)
    with torch.rbln.explain() as ex:
        a, t = torch.abs(b.rbln().t()), torch.trace(b.rbln())
    assert a.dtype == torch.bool and torch.equal(a.cpu(), b.t())
    assert t.dtype == torch.int64 and t.item() == 2
    assert not ex.fallback_ops and ex.device_ops["aten::abs"] == 1


@pytest.mark.parametrize("dim", [None, 0, 1])
def test_complex32_sum_accumulates_in_complex64_as_on_cuda(dim):
    z = torch.randn(5, 40, dtype=torch.complex64, generator=torch.Generator().manual_seed(1)).to(torch.complex32)
    with pytest.raises(RuntimeError, match="not implemented for 'ComplexHalf'"):
        z.sum() if dim is None else z.sum(dim)
    with torch.rbln.explain() as ex:
        actual = z.rbln().sum() if dim is None else z.rbln().t().sum(1 - dim)
    wide = z.to(torch.complex64)
    expected = (wide.sum() if dim is None else wide.sum(dim)).to(torch.complex32)
    assert actual.dtype == torch.complex32 and not ex.fallback_ops
    assert torch.equal(torch.view_as_real(actual.cpu()), torch.view_as_real(expected))


HALF_PRECISION_LIBRARY_OPS = {
    "multi_margin_loss": lambda x, t: torch.nn.functional.multi_margin_loss(x, t, margin=0.7),
    "multilabel_margin_loss": lambda x, t: torch.nn.functional.multilabel_margin_loss(x, t.unsqueeze(1).expand(-1, 5).contiguous()),
    "interpolate_antialias": lambda x, t: torch.nn.functional.interpolate(x.view(1, 2, 3, 5), size=(2, 3), mode="bilinear",
                                                                          antialias=True)}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", HALF_PRECISION_LIBRARY_OPS)
def test_half_precision_losses_and_antialiased_upsampling_as_on_cuda(name, dtype):
    """CPU's kernels of these lack float16 and bfloat16; CUDA's compute them in float32 and round: so does rbln
    (`upcast: true` in ops.yaml), forward and backward."""
    fn = HALF_PRECISION_LIBRARY_OPS[name]
    g = torch.Generator().manual_seed(3)
    x, t = torch.randn(6, 5, generator=g).to(dtype), torch.randint(0, 5, (6,), generator=g)
    with pytest.raises(NotImplementedError, match="not implemented for"):
        fn(x, t)
    cpu_leaf = x.float().requires_grad_()
    expected = fn(cpu_leaf, t)
    expected.sum().backward()
    leaf = x.rbln().requires_grad_()
    with torch.rbln.explain() as ex:
        actual = fn(leaf, t.rbln())
        actual.sum().backward()
    assert actual.dtype == dtype and leaf.grad.dtype == dtype and not ex.fallback_ops and ex.device_ops
    torch.testing.assert_close(actual.cpu().float(), expected.detach().to(dtype).float())
    torch.testing.assert_close(leaf.grad.cpu().float(), cpu_leaf.grad.to(dtype).float())
