"""Distinct values and counts on the device (kernels/reduction/Counting.cpp through kernels/library/Library.h): unique,
unique_consecutive, mode and bincount against CPU, with no fallback, and CPU's errors for bad input."""
import pytest
import torch

import torch_rbln  # noqa: F401


def _on_device(fn, *args):
    with torch.rbln.explain() as ex:
        out = fn(*args)
        torch.rbln.synchronize()
    assert not ex.fallback_ops, f"fell back: {ex.fallback_reasons}"
    assert ex.device_ops, "nothing ran on the device"
    return out, ex


def _assert_same(got, expected):
    for g, e in zip(got, expected):
        assert g.device.type == "rbln"
        torch.testing.assert_close(g.cpu(), e)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_unique_matches_cpu(dtype):
    x = torch.randint(0, 9, (6, 40)).to(dtype)
    rows = torch.randint(0, 2, (8, 3)).to(dtype)

    def distinct(t, r):
        return [*torch.unique(t, sorted=True, return_inverse=True, return_counts=True),
                *torch.unique(r, dim=0, return_inverse=True, return_counts=True),
                *torch.unique_consecutive(t.flatten(), return_inverse=True, return_counts=True),
                *torch.unique_consecutive(r, dim=0, return_counts=True)]

    got, _ = _on_device(distinct, x.to("rbln"), rows.to("rbln"))
    _assert_same(got, distinct(x, rows))


def test_mode_and_bincount_match_cpu():
    x = torch.randint(0, 5, (7, 30))
    w = torch.rand(30, dtype=torch.float64)

    def count(t, weights):
        return [*torch.mode(t, dim=1), *torch.mode(t.float(), dim=0, keepdim=True),
                torch.bincount(t[0]), torch.bincount(t[0], weights=weights, minlength=9)]

    got, ex = _on_device(count, x.to("rbln"), w.to("rbln"))
    _assert_same(got, count(x, w))
    assert {"aten::mode", "aten::bincount"} <= set(ex.device_ops)


def test_bad_input_gets_cpus_error_and_the_device_stays_usable():
    with pytest.raises(RuntimeError, match="bincount only supports 1-d non-negative integral inputs"):
        torch.bincount(torch.tensor([1, -1, 2], device="rbln"))
    with pytest.raises(RuntimeError, match="weights should be 1-d and have the same length as input"):
        torch.bincount(torch.tensor([1, 2], device="rbln"), weights=torch.ones(3, device="rbln"))
    got = torch.bincount(torch.tensor([0, 2, 2], device="rbln"))
    assert got.device.type == "rbln" and got.cpu().tolist() == [1, 0, 2]


def test_mode_values_can_be_differentiated():
    x = torch.tensor([[1., 2., 2., 3.], [4., 4., 0., 4.]])

    def grad_of_mode(t):
        t = t.detach().requires_grad_()
        values, _ = torch.mode(t, dim=1)
        (values * torch.tensor([2., 3.], device=t.device)).sum().backward()
        return [values.detach(), t.grad]

    got, ex = _on_device(grad_of_mode, x.to("rbln"))
    _assert_same(got, grad_of_mode(x))
    assert "aten::mode" in ex.device_ops
