"""scaled_dot_product_attention on the device (kernels/nn/Attention.cpp): the fused kernel
(SDPBackend.OVERRIDEABLE, CPU's flash kernel through the op library) for the inputs CPU runs
flash on, so outputs and gradients equal CPU's bit for bit, except a query of one token (a
decode step: a kernel of its own, equal to CPU's to float rounding); the math path for the others."""
import contextlib
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import torch_rbln  # noqa: F401

FUSED = "aten::_scaled_dot_product_fused_attention_overrideable"


def _inputs(case, dtype):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, n, 8, generator=g, dtype=dtype) for n in (3, 6, 6))
    kwargs = {}
    if case == "float_mask":
        kwargs["attn_mask"] = torch.randn(3, 6, generator=g, dtype=dtype)
    elif case == "bool_mask":
        kwargs["attn_mask"] = torch.rand(2, 1, 3, 6, generator=g) > 0.3
    elif case == "causal":
        q, kwargs["is_causal"] = torch.randn(2, 4, 6, 8, generator=g, dtype=dtype), True
    elif case == "grouped_query":
        k, v, kwargs["enable_gqa"] = k[:, :2].contiguous(), v[:, :2].contiguous(), True
    elif case == "transposed_query":
        q = torch.randn(2, 3, 4, 8, generator=g, dtype=dtype).transpose(1, 2)
    elif case == "scaled":
        kwargs["scale"] = 0.3
    return (q, k, v), kwargs


def _attention(device, tensors, kwargs):
    """Output and the gradients of q, k, v (and of a mask that requires grad) under a fixed weighting."""
    leaves = [t.detach().to(device).requires_grad_(t.is_floating_point()) for t in tensors]
    kw = {n: (t.detach().to(device).requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else t)
          for n, t in kwargs.items()}
    out = F.scaled_dot_product_attention(*leaves, **kw)
    weight = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape).to(device)
    (out * weight).sum().backward()
    grads = [t.grad for t in leaves]
    if isinstance(kw.get("attn_mask"), torch.Tensor) and kw["attn_mask"].requires_grad:
        grads.append(kw["attn_mask"].grad)
    return [out, *grads]


def _run_on_device(tensors, kwargs):
    with torch.rbln.explain() as ex:
        results = _attention("rbln", tensors, kwargs)
        torch.rbln.synchronize()
    assert not ex.fallback_ops, f"fell back: {ex.fallback_reasons}"
    assert all(r.device.type == "rbln" for r in results)
    return [r.cpu() for r in results], ex


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("case", ["plain", "float_mask", "bool_mask", "causal", "grouped_query", "transposed_query",
                                  "scaled"])
def test_fused_attention_and_its_gradients_equal_cpu(case, dtype):
    tensors, kwargs = _inputs(case, dtype)
    got, ex = _run_on_device(tensors, kwargs)
    expected = _attention("cpu", tensors, kwargs)
    assert {FUSED, FUSED + "_backward"} <= set(ex.device_ops)
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype and g.shape == e.shape
        assert torch.equal(g, e), (g - e).abs().max()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("case", ["plain", "float_mask", "bool_mask", "fully_masked_rows", "transposed_query",
                                  "scaled", "long_context"])
def test_decode_attention_and_its_gradients_equal_cpu(case, dtype):
    # One query token a head: the device's decode kernel (its logsumexp feeds the flash backward).
    g = torch.Generator().manual_seed(0)
    keys = 3000 if case == "long_context" else 37
    q, k, v = (torch.randn(2, 4, n, 16, generator=g, dtype=dtype) for n in (1, keys, keys))
    kwargs = {}
    if case == "float_mask":
        kwargs["attn_mask"] = torch.randn(1, keys, generator=g, dtype=dtype)
    elif case == "bool_mask":
        kwargs["attn_mask"] = torch.rand(2, 1, 1, keys, generator=g) > 0.3
    elif case == "fully_masked_rows":  # CPU's answer for a row with no key: zeros
        kwargs["attn_mask"] = torch.ones(2, 4, 1, keys, dtype=torch.bool)
        kwargs["attn_mask"][1, 2:] = False
    elif case == "transposed_query":
        q = torch.randn(2, 1, 4, 16, generator=g, dtype=dtype).transpose(1, 2)
    elif case == "scaled":
        kwargs["scale"] = 0.3
    got, ex = _run_on_device((q, k, v), kwargs)
    expected = _attention("cpu", (q, k, v), kwargs)
    assert {FUSED, FUSED + "_backward"} <= set(ex.device_ops)
    # Half-precision gradients: CPU's flash backward from an output one rounding apart.
    tolerance = {} if dtype == torch.float32 else {"atol": 2e-3, "rtol": 2e-2}
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype and g.shape == e.shape
        torch.testing.assert_close(g, e, **tolerance)
    if case == "fully_masked_rows":
        assert not got[0][1, 2:].any()


@pytest.mark.parametrize("case", ["mask_requires_grad", "three_dim", "math_selected"])
def test_math_path_where_cpu_takes_it(case):
    (q, k, v), kwargs = _inputs("float_mask", torch.float32)
    if case == "mask_requires_grad":  # CPU's flash kernel has no mask gradient
        kwargs["attn_mask"].requires_grad_()
    elif case == "three_dim":  # flash takes 4-d inputs only
        q, k, v = q[0], k[0], v[0]
    with sdpa_kernel(SDPBackend.MATH) if case == "math_selected" else contextlib.nullcontext():
        got, ex = _run_on_device((q, k, v), kwargs)
        expected = _attention("cpu", (q, k, v), kwargs)
    assert FUSED not in ex.device_ops and "aten::bmm" in ex.device_ops
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)


def test_dropout_takes_the_math_path_and_scales_the_kept_weights():
    # Uniform weights 1/8 over 8 keys and v = 1: each output row is (kept keys) * 2/8, one
    # dropout draw per row, so rows are multiples of 1/4 with mean 1 over many rows.
    q = torch.ones(1, 1, 256, 8, device="rbln")
    k, v = torch.ones(1, 1, 8, 8, device="rbln"), torch.ones(1, 1, 8, 8, device="rbln")
    with torch.rbln.explain() as ex:
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5).cpu()
    assert FUSED not in ex.device_ops and "aten::native_dropout" in ex.device_ops and not ex.fallback_ops
    rows = out[0, 0]
    assert torch.equal(rows, rows[:, :1].expand_as(rows))
    torch.testing.assert_close(rows * 4, (rows * 4).round(), rtol=0, atol=1e-5)
    assert abs(rows.mean().item() - 1) < 0.3 and rows.unique().numel() > 1


def test_bad_inputs_raise_cpu_errors_and_leave_the_device_usable():
    q = torch.randn(2, 4, 3, 8)
    with pytest.raises(RuntimeError, match="same device"):
        F.scaled_dot_product_attention(q.to("rbln"), torch.randn(2, 4, 6, 8), torch.randn(2, 4, 6, 8))
    bad = torch.randn(2, 4, 6, 5)  # key's embedding differs from the query's
    with pytest.raises(RuntimeError) as on_cpu:
        F.scaled_dot_product_attention(q, bad, bad)
    with pytest.raises(RuntimeError) as on_rbln:
        F.scaled_dot_product_attention(q.to("rbln"), bad.to("rbln"), bad.to("rbln"))
    assert str(on_rbln.value).split("\n")[0] == str(on_cpu.value).split("\n")[0]
    out = F.scaled_dot_product_attention(q.to("rbln"), q.to("rbln"), q.to("rbln"))
    assert torch.equal(out.cpu(), F.scaled_dot_product_attention(q, q, q))


def test_compiled_attention_uses_the_fused_kernel(tmp_path):
    script = textwrap.dedent("""
        import torch, torch.nn.functional as F, torch_rbln
        def attend(q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True).relu()
        q, k, v = (torch.randn(2, 4, 6, 8) for _ in range(3))
        expected = attend(q, k, v)
        with torch.rbln.explain() as ex:
            got = torch.compile(attend)(q.to("rbln"), k.to("rbln"), v.to("rbln"))
            torch.rbln.synchronize()
        assert "aten::_scaled_dot_product_fused_attention_overrideable" in ex.device_ops, ex.device_ops
        torch.testing.assert_close(got.cpu(), expected, rtol=0, atol=0)
        print("ok")
    """)
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
           "TORCH_RBLN_CACHE_DIR": str(tmp_path / "rbln")}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("ok")
