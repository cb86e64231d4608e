"""Dense linear algebra on the device (kernels/linalg/Linalg.cpp): values, batches, strided inputs, singular inputs'
info and gradients against CPU, with no CPU fallback in the forward or the backward."""
import pytest
import torch

TOL = {torch.float32: {"atol": 1e-4, "rtol": 1e-4}, torch.float64: {"atol": 1e-10, "rtol": 1e-10}}


def general(*shape, gen, dtype):
    """Random matrices with a heavy diagonal: well conditioned, so the factorizations pivot alike everywhere."""
    n = shape[-1]
    return (torch.randn(*shape, generator=gen) + n * torch.eye(shape[-2], n)).to(dtype)


def spd(*shape, gen, dtype):
    m = torch.randn(*shape, generator=gen, dtype=torch.float64)
    return (m @ m.mT + shape[-1] * torch.eye(shape[-1], dtype=torch.float64)).to(dtype)


def rhs(*shape, gen, dtype):
    return torch.randn(*shape, generator=gen).to(dtype)


def outputs(r):
    return list(r) if isinstance(r, (tuple, list)) else [r]


# name: (fn, [(maker, shape)], device ops that must run). Batched and broadcast shapes throughout.
CASES = {
    "solve_triangular": (lambda A, B: torch.linalg.solve_triangular(A.triu(), B, upper=True),
                         [(general, (2, 4, 4)), (rhs, (2, 4, 3))], {"aten::linalg_solve_triangular"}),
    "solve_triangular_right_unit": (
        lambda A, B: torch.linalg.solve_triangular(A.tril(), B, upper=False, left=False, unitriangular=True),
        [(general, (4, 4)), (rhs, (2, 3, 4))], {"aten::linalg_solve_triangular"}),
    "triangular_solve": (lambda A, B: torch.triangular_solve(B, A.triu(), upper=True, transpose=True),
                         [(general, (3, 4, 4)), (rhs, (3, 4, 2))], {"aten::triangular_solve.X"}),
    "lu_factor": (lambda A: torch.linalg.lu_factor(A), [(general, (2, 5, 5))], {"aten::linalg_lu_factor_ex.out"}),
    "lu_factor_wide": (lambda A: torch.linalg.lu_factor_ex(A), [(general, (2, 3, 5))],
                       {"aten::linalg_lu_factor_ex.out"}),
    "lu": (lambda A: torch.linalg.lu(A), [(general, (2, 5, 3))], {"aten::linalg_lu.out"}),
    "lu_unpack": (lambda A: torch.lu_unpack(*torch.linalg.lu_factor(A)), [(general, (3, 4, 4))],
                  {"aten::lu_unpack.out"}),
    "lu_solve": (lambda A, B: torch.linalg.lu_solve(*torch.linalg.lu_factor(A), B),
                 [(general, (2, 4, 4)), (rhs, (2, 4, 3))], {"aten::linalg_lu_solve.out"}),
    "lu_solve_adjoint_right": (lambda A, B: torch.linalg.lu_solve(*torch.linalg.lu_factor(A), B, left=False,
                                                                  adjoint=True),
                               [(general, (4, 4)), (rhs, (2, 3, 4))], {"aten::linalg_lu_solve.out"}),
    "qr": (lambda A: torch.linalg.qr(A), [(general, (2, 5, 3))], {"aten::linalg_qr.out"}),
    "qr_complete_wide": (lambda A: torch.linalg.qr(A, mode="complete"), [(general, (2, 3, 5))],
                         {"aten::linalg_qr.out"}),
    "matrix_exp": (lambda A: torch.linalg.matrix_exp(A), [(rhs, (2, 4, 4))], {"aten::linalg_matrix_exp"}),
    "matrix_exp_scaled": (lambda A: torch.matrix_exp(3 * A), [(rhs, (4, 4))], {"aten::linalg_matrix_exp"}),
    "cholesky": (lambda A: torch.linalg.cholesky(A), [(spd, (2, 4, 4))], {"aten::linalg_cholesky_ex.L"}),
    "cholesky_upper": (lambda A: torch.linalg.cholesky(A, upper=True), [(spd, (4, 4))],
                       {"aten::linalg_cholesky_ex.L"}),
    "cholesky_solve": (lambda A, B: torch.cholesky_solve(B, torch.linalg.cholesky(A)),
                       [(spd, (2, 4, 4)), (rhs, (2, 4, 3))], {"aten::_cholesky_solve_helper"}),
    "solve": (lambda A, B: torch.linalg.solve(A, B), [(general, (2, 4, 4)), (rhs, (2, 4, 3))],
              {"aten::_linalg_solve_ex.result"}),
    "solve_vector_right": (lambda A, B: torch.linalg.solve(A, B, left=False), [(general, (4, 4)), (rhs, (2, 3, 4))],
                           {"aten::_linalg_solve_ex.result"}),
    "solve_vector": (lambda A, b: torch.linalg.solve(A, b), [(general, (2, 4, 4)), (rhs, (2, 4))],
                     {"aten::_linalg_solve_ex.result"}),
    "inv": (lambda A: torch.linalg.inv(A), [(general, (3, 4, 4))], {"aten::linalg_inv_ex.inverse"}),
    "det": (lambda A: torch.linalg.det(A), [(general, (3, 4, 4))], {"aten::_linalg_det.result"}),
    "slogdet": (lambda A: torch.linalg.slogdet(-A), [(general, (3, 4, 4))], {"aten::_linalg_slogdet.sign"}),
    "logdet": (lambda A: torch.logdet(A), [(general, (4, 4))], {"aten::_linalg_slogdet.sign"}),
    "svd": (lambda A: torch.linalg.svd(A, full_matrices=False), [(general, (2, 5, 3))], {"aten::_linalg_svd"}),
    "svd_wide": (lambda A: torch.linalg.svd(A, full_matrices=False), [(general, (3, 5))], {"aten::_linalg_svd"}),
    "svdvals": (lambda A: torch.linalg.svdvals(A), [(general, (2, 4, 4))], {"aten::_linalg_svd"}),
    "pinv": (lambda A: torch.linalg.pinv(A), [(general, (2, 5, 3))], {"aten::_linalg_svd"}),
    "nuclear_norm": (lambda A: torch.linalg.matrix_norm(A, "nuc"), [(general, (3, 4))], {"aten::_linalg_svd"}),
    "eigh": (lambda A: torch.linalg.eigh(A), [(spd, (2, 4, 4))], {"aten::_linalg_eigh"}),
    "eigvalsh_upper": (lambda A: torch.linalg.eigvalsh(A, UPLO="U"), [(spd, (3, 3))], {"aten::_linalg_eigh"}),
}

# How the device sees the inputs: as made, transposed in memory, or every other element of a wider tensor.
LAYOUTS = {
    "contiguous": lambda t: t,
    "transposed": lambda t: t.mT.contiguous().mT if t.dim() >= 2 else t,
    "strided": lambda t: torch.stack([t, t], -1)[..., 0],
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", CASES)
def test_forward_and_gradients_match_cpu_on_device(name, layout, dtype):
    fn, inputs, ops = CASES[name]
    gen = torch.Generator().manual_seed(0)
    xs = [make(*shape, gen=gen, dtype=dtype).requires_grad_() for make, shape in inputs]
    ds = [x.detach().rbln().requires_grad_() for x in xs]
    arrange = LAYOUTS[layout]
    expected = outputs(fn(*[arrange(x) for x in xs]))
    with torch.rbln.explain() as ex:
        actual = outputs(fn(*[arrange(d) for d in ds]))
        torch.rbln.synchronize()
    assert not ex.fallback_ops, ex.fallback_reasons
    assert ops <= set(ex.device_ops), f"expected {ops} on the device, ran {sorted(ex.device_ops)}"
    for a, e in zip(actual, expected, strict=True):
        assert a.dtype == e.dtype and a.shape == e.shape
        torch.testing.assert_close(a.cpu(), e.detach(), **TOL[dtype])
    differentiable = [i for i, e in enumerate(expected) if e.requires_grad]
    grads = [torch.randn(expected[i].shape, generator=gen, dtype=dtype) for i in differentiable]
    want = torch.autograd.grad([expected[i] for i in differentiable], xs, grads)
    with torch.rbln.explain() as ex:
        got = torch.autograd.grad([actual[i] for i in differentiable], ds, [g.rbln() for g in grads])
        torch.rbln.synchronize()
    assert not ex.fallback_ops, ex.fallback_reasons
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g.cpu(), w, **TOL[dtype])


def _same(actual, expected):
    for a, e in zip(outputs(actual), outputs(expected), strict=True):
        torch.testing.assert_close(a.cpu(), e, equal_nan=True)


def _singular():
    a = torch.randn(3, 4, 4, generator=torch.Generator().manual_seed(1))
    a[1, :, 2] = a[1, :, 0]  # batch entry 1: two equal columns
    a[2] = 0
    return a


@pytest.mark.parametrize("fn", [
    lambda a: torch.linalg.lu_factor_ex(a),
    lambda a: torch.linalg.solve_ex(a, torch.ones(a.shape[:-1], device=a.device)),
    lambda a: torch.linalg.inv_ex(a).info,
    lambda a: torch.linalg.det(a),
    lambda a: torch.linalg.slogdet(a),
    lambda a: torch.linalg.cholesky_ex(-a @ a.mT),
], ids=["lu_factor_ex", "solve_ex", "inv_ex", "det", "slogdet", "cholesky_ex"])
def test_singular_inputs_report_info_like_cpu(fn):
    a = _singular()
    expected = fn(a)
    with torch.rbln.explain() as ex:
        actual = fn(a.rbln())
        torch.rbln.synchronize()
    assert not ex.fallback_ops, ex.fallback_reasons
    if isinstance(expected, tuple) and hasattr(expected, "LU"):  # U's values past a zero pivot are arbitrary
        expected, actual = (expected.pivots, expected.info), (actual.pivots, actual.info)
    _same(actual, expected)


@pytest.mark.parametrize("fn", [
    lambda a: torch.linalg.lu_factor(a),
    lambda a: torch.linalg.solve(a, torch.ones(a.shape[:-1], device=a.device)),
    lambda a: torch.linalg.inv(a),
    lambda a: torch.linalg.cholesky(-a @ a.mT),
    lambda a: torch.linalg.solve_triangular(a, torch.ones(3, 4, 2, dtype=torch.float64, device=a.device),
                                            upper=True),
    lambda a: torch.linalg.lu_solve(*torch.linalg.lu_factor(a[0]), a[0].double()),
    lambda a: torch.lu_unpack(a[0], torch.tensor([1, 5, 3, 4], dtype=torch.int32, device=a.device)),
    lambda a: torch.linalg.svd(a / 0),
    lambda a: torch.linalg.eigh(a[0] / 0),
    lambda a: torch.linalg.eigh(a[0], UPLO="X"),
], ids=["lu_factor", "solve", "inv", "cholesky", "solve_triangular_dtypes", "lu_solve_dtypes", "lu_unpack_pivots",
        "svd_non_finite", "eigh_non_finite", "eigh_uplo"])
def test_errors_match_cpu(fn):
    a = _singular()
    try:
        fn(a)
    except RuntimeError as e:
        expected = str(e)
    else:  # solve_triangular takes A's dtype rather than raising
        expected = None
    if expected is None:
        _same(fn(a.rbln()), fn(a))
        return
    with pytest.raises(RuntimeError) as raised:
        fn(a.rbln())
        torch.rbln.synchronize()
    assert expected.splitlines()[0] in str(raised.value)


@pytest.mark.parametrize("op,left,transpose", [
    ("ormqr", True, False), ("ormqr", True, True), ("ormqr", False, False), ("ormqr", False, True),
    ("linalg_householder_product", None, None),
])
def test_householder_reflectors_match_cpu_with_gradients(op, left, transpose):
    """ormqr and householder_product on geqrf's reflectors (geqrf itself runs on the CPU here)."""
    gen = torch.Generator().manual_seed(0)
    reflectors, tau = torch.geqrf(torch.randn(2, 5, 3, generator=gen, dtype=torch.float64))
    if op == "ormqr":
        other = torch.randn(2, 5, 4, generator=gen, dtype=torch.float64)
        inputs = (reflectors, tau, other if left else other.mT.contiguous())
        fn = lambda *t: torch.ormqr(*t, left=left, transpose=transpose)  # noqa: E731
    else:
        inputs, fn = (reflectors, tau), torch.linalg.householder_product
    xs = [t.clone().requires_grad_() for t in inputs]
    ds = [t.detach().rbln().requires_grad_() for t in xs]
    expected = fn(*xs)
    grad = torch.randn(expected.shape, generator=gen, dtype=torch.float64)
    want = torch.autograd.grad(expected, xs, grad)
    with torch.rbln.explain() as ex:
        actual = fn(*ds)
        got = torch.autograd.grad(actual, ds, grad.rbln())
        torch.rbln.synchronize()
    assert not ex.fallback_ops, ex.fallback_reasons
    assert f"aten::{op}" in ex.device_ops
    torch.testing.assert_close(actual.cpu(), expected.detach())
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g.cpu(), w)


@pytest.mark.parametrize("mode", ["complete", "r"])
def test_qr_modes_without_gradients_match_cpu(mode):
    a = torch.randn(3, 6, 4, generator=torch.Generator().manual_seed(0))
    with torch.rbln.explain() as ex:
        actual = torch.linalg.qr(a.rbln(), mode=mode)
    assert not ex.fallback_ops, ex.fallback_reasons
    _same(actual, torch.linalg.qr(a, mode=mode))


@pytest.mark.parametrize("shape", [(3, 0), (0, 4), (2, 0, 0)])
def test_svd_of_empty_matrices_is_cpus(shape):
    """An empty matrix's full U and Vh are identities, as on CPU."""
    a = torch.randn(shape)
    for full in (True, False):
        with torch.rbln.explain() as ex:
            actual = torch.linalg.svd(a.rbln(), full_matrices=full)
        assert not ex.fallback_ops and "aten::_linalg_svd" in ex.device_ops
        for x, e in zip(actual, torch.linalg.svd(a, full_matrices=full), strict=True):
            assert x.shape == e.shape and torch.equal(x.cpu(), e)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=str)
def test_complex_svd_and_eigh_run_on_the_device_with_cpus_values_and_gradients(dtype):
    """LAPACK's complex gesdd/heevd in the device's op library: CPU's values; their backwards on the device."""
    g = torch.Generator().manual_seed(1)
    a = torch.randn(2, 5, 3, dtype=dtype, generator=g)
    h = a.mT.conj() @ a  # Hermitian, distinct eigenvalues
    tol = {"atol": 1e-4, "rtol": 1e-4} if dtype == torch.complex64 else {}
    leaf, cpu_leaf = a.rbln().requires_grad_(), a.clone().requires_grad_()
    with torch.rbln.explain() as ex:
        u, s, vh = torch.linalg.svd(a.rbln(), full_matrices=False)
        w, v = torch.linalg.eigh(h.rbln())
        torch.linalg.svdvals(leaf).sum().backward()
        torch.rbln.synchronize()
    assert not ex.fallback_ops, ex.fallback_reasons
    assert ex.device_ops["aten::_linalg_svd"] >= 2 and ex.device_ops["aten::_linalg_eigh"] == 1
    torch.linalg.svdvals(cpu_leaf).sum().backward()
    assert s.dtype == w.dtype == dtype.to_real()
    torch.testing.assert_close(s.cpu(), torch.linalg.svdvals(a), **tol)
    torch.testing.assert_close(((u * s.to(dtype).unsqueeze(-2)) @ vh).cpu(), a, **tol)
    torch.testing.assert_close(w.cpu(), torch.linalg.eigvalsh(h), **tol)
    torch.testing.assert_close(((v * w.to(dtype).unsqueeze(-2)) @ v.mT.conj()).cpu(), h, **tol)
    torch.testing.assert_close(leaf.grad.cpu(), cpu_leaf.grad, **tol)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=str)
def test_complex_solves_and_inverses_run_on_the_device_and_singular_inputs_raise_as_on_cpu(dtype):
    """LAPACK's complex getrf/getrs in the op library; eig's backward solves with complex matrices through it."""
    g = torch.Generator().manual_seed(4)
    a = torch.randn(2, 4, 4, dtype=dtype, generator=g) + 4 * torch.eye(4, dtype=dtype)
    b = torch.randn(2, 4, 3, dtype=dtype, generator=g)
    m = torch.randn(4, 4, dtype=dtype.to_real(), generator=g)
    leaf, cpu_leaf = m.rbln().requires_grad_(), m.clone().requires_grad_()
    with torch.rbln.explain() as ex:
        x, xv, inv = torch.linalg.solve(a.rbln(), b.rbln()), torch.linalg.solve(a.rbln(), b[..., 0].rbln()), \
            torch.linalg.inv(a.rbln())
        torch.view_as_real(torch.linalg.eigvals(leaf)).pow(2).sum().backward()
        torch.rbln.synchronize()
    assert not ex.fallback_ops, ex.fallback_reasons
    torch.view_as_real(torch.linalg.eigvals(cpu_leaf)).pow(2).sum().backward()
    tol = {"atol": 1e-4, "rtol": 1e-4} if dtype == torch.complex64 else {}
    torch.testing.assert_close(x.cpu(), torch.linalg.solve(a, b), **tol)
    torch.testing.assert_close(xv.cpu(), torch.linalg.solve(a, b[..., 0]), **tol)
    torch.testing.assert_close(inv.cpu(), torch.linalg.inv(a), **tol)
    torch.testing.assert_close(leaf.grad.cpu(), cpu_leaf.grad, **tol)
    with pytest.raises(torch.linalg.LinAlgError, match="singular"):
        torch.linalg.solve(torch.zeros(3, 3, dtype=dtype, device="rbln"), torch.ones(3, dtype=dtype, device="rbln"))
    assert torch.linalg.solve(a[0].rbln(), b[0].rbln()).device.type == "rbln"  # the device stays usable
