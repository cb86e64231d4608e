"""Losses, resampling, padding and the backward kernels of activations and indexing on the device:
forward and gradients against CPU, no fallback."""
import pytest
import torch
import torch.nn.functional as F

T = torch.tensor
CASES = {
    # name: (fn, input shapes, device ops that must run)
    "mse": (lambda x, y: F.mse_loss(x, y), [(4, 5), (4, 5)], {"aten::mse_loss", "aten::mse_loss_backward"}),
    "smooth_l1": (lambda x, y: F.smooth_l1_loss(x, y, beta=0.7), [(4, 5), (4, 5)],
                  {"aten::smooth_l1_loss", "aten::smooth_l1_loss_backward"}),
    "huber_sum": (lambda x, y: F.huber_loss(x, y, reduction="sum", delta=0.5), [(4, 5), (4, 5)],
                  {"aten::huber_loss", "aten::huber_loss_backward"}),
    "logsigmoid": (lambda x: F.logsigmoid(x * 10), [(4, 5)],
                   {"aten::log_sigmoid_forward", "aten::log_sigmoid_backward"}),
    "spatial_cross_entropy": (lambda x: F.cross_entropy(x, T([[[0, 2], [1, 1]], [[2, 0], [0, 1]]]).to(x.device)),
                              [(2, 3, 2, 2)], {"aten::nll_loss2d_forward", "aten::nll_loss2d_backward"}),
    "sequence_cross_entropy": (lambda x: F.cross_entropy(x, T([[0, 2, 1], [1, 1, 0]]).to(x.device), reduction="sum"),
                               [(2, 3, 3)], {"aten::nll_loss2d_forward", "aten::nll_loss2d_backward"}),
    "nearest2d": (lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), [(2, 3, 4, 5)],
                  {"aten::upsample_nearest2d", "aten::upsample_nearest2d_backward"}),
    "nearest1d_size": (lambda x: F.interpolate(x, size=7, mode="nearest"), [(2, 3, 5)],
                       {"aten::upsample_nearest1d", "aten::upsample_nearest1d_backward"}),
    "nearest3d": (lambda x: F.interpolate(x, size=(3, 5, 2), mode="nearest"), [(1, 2, 2, 3, 4)],
                  {"aten::upsample_nearest3d", "aten::upsample_nearest3d_backward"}),
    "reflect2d": (lambda x: F.pad(x, (1, 2, 2, 1), mode="reflect"), [(2, 3, 4, 5)],
                  {"aten::reflection_pad2d", "aten::reflection_pad2d_backward"}),
    "replicate1d": (lambda x: F.pad(x, (3, 1), mode="replicate"), [(2, 3, 4)],
                    {"aten::replication_pad1d", "aten::replication_pad1d_backward"}),
    "replicate3d": (lambda x: F.pad(x, (1, 0, 2, 1, 0, 1), mode="replicate"), [(1, 2, 2, 3, 4)],
                    {"aten::replication_pad3d", "aten::replication_pad3d_backward"}),
    "linear1d": (lambda x: F.interpolate(x, size=9, mode="linear"), [(2, 3, 5)],
                 {"aten::upsample_linear1d", "aten::upsample_linear1d_backward"}),
    "bilinear2d": (lambda x: F.interpolate(x, scale_factor=1.7, mode="bilinear"), [(2, 3, 4, 5)],
                   {"aten::upsample_bilinear2d", "aten::upsample_bilinear2d_backward"}),
    "bilinear2d_align_corners_down": (lambda x: F.interpolate(x, size=(3, 2), mode="bilinear", align_corners=True),
                                      [(1, 2, 5, 7)], {"aten::upsample_bilinear2d", "aten::upsample_bilinear2d_backward"}),
    "trilinear3d": (lambda x: F.interpolate(x, size=(3, 5, 2), mode="trilinear"), [(1, 2, 2, 3, 4)],
                    {"aten::upsample_trilinear3d", "aten::upsample_trilinear3d_backward"}),
    "bicubic2d": (lambda x: F.interpolate(x, size=(7, 3), mode="bicubic"), [(2, 2, 4, 5)],
                  {"aten::upsample_bicubic2d", "aten::upsample_bicubic2d_backward"}),
    "bicubic2d_align_corners": (lambda x: F.interpolate(x, scale_factor=2, mode="bicubic", align_corners=True),
                                [(1, 2, 3, 4)], {"aten::upsample_bicubic2d", "aten::upsample_bicubic2d_backward"}),
    "nearest_exact2d": (lambda x: F.interpolate(x, size=(7, 3), mode="nearest-exact"), [(2, 3, 4, 5)],
                        {"aten::_upsample_nearest_exact2d", "aten::_upsample_nearest_exact2d_backward"}),
    "elu": (lambda x: F.elu(x, alpha=0.7), [(4, 5)], {"aten::elu", "aten::elu_backward"}),
    "celu": (lambda x: F.celu(x, alpha=1.3), [(4, 5)], {"aten::elu_backward"}),
    "selu": (F.selu, [(4, 5)], {"aten::elu_backward"}),
    "elu_result_inplace": (lambda x: F.elu(x * 1, inplace=True), [(4, 5)], {"aten::elu_backward"}),
    "hardshrink": (lambda x: F.hardshrink(x, 0.4), [(4, 5)], {"aten::hardshrink_backward"}),
    "softshrink": (lambda x: F.softshrink(x, 0.4), [(4, 5)], {"aten::softshrink_backward"}),
    "logit": (lambda x: torch.logit(x.sigmoid()), [(4, 5)], {"aten::logit_backward"}),
    "logit_eps": (lambda x: torch.logit(x.sigmoid() * 1.2 - 0.1, eps=0.05), [(4, 5)], {"aten::logit_backward"}),
    "glu": (lambda x: F.glu(x, dim=1), [(3, 6, 2)], {"aten::glu", "aten::glu_backward"}),
    "prelu": (lambda x, w: F.prelu(x, w), [(2, 3, 4), (3,)], {"aten::_prelu_kernel", "aten::_prelu_kernel_backward"}),
    "cross": (lambda x, y: torch.linalg.cross(x, y, dim=1), [(4, 3, 2), (1, 3, 2)], {"aten::linalg_cross"}),
    "binary_cross_entropy": (lambda x: F.binary_cross_entropy(x.sigmoid(), T([[0.0, 1, 0.3], [1, 0, 0.5]]).to(x.device)),
                             [(2, 3)], {"aten::binary_cross_entropy_backward"}),
    "unfold_overlapping": (lambda x: x.unfold(1, 3, 2), [(2, 9, 3)], {"aten::unfold_backward"}),
    "logcumsumexp": (lambda x: torch.logcumsumexp(x * 30, dim=1), [(3, 6)], {"aten::_logcumsumexp"}),
    "channel_shuffle": (lambda x: F.channel_shuffle(x, 3), [(2, 6, 2, 2)], {"aten::channel_shuffle"}),
    "take": (lambda x: torch.take(x, T([[0, -1], [7, 3]]).to(x.device)), [(3, 4)], {"aten::take", "aten::put_"}),
    "index_fill": (lambda x: x.index_fill(1, T([0, 2]).to(x.device), -1.5), [(3, 4)], {"aten::index_fill_.int_Scalar"}),
    "index_reduce_prod": (lambda x, s: x.index_reduce(0, T([0, 2, 0]).to(x.device), s, "prod"), [(3, 2), (3, 2)],
                          {"aten::index_reduce"}),
    "sgn": (torch.sgn, [(4, 5)], {"aten::sgn", "aten::_efficientzerotensor"}),
    "norm": (lambda x: torch.ops.aten.norm.ScalarOpt_dim(x, 3, [1]), [(4, 5)], {"aten::norm.ScalarOpt_dim"}),
    "nansum": (lambda x: torch.nansum(x.masked_fill(x > 1, float("nan")), dim=0), [(4, 5)], {"aten::nansum"}),
    "trace": (torch.trace, [(4, 5)], {"aten::trace"}),
    "vdot": (torch.vdot, [(5,), (5,)], {"aten::vdot"}),
    "max_unpool2d": (lambda x: F.max_unpool2d(*F.max_pool2d(x, 2, return_indices=True), 2), [(2, 3, 4, 6)],
                     {"aten::max_unpool2d"}),
    "max_unpool3d": (lambda x: F.max_unpool3d(*F.max_pool3d(x, 2, return_indices=True), 2), [(1, 2, 4, 4, 2)],
                     {"aten::max_unpool3d"}),
    "masked_scatter": (lambda x, s: x.masked_scatter(T([[True, False, True]]).to(x.device), s), [(2, 3), (4,)],
                       {"aten::masked_scatter_"}),
}


@pytest.mark.parametrize("name", CASES)
def test_forward_and_gradients_match_cpu_on_device(name):
    fn, shapes, ops = CASES[name]
    gen = torch.Generator().manual_seed(0)
    xs = [torch.randn(s, generator=gen, requires_grad=True) for s in shapes]
    ds = [x.detach().rbln().requires_grad_() for x in xs]
    expected = fn(*xs)
    grad = torch.randn(expected.shape, generator=gen)
    expected.backward(grad)
    with torch.rbln.explain() as ex:
        actual = fn(*ds)
        actual.backward(grad.rbln())
    torch.testing.assert_close(actual.cpu(), expected.detach())
    for x, d in zip(xs, ds):
        torch.testing.assert_close(d.grad.cpu(), x.grad)
    assert not ex.fallback_ops, ex.fallback_reasons
    assert ops <= set(ex.device_ops), sorted(ex.device_ops)


def test_reflection_pad_larger_than_input_names_the_problem(assert_device_works):
    with pytest.raises(RuntimeError, match="Padding size should be less than the corresponding input dimension"):
        F.pad(torch.randn(1, 2, 3).rbln(), (3, 0), mode="reflect")
    assert_device_works()


def test_spatial_nll_loss_rejects_mismatched_target():
    with pytest.raises(RuntimeError, match=r"size mismatch \(got input: \[2, 3, 2, 2\]"):
        F.nll_loss(torch.randn(2, 3, 2, 2).rbln(), torch.zeros(2, 3, 2, dtype=torch.long).rbln())


@pytest.mark.parametrize("n,m", [(3, 5), (4, 4), (0, 2)])
def test_eye_on_device(n, m):
    with torch.rbln.explain() as ex:
        actual = torch.eye(n, m, device="rbln")
    torch.testing.assert_close(actual.cpu(), torch.eye(n, m))
    assert not ex.fallback_ops and "aten::eye.m_out" in ex.device_ops


def test_max_unpool_with_an_index_outside_the_output_names_it(assert_device_works):
    x = torch.randn(1, 1, 2, 2).rbln()
    with pytest.raises(RuntimeError, match="Found an invalid max index: 16"):
        F.max_unpool2d(x, torch.tensor([[[[0, 1], [2, 16]]]]).rbln(), 2).cpu()
    assert_device_works()


def test_take_out_of_range_names_the_index(assert_device_works):
    # Indices live on the device: the error surfaces at the next sync, as on CUDA.
    with pytest.raises(IndexError, match="out of range: tried to access index 12 on a tensor of 12 elements"):
        torch.take(torch.randn(3, 4).rbln(), torch.tensor([12]).rbln()).cpu()
    assert_device_works()
