"""kthvalue, median and nanmedian on the device choose CPU's index among equal values (and NaNs), and give CPU's
errors."""
import pytest
import torch

SELECTIONS = {
    "kthvalue": lambda t, k: torch.kthvalue(t, k, 1),
    "kthvalue-dim0-keepdim": lambda t, k: torch.kthvalue(t.t(), k, 0, keepdim=True),
    "median.dim": lambda t, k: torch.median(t, 1),
    "nanmedian.dim": lambda t, k: torch.nanmedian(t, -1, keepdim=True),
    "median": lambda t, k: (torch.median(t),),
    "nanmedian": lambda t, k: (torch.nanmedian(t),),
}


@pytest.mark.parametrize("name", SELECTIONS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int32])
def test_ties_and_nans_pick_cpus_index(name, dtype):
    fn, g = SELECTIONS[name], torch.Generator().manual_seed(len(name))
    with torch.rbln.explain() as ex:
        for trial in range(60):
            n, rows = int(torch.randint(1, 70, (1,), generator=g)), int(torch.randint(1, 5, (1,), generator=g))
            x = torch.randint(0, 4, (rows, n), generator=g).float()  # few distinct values: many ties
            if trial % 2 and dtype.is_floating_point:
                x[x == 3] = float("nan")
            x, k = x.to(dtype), int(torch.randint(1, n + 1, (1,), generator=g))
            for expected, actual in zip(fn(x, k), fn(x.rbln(), k)):
                assert actual.device.type == "rbln"
                torch.testing.assert_close(actual.cpu(), expected, rtol=0, atol=0, equal_nan=True)
    assert not ex.fallback_ops and ex.device_ops


def test_out_views_are_written_in_place():
    x = torch.randn(5, 7)
    values, indices = torch.zeros(5, 2, device="rbln"), torch.zeros(5, 2, dtype=torch.long, device="rbln")
    torch.median(x.rbln(), 1, out=(values[:, 1], indices[:, 1]))
    expected = torch.median(x, 1)
    assert torch.equal(values[:, 1].cpu(), expected.values) and torch.equal(indices[:, 1].cpu(), expected.indices)
    assert torch.equal(values[:, 0].cpu(), torch.zeros(5))


@pytest.mark.parametrize("call", [
    lambda x: torch.kthvalue(x, 5, 1),
    lambda x: torch.kthvalue(x[:, :0], 1, 1),
    lambda x: torch.median(x[:, :0], 1),
    lambda x: torch.median(x, 1, out=(torch.empty(0, device=x.device), torch.empty(0, device=x.device))),
    lambda x: torch.nanmedian(x, 0, out=(torch.empty(0, dtype=torch.double, device=x.device),
                                         torch.empty(0, dtype=torch.long, device=x.device))),
    lambda x: torch.kthvalue(x, 1, out=(torch.empty(0, dtype=torch.double, device=x.device),
                                        torch.empty(0, dtype=torch.long, device=x.device))),
], ids=["k-range", "kthvalue-empty-dim", "median-empty-dim", "indices-dtype", "values-dtype", "kthvalue-values-dtype"])
def test_errors_as_cpus_and_the_device_stays_usable(call):
    x = torch.randn(3, 4)
    with pytest.raises((RuntimeError, IndexError)) as cpu_error:
        call(x)
    with pytest.raises(cpu_error.type) as rbln_error:
        call(x.rbln())
    assert str(rbln_error.value).replace("torch.rbln.", "torch.") == str(cpu_error.value)  # as torch.cuda.FloatTensor
    assert torch.equal(torch.median(x.rbln()).cpu(), torch.median(x))


def test_empty_input_median_is_nan():
    assert torch.median(torch.empty(0, device="rbln")).cpu().isnan()
