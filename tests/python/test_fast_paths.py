"""The performance paths against CPU: vectorized float32 kernels (exp, softmax,
log_softmax, layer_norm) under each CPU capability, the threaded full sum, the
single-launch cat, the dense fill_, bmm spread over the batch, parallel
copies above 4 MiB, and .item() after queued work and after a failed kernel.
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
    with pytest.raises(RuntimeError, match="index"):  # at the call with RBLN_LAUNCH_BLOCKING=1, else at .item()
        torch.index_select(x, 0, bad * 1000)  # out of range: fails in the kernel
        x[0].item()
    assert x[0].item() == 100.0  # the stream is usable again


@pytest.mark.parametrize("capability", ["default", "avx2"])
def test_vector_kernels_under_lower_cpu_capability(run_python, capability):
    out = run_python("""
        import torch.nn.functional as F
        from torch.testing import assert_close
        x = torch.randn(13, 1029) * 4
        assert_close(torch.exp(x.rbln()).cpu(), torch.exp(x))
        assert_close(torch.softmax(x.rbln(), -1).cpu(), torch.softmax(x, -1))
        assert_close(torch.log_softmax(x.rbln(), -1).cpu(), torch.log_softmax(x, -1))
        assert_close(F.layer_norm(x.rbln(), (1029,)).cpu(), F.layer_norm(x, (1029,)), rtol=1e-4, atol=1e-4)
        big = torch.randn(1 << 20)
        assert_close(big.rbln().sum().cpu(), big.sum(), rtol=1e-5, atol=1e-3)
        print(json.dumps({"ok": True}))
    """, ATEN_CPU_CAPABILITY=capability)
    assert out["ok"]
