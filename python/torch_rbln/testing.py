"""Helpers for tests that compare rbln with CPU over PyTorch's OpInfo samples.

Each sample runs on CPU and on rbln (contiguous, non-contiguous and with a
storage offset; function, in-place and out= variants), and must match CPU,
raise where CPU raises, and run on the device without falling back.
"""
from __future__ import annotations

import functools
import os

import torch

import torch_rbln  # noqa: F401  (the backend must exist before torch.testing._internal loads)

DTYPES = {
    "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64,
    "int8": torch.int8, "uint8": torch.uint8, "int16": torch.int16, "int32": torch.int32, "int64": torch.int64,
    "uint16": torch.uint16, "uint32": torch.uint32, "uint64": torch.uint64,
    "bool": torch.bool, "complex64": torch.complex64, "complex128": torch.complex128, "complex32": torch.complex32,
    "float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2, "float8_e4m3fnuz": torch.float8_e4m3fnuz,
    "float8_e5m2fnuz": torch.float8_e5m2fnuz, "float8_e8m0fnu": torch.float8_e8m0fnu,
}


@functools.cache
def _op_db():
    from torch.testing._internal.common_methods_invocations import op_db

    return {(op.name if not op.variant_test_name else f"{op.name}.{op.variant_test_name}"): op for op in op_db}


def opinfo(name: str):
    try:
        return _op_db()[name]
    except KeyError:
        raise KeyError(f"no OpInfo named {name!r} in torch.testing._internal op_db") from None


def opinfo_samples(op, device, dtype, *, reference: bool = False, **kwargs):
    """op's sample (or reference) inputs, with torch seeded once before them. PyTorch reseeds before every
    sample, and each torch.manual_seed also queues a seed, with a formatted Python stack, for every
    uninitialized CUDA-like backend: about 3 ms a sample, half the time of an op with a thousand samples."""
    torch.manual_seed(0)
    make = op.reference_inputs if reference else op.sample_inputs
    return make(device, dtype, set_seed=False, **kwargs)


def opinfo_params(entries):
    """pytest.mark.parametrize arguments: one case per (op, OpInfo, dtype) that CPU supports; with
    RBLN_TEST_SAMPLE=N (make test-quick) every Nth case only."""
    values, ids = [], []
    for func, overloads, names, dtypes, strategy, tolerance in entries:
        for name in names:
            supported = opinfo(name).supported_dtypes("cpu")
            for dtype in dtypes:
                if DTYPES[dtype] in supported:
                    values.append((func, overloads, name, dtype, strategy, tolerance.get(dtype)))
                    ids.append(f"{func}-{name}-{dtype}")
    step = int(os.environ.get("RBLN_TEST_SAMPLE", "1"))
    return {"argvalues": values[::step], "ids": ids[::step]}


def to_device(x, device="rbln"):
    return x.to(device) if isinstance(x, torch.Tensor) else x


def to_cpu(x):
    if isinstance(x, torch.Tensor):
        return x.cpu()
    if isinstance(x, (list, tuple)):
        return type(x)(to_cpu(v) for v in x)
    return x


def with_offset(t: torch.Tensor) -> torch.Tensor:
    """The same values in a device tensor whose storage offset is not zero."""
    if not isinstance(t, torch.Tensor):
        return t
    buf = torch.empty(t.numel() + 3, dtype=t.dtype, device=t.device)
    view = buf[3:].view(t.shape)
    view.copy_(t)
    return view


def _run(fn, sample):
    return fn(sample.input, *sample.args, **sample.kwargs)


# Results may differ from CPU's by a rounding step: CPU's vectorized math,
# fused multiply-adds and BLAS summation order differ from ours in the last bit.
TOLERANCES = {
    torch.float32: {"atol": 1e-5, "rtol": 1e-5},
    torch.float16: {"atol": 1e-3, "rtol": 1e-3},
    torch.bfloat16: {"atol": 1e-2, "rtol": 1.6e-2},
}


def _tolerance(x, override=None):
    """The dtype's tolerance, or the registry's [atol, rtol] for the op (summation-order-bound kernels)."""
    if override:
        return {"atol": override[0], "rtol": override[1]}
    if isinstance(x, torch.Tensor):
        return TOLERANCES.get(x.dtype, {})
    if isinstance(x, (list, tuple)) and x:
        return _tolerance(x[0])
    return {}


def _on_device(sample):
    """Tensors and any `device=` factory argument moved to rbln."""
    dev = sample.transform(to_device)
    if "device" in dev.kwargs:
        dev.kwargs["device"] = "rbln"
    return dev


def _check(fn, cpu_sample, dev_sample, overloads, composite, what, tolerance=None):
    """Runs fn on both devices and compares; returns False when CPU raised."""
    try:
        expected = _run(fn, cpu_sample)
    except Exception as cpu_error:
        try:
            with torch.device("rbln"):
                _run(fn, dev_sample)
        except Exception:
            return False
        raise AssertionError(f"{what}: CPU raised {cpu_error!r} but rbln did not")
    with torch.rbln.explain() as ex, torch.device("rbln"):  # factories default to rbln too
        actual = _run(fn, dev_sample)
    torch.testing.assert_close(to_cpu(actual), expected, equal_nan=True, msg=lambda m: f"{what}: {m}",
                               **_tolerance(expected, tolerance))
    assert not ex.fallback_ops, f"{what}: fell back to the CPU: {ex.fallback_reasons}"
    if composite:
        assert ex.device_ops, f"{what}: nothing ran on the device"
    else:
        ran = [o for o in overloads if f"aten::{o}" in ex.device_ops]
        assert ran, f"{what}: none of {overloads} ran on the device (ran: {sorted(ex.device_ops)})"
    return True


def check_opinfo_samples(overloads, name: str, dtype: str, composite: bool = False, tolerance=None):
    op = opinfo(name)
    dt = DTYPES[dtype]
    checked = 0
    inplace_registered = composite or any(o.split(".")[0].endswith("_") for o in overloads)
    out_registered = composite or any(o.endswith("out") or ".out" in o for o in overloads)
    for i, sample in enumerate(opinfo_samples(op, "cpu", dt, requires_grad=False)):
        dev = _on_device(sample)
        # PyTorch may decompose differently per layout, so CPU runs the same layout.
        layouts = {
            "contiguous": (sample, dev),
            "noncontiguous": (sample.noncontiguous(), dev.noncontiguous()),
            "offset": (sample.transform(with_offset), dev.transform(with_offset)),
        }
        for layout, (cpu_sample, dev_sample) in layouts.items():
            checked += _check(op.op, cpu_sample, dev_sample, overloads, composite,
                              f"{name} {dtype} sample {i} {layout}", tolerance)
        if op.inplace_variant is not None and inplace_registered:
            cpu_in = sample.transform(lambda t: t.clone() if isinstance(t, torch.Tensor) else t)
            dev_in = dev.transform(lambda t: t.clone() if isinstance(t, torch.Tensor) else t)
            _check(op.inplace_variant, cpu_in, dev_in, overloads, composite, f"{name} {dtype} sample {i} in-place",
                   tolerance)
        if op.supports_out and out_registered:
            try:
                expected = _run(op.op, sample)
            except Exception:
                continue
            if isinstance(expected, torch.Tensor):
                # Against CPU's out=, which is not always the functional's result (torch.fft.ihfft2 with one
                # dim leaves an empty out empty in torch 2.13).
                expected = torch.empty(0, dtype=expected.dtype)
                op.op(sample.input, *sample.args, **sample.kwargs, out=expected)
                out = torch.empty(0, dtype=expected.dtype, device="rbln")
                with torch.rbln.explain() as ex:
                    op.op(dev.input, *dev.args, **dev.kwargs, out=out)
                torch.testing.assert_close(out.cpu(), expected, equal_nan=True, **_tolerance(expected, tolerance))
                assert not ex.fallback_ops, f"{name} {dtype} sample {i} out=: fell back: {ex.fallback_reasons}"
    assert checked > 0, f"no {name} sample in {dtype} ran without raising on CPU"
