"""The counted CPU fallback: results, torch.rbln.explain(), warnings and strict mode."""
import warnings

import pytest
import torch

import torch_rbln

NOT_LISTED, LISTED, DTYPE = "not in ops.yaml", "listed as fallback in ops.yaml", "dtype not supported on the device"

# (op, dtype of the input, the overload that falls back, reason). torch.hash_tensor reaches the device as
# aten::hash_tensor.out: PyTorch's functional hash_tensor is a composite over it. histogramdd with a tensor of edges per
# dim is listed: its op takes a tensor list.
FALLBACKS = {
    "hash_tensor": (lambda x: torch.hash_tensor(x, dim=1), torch.float32, "aten::hash_tensor.out", NOT_LISTED),
    "histogramdd": (lambda x: torch.histogramdd(x, [torch.tensor([-1.0, 0.0, 1.0], device=x.device)] * 4).hist,
                    torch.float32, "aten::_histogramdd_from_bin_tensors", LISTED),
    # ops.yaml: hardtanh's dtypes are `numeric`, which has no int16
    "hardtanh_int16": (lambda x: torch.nn.functional.hardtanh(x, 2, 9), torch.int16, "aten::hardtanh", DTYPE),
}


def _to_cpu(out):
    return tuple(t.cpu() for t in out) if isinstance(out, tuple) else out.cpu()


def _devices(out):
    return {t.device for t in (out if isinstance(out, tuple) else (out,))}


@pytest.mark.parametrize("name", FALLBACKS)
@pytest.mark.parametrize("device", ["rbln:0", "rbln:1"])
def test_fallback_matches_cpu_and_is_counted(name, device, cpu_rand):
    fn, dtype, overload, reason = FALLBACKS[name]
    x = cpu_rand(5, 4, dtype=dtype)
    expected = fn(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.rbln.explain() as ex:
            out = fn(x.to(device))
    assert _devices(out) == {torch.device(device)}
    torch.testing.assert_close(_to_cpu(out), expected)
    assert ex.fallback_ops == {overload: 1}
    assert ex.fallback_reasons == {overload: {reason: 1}}
    assert overload not in ex.device_ops


def test_fallback_on_strided_input_and_in_place_on_a_view(cpu_rand):
    x = cpu_rand(6, 8)
    i = torch.randint(1, 60, (6, 8), dtype=torch.int16)
    d, di = x.rbln(), i.rbln()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.rbln.explain() as ex:
            z = torch.hash_tensor(d.t()[1:, ::2], dim=0)
            # in-place fallbacks (hardtanh_ takes no int16 on the device) writing through views of di
            torch.nn.functional.hardtanh_(di[:, 1:4], 6, 50)
            torch.nn.functional.hardtanh_(di[1:, ::2].t(), 0, 4)
    assert ex.fallback_ops == {"aten::hash_tensor.out": 1, "aten::hardtanh_": 2}
    expected = i.clone()
    torch.nn.functional.hardtanh_(expected[:, 1:4], 6, 50)
    torch.nn.functional.hardtanh_(expected[1:, ::2].t(), 0, 4)
    torch.testing.assert_close(z.cpu(), torch.hash_tensor(x.t()[1:, ::2], dim=0))
    torch.testing.assert_close(di.cpu(), expected)


def test_device_ops_are_counted_and_do_not_fall_back(cpu_rand):
    a, b = cpu_rand(3, 4), cpu_rand(3, 4)
    with torch.rbln.explain() as ex:
        out = a.rbln() + b.rbln()
        out = out.relu()
    torch.testing.assert_close(out.cpu(), (a + b).relu())
    assert ex.device_ops["aten::add.Tensor"] == 1
    assert ex.device_ops["aten::relu"] == 1
    assert ex.fallback_ops == {} and ex.fallback_reasons == {}


def test_explain_counts_repeated_fallbacks_only_inside_the_block(cpu_rand):
    d = cpu_rand(8).rbln()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.hash_tensor(d)
        with torch.rbln.explain() as ex:
            for _ in range(3):
                torch.hash_tensor(d)
        torch.hash_tensor(d)
    assert ex.fallback_ops == {"aten::hash_tensor.out": 3}


def test_fallback_warns_once_per_op(cpu_rand):
    # aten::_compute_linear_combination (unlisted) falls back in this test only, so its first fallback happens here.
    assert "aten::_compute_linear_combination" not in torch_rbln._C._fallback_counts()
    x, coefficients = cpu_rand(3, 8), cpu_rand(2, 3)
    d = (x.rbln(), coefficients.rbln())
    with warnings.catch_warnings(record=True) as first:
        warnings.simplefilter("always")
        torch._compute_linear_combination(*d)
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        out = torch._compute_linear_combination(*d)
    assert [w.category for w in first] == [UserWarning]
    assert "aten::_compute_linear_combination" in str(first[0].message) and NOT_LISTED in str(first[0].message)
    assert again == []
    assert out.device.type == "rbln"
    torch.testing.assert_close(out.cpu(), torch._compute_linear_combination(x, coefficients))


def test_disabled_fallback_raises_naming_the_op(run_python):
    out = run_python(
        """
        x = torch.arange(20.0).view(4, 5).rbln()
        cases = {
            "aten::hash_tensor.out": lambda: torch.hash_tensor(x),
            "aten::_histogramdd_from_bin_tensors": lambda: torch.histogramdd(x, [x[0, :3]] * 5),
            "aten::hardtanh": lambda: torch.nn.functional.hardtanh(x.to(torch.int16), 2, 9),
        }
        errors = {}
        for name, fn in cases.items():
            try:
                fn()
                errors[name] = None
            except RuntimeError as e:
                errors[name] = str(e)
        device_ok = (x * 2 + x).cpu().equal(torch.arange(20.0).view(4, 5) * 3)
        print(json.dumps({"errors": errors, "device_ok": device_ok}))
        """,
        TORCH_RBLN_DISABLE_FALLBACK="1")
    for name, message in out["errors"].items():
        assert message is not None, f"{name} ran although the fallback is disabled"
        assert name in message and "TORCH_RBLN_DISABLE_FALLBACK" in message
    assert out["device_ok"]
