"""The conformance sweep's CUDA column (conformance/cuda_dtypes.py): dtypes CUDA supports beyond CPU's run on
rbln against CPU's result in a dtype CPU supports."""
import torch

from conformance.__main__ import _describe, opinfo_name, skip_reason
from conformance.cuda_dtypes import cases, cuda_sweep, run_sample, tolerance_of
from torch_rbln.testing import TOLERANCES


def _ops(*names):
    from torch.testing._internal.common_methods_invocations import op_db

    return [op for op in op_db if opinfo_name(op) in names]


def test_cases_pair_each_cuda_only_dtype_with_a_cpu_reference():
    (histc,) = _ops("histc")
    assert cases(histc) == [(d, torch.float64) for d in
                            (torch.int16, torch.int32, torch.int64, torch.int8, torch.uint8)]


def test_cuda_only_dtypes_run_on_the_device_with_cpus_values():
    rows = cuda_sweep(_ops("histc", "round.decimals_3"), opinfo_name,
                      lambda op: skip_reason(op.name) or skip_reason(opinfo_name(op)), _describe, 20.0)
    assert {(r["op"], r["dtype"]): r["status"] for r in rows} == {
        **{("histc", d): "device" for d in ("int16", "int32", "int64", "int8", "uint8")},
        ("round.decimals_3", "float16"): "device"}
    assert all(r["samples"] > 0 and r["fallback_ops"] == [] for r in rows)


def test_a_wrong_device_result_is_a_mismatch():
    from torch.testing._internal.opinfo.core import SampleInput

    def off_by_one_on_rbln(x):
        return torch.histc(x, bins=4) + (x.device.type == "rbln")

    sample = SampleInput(torch.tensor([1, 2, 2, 7], dtype=torch.int32, device="rbln"))
    status, _, why = run_sample(off_by_one_on_rbln, sample, torch.int32, torch.float64, {})
    assert status == "mismatch" and "Tensor-likes are not" in why, why
    assert run_sample(torch.histc, sample, torch.int32, torch.float64, {})[0] == "device"


def test_complex32_takes_the_tolerance_of_pytorchs_complex32_reference_test():
    conv2d, histc, hfft2 = _ops("nn.functional.conv2d", "histc", "fft.hfft2")
    assert tolerance_of(conv2d, torch.complex32) == {"atol": 0.06, "rtol": 0.05}  # op_db's toleranceOverride
    assert tolerance_of(conv2d, torch.float16) == TOLERANCES[torch.float16]
    assert tolerance_of(hfft2, torch.float16) == {"atol": 0.04, "rtol": 0.04}  # computed in complex32
    assert tolerance_of(histc, torch.int32) == TOLERANCES.get(torch.int32, {})
