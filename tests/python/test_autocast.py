"""Autocast on rbln (issue 5 section 6).

runtime/device/RBLNAutocast.cpp registers PyTorch's standard op lists for the
AutocastPrivateUse1 key, with the policies CUDA uses: lower_precision_fp
(conv, matmul family, linear, RNN cells, attention) run in the autocast dtype;
fp32 ops (pointwise transcendental functions, norms, losses, upsampling) and
fp32_set_opt_dtype reductions run in float32; promote ops run in the widest
input type. Op by op, in bfloat16 and float16 autocast, each registered op is
called from Python with small inputs: its output dtype must follow the policy
(read from PyTorch's own list macros in ATen/autocast_mode.h) and its value must
match CPU running the op, without autocast, on inputs cast the way the policy
casts them. Then GradScaler("rbln") in a training loop, and the AMP API.
"""
from __future__ import annotations

import math
import re
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from codegen.registry import load
from torch_rbln.testing import TOLERANCES

OPS_YAML_TOLERANCES = {e.func: e.tolerance for e in load(str(Path(__file__).resolve().parents[2] / "ops.yaml"))}

LOW = [torch.bfloat16, torch.float16]


# ---- the policy of each registered op, from PyTorch's list macros --------------------------------
def _policies() -> dict[str, str]:
    header = Path(torch.__file__).parent / "include" / "ATen" / "autocast_mode.h"
    text = header.read_text()
    lists = {"AT_FORALL_LOWER_PRECISION_FP": "lower_precision_fp", "AT_FORALL_FP32": "fp32",
             "AT_FORALL_FP32_SET_OPT_DTYPE": "fp32_set_opt_dtype", "AT_FORALL_PROMOTE": "promote"}
    out = {}
    for macro, policy in lists.items():
        body = re.search(rf"#define {macro}\(_\)(.*?)\n\n", text, re.S).group(1)
        for name, overload in re.findall(r"_\((\w+)(?:,\s*(\w+))?\)", body):
            out[f"aten::{name}" + (f".{overload}" if overload else "")] = policy
    body = re.search(r"#define AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE\(_\)(.*?)\n\n", text, re.S).group(1)
    for name in re.findall(r'"(\w+\.\w+)"', body):  # norm.Scalar, norm.ScalarOpt_dim: fp32_append_dtype
        out[f"aten::{name}"] = "fp32"
    return out


POLICY = _policies()


# ---- op table: the registered op -> (call, CPU float32 inputs) ------------------------------------
def _t(*shape, lo=-2.0, hi=2.0, seed=0):
    g = torch.Generator().manual_seed(seed + 17 * len(shape) + sum(shape))
    return torch.rand(shape, generator=g) * (hi - lo) + lo


def _pos(*shape, seed=0):
    return _t(*shape, lo=0.2, hi=3.0, seed=seed)


def _sign(*shape, seed=0):
    return torch.where(_t(*shape, seed=seed) > 0, 1.0, -1.0)


def _idx(high, *shape, seed=0):
    return torch.randint(0, high, shape, generator=torch.Generator().manual_seed(seed))


def _interp(mode, dims, **kw):
    shape = (1, 2) + (4,) * dims
    return lambda x: F.interpolate(x, scale_factor=2, mode=mode, **kw), lambda: (_t(*shape),)


CONV = (1, 1), (0, 0), (1, 1)
TABLE = {
    # lower_precision_fp
    "aten::_convolution.deprecated": (
        lambda x, w, b: torch._convolution(x, w, b, *CONV, False, (0, 0), 1, False, True, True),
        lambda: (_t(2, 3, 5, 5), _t(4, 3, 3, 3, seed=1), _t(4, seed=2))),
    "aten::_convolution": (
        lambda x, w, b: torch._convolution(x, w, b, *CONV, False, (0, 0), 1, False, True, True, True),
        lambda: (_t(2, 3, 5, 5), _t(4, 3, 3, 3, seed=1), _t(4, seed=2))),
    "aten::conv1d": (F.conv1d, lambda: (_t(2, 3, 8), _t(4, 3, 3, seed=1))),
    "aten::conv2d": (F.conv2d, lambda: (_t(2, 3, 6, 6), _t(4, 3, 3, 3, seed=1), _t(4, seed=2))),
    "aten::conv3d": (F.conv3d, lambda: (_t(1, 2, 4, 4, 4), _t(3, 2, 2, 2, 2, seed=1))),
    "aten::conv_tbc": (torch.conv_tbc, lambda: (_t(5, 2, 3), _t(3, 3, 4, seed=1), _t(4, seed=2))),
    "aten::conv_transpose1d": (F.conv_transpose1d, lambda: (_t(2, 3, 5), _t(3, 4, 3, seed=1))),
    "aten::conv_transpose2d.input": (F.conv_transpose2d, lambda: (_t(2, 3, 4, 4), _t(3, 4, 3, 3, seed=1))),
    "aten::conv_transpose3d.input": (F.conv_transpose3d, lambda: (_t(1, 2, 3, 3, 3), _t(2, 3, 2, 2, 2, seed=1))),
    "aten::convolution": (lambda x, w, b: torch.convolution(x, w, b, *CONV, False, (0, 0), 1),
                          lambda: (_t(2, 3, 5, 5), _t(4, 3, 3, 3, seed=1), _t(4, seed=2))),
    "aten::prelu": (torch.prelu, lambda: (_t(2, 3, 4), _t(3, seed=1))),
    "aten::addmm": (torch.addmm, lambda: (_t(4, 5), _t(4, 6, seed=1), _t(6, 5, seed=2))),
    "aten::addmv": (torch.addmv, lambda: (_t(4), _t(4, 6, seed=1), _t(6, seed=2))),
    "aten::addr": (torch.addr, lambda: (_t(4, 5), _t(4, seed=1), _t(5, seed=2))),
    "aten::matmul": (torch.matmul, lambda: (_t(3, 4, 6), _t(6, 5, seed=1))),
    "aten::einsum": (lambda a, b: torch.einsum("bij,bjk->bik", a, b), lambda: (_t(2, 3, 4), _t(2, 4, 5, seed=1))),
    "aten::mm": (torch.mm, lambda: (_t(4, 6), _t(6, 5, seed=1))),
    "aten::mv": (torch.mv, lambda: (_t(4, 6), _t(6, seed=1))),
    "aten::linalg_vecdot": (torch.linalg.vecdot, lambda: (_t(3, 6), _t(3, 6, seed=1))),
    "aten::linear": (F.linear, lambda: (_t(3, 6), _t(4, 6, seed=1), _t(4, seed=2))),
    "aten::addbmm": (torch.addbmm, lambda: (_t(3, 5), _t(2, 3, 4, seed=1), _t(2, 4, 5, seed=2))),
    "aten::baddbmm": (torch.baddbmm, lambda: (_t(2, 3, 5), _t(2, 3, 4, seed=1), _t(2, 4, 5, seed=2))),
    "aten::bmm": (torch.bmm, lambda: (_t(2, 3, 4), _t(2, 4, 5, seed=1))),
    "aten::chain_matmul": (torch.chain_matmul, lambda: (_t(3, 4), _t(4, 5, seed=1), _t(5, 2, seed=2))),
    "aten::linalg_multi_dot": (lambda *m: torch.linalg.multi_dot(list(m)),
                               lambda: (_t(3, 4), _t(4, 5, seed=1), _t(5, 2, seed=2))),
    "aten::lstm_cell": (lambda x, h, c, *w: torch.lstm_cell(x, (h, c), *w),
                        lambda: (_t(3, 4), _t(3, 5, seed=1), _t(3, 5, seed=2), _t(20, 4, seed=3), _t(20, 5, seed=4),
                                 _t(20, seed=5), _t(20, seed=6))),
    "aten::gru_cell": (torch.gru_cell, lambda: (_t(3, 4), _t(3, 5, seed=1), _t(15, 4, seed=3), _t(15, 5, seed=4),
                                                _t(15, seed=5), _t(15, seed=6))),
    "aten::rnn_tanh_cell": (torch.rnn_tanh_cell, lambda: (_t(3, 4), _t(3, 5, seed=1), _t(5, 4, seed=2),
                                                          _t(5, 5, seed=3), _t(5, seed=4), _t(5, seed=5))),
    "aten::rnn_relu_cell": (torch.rnn_relu_cell, lambda: (_t(3, 4), _t(3, 5, seed=1), _t(5, 4, seed=2),
                                                          _t(5, 5, seed=3), _t(5, seed=4), _t(5, seed=5))),
    "aten::scaled_dot_product_attention": (
        F.scaled_dot_product_attention, lambda: (_t(2, 3, 4, 8), _t(2, 3, 5, 8, seed=1), _t(2, 3, 5, 8, seed=2))),
    # fp32
    "aten::acos": (torch.acos, lambda: (_t(8, lo=-0.9, hi=0.9),)),
    "aten::asin": (torch.asin, lambda: (_t(8, lo=-0.9, hi=0.9),)),
    "aten::cosh": (torch.cosh, lambda: (_t(8),)),
    "aten::erfinv": (torch.erfinv, lambda: (_t(8, lo=-0.9, hi=0.9),)),
    "aten::exp": (torch.exp, lambda: (_t(8),)),
    "aten::expm1": (torch.expm1, lambda: (_t(8),)),
    "aten::log": (torch.log, lambda: (_pos(8),)),
    "aten::log10": (torch.log10, lambda: (_pos(8),)),
    "aten::log2": (torch.log2, lambda: (_pos(8),)),
    "aten::log1p": (torch.log1p, lambda: (_t(8, lo=-0.5, hi=3.0),)),
    "aten::reciprocal": (torch.reciprocal, lambda: (_pos(8),)),
    "aten::rsqrt": (torch.rsqrt, lambda: (_pos(8),)),
    "aten::sinh": (torch.sinh, lambda: (_t(8),)),
    "aten::tan": (torch.tan, lambda: (_t(8, lo=-1.2, hi=1.2),)),
    "aten::pow.Tensor_Scalar": (lambda x: torch.pow(x, 1.7), lambda: (_pos(8),)),
    "aten::pow.Tensor_Tensor": (torch.pow, lambda: (_pos(8), _t(8, lo=-1.0, hi=1.0, seed=1))),
    "aten::pow.Scalar": (lambda x: torch.pow(1.7, x), lambda: (_t(8),)),
    "aten::softplus": (F.softplus, lambda: (_t(8),)),
    "aten::layer_norm": (lambda x, w, b: F.layer_norm(x, (8,), w, b), lambda: (_t(3, 8), _t(8, seed=1), _t(8, seed=2))),
    "aten::native_layer_norm": (lambda x, w, b: torch.native_layer_norm(x, (8,), w, b, 1e-5)[0],
                                lambda: (_t(3, 8), _t(8, seed=1), _t(8, seed=2))),
    "aten::rms_norm": (lambda x, w: F.rms_norm(x, (8,), w), lambda: (_t(3, 8), _t(8, seed=1))),
    "aten::group_norm": (lambda x, w, b: F.group_norm(x, 2, w, b), lambda: (_t(2, 4, 3), _t(4, seed=1), _t(4, seed=2))),
    "aten::frobenius_norm.dim": (lambda x: torch.frobenius_norm(x, (0, 1)), lambda: (_t(3, 4),)),
    "aten::nuclear_norm": (torch.nuclear_norm, lambda: (_t(4, 4),)),
    "aten::nuclear_norm.dim": (lambda x: torch.nuclear_norm(x, dim=(1, 2)), lambda: (_t(2, 4, 4),)),
    "aten::cosine_similarity": (F.cosine_similarity, lambda: (_t(3, 8), _t(3, 8, seed=1))),
    "aten::poisson_nll_loss": (F.poisson_nll_loss, lambda: (_t(3, 4), _pos(3, 4, seed=1))),
    "aten::cosine_embedding_loss": (F.cosine_embedding_loss, lambda: (_t(3, 8), _t(3, 8, seed=1), _sign(3, seed=2))),
    "aten::nll_loss": (F.nll_loss, lambda: (_t(4, 5), _idx(5, 4))),
    "aten::nll_loss2d": (F.nll_loss, lambda: (_t(2, 5, 3, 3), _idx(5, 2, 3, 3))),
    "aten::hinge_embedding_loss": (F.hinge_embedding_loss, lambda: (_t(3, 4), _sign(3, 4, seed=1))),
    "aten::kl_div": (lambda a, b: F.kl_div(a, b, reduction="batchmean"),
                     lambda: (_t(3, 4, lo=-3, hi=-0.1), _t(3, 4, lo=0.05, hi=0.9, seed=1))),
    "aten::l1_loss": (F.l1_loss, lambda: (_t(3, 4), _t(3, 4, seed=1))),
    "aten::smooth_l1_loss": (F.smooth_l1_loss, lambda: (_t(3, 4), _t(3, 4, seed=1))),
    "aten::huber_loss": (F.huber_loss, lambda: (_t(3, 4), _t(3, 4, seed=1))),
    "aten::mse_loss": (F.mse_loss, lambda: (_t(3, 4), _t(3, 4, seed=1))),
    "aten::margin_ranking_loss": (F.margin_ranking_loss, lambda: (_t(5), _t(5, seed=1), _sign(5, seed=2))),
    "aten::multilabel_margin_loss": (F.multilabel_margin_loss,
                                     lambda: (_t(3, 4), torch.tensor([[3, 0, -1, 1], [0, 1, 2, 3], [1, -1, 0, 0]]))),
    "aten::soft_margin_loss": (F.soft_margin_loss, lambda: (_t(3, 4), _sign(3, 4, seed=1))),
    "aten::triplet_margin_loss": (F.triplet_margin_loss, lambda: (_t(3, 4), _t(3, 4, seed=1), _t(3, 4, seed=2))),
    "aten::multi_margin_loss": (F.multi_margin_loss, lambda: (_t(3, 5), _idx(5, 3))),
    "aten::binary_cross_entropy_with_logits": (F.binary_cross_entropy_with_logits,
                                               lambda: (_t(3, 4), _t(3, 4, lo=0.0, hi=1.0, seed=1))),
    "aten::dist": (torch.dist, lambda: (_t(3, 4), _t(3, 4, seed=1))),
    "aten::pdist": (F.pdist, lambda: (_t(5, 3),)),
    "aten::cdist": (torch.cdist, lambda: (_t(4, 3), _t(5, 3, seed=1))),
    "aten::renorm": (lambda x: torch.renorm(x, 2, 0, 1.0), lambda: (_t(3, 4),)),
    "aten::logsumexp": (lambda x: torch.logsumexp(x, 1), lambda: (_t(3, 4),)),
    "aten::upsample_nearest1d": _interp("nearest", 1),
    "aten::_upsample_nearest_exact1d": _interp("nearest-exact", 1),
    "aten::upsample_nearest2d": _interp("nearest", 2),
    "aten::_upsample_nearest_exact2d": _interp("nearest-exact", 2),
    "aten::upsample_nearest3d": _interp("nearest", 3),
    "aten::_upsample_nearest_exact3d": _interp("nearest-exact", 3),
    "aten::upsample_linear1d": _interp("linear", 1),
    "aten::upsample_bilinear2d": _interp("bilinear", 2),
    "aten::_upsample_bilinear2d_aa": _interp("bilinear", 2, antialias=True),
    "aten::upsample_trilinear3d": _interp("trilinear", 3),
    "aten::upsample_bicubic2d": _interp("bicubic", 2),
    "aten::_upsample_bicubic2d_aa": _interp("bicubic", 2, antialias=True),
    "aten::norm.Scalar": (lambda x: torch.ops.aten.norm.Scalar(x, 2), lambda: (_t(3, 4),)),
    "aten::norm.ScalarOpt_dim": (lambda x: torch.ops.aten.norm.ScalarOpt_dim(x, 2, [1]), lambda: (_t(3, 4),)),
    # fp32_set_opt_dtype
    "aten::prod": (torch.prod, lambda: (_t(6, lo=0.5, hi=1.5),)),
    "aten::prod.dim_int": (lambda x: torch.prod(x, 1), lambda: (_t(3, 4, lo=0.5, hi=1.5),)),
    "aten::softmax.int": (lambda x: torch.softmax(x, 1), lambda: (_t(3, 4),)),
    "aten::log_softmax.int": (lambda x: torch.log_softmax(x, 1), lambda: (_t(3, 4),)),
    "aten::cumprod": (lambda x: torch.cumprod(x, 0), lambda: (_t(6, lo=0.5, hi=1.5),)),
    "aten::cumsum": (lambda x: torch.cumsum(x, 0), lambda: (_t(6),)),
    "aten::linalg_vector_norm": (torch.linalg.vector_norm, lambda: (_t(3, 4),)),
    "aten::linalg_matrix_norm": (lambda x: torch.linalg.matrix_norm(x, ord=1), lambda: (_t(3, 4),)),
    "aten::linalg_matrix_norm.str_ord": (torch.linalg.matrix_norm, lambda: (_t(3, 4),)),
    "aten::sum": (torch.sum, lambda: (_t(3, 4),)),
    "aten::sum.dim_IntList": (lambda x: torch.sum(x, 1), lambda: (_t(3, 4),)),
    # promote
    "aten::addcdiv": (torch.addcdiv, lambda: (_t(6), _t(6, seed=1), _pos(6, seed=2))),
    "aten::addcmul": (torch.addcmul, lambda: (_t(6), _t(6, seed=1), _t(6, seed=2))),
    "aten::atan2": (torch.atan2, lambda: (_t(6), _t(6, seed=1))),
    "aten::bilinear": (F.bilinear, lambda: (_t(3, 4), _t(3, 5, seed=1), _t(6, 4, 5, seed=2), _t(6, seed=3))),
    "aten::cross": (lambda a, b: torch.cross(a, b, dim=1), lambda: (_t(3, 3), _t(3, 3, seed=1))),
    "aten::dot": (torch.dot, lambda: (_t(6), _t(6, seed=1))),
    "aten::vdot": (torch.vdot, lambda: (_t(6), _t(6, seed=1))),
    "aten::grid_sampler": (lambda x, g: torch.grid_sampler(x, g, 0, 0, False),
                           lambda: (_t(1, 2, 4, 4), _t(1, 3, 3, 2, lo=-1, hi=1, seed=1))),
    "aten::index_put": (lambda x, i, v: torch.index_put(x, (i,), v), lambda: (_t(5), torch.tensor([1, 3]), _t(2, seed=1))),
    "aten::tensordot": (lambda a, b: torch.tensordot(a, b, dims=2), lambda: (_t(2, 3, 4), _t(3, 4, 2, seed=1))),
    "aten::scatter_add": (lambda x, i, s: torch.scatter_add(x, 1, i, s),
                          lambda: (_t(3, 4), _idx(4, 3, 2), _t(3, 2, seed=1))),
}
# Registered ops that cannot be called on rbln (nor on CPU): not rbln's to fix.
NOT_CALLABLE = {
    "aten::_scaled_dot_product_flash_attention": "a CUDA-only ATen op: CPU has no kernel for it "
                                                 "(its CPU variant is _scaled_dot_product_flash_attention_for_cpu)",
    "aten::_thnn_fused_lstm_cell": "no CPU kernel to compare with: covered by aten::lstm_cell above and by "
                                   "nn.LSTM in test_training.py",
    "aten::_thnn_fused_gru_cell": "no CPU kernel to compare with: covered by aten::gru_cell above and by "
                                  "nn.GRU in test_training.py",
}
# Known backend bugs: the op must fail today (strict); drop the entry once it works.
KNOWN_FAILURES: dict[str, str] = {}  # op -> the backend bug that makes it fail (none today)


def _map(x, f):
    if isinstance(x, torch.Tensor):
        return f(x)
    if isinstance(x, (list, tuple)):
        return type(x)(_map(v, f) for v in x)
    return x


def _cast(args, dtype):
    return _map(args, lambda t: t.to(dtype) if t.is_floating_point() else t)


def _mixed(args, low):
    """The first floating input in float32, the others in `low`: a promote op must widen."""
    out, seen = [], False
    for a in args:
        if isinstance(a, torch.Tensor) and a.is_floating_point():
            out.append(a if not seen else a.to(low))
            seen = True
        else:
            out.append(a)
    return tuple(out)


def _floating_outputs(out):
    flat = []
    _map(out, flat.append)
    return [t for t in flat if t.is_floating_point()]


def _check_op(key: str, low: torch.dtype):
    """Runs one registered op under rbln autocast and checks dtype and value against CPU."""
    policy = POLICY[key]
    fn, make = TABLE[key]
    master = make()
    if policy == "lower_precision_fp":
        inputs, run_as = master, low  # float32 inputs, cast down
    elif policy == "promote":
        inputs, run_as = _mixed(master, low), torch.float32
    else:  # fp32 and fp32_set_opt_dtype: low-precision inputs, cast up
        inputs, run_as = _cast(master, low), torch.float32
    dev_inputs = _map(inputs, lambda t: t.to("rbln"))
    with torch.autocast("rbln", dtype=low):
        actual = fn(*dev_inputs)
    outs = _floating_outputs(actual)
    assert outs, f"{key}: no floating output"
    assert all(o.dtype == run_as for o in outs), f"{key} under {low} autocast gave {[o.dtype for o in outs]}, " \
                                                 f"expected {run_as} ({policy})"
    assert all(o.device.type == "rbln" for o in outs)
    # CPU, no autocast, inputs cast the way the policy casts them.
    try:
        expected = fn(*_cast(inputs, run_as))
    except (RuntimeError, NotImplementedError):
        if run_as == torch.float32:
            raise
        # CPU has no low-precision kernel for this op: compute in float32 and round.
        expected = _map(fn(*_cast(_cast(inputs, run_as), torch.float32)), lambda t: t.to(run_as))
    for a, e in zip(outs, _floating_outputs(expected)):
        torch.testing.assert_close(a.cpu(), e, msg=lambda m: f"{key} under {low} autocast: {m}", **_tolerance(key, run_as))


def _tolerance(key: str, dtype: torch.dtype) -> dict[str, float]:
    """The ops.yaml `tolerance:` of the op's entry (kernels that sum in another order than CPU's), else the default."""
    atol_rtol = OPS_YAML_TOLERANCES.get(key.removeprefix("aten::"), {}).get(str(dtype).removeprefix("torch."))
    return dict(zip(("atol", "rtol"), atol_rtol)) if atol_rtol else TOLERANCES[dtype]


def _run_policy(policy: str, low: torch.dtype):
    keys = [k for k, p in POLICY.items() if p == policy and k not in NOT_CALLABLE]
    failures, unexpected = [], []
    for key in keys:
        if key in KNOWN_FAILURES:
            try:
                _check_op(key, low)
            except Exception:
                continue
            unexpected.append(key)
            continue
        try:
            _check_op(key, low)
        except Exception as e:  # collect all, report together
            failures.append(f"{key}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
    assert not failures, "\n".join(failures)
    assert not unexpected, f"known failures that now pass (drop them from KNOWN_FAILURES): {unexpected}"
    assert len(keys) > 5


def test_every_registered_op_is_in_the_table():
    # The list macros plus the banned binary_cross_entropy (test_binary_cross_entropy_is_banned).
    registered = set(torch._C._dispatch_get_registrations_for_dispatch_key("AutocastPrivateUse1"))
    registered.discard("aten::binary_cross_entropy")
    assert registered == set(POLICY), (sorted(registered - set(POLICY)), sorted(set(POLICY) - registered))
    assert registered <= set(TABLE) | set(NOT_CALLABLE), sorted(registered - set(TABLE) - set(NOT_CALLABLE))


def test_rbln_registers_what_cuda_registers():
    """The same ops as CUDA's autocast, except cuDNN's own convolutions."""
    cuda = set(torch._C._dispatch_get_registrations_for_dispatch_key("AutocastCUDA"))
    rbln = set(torch._C._dispatch_get_registrations_for_dispatch_key("AutocastPrivateUse1"))
    cuda_only = {"aten::cudnn_convolution", "aten::cudnn_convolution_transpose"}
    assert rbln == cuda - cuda_only


def test_binary_cross_entropy_is_banned():
    """As on CUDA and XPU: unsafe in float16 (binary_cross_entropy_with_logits is the safe form)."""
    x = torch.rand(4, 4, device="rbln")
    y = torch.rand(4, 4, device="rbln")
    with torch.autocast("rbln"), pytest.raises(RuntimeError, match="unsafe to autocast"):
        F.binary_cross_entropy(x, y)


def test_not_callable_ops_fail_on_cpu_too():
    q = _t(1, 2, 4, 8)
    with pytest.raises((RuntimeError, NotImplementedError)):
        torch.ops.aten._scaled_dot_product_flash_attention(q, q, q)


@pytest.mark.parametrize("low", LOW, ids=str)
def test_lower_precision_fp_ops(low):
    _run_policy("lower_precision_fp", low)


@pytest.mark.parametrize("low", LOW, ids=str)
def test_fp32_ops(low):
    _run_policy("fp32", low)


@pytest.mark.parametrize("low", LOW, ids=str)
def test_fp32_set_opt_dtype_ops(low):
    _run_policy("fp32_set_opt_dtype", low)
    # An explicit dtype wins over the policy.
    x = torch.randn(3, 4, device="rbln", dtype=low)
    with torch.autocast("rbln", dtype=low):
        assert torch.sum(x, 1, dtype=low).dtype == low
        assert torch.softmax(x, 1, dtype=torch.float64).dtype == torch.float64


@pytest.mark.parametrize("low", LOW, ids=str)
def test_promote_ops(low):
    _run_policy("promote", low)
    # Inputs all in the low dtype stay there.
    a, b = (torch.randn(6, device="rbln", dtype=low) for _ in range(2))
    with torch.autocast("rbln", dtype=low):
        assert torch.addcmul(a, b, b).dtype == low and torch.atan2(a, b).dtype == low


@pytest.mark.parametrize("low", LOW, ids=str)
def test_builtin_promotion_under_autocast(low):
    """cat and stack (not on autocast's lists) promote by themselves, as upstream's
    torch_need_autocast_promote list expects; elementwise ops keep their own promotion."""
    a = _t(6)
    b = _t(6, seed=1).to(low)
    with torch.autocast("rbln", dtype=low):
        for fn in (torch.cat, torch.stack):
            out = fn([a.to("rbln"), b.to("rbln")])
            assert out.dtype == torch.float32
            torch.testing.assert_close(out.cpu(), fn([a, b.float()]))
        assert (a.to("rbln") + b.to("rbln")).dtype == torch.float32
        assert (b.to("rbln") * b.to("rbln")).dtype == low
        assert torch.relu(a.to("rbln")).dtype == torch.float32  # not on any list: untouched


# ---- the AMP API ----------------------------------------------------------------------------------
def test_autocast_is_available_and_supported_dtypes_are_true():
    assert torch.amp.is_autocast_available("rbln")
    supported = torch.rbln.get_amp_supported_dtype()
    assert set(supported) == {torch.float16, torch.bfloat16}
    assert torch.rbln.is_bf16_supported()
    a, b = torch.randn(4, 4, device="rbln"), torch.randn(4, 4, device="rbln")
    for dtype in supported:  # each claimed dtype really runs
        with torch.rbln.explain() as ex, torch.autocast("rbln", dtype=dtype):
            out = a @ b
        assert out.dtype == dtype and "aten::mm" in ex.device_ops and not ex.fallback_ops
        torch.testing.assert_close(out.cpu(), (a.cpu().to(dtype) @ b.cpu().to(dtype)), **TOLERANCES[dtype])
    # Any other dtype: PyTorch warns and leaves autocast off.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.autocast("rbln", dtype=torch.float64):
            assert not torch.is_autocast_enabled("rbln")
            assert (a @ b).dtype == torch.float32
    assert any("not supported" in str(w.message) for w in caught)


def test_default_autocast_dtype_is_float16():
    assert torch.get_autocast_dtype("rbln") == torch.float16
    a = torch.randn(4, 4, device="rbln")
    with torch.autocast("rbln"):
        assert torch.is_autocast_enabled("rbln")
        assert (a @ a).dtype == torch.float16
    assert not torch.is_autocast_enabled("rbln")


def test_autocast_is_per_device_type():
    a = torch.randn(4, 4)
    d = a.to("rbln")
    with torch.autocast("rbln", dtype=torch.bfloat16):
        assert (a @ a).dtype == torch.float32  # CPU tensors: untouched
        assert (d @ d).dtype == torch.bfloat16
        with torch.autocast("rbln", enabled=False):
            assert (d @ d).dtype == torch.float32
        assert (d @ d).dtype == torch.bfloat16
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert (d @ d).dtype == torch.float32  # CPU autocast leaves rbln alone
        assert (a @ a).dtype == torch.bfloat16


def test_autocast_caches_weight_casts():
    """A leaf that requires grad (a weight) is cast once per autocast region, as on CUDA."""
    w = torch.randn(4, 4, device="rbln", requires_grad=True)
    xs = [torch.randn(4, 4, device="rbln") for _ in range(3)]
    copies = {}
    for cache in (True, False):
        with torch.rbln.explain() as ex, torch.autocast("rbln", dtype=torch.float16, cache_enabled=cache):
            for x in xs:
                x @ w
        copies[cache] = ex.device_ops.get("aten::copy_", 0)
    assert copies[False] - copies[True] == len(xs) - 1


@pytest.mark.parametrize("low", LOW, ids=str)
def test_backward_through_autocast(low):
    """Low-precision forward, float32 parameter gradients, equal to CPU's with the casts written out."""
    x = _t(5, 6)
    w = _t(4, 6, seed=1)
    b = _t(4, seed=2)
    grads = {}
    for dev in ("cpu", "rbln"):
        wd = w.to(dev, copy=True).requires_grad_()
        bd = b.to(dev, copy=True).requires_grad_()
        if dev == "rbln":
            with torch.autocast("rbln", dtype=low):
                out = F.linear(x.to(dev), wd, bd)
                assert out.dtype == low
                loss = out.float().pow(2).sum()
        else:
            loss = F.linear(x.to(low), wd.to(low), bd.to(low)).float().pow(2).sum()
        loss.backward()
        assert wd.grad.dtype == torch.float32 and bd.grad.dtype == torch.float32
        grads[dev] = (wd.grad.cpu(), bd.grad.cpu())
    torch.testing.assert_close(grads["rbln"], grads["cpu"], **TOLERANCES[low])


# ---- GradScaler -----------------------------------------------------------------------------------
def _model(device):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).to(device)


def _data():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(32, 8, generator=g)
    return x, x.sum(1, keepdim=True) * 0.5


def test_grad_scaler_training_loop_matches_cpu():
    """Float16 autocast with loss scaling on rbln; the losses follow CPU's float32 run."""
    x, y = _data()
    cpu, dev = _model("cpu"), _model("rbln")
    opt_cpu = torch.optim.SGD(cpu.parameters(), lr=0.05)
    opt_dev = torch.optim.SGD(dev.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("rbln", init_scale=2.0**12, growth_interval=2)
    xd, yd = x.to("rbln"), y.to("rbln")
    losses_cpu, losses_dev, scales = [], [], []
    for _ in range(6):
        opt_cpu.zero_grad()
        loss = F.mse_loss(cpu(x), y)
        loss.backward()
        opt_cpu.step()
        losses_cpu.append(loss.item())

        opt_dev.zero_grad()
        with torch.autocast("rbln", dtype=torch.float16):
            out = dev(xd)
            assert out.dtype == torch.float16
            loss = F.mse_loss(out, yd)  # fp32 policy
            assert loss.dtype == torch.float32
        scaled = scaler.scale(loss)
        assert scaled.device.type == "rbln"
        torch.testing.assert_close(scaled.item(), loss.item() * scaler.get_scale())
        with torch.rbln.explain() as ex:
            scaled.backward()
            scaler.step(opt_dev)
            scaler.update()
        assert {"aten::_amp_foreach_non_finite_check_and_unscale_", "aten::_amp_update_scale_"} <= set(ex.device_ops)
        assert not ex.fallback_ops, ex.fallback_reasons
        losses_dev.append(loss.item())
        scales.append(scaler.get_scale())
    assert losses_dev[-1] < losses_dev[0] * 0.8
    torch.testing.assert_close(losses_dev, losses_cpu, rtol=2e-2, atol=1e-3)
    # No overflow: the scale doubles every growth_interval (2) steps.
    assert scales == [2.0**12, 2.0**13, 2.0**13, 2.0**14, 2.0**14, 2.0**15]
    for p_dev, p_cpu in zip(dev.parameters(), cpu.parameters()):
        assert p_dev.dtype == torch.float32
        torch.testing.assert_close(p_dev.detach().cpu(), p_cpu.detach(), rtol=2e-2, atol=2e-3)


def test_grad_scaler_skips_steps_with_inf_and_backs_off():
    x, y = _data()
    model = _model("rbln")
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("rbln", init_scale=2.0**10, backoff_factor=0.5, growth_interval=100)
    xd, yd = x.to("rbln"), y.to("rbln")

    def step(inject=None):
        opt.zero_grad()
        with torch.autocast("rbln", dtype=torch.float16):
            loss = F.mse_loss(model(xd), yd)
        scaler.scale(loss).backward()
        if inject is not None:
            model[0].weight.grad[0, 0] = inject
        before = [p.detach().cpu().clone() for p in model.parameters()]
        scaler.step(opt)
        scaler.update()
        after = [p.detach().cpu() for p in model.parameters()]
        return before, after

    before, after = step()
    assert any(not torch.equal(b, a) for b, a in zip(before, after))  # a normal step updates
    assert scaler.get_scale() == 2.0**10
    for bad in (math.inf, -math.inf, math.nan):
        scale = scaler.get_scale()
        before, after = step(inject=bad)
        assert all(torch.equal(b, a) for b, a in zip(before, after)), f"step with {bad} grad was not skipped"
        assert scaler.get_scale() == scale * 0.5
    # Overflow in float16 itself: a loss scale too large makes the scaled gradients inf.
    scaler.update(new_scale=2.0**40)
    before, after = step()
    assert all(torch.equal(b, a) for b, a in zip(before, after))
    assert scaler.get_scale() == 2.0**39
    # Back at a sane scale, training resumes.
    scaler.update(new_scale=2.0**10)
    before, after = step()
    assert any(not torch.equal(b, a) for b, a in zip(before, after))


def test_grad_scaler_unscale_matches_unscaled_gradients():
    """unscale_ divides the gradients by the scale: equal to the gradients of the unscaled loss."""
    x, y = _data()
    model = _model("rbln")
    xd, yd = x.to("rbln"), y.to("rbln")
    with torch.autocast("rbln", dtype=torch.float16):
        loss = F.mse_loss(model(xd), yd)
    plain = torch.autograd.grad(loss, list(model.parameters()), retain_graph=True)
    scaler = torch.amp.GradScaler("rbln", init_scale=2.0**8)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    for p, g in zip(model.parameters(), plain):
        torch.testing.assert_close(p.grad.cpu(), g.cpu(), rtol=1e-3, atol=1e-5)
