"""The bounded conformance slice `make test` runs: OpInfo samples of common ops
in every dtype and variant must match CPU (on the device or through a counted
fallback), and the ops the registry puts on the device must not fall back."""
import pytest

from conformance.__main__ import DTYPES, SLICE, opinfo_name, sweep


@pytest.fixture(scope="module")
def results():
    from torch.testing._internal.common_methods_invocations import op_db

    ops = [op for op in op_db if opinfo_name(op) in SLICE]
    assert {opinfo_name(op) for op in ops} == set(SLICE)
    return sweep(ops, list(DTYPES), max_seconds_per_case=3.0)


def test_slice_matches_cpu(results):
    bad = [r for r in results if r["status"] in ("mismatch", "error")]
    assert not bad, bad


@pytest.mark.parametrize("name", ["add", "mul", "abs", "exp", "eq", "sum", "mean", "softmax", "mm", "bmm", "addmm",
                                  "index_select", "cat", "masked_fill", "nn.functional.linear", "clamp"])
def test_device_ops_do_not_fall_back(results, name):
    float32 = [r for r in results if r["op"] == name and r["dtype"] == "float32" and r["variant"] == "function"]
    assert float32 and all(r["status"] == "device" for r in float32), float32
