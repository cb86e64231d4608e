"""The bounded conformance slice `make test` runs: OpInfo samples of common ops
in every dtype and variant must match CPU (on the device or through a counted
fallback), and the ops the registry puts on the device must not fall back.
The gradient column too: float32 gradients must match CPU's, and the backward of
ops whose derivatives are made of device ops must run on the device."""
import pytest

from conformance.__main__ import SLICE, SLICE_DTYPES, opinfo_name, skip_reason, sweep
from conformance.gradients import grad_sweep


@pytest.fixture(scope="module")
def ops():
    from torch.testing._internal.common_methods_invocations import op_db

    ops = [op for op in op_db if opinfo_name(op) in SLICE]
    assert {opinfo_name(op) for op in ops} == set(SLICE)
    return ops


@pytest.fixture(scope="module")
def results(ops):
    return sweep(ops, list(SLICE_DTYPES), max_seconds_per_case=3.0)


@pytest.fixture(scope="module")
def gradients(ops):
    return grad_sweep(ops, opinfo_name, lambda op: skip_reason(op.name) or skip_reason(opinfo_name(op)),
                      max_seconds_per_case=3.0)


def test_slice_matches_cpu(results):
    bad = [r for r in results if r["status"] in ("mismatch", "error")]
    assert not bad, bad


@pytest.mark.parametrize("name", ["add", "mul", "abs", "exp", "eq", "sum", "mean", "softmax", "mm", "bmm", "addmm",
                                  "index_select", "cat", "masked_fill", "nn.functional.linear", "clamp"])
def test_device_ops_do_not_fall_back(results, name):
    float32 = [r for r in results if r["op"] == name and r["dtype"] == "float32" and r["variant"] == "function"]
    assert float32 and all(r["status"] == "device" for r in float32), float32


def test_slice_gradients_match_cpu(ops, gradients):
    differentiable = {opinfo_name(op) for op in ops if op.supports_autograd}
    assert {r["op"] for r in gradients} == differentiable
    assert all(r["variant"] == "gradient" and r["dtype"] == "float32" for r in gradients)
    bad = [r for r in gradients if r["status"] not in ("device", "fallback")]
    assert not bad, bad
    assert all(r["samples"] > 0 for r in gradients)


# Backwards made only of device ops. Not listed: abs (sgn), cumsum (flip), index_select (index_add),
# sort (scatter), whose backwards still fall back.
@pytest.mark.parametrize("name", ["add", "mul", "div.no_rounding_mode", "exp", "sigmoid", "where", "sum", "mean",
                                  "amax", "softmax", "log_softmax", "mm", "bmm", "addmm", "matmul", "cat",
                                  "masked_fill", "nn.functional.linear", "nn.functional.relu", "clamp", "transpose",
                                  "reshape"])
def test_backward_runs_on_device(gradients, name):
    (r,) = [r for r in gradients if r["op"] == name]
    assert r["status"] == "device", r
