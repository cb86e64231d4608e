"""The bounded error-parity slice `make test` runs (conformance/errors.py, `python -m conformance.errors`):
error inputs and mutated samples of a few OpInfo entries, in worker subprocesses, on CPU and on rbln.
No call may crash or hang, and none may disagree with CPU (or, for tensors on two devices, with CUDA's
device rule) beyond KNOWN, which names each disagreement the slice still has and why."""
import pytest
import torch

from torch.testing._internal.opinfo.core import SampleInput

from conformance.errors import (_CudaRejects, _cuda_expectation, _cuda_rule, _op_settings, distribution_differs,
                                find_op, make_calls, run)

# Entries that agree in every call, between them every kind of mutation: error inputs CPU rejects, out= dtypes
# CPU casts to and ones it refuses, tensors on two devices CUDA rejects and 0-dim CPU tensors it accepts.
SLICE = ("add", "mul", "div.no_rounding_mode", "eq", "pow", "atan2", "maximum", "bitwise_and", "xlogy", "neg",
         "nn.functional.gelu", "gather", "scatter", "mean", "sum", "logcumsumexp", "dot", "mm", "diag", "diff",
         "linspace", "masked_fill", "softmax", "reshape")
# Known disagreements in the slice: call id -> why. Each must still disagree (a fixed one leaves the list).
KNOWN: dict[str, str] = {}


@pytest.fixture(scope="module")
def report():
    return run(SLICE, max_calls=24, timeout=60.0, workers=2)


def test_slice_covers_every_entry(report):
    assert set(report["ops"]) == set(SLICE) and not report["op_errors"] and not report["harness_errors"], report


def test_no_crash_or_hang(report):
    assert report["categories"]["crash"] == 0 and report["categories"]["hang"] == 0, report["disagreements"]


def test_no_disagreement_with_cpu(report):
    bad = [d for d in report["disagreements"] if d["id"] not in KNOWN]
    assert not bad, "\n".join(f"{d['id']} {d['category']}: {d.get('call')}: CPU {d.get('cpu')}; rbln {d.get('rbln')}"
                              f" {d.get('detail') or ''}\n  {d['repro']}" for d in bad)


def test_known_disagreements_still_disagree(report):
    ids = {d["id"] for d in report["disagreements"]}
    assert set(KNOWN) <= ids, set(KNOWN) - ids


def test_slice_exercises_errors_out_casting_and_devices(report):
    kinds = report["kinds"]
    # error inputs that CPU rejects; out= dtypes CPU casts to and ones it refuses; tensors on two devices that
    # CUDA rejects and 0-dim CPU tensors it accepts
    assert kinds["error_input"]["cpu_raised"] >= 10
    for kind in ("out_dtype", "device", "out_device", "out_alias", "dtype", "dim", "index", "empty", "zero_dim",
                 "noncontiguous", "expanded", "out_shape", "shape", "nan_inf", "int_value", "out_strided",
                 "zero_dim_out_alias"):
        assert kinds[kind]["calls"] > 0, kind
    for kind in ("out_dtype", "device"):
        assert 0 < kinds[kind]["cpu_raised"] < kinds[kind]["calls"], (kind, kinds[kind])
    assert report["meta"]["calls"] >= 300


def test_cpu_behaviours_are_listed_with_their_reason_not_counted(report):
    # gelu(+inf) is NaN on CPU (oneDNN's kernel on AVX-512 machines), +inf on rbln as ATen's and CUDA's kernels
    listed = report["cpu_behaviours"]
    assert all(d["cpu_behaviour"] and d["id"] not in {b["id"] for b in report["disagreements"]} for d in listed)
    assert all(d["op"] == "nn.functional.gelu" and d["kind"] == "nan_inf" for d in listed), listed


def test_calls_are_deterministic():
    """Calls depend on the seed only, not on the state of the global generator."""
    for name in ("add", "index_select"):
        first = make_calls(find_op(name), 0, 24)
        torch.rand(7)
        second = make_calls(find_op(name), 0, 24)
        assert [c.describe() for c in first] == [c.describe() for c in second]
        for a, b in zip(first, second):
            for x, y in zip((a.sample.input, *a.sample.args), (b.sample.input, *b.sample.args)):
                if isinstance(x, torch.Tensor):  # the same values, NaN where NaN was injected
                    torch.testing.assert_close(x, y, rtol=0, atol=0, equal_nan=True)


def test_random_outputs_are_compared_by_distribution():
    """Random ops' results: the same distribution agrees, another one (shifted, rescaled, other odds, NaN on one side
    only) disagrees; too few elements, or elements drawn together, compare dtypes and shapes only."""
    g = torch.Generator().manual_seed(0)
    cpu = torch.randn(400, 3, generator=g)
    assert distribution_differs(cpu, torch.randn(400, 3, device="rbln")) is None
    assert distribution_differs(cpu, torch.randn(400, 3, device="rbln") + 0.5) is not None
    assert distribution_differs(cpu, 2 * torch.randn(400, 3, device="rbln")) is not None
    odds = torch.full((1000,), 0.5)
    assert distribution_differs(torch.bernoulli(odds, generator=g), torch.bernoulli(odds.rbln())) is None
    assert distribution_differs(torch.bernoulli(odds, generator=g), torch.bernoulli(odds.rbln() + 0.3)) is not None
    with_nan = torch.randn(400, device="rbln")
    with_nan[3] = float("nan")
    assert "NaN" in distribution_differs(cpu.flatten(), with_nan)
    assert distribution_differs(torch.zeros(8), torch.ones(8)) is None  # too few elements to judge
    assert _op_settings(find_op("normal"))[0] == "distribution"
    assert _op_settings(find_op("nn.functional.dropout2d"))[0] is False  # whole channels are drawn together
    assert _op_settings(find_op("add"))[0] is True


def _rejects(fn) -> bool:
    try:
        with _cuda_rule()():
            fn()
    except _CudaRejects:
        return True
    return False


def test_cuda_device_rule():
    """CUDA's device checks, as the harness derives them from native_functions.yaml."""
    x = torch.ones(2, 3, device="rbln")
    assert not _rejects(lambda: x + torch.tensor(2.0))  # a 0-dim CPU input of a TensorIterator op
    assert _rejects(lambda: x + torch.ones(3))
    assert _rejects(lambda: torch.tensor(2.0).add_(x.sum()))  # a CPU tensor written by a TensorIterator op
    assert _rejects(lambda: torch.mm(x, torch.ones(3, 1)))  # the default check: one device
    assert _rejects(lambda: torch.add(x, x, out=torch.empty(2, 3)))  # out= on another device
    assert not _rejects(lambda: x[torch.tensor([1, 0])])  # CPU indices are moved to the device
    assert not _rejects(lambda: x.copy_(torch.zeros(2, 3)))  # copies cross devices
    assert _rejects(lambda: x.masked_fill(torch.tensor(True), 0.0))  # masked_fill's kernel wants the mask there
    assert _rejects(lambda: torch.ones(3)[torch.tensor([0], device="rbln")])  # device indices into a CPU tensor


def test_device_generic_errors_are_cudas():
    """An error PyTorch's device-generic code raises before any kernel is CUDA's too; a kernel's is not."""
    x = torch.ones(3, device="rbln")
    inner = _cuda_expectation(torch.inner, "function", (SampleInput(x, args=(torch.ones(3),)), None), _cuda_rule())
    assert inner[0] is RuntimeError and inner[2], inner
    # a 0-dim CPU target: a binary TensorIterator op takes it as a CPU scalar; another TensorIterator kernel's
    # config decides, so a device mismatch and CPU's outcome are both CUDA's there
    x0, c0 = torch.full((), 0.5, device="rbln"), torch.full((), 0.25)
    assert _cuda_expectation(torch.nn.functional.mse_loss, "function", (SampleInput(x0, args=(c0,)), None),
                             _cuda_rule()) is None
    bce = _cuda_expectation(torch.nn.functional.binary_cross_entropy, "function", (SampleInput(x0, args=(c0,)), None),
                            _cuda_rule())
    assert bce is not None and bce[0] is RuntimeError and not bce[2], bce


def test_crash_and_hang_are_attributed_to_the_call():
    """A call that kills its worker or hangs is counted against that call, and the next call runs in a new worker."""
    r = run(["_selftest.crash", "_selftest.hang"], max_calls=2, timeout=5.0, workers=2)
    got = {d["id"]: d["category"] for d in r["disagreements"]}
    assert got == {"_selftest.crash#0": "crash", "_selftest.hang#0": "hang"}, r["disagreements"]
    assert r["ops"] == {"_selftest.crash": {"calls": 2, "disagreements": 1},
                        "_selftest.hang": {"calls": 2, "disagreements": 1}}, r["ops"]  # call #1 ran after each
    assert all("SIGSEGV" in d["detail"] for d in r["disagreements"] if d["category"] == "crash")
    # each one is run again alone in a new worker, and does it again
    assert all("again alone in a new worker" in d["detail"] for d in r["disagreements"]), r["disagreements"]
