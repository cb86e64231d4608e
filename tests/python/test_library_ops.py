"""ops.yaml's `strategy: library` ops (kernels/library/Library.h) and their backward ops on the device: CPU's values and
gradients, no fallback, CUDA's device check, CPU's errors, and no host wait where a meta function sizes the result."""
import pytest
import torch
import torch.nn.functional as F

import torch_rbln  # noqa: F401


def _run(fn, args, on):
    """fn's outputs and the gradients of every floating input that requires grad, on device `on`."""
    args = [a.detach().to(on).requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a for a in args]
    out = fn(*args)
    outs = [o for o in (out if isinstance(out, (tuple, list)) else [out]) if isinstance(o, torch.Tensor)]
    wants = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    grads = []
    if wants:
        differentiable = [o for o in outs if o.requires_grad]
        seeds = [torch.linspace(-1, 1, o.numel(), dtype=o.dtype).reshape(o.shape).to(on) for o in differentiable]
        grads = torch.autograd.grad(differentiable, wants, seeds)
    return [o.detach() for o in outs] + list(grads)


def _check(fn, *args, ops, tol=None):
    expected = _run(fn, args, "cpu")
    with torch.rbln.explain() as ex:
        got = _run(fn, args, "rbln")
        torch.rbln.synchronize()
    assert not ex.fallback_ops, f"fell back: {ex.fallback_reasons}"
    assert set(ops) <= set(ex.device_ops), f"{set(ops) - set(ex.device_ops)} did not run on the device"
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.device.type == "rbln"
        torch.testing.assert_close(g.cpu(), e, **(tol or {}))
    return ex


def _grad(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype).requires_grad_()


def test_eigendecompositions_least_squares_and_qr():
    torch.manual_seed(0)
    a = torch.randn(3, 4, 4)
    ex = _check(lambda x: [*torch.linalg.eig(x), torch.linalg.eigvals(x)], a,
                ops=["aten::linalg_eig", "aten::_linalg_eigvals"])
    assert "data_dependent" not in ex.syncs  # sized by the meta function, no host wait
    _check(torch.linalg.eigvals, torch.randn(5, 5, dtype=torch.complex64), ops=["aten::_linalg_eigvals"])
    tall, b = torch.randn(2, 6, 3), torch.randn(2, 6, 2)
    ex = _check(lambda x, y: torch.linalg.lstsq(x, y, driver="gelsd"), tall, b, ops=["aten::linalg_lstsq"],
                tol={"atol": 1e-4, "rtol": 1e-4})
    assert ex.syncs.get("data_dependent") == 1  # residuals' size is the rank's: the host waits, as on CUDA
    _check(torch.geqrf, torch.randn(5, 3), ops=["aten::geqrf"])
    spd = torch.randn(4, 4)
    spd = spd @ spd.T + 4 * torch.eye(4)
    factor = torch.linalg.cholesky(spd).requires_grad_()
    _check(torch.cholesky_inverse, factor, ops=["aten::cholesky_inverse"], tol={"atol": 1e-4, "rtol": 1e-4})


def test_distances_and_their_gradients():
    torch.manual_seed(1)
    _check(lambda x, y: torch.cdist(x, y, p=1.0), _grad(2, 5, 3), _grad(2, 4, 3),
           ops=["aten::_cdist_forward", "aten::_cdist_backward"])
    _check(lambda x: F.pdist(x, p=3.0), _grad(6, 4), ops=["aten::_pdist_forward", "aten::_pdist_backward"])


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_and_its_gradients(mode):
    torch.manual_seed(2)
    indices, offsets = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), torch.tensor([0, 3, 3, 6])
    weights = torch.rand(8).requires_grad_() if mode == "sum" else None
    _check(lambda w, i, o, p: F.embedding_bag(i, w, o, mode=mode, per_sample_weights=p, padding_idx=2),
           _grad(10, 3), indices, offsets, weights, ops=["aten::_embedding_bag", "aten::_embedding_bag_backward"])
    _check(lambda w, i, o: F.embedding_bag(i, w, o, mode=mode), torch.randn(10, 3, dtype=torch.bfloat16),
           indices, offsets, ops=["aten::_embedding_bag_forward_only"])


def test_ctc_loss_and_its_gradient():
    torch.manual_seed(3)
    log_probs = torch.randn(12, 3, 5).log_softmax(2).requires_grad_()
    targets = torch.randint(1, 5, (3, 4))
    _check(lambda lp, t: F.ctc_loss(lp, t, [12, 10, 8], [4, 3, 2], reduction="sum"), log_probs, targets,
           ops=["aten::_ctc_loss", "aten::_ctc_loss_backward"], tol={"atol": 1e-4, "rtol": 1e-4})


def test_samplers_and_antialiased_resize():
    torch.manual_seed(4)
    grid = (torch.rand(2, 3, 4, 2, 3) * 2.2 - 1.1).requires_grad_()
    _check(lambda x, g: F.grid_sample(x, g, mode="bilinear", padding_mode="border", align_corners=False),
           _grad(2, 2, 5, 4, 3), grid, ops=["aten::grid_sampler_3d", "aten::grid_sampler_3d_backward"])
    grid2d = (torch.rand(2, 4, 3, 2) * 2.2 - 1.1).requires_grad_()  # the 2-d forward is a compile entry
    _check(lambda x, g: F.grid_sample(x, g, mode="bilinear", padding_mode="zeros", align_corners=True),
           _grad(2, 3, 5, 4), grid2d, ops=["aten::grid_sampler_2d_backward"])
    for mode in ("bilinear", "bicubic"):
        _check(lambda x: F.interpolate(x, size=(5, 3), mode=mode, antialias=True), _grad(1, 2, 11, 9),
               ops=[f"aten::_upsample_{mode}2d_aa", f"aten::_upsample_{mode}2d_aa_backward"])
    image = torch.randint(0, 256, (1, 3, 12, 12), dtype=torch.uint8)
    _check(lambda x: F.interpolate(x, size=(5, 7), mode="bilinear", antialias=True), image,
           ops=["aten::_upsample_bilinear2d_aa"])


def test_segment_reduce_and_margin_losses():
    torch.manual_seed(5)
    lengths = torch.tensor([2, 0, 3, 1])
    for reduce in ("sum", "max", "mean"):
        _check(lambda d, n: torch.segment_reduce(d, reduce, lengths=n, initial=0.0), _grad(6, 2), lengths,
               ops=["aten::segment_reduce", "aten::_segment_reduce_backward"])
    target = torch.tensor([0, 3, 1])
    _check(lambda x, t: F.multi_margin_loss(x, t, p=2, margin=0.5), _grad(3, 4), target,
           ops=["aten::multi_margin_loss", "aten::multi_margin_loss_backward"])
    labels = torch.tensor([[3, 0, -1, 1], [1, 2, 3, -1]])
    _check(F.multilabel_margin_loss, _grad(2, 4), labels,
           ops=["aten::multilabel_margin_loss_forward", "aten::multilabel_margin_loss_backward"])


def test_histogram_and_nonzero_static():
    torch.manual_seed(6)
    x = torch.randn(50)
    _check(lambda t: torch.histogram(t, 7, range=(-2.0, 2.0), weight=t.abs()), x, ops=["aten::histogram.bin_ct"])
    _check(lambda t, bins: torch.histogram(t, bins, density=True), x, torch.tensor([-3.0, -0.5, 0.0, 1.0, 3.0]),
           ops=["aten::histogram.bins_tensor"])
    points = torch.randn(40, 3)
    ex = _check(lambda t: torch.histogramdd(t, [3, 4, 2], weight=t[:, 0].abs()), points,
                ops=["aten::_histogramdd_bin_edges", "aten::_histogramdd_from_bin_cts"])
    assert ex.syncs.get("data_dependent") == 2  # neither op has a meta function
    mask = torch.tensor([[0, 1, 0], [1, 1, 0]])
    _check(lambda t: [torch.nonzero_static(t, size=5), torch.nonzero_static(t, size=2, fill_value=7)], mask,
           ops=["aten::nonzero_static"])


def test_devices_checked_and_cpus_errors_leave_the_device_usable():
    weight = torch.randn(10, 3, device="rbln")
    indices = torch.tensor([1, 2, 4], device="rbln")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        F.embedding_bag(indices, weight, torch.tensor([0, 1]))  # offsets left on the CPU
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.segment_reduce(torch.arange(5.0, device="rbln"), "max", lengths=torch.tensor([2, 3]), initial=1)
    with pytest.raises(RuntimeError, match=r"input.size\(-2\) should match other.size\(-2\)"):  # CPU's check, at the call
        torch.linalg.lstsq(torch.randn(4, 3, device="rbln"), torch.randn(5, 2, device="rbln"))
    with pytest.raises(RuntimeError, match="A must be batches of square matrices"):
        torch.linalg.eig(torch.randn(3, 4, device="rbln"))
    got = F.embedding_bag(indices, weight, torch.tensor([0, 1], device="rbln"))
    torch.testing.assert_close(got.cpu(), F.embedding_bag(indices.cpu(), weight.cpu(), torch.tensor([0, 1])))
