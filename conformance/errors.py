"""python -m conformance.errors [--ops NAME ...] [--max-calls N] [--seconds-per-op S] [--timeout S] [--workers N]
                               [--seed N] [--report PATH] [--docs PATH] [--repro ID]

Error parity: every OpInfo entry's `error_inputs`, and mutations of its first samples (wrong dtypes and
shapes, a CPU tensor mixed into rbln inputs, out= of another dtype, shape or device, out= aliasing an
input, bad dims and index values, empty, 0-dim, non-contiguous and expanded inputs; NaN and Inf in the
floating inputs; 2**31, 2**63 - 1 and -1 for each int argument (enum arguments are ints); a strided out=,
compared with CPU's contiguous one because some CPU kernels ignore its layout; a 0-dim input that is also
the out=), run on CPU and on
rbln with identical inputs (same values, sizes, strides and offsets). Samples and error inputs are made
on rbln, as PyTorch's device tests make them (arguments that must be CPU tensors stay there); the CPU
side gets CPU copies. Every call is judged against CPU's outcome; where the device matters, against
CUDA's rule (below). The report lists every disagreement with a one-line Python reproducer:

- crash / hang: rbln killed the worker with a signal, or did not return within --timeout;
- raised_where_cpu_returned, returned_where_cpu_raised, exception_type (CPU's type; the ErrorInput's
  regex where CPU's message matches it but rbln's does not: error_message);
- returned_where_cuda_raises: a CPU tensor mixed into rbln inputs where CUDA's device check rejects it;
- dtype, shape, value (same tolerances as the conformance sweep), warning (CPU warned that it resized
  an out= tensor and rbln did not, or the reverse) where both returned.

CUDA's device rule comes from native_functions.yaml, per ATen op the call reaches (the call runs on rbln
under a dispatch mode that watches them; an op without a CUDA kernel runs its composite kernel, so its
parts are watched): an op with the default device check rejects tensors on two devices; a structured
binary TensorIterator op also accepts 0-dim CPU inputs (CPU scalars); for other TensorIterator and
`device_check: NoCheck` kernels the kernel decides, so a device-mismatch error and CPU's outcome are
both accepted; copies and CPU indices cross devices. An error PyTorch's device-generic code raises
before any kernel runs is CUDA's too. Also CUDA's, besides CPU's behaviour: RuntimeError for index values
CPU rejects (CUDA checks them on the device), either outcome where CPU and CUDA support different dtypes
(the OpInfo's lists), any exception where CPU's own is an internal failure. Values are compared where
they are defined: by distribution for random outputs drawn element by element (a two-sample
Kolmogorov-Smirnov test), not for other random or uninitialized outputs, an out= aliasing the input of an op that is not
elementwise, or out-of-range index values CPU does not check; a strided input may match CPU's result on
either its layout or a contiguous copy. A size past the device's memory raises CUDA's OutOfMemoryError
where CPU allocated it. Disagreements that `CPU_BEHAVIOURS` explains (CPU's undefined behaviour, or a quirk
CUDA does not share) are listed with the reason and not counted.

Each worker is a subprocess (--workers of them, at most 2 here); a call that crashes or hangs is
counted against that call, the worker restarts, and the call runs once more alone in a new worker (the
report says whether it did that again). Seeded per op: a run is reproducible.
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import functools
import itertools
import json
import math
import os
import re
import signal
import sys
import time
import warnings
import zlib

import torch

import torch_rbln  # noqa: F401  (before torch.testing._internal)

from .__main__ import TOLERANCES, describe_sample, ops_yaml_tolerances, opinfo_name, skip_reason, to_cpu
from .gradients import _mirror

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KINDS = ("error_input", "dtype", "shape", "device", "out_dtype", "out_shape", "out_device", "out_alias", "dim",
         "index", "empty", "zero_dim", "noncontiguous", "expanded", "nan_inf", "int_value", "out_strided",
         "zero_dim_out_alias")
CATEGORIES = ("crash", "hang", "raised_where_cpu_returned", "returned_where_cpu_raised", "returned_where_cuda_raises",
              "exception_type", "error_message", "dtype", "shape", "value", "warning")
SAMPLES_PER_OP = 3
ERROR_INPUTS_PER_OP = 8


@dataclasses.dataclass
class Call:
    kind: str
    variant: str  # function, inplace or out
    sample: object  # a SampleInput made on rbln, never run itself (each side gets its own copies)
    cpu_at: tuple = ()  # positions of the tensors (in SampleInput.transform's order) left on CPU for rbln
    # ("empty", shape, dtype, device for the rbln side), ("strided", shape, dtype, device): every other element of
    # a buffer, or ("alias",): out=input
    out: tuple | None = None
    regex: str | None = None  # the ErrorInput's error_regex
    values: bool = True  # False: only dtypes and shapes are compared (an out= aliasing a non-elementwise op's input)
    compute_dtype: torch.dtype | None = None  # an out= of another dtype: the tolerance is the computation's

    def describe(self) -> str:
        out = "" if not self.out else " out=input" if self.out[0] == "alias" else \
            f" out={str(self.out[2]).removeprefix('torch.')}{list(self.out[1])}@{self.out[3]}" + \
            (" strided" if self.out[0] == "strided" else "")
        return f"{self.kind} {self.variant}{' cpu@' + str(list(self.cpu_at)) if self.cpu_at else ''} " + \
            _describe(self.sample) + out


# ---------------------------------------------------------------------------------------------------------------
# Inputs


def _map_tensors(sample, fn):
    """sample.transform with fn(tensor, position); a tensor that appears twice maps once."""
    counter, memo = itertools.count(), {}

    def f(t):
        if not isinstance(t, torch.Tensor):
            return t
        if id(t) not in memo:
            memo[id(t)] = fn(t, next(counter))
        return memo[id(t)]

    return sample.transform(f)


def _tensors(sample) -> list:
    found = []
    _map_tensors(sample, lambda t, i: found.append(t) or t)
    return found


def _replace(sample, position, fn):
    return _map_tensors(sample, lambda t, i: fn(t) if i == position else t)


def _is_rbln(v) -> bool:
    return (isinstance(v, torch.device) and v.type == "rbln") or (isinstance(v, str) and v.split(":")[0] == "rbln")


def _side(call, side, contiguous=False):
    """The call's sample (and out= tensor) for one side, copies with the sample's geometry: on "cpu" every
    tensor and device argument is CPU's; on "rbln" the tensors stay where the sample put them (arguments that
    must be CPU tensors are), except those call.cpu_at leaves on CPU."""
    if side == "cpu":
        s = _map_tensors(call.sample, lambda t, i: _mirror(t).contiguous() if contiguous else _mirror(t))
        s.args = tuple("cpu" if _is_rbln(a) else a for a in s.args)
        s.kwargs = {k: "cpu" if k == "device" and _is_rbln(v) else v for k, v in s.kwargs.items()}
    else:
        s = _map_tensors(call.sample, lambda t, i: _mirror(t, device="cpu" if i in call.cpu_at else t.device))
    out = None
    if call.out and call.out[0] == "alias":
        out = s.input
    elif call.out:
        how, shape, dtype, out_device = call.out
        # CPU's reference for a strided out= is its contiguous one: some CPU kernels (narrow_copy, avg_pool3d,
        # gelu) write a strided out= as if it were contiguous.
        if how == "strided" and side == "rbln":
            out = torch.zeros(tuple(shape) + (2,), dtype=dtype, device=out_device)[..., 0]
        else:
            out = torch.zeros(shape, dtype=dtype, device="cpu" if side == "cpu" else out_device)
    return s, out


def _describe(sample) -> str:
    def tensor(t):
        geometry = "" if t.is_contiguous() else f" stride={list(t.stride())}"
        where = "@cpu" if t.device.type == "cpu" else ""  # an argument the sample keeps on CPU
        return f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}{where}{geometry}"
    return describe_sample(sample, tensor)


def _seed(name: str, seed: int) -> int:
    return (zlib.crc32(name.encode()) + seed) % (1 << 31)


def _base_dtype(op):
    supported = op.supported_dtypes("cpu")
    for dtype in (torch.float32, torch.int64, torch.bool, torch.float64, torch.complex64):
        if dtype in supported:
            return dtype
    return None


def _first_int(sample):
    """Where a dim-like int sits: ("kw", name) for dim=, ("arg", i) for the first int positional argument."""
    for key in ("dim", "dims"):
        if isinstance(sample.kwargs.get(key), int) and not isinstance(sample.kwargs.get(key), bool):
            return "kw", key
    for i, a in enumerate(sample.args):
        if isinstance(a, int) and not isinstance(a, bool):
            return "arg", i
    return None


def _int_arguments(sample) -> list:
    """Where every int argument sits (not bools): ("kw", name) or ("arg", i)."""
    def is_int(v):
        return isinstance(v, int) and not isinstance(v, bool)
    return [("arg", i) for i, a in enumerate(sample.args) if is_int(a)] + \
        [("kw", k) for k, v in sample.kwargs.items() if is_int(v)]


def _poisoned(t, rng):
    """t with NaN, +Inf and -Inf at seeded places (as many as it has elements)."""
    flat = t.detach().clone().flatten()
    for value, at in zip((math.nan, math.inf, -math.inf), rng.sample(range(flat.numel()), min(3, flat.numel()))):
        flat[at] = value
    return flat.view(t.shape)


# Ops whose int arguments size their result: 2**31 of them would allocate gigabytes on each side.
SIZED_BY_INTS = ("arange", "linspace", "logspace", "full", "ones", "zeros", "empty", "eye", "new_", "rand", "randn",
                 "randint", "normal", "tril_indices", "triu_indices", "repeat", "tile", "expand", "broadcast_to",
                 "one_hot", "bincount", "histc", "nn.functional.interpolate", "nn.functional.upsample", "kron",
                 "cartesian_prod", "combinations", "block_diag", "diag_embed", "vander", "signal.windows",
                 "stft", "istft", "fft", "multinomial", "bernoulli", "unfold", "as_strided", "resize")


def _with_int(sample, where, value):
    s = _map_tensors(sample, lambda t, i: t)
    if where[0] == "kw":
        s.kwargs = {**s.kwargs, where[1]: value}
    else:
        s.args = tuple(value if i == where[1] else a for i, a in enumerate(s.args))
    return s


def _noncontiguous(t):
    return torch.stack([t, t], -1)[..., 0] if t.dim() and t.numel() > 1 else t


def _expanded(t):
    for d, n in enumerate(t.shape):
        if n > 1:
            return t.narrow(d, 0, 1).expand(t.shape)
    return None


def _other_dtypes(dtype):
    if dtype.is_floating_point or dtype.is_complex:
        return (torch.int64, torch.bool, torch.float64, torch.float16, torch.complex64)
    return (torch.float32, torch.bool if dtype != torch.bool else torch.int64, torch.float64)


def _single_tensor_result(fn, sample):
    s, _ = _side(Call("", "function", sample), "cpu")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = fn(s.input, *s.args, **s.kwargs)
    except Exception:
        return None
    return r if isinstance(r, torch.Tensor) else None


from torch.testing._internal.opinfo.core import BinaryUfuncInfo, UnaryUfuncInfo  # noqa: E402


def _sample_calls(op, sample, rng) -> dict[str, list[Call]]:
    """Mutations of one sample (made on rbln), by kind. The expectations come from running the calls on
    CPU (and under CUDA's device rule), never from here."""
    calls = collections.defaultdict(list)
    tensors = _tensors(sample)
    if not tensors:
        return calls
    x = tensors[0]  # the input, or the first of a list of inputs
    inplace = op.inplace_variant is not None
    pointwise = isinstance(op, (UnaryUfuncInfo, BinaryUfuncInfo))
    dtype = rng.choice(_other_dtypes(x.dtype))
    calls["dtype"].append(Call("dtype", "function", _replace(sample, 0, lambda t: t.to(dtype))))
    # wrong shape: the first tensor argument gets one more element in its last dim
    others = [i for i, t in enumerate(tensors) if i > 0 and t.dim() > 0]
    if others:
        def grown(t):
            return torch.testing.make_tensor(t.shape[:-1] + (t.shape[-1] + 1,), dtype=t.dtype, device=t.device)
        calls["shape"].append(Call("shape", "function", _replace(sample, others[0], grown)))
    else:
        calls["shape"].append(Call("shape", "function", _replace(
            sample, 0, lambda t: t.reshape(-1) if t.dim() >= 2 else torch.testing.make_tensor(
                (3,) * (t.dim() + 2), dtype=t.dtype, device=t.device))))
    if len(tensors) >= 2:
        calls["device"].append(Call("device", "function", sample, cpu_at=(len(tensors) - 1,)))
        calls["device"].append(Call("device", "function", sample, cpu_at=(0,)))
        if tensors[1].numel():
            scalar = _replace(sample, 1, lambda t: t.flatten()[0].clone())
            calls["device"].append(Call("device", "function", scalar, cpu_at=(1,)))
    result = _single_tensor_result(op.op, sample) if op.supports_out else None
    if op.supports_out:
        if result is not None:
            shape, rdtype = tuple(result.shape), result.dtype
            for d in ((torch.float64, torch.int64) if rdtype.is_floating_point else
                      (torch.float32, torch.bool) if rdtype != torch.bool else (torch.int64, torch.float16)):
                calls["out_dtype"].append(Call("out_dtype", "out", sample, out=("empty", shape, d, "rbln"),
                                               compute_dtype=rdtype))
            wrong = (2, 2) if shape == (1,) else (1,)
            calls["out_shape"].append(Call("out_shape", "out", sample, out=("empty", wrong, rdtype, "rbln")))
            calls["out_device"].append(Call("out_device", "out", sample, out=("empty", shape, rdtype, "cpu")))
            if isinstance(sample.input, torch.Tensor):
                # where the op is not elementwise, what an out= aliasing its input holds depends on the kernel
                calls["out_alias"].append(Call("out_alias", "out", sample, out=("alias",), values=pointwise))
    where = _first_int(sample)
    if where is not None:
        calls["dim"].append(Call("dim", "function", _with_int(sample, where, x.dim() + 1)))
        calls["dim"].append(Call("dim", "function", _with_int(sample, where, -x.dim() - 2)))
    index = [i for i, t in enumerate(tensors) if i > 0 and not t.is_floating_point() and not t.is_complex()
             and t.dtype != torch.bool and t.numel()]
    if index:  # index values past every dim of the sample's tensors
        bad = 1 + max(t.numel() for t in tensors)
        for value in (bad, -bad):
            # where CPU does not check them, reads out of bounds: only dtypes and shapes are compared then
            calls["index"].append(Call("index", "function", _replace(sample, index[0], lambda t: torch.full_like(
                t, value)), values=False))
    if x.dim():
        empty = _map_tensors(sample, lambda t, i: t.narrow(-1, 0, 0) if t.dim() else t)
        calls["empty"].append(Call("empty", "function", empty))
    if x.numel():
        calls["zero_dim"].append(Call("zero_dim", "function", _replace(sample, 0, lambda t: t.flatten()[0].clone())))
    if any(t.dim() and t.numel() > 1 for t in tensors):
        noncontiguous = _map_tensors(sample, lambda t, i: _noncontiguous(t))
        for variant in ("function", "inplace") if inplace else ("function",):
            calls["noncontiguous"].append(Call("noncontiguous", variant, noncontiguous))
    if _expanded(x) is not None:
        expanded = _replace(sample, 0, _expanded)
        for variant in ("function", "inplace") if inplace else ("function",):
            calls["expanded"].append(Call("expanded", variant, expanded))
    floating = [i for i, t in enumerate(tensors) if t.is_floating_point() and t.numel()]
    if floating:  # NaN and Inf where the first floating input had values, then in every floating input
        calls["nan_inf"].append(Call("nan_inf", "function", _replace(sample, floating[0], lambda t: _poisoned(t, rng))))
        if len(floating) > 1:
            calls["nan_inf"].append(Call("nan_inf", "function", _map_tensors(
                sample, lambda t, i: _poisoned(t, rng) if i in floating else t)))
    if not any(k in opinfo_name(op) for k in SIZED_BY_INTS):  # huge, the largest and negative values of each int argument
        for where in _int_arguments(sample)[:3]:
            for value in (2**31, 2**63 - 1, -1):
                calls["int_value"].append(Call("int_value", "function", _with_int(sample, where, value)))
    if op.supports_out and result is not None and result.dim():
        calls["out_strided"].append(Call("out_strided", "out", sample, out=("strided", shape, rdtype, "rbln")))
    if op.supports_out and x.numel() and isinstance(sample.input, torch.Tensor):
        # a 0-dim input that is also the out= (a reduction's or an elementwise op's result has its shape)
        zero_dim = _replace(sample, 0, lambda t: t.flatten()[0].clone())
        calls["zero_dim_out_alias"].append(Call("zero_dim_out_alias", "out", zero_dim, out=("alias",),
                                                values=pointwise))
    return calls


def make_calls(op, seed: int, max_calls: int) -> list[Call]:
    """The op's calls, deterministic for (op, seed): its error inputs and the mutations of its first samples,
    taken kind by kind in turn so a cap keeps every kind."""
    import random

    name = opinfo_name(op)
    # Seeded once here: the inputs below are made with set_seed=False (torch_rbln.testing.opinfo_samples says why).
    torch.manual_seed(_seed(name, seed))
    torch.rbln.manual_seed(_seed(name, seed))
    rng = random.Random(_seed(name, seed))
    by_kind = collections.defaultdict(list)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if op.error_inputs_func is not None:
            for e in itertools.islice(op.error_inputs("rbln", set_seed=False), ERROR_INPUTS_PER_OP):
                by_kind["error_input"].append(Call("error_input", "function", e.sample_input, regex=e.error_regex))
        dtype = _base_dtype(op)
        if dtype is not None:
            # made on the device, as PyTorch's device tests make them: arguments that must be on CPU are
            samples = (s for s in op.sample_inputs("rbln", dtype, set_seed=False) if not s.kwargs.get("dropout_p"))
            for sample in itertools.islice(samples, SAMPLES_PER_OP):
                for kind, calls in _sample_calls(op, sample, rng).items():
                    by_kind[kind] += calls
    out = []
    for group in itertools.zip_longest(*(by_kind[k] for k in KINDS if by_kind[k])):
        out += [c for c in group if c is not None]
    return out[:max_calls]


# ---------------------------------------------------------------------------------------------------------------
# CUDA's device rule


@functools.cache
def _native_functions() -> dict[tuple[str, str], tuple[str, bool]]:
    """(ATen name, overload) -> (device check, has a CUDA kernel), from the native_functions.yaml torchgen ships.
    The check is "ExactSame" (the default: every tensor argument on one device), "Binary" (NoCheck, a structured
    TensorIterator op of two inputs: built as a binary op, which accepts CPU scalars), "TensorIterator" (NoCheck,
    another TensorIterator kernel: whether its config accepts CPU scalars is the kernel's) or "NoCheck"."""
    import torchgen

    path = os.path.join(os.path.dirname(torchgen.__file__), "packaged", "ATen", "native", "native_functions.yaml")
    entries, func_args, cur, in_dispatch = {}, {}, None, False
    with open(path) as f:
        for line in f:
            if line.startswith("- func:"):
                signature = line.split(":", 1)[1].strip()
                func = signature.split("(")[0]
                func_args[func] = signature.split("(", 1)[1].rsplit(") ->", 1)[0]
                cur = entries.setdefault(func, {"keys": set()})
                in_dispatch = False
            elif cur is None or not line.strip() or line.lstrip().startswith("#"):
                continue
            elif line.startswith("  ") and not line.startswith("    "):
                key, _, value = line.strip().partition(":")
                in_dispatch = key == "dispatch"
                cur[key] = value.strip()
            elif in_dispatch and ":" in line:
                cur["keys"].update(k.strip() for k in line.split(":")[0].split(","))

    def inherits_ti(e):
        return e.get("structured_inherits") == "TensorIteratorBase"

    out = {}
    for func, e in entries.items():
        delegate = entries.get(e.get("structured_delegate", ""), {})
        check = e.get("device_check", "")
        inputs = re.findall(r"Tensor\??(?:\([a-z]\))? \w+", func_args[func].split("*")[0])
        kind = "ExactSame" if not check.startswith("NoCheck") else \
            "Binary" if (inherits_ti(e) or inherits_ti(delegate)) and len(inputs) == 2 else \
            "TensorIterator" if "TensorIterator" in check or inherits_ti(e) or inherits_ti(delegate) else "NoCheck"
        name, _, overload = func.partition(".")
        # a CUDA kernel: listed, or generated from the op's ufunc loops
        out[(name, overload)] = (kind, any("CUDA" in x["keys"] or "ufunc_inner_loop" in x for x in (e, delegate) if x))
    return out


class _CudaRejects(Exception):
    pass


# Advanced indexing on CUDA moves CPU index tensors to the device (TensorAdvancedIndexing's make_info); device
# indices into a CPU tensor raise IndexError there.
CPU_INDICES_OK = {"index", "index_put", "index_put_", "_index_put_impl_"}
# The copies between devices (copy_'s implementation).
CROSS_DEVICE = {"_copy_from", "_copy_from_and_resize"}
# TensorIterator ops whose CUDA kernels require these arguments on the device, 0-dim or not.
KERNEL_DEVICE_ARGS = {"masked_fill": "mask", "masked_fill_": "mask"}
COMPOSITE_KEYS = ("CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional", "CompositeImplicitAutograd")


def _cuda_verdict(func, args, kwargs) -> tuple[str, str, type] | None:
    """("reject", why, exception type) where CUDA's device checks reject this ATen call, ("unsure", ...) where
    the kernel's own check decides (a TensorIterator config that may or may not accept CPU scalars), else None."""
    schema = func._schema
    name = schema.name.removeprefix("aten::")
    check, _ = _native_functions().get((name, schema.overload_name), ("ExactSame", True))
    if name in CROSS_DEVICE:
        return None
    if name in CPU_INDICES_OK and args[0].device.type == "cpu" and any(
            isinstance(t, torch.Tensor) and t.device.type != "cpu" for t in args[1]):
        return "reject" if name == "index" else "unsure", f"{func}: device indices into a CPU tensor", IndexError
    tensors = []  # (tensor, must be on the device: written to, or a kernel's device argument)
    for i, a in enumerate(schema.arguments):
        if a.name == "indices" and name in CPU_INDICES_OK:
            continue
        v = kwargs.get(a.name) if a.name in kwargs or a.kwarg_only else args[i] if i < len(args) else None
        written = a.alias_info is not None and a.alias_info.is_write
        for t in v if isinstance(v, (list, tuple)) else [v]:
            if isinstance(t, torch.Tensor):
                tensors.append((t, written or KERNEL_DEVICE_ARGS.get(name) == a.name))
    if len({t.device for t, _ in tensors}) < 2:
        return None
    why = f"{func} with tensors on {sorted({str(t.device) for t, _ in tensors})}"
    if check == "NoCheck":  # the kernel's own checks decide where it writes to another device
        return ("unsure", why, RuntimeError) if any(on_device for _, on_device in tensors) else None
    if check == "ExactSame":
        return "reject", why, RuntimeError
    # TensorIterator: a 0-dim CPU input may be a CPU scalar; nothing else crosses devices
    if len({t.device for t, on_device in tensors if on_device or t.dim() or t.device.type != "cpu"}) > 1:
        return "reject", why, RuntimeError
    return None if check == "Binary" else ("unsure", why, RuntimeError)


def _cuda_rule():
    """A dispatch mode that raises _CudaRejects at the first ATen op CUDA's device checks reject, and notes in
    `unsure` the ops whose kernels decide. An op without a CUDA kernel runs its composite kernel, so the ops
    it is made of are checked as on CUDA; where that composite fails (it may pick rbln's backend), the op's
    own check stands, unsure. An exception a kernel raises is marked (`_in_kernel`): what rbln's kernels do
    says nothing about CUDA."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class CudaDeviceRule(TorchDispatchMode):
        unsure = None

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            schema = func._schema
            aten = schema.name.startswith("aten::")
            _, has_cuda = _native_functions().get((schema.name.removeprefix("aten::"), schema.overload_name),
                                                  ("ExactSame", True))
            verdict = _cuda_verdict(func, args, kwargs) if aten else None
            # Custom ops (torch.library) are watched inside too: their CUDA kernel is the composite one.
            composite = [k for k in COMPOSITE_KEYS if (not has_cuda or not aten) and
                         torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), k)]
            if composite:
                try:
                    with self:
                        return func._op_dk(getattr(torch._C.DispatchKey, composite[0]), *args, **kwargs)
                except _CudaRejects:
                    raise
                except Exception as e:
                    e._in_kernel = True
                    if verdict:
                        self.unsure = self.unsure or verdict[1]
                    raise
            if verdict and verdict[0] == "reject":
                raise _CudaRejects(*verdict[1:])
            if verdict:
                self.unsure = self.unsure or verdict[1]
            try:
                return func(*args, **kwargs)
            except Exception as e:
                e._in_kernel = True
                raise

    return CudaDeviceRule


def _cuda_expectation(fn, variant, probe, cuda_rule):
    """What CUDA does with a call that has tensors on two devices: (exception type, why, certain) or None where
    CPU's outcome is the expectation. The call runs on rbln under CUDA's device rule; an exception raised
    outside any kernel comes from PyTorch's device-generic code, which CUDA runs too. Not certain (the
    kernel's own check decides): a device-mismatch RuntimeError and CPU's outcome are both CUDA's."""
    mode = cuda_rule()
    try:
        with mode:
            _invoke(fn, variant, *probe)
    except _CudaRejects as e:
        return e.args[1], f"CUDA's device check rejects {e.args[0]}", True
    except Exception as e:
        if not getattr(e, "_in_kernel", False):
            return type(e), f"device-generic code raises {type(e).__name__}: {' '.join(str(e).split())[:120]}", True
    return (RuntimeError, f"CUDA's kernel checks {mode.unsure}", False) if mode.unsure else None


# ---------------------------------------------------------------------------------------------------------------
# Running and judging


def _variant_fn(op, variant):
    return op.inplace_variant if variant == "inplace" else op.op


def _invoke(fn, variant, s, out):
    if variant == "out":
        fn(s.input, *s.args, **s.kwargs, out=out)
        return out
    return fn(s.input, *s.args, **s.kwargs)


def _outcome(thunk, sync=False) -> dict:
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        try:
            value = thunk()
            if sync:
                torch.rbln.synchronize()
            result = {"returned": value}
        except Exception as e:
            result = {"raised": type(e), "message": " ".join(str(e).split())}
    result["resized"] = any("resized" in str(x.message) for x in w)
    return result


def _summary(o) -> str:
    if "raised" in o:
        return f"raised {o['raised'].__name__}: {o['message'][:160]}"
    v = o["returned"]
    if isinstance(v, torch.Tensor):
        return f"returned {str(v.dtype).removeprefix('torch.')}{list(v.shape)}"
    return f"returned {type(v).__name__}"


# Random outputs: a two-sample Kolmogorov-Smirnov test at this level per compared tensor, on tensors of at least
# DISTRIBUTION_MIN_ELEMENTS elements (smaller ones: dtype and shape only).
DISTRIBUTION_LEVEL = 1e-6
DISTRIBUTION_MIN_ELEMENTS = 16
# Random ops whose elements are not drawn one by one (whole channels, pooling regions, a random projection, dropout
# inside attention): the test's samples are not independent, so they compare dtypes and shapes only.
DRAWN_TOGETHER = ("nn.functional.dropout2d", "nn.functional.dropout3d", "nn.functional.feature_alpha_dropout",
                  "nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d", "svd_lowrank",
                  "pca_lowrank", "nn.functional.multi_head_attention_forward")


def distribution_differs(expected: torch.Tensor, actual: torch.Tensor) -> str | None:
    """Why two random outputs cannot come from one distribution (the elements as one sample each; elements at the
    same position share their parameters on both sides), or None."""
    if expected.is_complex():
        expected, actual = torch.view_as_real(expected), torch.view_as_real(actual)
    x, y = expected.detach().cpu().flatten().double(), actual.detach().cpu().flatten().double()
    if bool(x.isnan().any()) != bool(y.isnan().any()):
        return f"NaN in {'CPU' if x.isnan().any() else 'rbln'}'s result only"
    x, y = x[~x.isnan()].sort().values, y[~y.isnan()].sort().values
    n, m = len(x), len(y)
    if min(n, m) < DISTRIBUTION_MIN_ELEMENTS:
        return None
    both = torch.cat([x, y])
    d = (torch.searchsorted(x, both, right=True) / n - torch.searchsorted(y, both, right=True) / m).abs().max().item()
    limit = math.sqrt(-math.log(DISTRIBUTION_LEVEL / 2) / 2) * math.sqrt((n + m) / (n * m))
    if d > limit:
        return (f"distributions differ: Kolmogorov-Smirnov D = {d:.3f} > {limit:.3f} (level {DISTRIBUTION_LEVEL:g}, "
                f"{n} and {m} elements; CPU mean {x.mean().item():.4g}, rbln {y.mean().item():.4g})")
    return None


def _compare(expected, actual, tolerance, values: bool | str):
    """(category, detail) where both returned and disagree, else None. `tolerance`: ops.yaml's for the op,
    else the dtype whose default tolerance applies (None: each result's own). `values` False compares dtypes
    and shapes only, "distribution" compares random outputs' distributions."""
    from torch.utils._pytree import tree_flatten

    exp, exp_spec = tree_flatten(expected)
    act, act_spec = tree_flatten(actual)
    act = to_cpu(act)
    if exp_spec != act_spec:
        return "value", f"structure {exp_spec} vs {act_spec}"
    for e, a in zip(exp, act):
        if isinstance(e, torch.Tensor) != isinstance(a, torch.Tensor):
            return "value", f"{type(e).__name__} vs {type(a).__name__}"
        if isinstance(e, torch.Tensor):
            if e.dtype != a.dtype:
                return "dtype", f"CPU {e.dtype}, rbln {a.dtype}"
            if e.shape != a.shape:
                return "shape", f"CPU {list(e.shape)}, rbln {list(a.shape)}"
        if not values:
            continue
        if values == "distribution":
            why = distribution_differs(e, a) if isinstance(e, torch.Tensor) else None
            if why:
                return "value", why
            continue
        tol = tolerance if isinstance(tolerance, dict) else TOLERANCES.get(tolerance or getattr(e, "dtype", None), {})
        try:
            torch.testing.assert_close(a, e, equal_nan=True, check_device=False, **tol)
        except (AssertionError, TypeError, ValueError) as err:
            if isinstance(err, AssertionError) or e != a:
                return "value", " ".join(str(err).split())[:300]
    return None


# CPU's own internal failures are no contract: any exception is CPU's behaviour there.
CPU_INTERNAL = re.compile(r"INTERNAL ASSERT FAILED|SmallVector unable to grow")
DTYPE_NAMES = {"Half": torch.float16, "BFloat16": torch.bfloat16, "Float": torch.float32, "Double": torch.float64,
               "ComplexHalf": torch.complex32, "ComplexFloat": torch.complex64, "ComplexDouble": torch.complex128,
               "Bool": torch.bool, "Byte": torch.uint8, "Char": torch.int8, "Short": torch.int16, "Int": torch.int32,
               "Long": torch.int64}


def _index_value_error(cpu) -> bool:
    """CPU rejected an index value (not a dim): CUDA's kernels check those on the device, where a failed
    check surfaces as RuntimeError (a device-side assert), so either type is CUDA's or CPU's behaviour."""
    return cpu["raised"] is IndexError and re.search(r"out of (range|bounds)", cpu["message"]) is not None \
        and "Dimension out of range" not in cpu["message"]


def _dtype_support_differs(op, outcome) -> bool:
    """The outcome is a kernel's 'not implemented for <dtype>' where CPU and CUDA support different dtypes
    (the OpInfo's lists): CUDA's dtypes are the contract, and no CPU result exists to compare with."""
    m = re.search(r"not implemented for '(\w+)'", outcome.get("message", ""))
    dtype = DTYPE_NAMES.get(m.group(1)) if m and outcome["raised"] is NotImplementedError else None
    return dtype is not None and (dtype in op.supported_dtypes("cpu")) != (dtype in op.supported_dtypes("cuda"))


def judge(op, call, cpu, rbln, cuda, tolerance, values=True):
    """The disagreement's (category, detail), or None when rbln agrees with the expectation: CPU's outcome,
    or `cuda` ((exception type, why): what CUDA raises for tensors on two devices)."""
    if cuda and cuda[2]:
        if "returned" in rbln:
            return "returned_where_cuda_raises", cuda[1]
        if not issubclass(rbln["raised"], cuda[0]):
            return "exception_type", f"CUDA raises {cuda[0].__name__} ({cuda[1]}), rbln {rbln['raised'].__name__}"
        return None
    if cuda and "raised" in rbln and "device" in rbln["message"]:
        return None  # a device mismatch, where CUDA's kernel decides
    if _dtype_support_differs(op, cpu) or ("raised" in rbln and _dtype_support_differs(op, rbln)):
        return None
    if "raised" in rbln and issubclass(rbln["raised"], torch.OutOfMemoryError) and (
            call.kind == "int_value" or "can't allocate memory" in cpu.get("message", "")):
        return None  # a size past the device's memory: CUDA's OutOfMemoryError (a RuntimeError), where CPU allocated
    if "raised" in cpu and "returned" in rbln:
        return "returned_where_cpu_raised", None
    if "returned" in cpu and "raised" in rbln:
        return "raised_where_cpu_returned", None
    if "raised" in cpu:
        if cpu["raised"] is not rbln["raised"] and not CPU_INTERNAL.search(cpu["message"]) and \
                not (_index_value_error(cpu) and issubclass(rbln["raised"], RuntimeError)):
            return "exception_type", f"CPU {cpu['raised'].__name__}, rbln {rbln['raised'].__name__}"
        if call.regex and re.search(call.regex, cpu["message"]) and not re.search(call.regex, rbln["message"]):
            return "error_message", f"rbln's message does not match the ErrorInput's regex {call.regex!r}"
        return None
    bad = _compare(cpu["returned"], rbln["returned"], tolerance or call.compute_dtype, call.values and values)
    if bad:
        return bad
    if cpu["resized"] != rbln["resized"]:
        return "warning", f"resize warning: CPU {cpu['resized']}, rbln {rbln['resized']}"
    return None


def run_call(op, call, seed, tolerance, values, cpu_done=lambda: None, cuda_rule=None) -> dict:
    """Runs one call on CPU, then on rbln; the record says what CPU did, what rbln did, and the disagreement."""
    fn = _variant_fn(op, call.variant)
    cpu_sample, cpu_out = _side(call, "cpu")
    dev_sample, dev_out = _side(call, "rbln")
    mixed = bool(call.cpu_at) or bool(call.out and call.out[0] == "empty" and call.out[3] == "cpu") or \
        any(t.device.type == "cpu" for t in _tensors(call.sample))
    torch.manual_seed(seed)
    cpu = _outcome(lambda: _invoke(fn, call.variant, cpu_sample, cpu_out))
    cpu_done()
    cuda = _cuda_expectation(fn, call.variant, _side(call, "rbln"), cuda_rule) if mixed else None
    torch.manual_seed(seed)
    torch.rbln.manual_seed(seed)
    rbln = _outcome(lambda: _invoke(fn, call.variant, dev_sample, dev_out), sync=True)
    bad = judge(op, call, cpu, rbln, cuda, tolerance, values)
    if bad and bad[0] == "value" and call.kind in ("noncontiguous", "expanded") and call.variant == "function":
        # CPU's result depends on the layout (the same values, contiguous, give another): either is CPU's
        contiguous = _outcome(lambda: _invoke(fn, call.variant, *_side(call, "cpu", contiguous=True)))
        if "returned" in contiguous and not judge(op, call, contiguous, rbln, None, tolerance, values):
            bad = None
    certain = cuda and cuda[2]
    record = {"kind": call.kind, "expect": "raise" if ("raised" in cpu or certain) else "return"}
    if bad:
        record.update(category=bad[0], detail=bad[1], call=call.describe(),
                      cpu=(f"CUDA raises {cuda[0].__name__}" if certain else _summary(cpu)), rbln=_summary(rbln))
        reason = cpu_behaviour(opinfo_name(op), call.kind)
        if reason:
            record["cpu_behaviour"] = reason
    return record


# Disagreements where CPU's behaviour is its own undefined behaviour or a quirk CUDA does not share: listed in the
# report with the reason, not counted. (op name pattern, mutation kind) -> why.
CPU_BEHAVIOURS = (
    (r"special\..*polynomial", "nan_inf", "at a NaN x of order >= 2 CPU returns an uninitialized variable (its "
     "recurrence stops before the first step), and a NaN order is cast to an integer (undefined in C++); rbln "
     "propagates the NaN (test_polynomial_recurrences_at_nan)"),
    (r"nn\.functional\.gelu$", "nan_inf", "on AVX-512 machines CPU hands float32 gelu to oneDNN, whose gelu(+inf) "
     "is NaN; ATen's kernel and CUDA's give +inf, as rbln (test_gelu_at_infinities_and_nan)"),
    (r"max_unpool", "dtype", "CPU's kernel takes floating types only; CUDA's takes every type, as rbln"),
    (r"grid_sampler_[23]d$|nn\.functional\.grid_sample$", "int_value", "CPU does not validate the interpolation "
     "and padding modes and reads memory with an out-of-range one; rbln raises CPU's message for a bad mode"),
    (r"nn\.functional\.pixel_unshuffle$", "empty", "CPU's kernel returns an empty input unchanged; CUDA's (the "
     "composite) gives the unshuffled shape, as rbln"),
    (r"nn\.functional\.ctc_loss$", "shape", "a target length past the targets: CPU reads out of bounds"),
    (r"^fft\.", "empty", "CPU's MKL rejects a batch of no transforms (an empty dim the transform does not cover); "
     "rbln returns the empty result"),
    (r"grid_sampler_[23]d$", "dim", "the mutated int is the interpolation mode: see int_value"),
    *((r"^(addmm(\.decomposed)?|addmv|baddbmm)$", kind, "out= is `self` with another shape: CPU's structured meta "
       "resizes it under itself, then reads it as the bias, uninitialized past its first elements; rbln refuses the "
       "call as an in-place one (Bad in-place call)") for kind in ("out_alias", "zero_dim_out_alias")),
    *((r"^addr$", kind, "out= is `self` with another shape: CPU resizes it, then reads it through a broadcast view "
       "while writing it, so each element depends on those written before it (serial order); rbln refuses the "
       "call as addr_ does") for kind in ("out_alias", "zero_dim_out_alias")),
    (r"^linalg\.svdvals$", "out_alias", "out= is the input matrix: CPU resizes it to the singular values' shape and "
     "then takes sizes from freed memory (its error names a garbage size); rbln returns the singular values"),
    (r"nn\.functional\.conv(3d|_transpose[123]d)$", "dtype", "CUDA checks that input and weight types agree "
     "before its kernel (RuntimeError, as rbln); CPU reaches its kernel's NotImplementedError first"),
)


def cpu_behaviour(name: str, kind: str) -> str | None:
    return next((why for pattern, k, why in CPU_BEHAVIOURS if k == kind and re.search(pattern, name)), None)


# ---------------------------------------------------------------------------------------------------------------
# Reproducers


def _fn_expr(op, variant):
    fn = _variant_fn(op, variant)
    name = getattr(fn, "__name__", "")
    if variant == "inplace" and getattr(torch.Tensor, name, None) is fn:
        return None, name
    for mod in ("torch", "torch.nn.functional", "torch.special", "torch.linalg", "torch.fft"):
        if name and getattr(eval(mod), name, None) is fn:
            return f"{mod}.{name}", None
    if getattr(torch.Tensor, name, None) is fn:
        return None, name
    attr = "inplace_variant" if variant == "inplace" else "op"
    return ("next(o for o in __import__('torch.testing._internal.common_methods_invocations', fromlist=['op_db'])"
            f".op_db if (o.name, o.variant_test_name) == {(op.name, op.variant_test_name)!r}).{attr}"), None


def _num(v) -> str:
    if isinstance(v, float) and not math.isfinite(v):
        return f"float('{v}')"
    if isinstance(v, complex):
        return f"complex({_num(v.real)}, {_num(v.imag)})"
    return repr(v)


def _nested(v) -> str:
    return "[" + ", ".join(_nested(x) for x in v) + "]" if isinstance(v, list) else _num(v)


def _tensor_expr(t, device) -> str | None:
    if t.layout != torch.strided or t.untyped_storage().nbytes() // t.element_size() > 32:
        return None
    dtype, n = str(t.dtype), t.untyped_storage().nbytes() // t.element_size()
    if t.numel() == 0:
        return f"torch.empty({list(t.shape)}, dtype={dtype}, device={device!r})"
    if t.is_contiguous() and t.storage_offset() == 0 and n == t.numel():
        return f"torch.tensor({_nested(t.tolist())}, dtype={dtype}, device={device!r})"
    flat = torch.empty(0, dtype=t.dtype, device=t.device).set_(t.untyped_storage(), 0, (n,), (1,))
    return (f"torch.tensor({_nested(flat.tolist())}, dtype={dtype}, device={device!r})"
            f".as_strided({list(t.shape)}, {list(t.stride())}, {t.storage_offset()})")


def _value_expr(v, tensor_expr):
    if isinstance(v, torch.Tensor):
        return tensor_expr(v)
    if isinstance(v, (list, tuple)):
        items = [_value_expr(x, tensor_expr) for x in v]
        if any(i is None for i in items):
            return None
        return ("[" + ", ".join(items) + "]") if isinstance(v, list) else \
            ("(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")")
    if isinstance(v, torch.device):
        return f"torch.device({str(v)!r})"
    if isinstance(v, (float, complex)):
        return _num(v)
    text = repr(v)
    return None if text.startswith("<") or " object at " in text else text


def reproducer(op, call, call_id) -> str:
    """One line of Python that runs the call on rbln: literal inputs where they are small, else the harness."""
    harness = f"from conformance.errors import repro; repro({call_id!r})"
    fn, method = _fn_expr(op, call.variant)
    positions = {}
    _map_tensors(call.sample, lambda t, i: positions.setdefault(id(t), i))

    def tensor_expr(t):
        return _tensor_expr(t, "cpu" if positions.get(id(t)) in call.cpu_at or t.device.type == "cpu" else "rbln")

    first = _value_expr(call.sample.input, tensor_expr)
    args = [_value_expr(a, tensor_expr) for a in call.sample.args]
    values = {k: _value_expr(v, tensor_expr) for k, v in call.sample.kwargs.items()}
    if first is None or None in args or None in values.values():
        return harness
    kwargs = [f"{k}={v}" for k, v in values.items()]
    setup = ""
    if call.out and call.out[0] == "alias":
        setup, first = f"x = {first}; ", "x"
        kwargs.append("out=x")
    elif call.out:
        how, shape, dtype, device = call.out
        strided = how == "strided"
        kwargs.append(f"out=torch.zeros({list(shape) + [2] * strided}, dtype={dtype}, device={device!r})"
                      + ("[..., 0]" if strided else ""))
    inner = ", ".join(args + kwargs)
    expr = f"{first}.{method}({inner})" if method else f"{fn}({', '.join([first] + args + kwargs)})"
    return f"import torch; {setup}print({expr})"


# ---------------------------------------------------------------------------------------------------------------
# Workers


def _selftest_ops():
    """Two entries the harness's own test uses: one that kills the process, one that hangs, on rbln and only
    for an input that is not float32 (the first call, a dtype mutation; the next one returns)."""
    from torch.testing._internal.opinfo.core import OpInfo, SampleInput

    def crash(x):
        if x.device.type == "rbln" and x.dtype != torch.float32:
            os.kill(os.getpid(), signal.SIGSEGV)
        return x + 1

    def hang(x):
        if x.device.type == "rbln" and x.dtype != torch.float32:
            time.sleep(3600)
        return x + 1

    def samples(op, device, dtype, requires_grad, **kwargs):
        yield SampleInput(torch.ones(3, device=device, dtype=dtype))

    return [OpInfo(f"_selftest.{fn.__name__}", op=fn, dtypes=(torch.float32,), sample_inputs_func=samples,
                   supports_out=False, supports_autograd=False) for fn in (crash, hang)]


@functools.cache
def _op_db() -> dict:
    from torch.testing._internal.common_methods_invocations import op_db

    return {opinfo_name(op): op for op in op_db}


def find_op(name: str):
    """The OpInfo entry named `name` (op_db is imported only for a name outside the self-test entries)."""
    if name.startswith("_selftest."):
        return {opinfo_name(op): op for op in _selftest_ops()}[name]
    return _op_db()[name]


_tolerances = functools.cache(ops_yaml_tolerances)
# Ops whose mutated samples grow a tensor: the new elements are uninitialized memory.
GROWS_UNINITIALIZED = ("resize_", "resize_as_")


def _op_settings(op):
    """(values compared, tolerance) for an op: random outputs compare distributions, uninitialized ones dtypes and
    shapes only; the tolerance is ops.yaml's for the op, as in the conformance sweep."""
    name = opinfo_name(op)
    reason = skip_reason(op.name) or skip_reason(name)
    values = ("distribution" if op.name not in DRAWN_TOGETHER else False) if reason == "random output" else \
        reason is None and op.name not in GROWS_UNINITIALIZED
    return values, _tolerances().get(name, {}).get(str(_base_dtype(op)).removeprefix("torch."))


def _worker(conn, seed, max_calls, seconds_per_op):
    warnings.simplefilter("ignore")
    cuda_rule = _cuda_rule()
    (torch.ones(1, device="rbln") + 1).cpu()  # the device starts up here, not in the first call's time
    conn.send(("ready",))
    cached = (None, [])
    while (job := conn.recv()) is not None:
        name, start, stop = job
        try:
            op = find_op(name)
            if cached[0] != name:
                cached = (name, make_calls(op, seed, max_calls))
        except Exception as e:
            conn.send(("op_error", name, f"making calls failed: {type(e).__name__}: {str(e)[:200]}"))
            continue
        calls = cached[1]
        values, tolerance = _op_settings(op)
        began = time.perf_counter()
        for i in range(start, min(stop or len(calls), len(calls))):
            if time.perf_counter() - began > seconds_per_op:
                conn.send(("budget", name, i))
                break
            conn.send(("start", name, i, calls[i].kind))
            call_seed = _seed(f"{name}#{i}", seed)
            try:
                record = run_call(op, calls[i], call_seed, tolerance, values, lambda: conn.send(("cpu_done", name, i)),
                                  cuda_rule)
            except Exception as e:  # the harness's own failure (e.g. a result it cannot compare)
                record = {"kind": calls[i].kind, "harness_error": f"{type(e).__name__}: {str(e)[:200]}"}
            if "category" in record:
                record["repro"] = reproducer(op, calls[i], f"{name}#{i}")
            conn.send(("result", name, i, record))
        conn.send(("end", name, len(calls)))


class _Worker:
    """One worker subprocess and the job it runs: an op, the call it is in and which side of it."""

    def __init__(self, ctx, seed, max_calls, seconds_per_op):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, seed, max_calls, seconds_per_op), daemon=True)
        self.proc.start()
        child.close()
        self.ready, self.job, self.deadline = False, None, time.monotonic() + 300  # imports torch and op_db
        self.call = self.next = self.phase = None

    def send(self, job, timeout):
        self.job, self.call, self.next, self.phase = job, None, None, "generate"
        self.deadline = time.monotonic() + 4 * timeout
        self.conn.send(job)

    def done(self):
        self.job, self.call, self.next, self.phase, self.deadline = None, None, None, None, math.inf

    def stop(self):
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join()

    def how(self, lost, timeout) -> str:
        if lost == "hang":
            return f"no answer within {timeout} s, killed"
        code = self.proc.exitcode
        return f"killed by {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}"


def run(names, *, seed=0, max_calls=24, seconds_per_op=20.0, timeout=20.0, workers=2, progress=None) -> dict:
    """Runs the named OpInfo entries' calls in a pool of worker subprocesses; returns the report."""
    import multiprocessing
    from multiprocessing.connection import wait

    ctx = multiprocessing.get_context("spawn")
    queue = collections.deque((name, 0, None) for name in names)  # (op, first call, end: None for all)
    records, op_errors, cpu_failures, budget, regenerated = {}, [], [], [], set()
    pool = [_Worker(ctx, seed, max_calls, seconds_per_op) for _ in range(max(1, min(workers, len(names))))]
    began = time.perf_counter()

    def lost(w, how):
        """The worker died or hung: the call it was in gets the blame, and its op resumes after that call."""
        w.stop()
        name, detail, confirming = w.job[0], w.how(how, timeout), w.job[2] is not None
        if w.phase == "rbln" and confirming:
            records[(name, w.call)]["detail"] += "; again alone in a new worker"
        elif w.phase == "rbln":
            call_id = f"{name}#{w.call}"
            records[(name, w.call)] = {"kind": w.kind, "expect": "?", "category": how, "detail": f"rbln: {detail}",
                                       "repro": f"from conformance.errors import repro; repro({call_id!r})"}
            queue.appendleft((name, w.call, w.call + 1))  # alone in a new worker: does it do that again?
        elif w.phase == "cpu":
            what = f"CPU {how} ({detail})"
            if confirming:  # alone, it died on CPU's side: CPU's fault, shown late the first time
                what += f"; the first time in rbln's side ({records.pop((name, w.call))['detail']})"
            cpu_failures.append({"id": f"{name}#{w.call}", "what": what})
        elif w.phase == "generate" and name not in regenerated:  # making the samples: once more, in a new worker
            regenerated.add(name)
            queue.appendleft((name, 0, None))
        else:
            op_errors.append({"op": name, "error": f"worker {how} ({detail}) outside a call, {w.phase}"})
        resume = w.call + 1 if w.phase in ("cpu", "rbln") else w.next
        if resume is not None and not confirming:
            queue.appendleft((name, resume, None))
        elif progress:
            progress(name, len(queue))
        pool[pool.index(w)] = _Worker(ctx, seed, max_calls, seconds_per_op)

    while queue or any(w.job for w in pool):
        for w in pool:
            if w.ready and w.job is None and queue:
                w.send(queue.popleft(), timeout)
        ready = wait([w.conn for w in pool], timeout=max(0.0, min(w.deadline for w in pool) - time.monotonic()) + 0.05)
        for w in list(pool):
            if w.conn not in ready:
                if time.monotonic() > w.deadline:
                    if not w.ready:
                        raise RuntimeError("a worker did not start within 300 s")
                    lost(w, "hang")
                continue
            try:
                msg = w.conn.recv()
            except (EOFError, OSError):
                w.proc.join(5)
                if w.job is None:
                    raise RuntimeError(f"a worker died outside a job (exit code {w.proc.exitcode})") from None
                lost(w, "crash")
                continue
            kind = msg[0]
            if kind == "ready":
                w.ready, w.deadline = True, math.inf
            elif kind == "start":
                w.call, w.kind, w.phase, w.deadline = msg[2], msg[3], "cpu", time.monotonic() + timeout
            elif kind == "cpu_done":
                w.phase = "rbln"
            elif kind == "result":
                if w.job[2] is not None:  # a crash or hang not repeated alone: still rbln's, after other calls
                    records[(msg[1], msg[2])]["detail"] += "; not again alone in a new worker (left by an earlier call?)"
                else:
                    records[(msg[1], msg[2])] = msg[3]
                w.call, w.next, w.phase, w.deadline = None, msg[2] + 1, "between", time.monotonic() + 4 * timeout
            elif kind == "budget":
                budget.append({"op": msg[1], "ran": msg[2]})
            elif kind in ("end", "op_error"):
                if kind == "op_error":
                    op_errors.append({"op": msg[1], "error": msg[2]})
                w.done()
                if progress:
                    progress(msg[1], len(queue))
    for w in pool:
        w.conn.send(None)
        w.proc.join(10)
        w.stop()
    return _report(records, op_errors, cpu_failures, budget,
                   {"torch": torch.__version__, "seed": seed, "ops": len(names), "max_calls_per_op": max_calls,
                    "seconds_per_op": seconds_per_op, "timeout": timeout, "workers": len(pool),
                    "seconds": round(time.perf_counter() - began, 1)})


def _report(records, op_errors, cpu_failures, budget, meta) -> dict:
    kinds = {k: {"calls": 0, "cpu_raised": 0, "disagreements": 0} for k in KINDS}
    categories = {c: 0 for c in CATEGORIES}
    ops = collections.defaultdict(lambda: {"calls": 0, "disagreements": 0})
    disagreements, harness_errors, cpu_behaviours = [], [], []
    for (name, i), r in sorted(records.items()):
        ops[name]["calls"] += 1
        if "harness_error" in r:
            harness_errors.append({"id": f"{name}#{i}", "error": r["harness_error"]})
            continue
        k = kinds.setdefault(r["kind"], {"calls": 0, "cpu_raised": 0, "disagreements": 0})
        k["calls"] += 1
        k["cpu_raised"] += r.get("expect") == "raise"
        if "cpu_behaviour" in r:
            cpu_behaviours.append({"id": f"{name}#{i}", "op": name, **r})
        elif "category" in r:
            k["disagreements"] += 1
            categories[r["category"]] += 1
            ops[name]["disagreements"] += 1
            disagreements.append({"id": f"{name}#{i}", "op": name, **r})
    total = sum(o["calls"] for o in ops.values())
    meta = {**meta, "calls": total, "disagreements": len(disagreements)}
    return {"meta": meta, "categories": categories, "kinds": kinds,
            "ops": dict(sorted(ops.items())), "disagreements": disagreements, "op_errors": op_errors,
            "cpu_failures": cpu_failures, "harness_errors": harness_errors, "budget_stops": budget,
            "cpu_behaviours": cpu_behaviours}


def repro(call_id: str, seed: int = 0):
    """Runs one call of a report (its id, "op#index") in this process and prints both outcomes."""
    name, _, index = call_id.rpartition("#")
    op = find_op(name)
    call = make_calls(op, seed, int(index) + 1)[int(index)]
    values, tolerance = _op_settings(op)
    print(call.describe())
    record = run_call(op, call, _seed(call_id, seed), tolerance, values, cuda_rule=_cuda_rule())
    print(json.dumps(record, indent=1, default=str))
    return record


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", nargs="*", help="OpInfo names to run (default: all of op_db)")
    p.add_argument("--max-calls", type=int, default=24, help="calls per op (error inputs, then mutations)")
    p.add_argument("--seconds-per-op", type=float, default=20.0, help="stop an op's calls after this long")
    p.add_argument("--timeout", type=float, default=20.0, help="a call still running after this long is a hang")
    p.add_argument("--workers", type=int, default=2, help="worker subprocesses")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--report", default=os.path.join(ROOT, "conformance", "errors_report.json"))
    p.add_argument("--docs", default=os.path.join(ROOT, "docs", "error_parity.md"))
    p.add_argument("--repro", metavar="ID", help="run one call (its report id, op#index) here and print it")
    args = p.parse_args()
    if args.repro:
        repro(args.repro, args.seed)
        return 0
    from torch.testing._internal.common_methods_invocations import op_db

    names = [opinfo_name(op) for op in op_db if not args.ops or opinfo_name(op) in args.ops]
    names = [n for n in names if not (skip_reason(n) or "").startswith("sparse")]
    names += [n for n in args.ops or () if n.startswith("_selftest.")]
    report = run(names, seed=args.seed, max_calls=args.max_calls, seconds_per_op=args.seconds_per_op,
                 timeout=args.timeout, workers=args.workers,
                 progress=lambda name, left: print(f"  {name} ({left} left)", file=sys.stderr, flush=True))
    from .render import render_error_parity

    with open(args.report, "w") as f:
        json.dump(report, f, indent=1)
    with open(args.docs, "w") as f:
        f.write(render_error_parity(report))
    print(open(args.docs).read().split("\n## All disagreements")[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
