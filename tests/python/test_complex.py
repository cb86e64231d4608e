"""Complex64/complex128 math on the device: elementwise ops, reductions, matmul (BLAS's cgemm/zgemm) and
conjugate views, against CPU, with no fallback. The generated per-op tests run each entry's OpInfo
samples; these are the compositions users write (spectra, |z|, z^H w)."""
import pytest
import torch

import torch_rbln  # noqa: F401

COMPLEX = [torch.complex64, torch.complex128]


def _pair(*shape, dtype):
    z = torch.randn(*shape, dtype=dtype)
    return z, z.to("rbln")


def _on_device(fn, *args):
    with torch.rbln.explain() as ex:
        out = fn(*args)
        torch.rbln.synchronize()
    assert not ex.fallback_ops, f"fell back: {ex.fallback_reasons}"
    assert ex.device_ops, "nothing ran on the device"
    return out, ex


@pytest.mark.parametrize("dtype", COMPLEX)
def test_elementwise_math_matches_cpu(dtype):
    (a, da), (b, db) = _pair(64, dtype=dtype), _pair(64, dtype=dtype)

    def math(x, y):
        return [x + y, x - 2 * y, x * y, x / y, -x, x.exp(), x.log(), x.sqrt(), x.rsqrt(), x.reciprocal(),
                x.sin(), x.cos(), x.tanh(), x.sigmoid(), x.sgn(), torch.addcmul(x, x, y, value=0.5),
                torch.where(x.real > 0, x, y), x == y, x != x]

    got, ex = _on_device(math, da, db)
    for g, e in zip(got, math(a, b)):
        assert g.device.type == "rbln" and g.dtype == e.dtype
        torch.testing.assert_close(g.cpu(), e)
    assert {"aten::mul.Tensor", "aten::div.Tensor", "aten::exp", "aten::sgn"} <= set(ex.device_ops)


@pytest.mark.parametrize("dtype", COMPLEX)
def test_add_and_sub_multiply_by_alpha_at_extremal_values_as_cpu(dtype):
    """CPU (and CUDA) compute a + alpha * b and a + (-alpha) * b with a complex multiply even for alpha = 1, so an
    infinite part of b makes the other part NaN ((1 + 0i) * (inf + 1i) = inf + nan i); rbln gives the same."""
    big = torch.finfo(torch.float32 if dtype == torch.complex64 else torch.float64).max
    inf = float("inf")
    a = torch.tensor([complex(big, -big), complex(inf, 1), complex(1, -inf), complex(2, 3)], dtype=dtype)
    b = torch.tensor([complex(inf, 1), complex(big, -big), complex(0, inf), complex(-1, 0.5)], dtype=dtype)
    assert torch.add(a, b).isnan().any()  # the case is real: CPU's sum holds NaNs a direct sum would not
    for alpha in (1, 2, 1j):
        for op in (torch.add, torch.sub, torch.rsub):
            expected = op(a, b, alpha=alpha)
            got, _ = _on_device(lambda x, y: op(x, y, alpha=alpha), a.rbln(), b.rbln())
            torch.testing.assert_close(got.cpu(), expected, equal_nan=True, rtol=0, atol=0, msg=f"{op.__name__} {alpha}")


@pytest.mark.parametrize("dtype", COMPLEX)
def test_abs_gives_the_real_magnitude(dtype):
    z, dz = _pair(5, 7, dtype=dtype)
    got, ex = _on_device(torch.abs, dz)
    assert got.dtype == z.abs().dtype == dtype.to_real() and "aten::abs" in ex.device_ops
    torch.testing.assert_close(got.cpu(), z.abs())
    out = torch.empty(0, dtype=dtype, device="rbln")  # a complex out= holds |z| + 0i, as on CPU
    torch.abs(dz, out=out)
    torch.testing.assert_close(out.cpu(), torch.abs(z, out=torch.empty(0, dtype=dtype)))
    with pytest.raises(RuntimeError, match="In-place abs is not supported for complex tensors"):
        dz.abs_()
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type Long"):
        torch.abs(dz, out=torch.empty(0, dtype=torch.long, device="rbln"))


@pytest.mark.parametrize("dtype", COMPLEX)
def test_matmul_and_conjugate_transposes_match_cpu(dtype):
    (a, da), (b, db) = _pair(6, 5, dtype=dtype), _pair(6, 4, dtype=dtype)
    (c, dc), (v, dv) = _pair(3, 5, 4, dtype=dtype), _pair(5, dtype=dtype)

    def products(x, y, batch, vec):
        return [x.mH @ y, x.T @ y.conj(), torch.addmm(x.mH @ x, x.mH, x, beta=0.5, alpha=2j), batch.mH @ batch,
                x.conj() @ vec, x @ vec]

    got, ex = _on_device(products, da, db, dc, dv)
    for g, e in zip(got, products(a, b, c, v)):
        torch.testing.assert_close(g.cpu(), e)
    assert {"aten::mm", "aten::bmm", "aten::addmm"} <= set(ex.device_ops)


@pytest.mark.parametrize("dtype", COMPLEX)
def test_reductions_and_fills_match_cpu(dtype):
    z, dz = _pair(4, 300, dtype=dtype)

    def reduce(x):
        return [x.sum(), x.sum(1), x.mean(0, keepdim=True), x.mean(), torch.zeros_like(x).fill_(1 - 2j),
                x.masked_fill(x.real < 0, 3j), x.conj_physical()]

    got, _ = _on_device(reduce, dz)
    for g, e in zip(got, reduce(z)):
        torch.testing.assert_close(g.cpu(), e)
    out = torch.empty(0, dtype=dtype, device="rbln")
    _, ex = _on_device(lambda: torch.conj_physical(dz.conj(), out=out))
    assert "aten::conj_physical.out" in ex.device_ops
    torch.testing.assert_close(out.cpu(), z)


@pytest.mark.parametrize("dtype", COMPLEX)
def test_scans_products_powers_and_their_gradients_match_cpu(dtype):
    """cumsum, cumprod, prod, pow and angle of complex inputs, forward and backward (cumprod's runs through flip)."""
    z = (torch.randn(3, 7, dtype=dtype, generator=torch.Generator().manual_seed(2)) * 0.9)

    def fn(x):
        return [torch.cumsum(x, 1), torch.cumprod(x, 1), torch.prod(x, 0), torch.pow(x, x.flip(0)), torch.angle(x)]

    leaf, cpu_leaf = z.rbln().requires_grad_(), z.clone().requires_grad_()
    with torch.rbln.explain() as ex:
        got = fn(leaf)
        sum(torch.view_as_real(g).sum() if g.is_complex() else g.sum() for g in got).backward()
        torch.rbln.synchronize()
    assert not ex.fallback_ops, ex.fallback_reasons
    expected = fn(cpu_leaf)
    sum(torch.view_as_real(e).sum() if e.is_complex() else e.sum() for e in expected).backward()
    for g, e in zip(got, expected):
        torch.testing.assert_close(g.detach().cpu(), e.detach())
    torch.testing.assert_close(leaf.grad.cpu(), cpu_leaf.grad)


def test_power_spectrum_runs_on_the_device():
    """|rfft|^2 and fft2 of complex64 input: the spectra users compute, end to end on the device."""
    x, dx = _pair(4, 64, dtype=torch.float32)
    z, dz = _pair(8, 8, dtype=torch.complex64)

    def spectra(signal, image):
        return [torch.fft.rfft(signal).abs() ** 2, torch.fft.fft2(image) * image.conj(), torch.fft.ifft2(image).abs()]

    got, _ = _on_device(spectra, dx, dz)
    for g, e in zip(got, spectra(x, z)):
        torch.testing.assert_close(g.cpu(), e)


@pytest.mark.parametrize("dtype", [torch.float32, *COMPLEX])
def test_python_complex_scalars_and_cpu_complex128_scalars(dtype):
    """A Python complex or a CPU complex128 0-dim tensor (a host scalar, 16 bytes) with a device tensor: the
    scalar's value is read with complex<double>'s alignment (a misaligned load crashed the process)."""
    x, dx = _pair(9, dtype=dtype)
    scalar = torch.tensor(0.5 - 2j, dtype=torch.complex128)

    def scaled(t):
        return [t * 1j, t + (2 - 1j), t * scalar, scalar - t]

    got, _ = _on_device(scaled, dx)
    for g, e in zip(got, scaled(x)):
        torch.testing.assert_close(g.cpu(), e)


def test_polar_backward_matches_cpu():
    """polar's backward multiplies its complex result by 1j (a complex128 host scalar)."""
    r, theta = torch.rand(6) + 0.5, torch.randn(6)
    grad = torch.randn(6, dtype=torch.complex64)

    def grads(device):
        a, b = r.to(device).requires_grad_(), theta.to(device).requires_grad_()
        return torch.autograd.grad(torch.polar(a, b), [a, b], grad.to(device))

    for g, e in zip(grads("rbln"), grads("cpu")):
        assert g.device.type == "rbln"
        torch.testing.assert_close(g.cpu(), e)


def test_complex_and_polar_are_device_kernels_on_broadcast_and_strided_parts():
    """complex and polar write the result's real view with device ops (no compiled plan, no fallback), with
    CPU's broadcasting, out= resizing and dtype errors."""
    real, imag = torch.randn(3, 4), torch.randn(1, 4)
    with torch.rbln.explain() as ex:
        z = torch.complex(real.rbln(), imag.rbln())
        p = torch.polar(real.abs().rbln().t(), imag.expand(3, 4).rbln().t())
        out = torch.empty(2, dtype=torch.complex32, device="rbln")
        h = torch.complex(real.half().rbln(), imag.half().rbln(), out=out)
        torch.rbln.synchronize()
    assert torch.equal(z.cpu(), torch.complex(real, imag))
    torch.testing.assert_close(p.cpu(), torch.polar(real.abs().t(), imag.expand(3, 4).t()))
    assert h is out and h.shape == (3, 4)
    assert torch.equal(torch.view_as_real(h.cpu()), torch.view_as_real(torch.complex(real.half(), imag.half())))
    assert ex.device_ops.get("aten::complex.out") == 2 and ex.device_ops.get("aten::polar.out") == 1
    assert not ex.compiled_ops and not ex.fallback_ops
    for device in ("cpu", "rbln"):
        with pytest.raises(RuntimeError, match="Expected object of scalar type Float but got scalar type Double"):
            torch.complex(torch.randn(2, device=device), torch.randn(2, dtype=torch.float64, device=device))
        with pytest.raises(RuntimeError, match="for argument 'out'"):
            torch.complex(torch.randn(2, device=device), torch.randn(2, device=device),
                          out=torch.empty(2, dtype=torch.complex128, device=device))


def test_count_nonzero_over_dims_is_a_device_composition():
    x = torch.randn(3, 4, 5)
    x[x.abs() < 0.5] = 0
    with torch.rbln.explain() as ex:
        got = [torch.count_nonzero(x.rbln(), dim) for dim in ((0,), (1, 2), (), (-1, 0))]
    for g, dim in zip(got, ((0,), (1, 2), (), (-1, 0))):
        assert g.device.type == "rbln" and torch.equal(g.cpu(), torch.count_nonzero(x, dim))
    assert ex.device_ops.get("aten::count_nonzero.dim_IntList") == 4 and not ex.compiled_ops and not ex.fallback_ops
