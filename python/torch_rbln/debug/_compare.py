"""Compare mode: every op on rbln also runs on CPU copies of its inputs, and its results (and the
arguments it writes) are compared, so the first op whose kernel computes a wrong number is named with
where it ran, instead of a loss that drifts thousands of ops later."""
from __future__ import annotations

import contextlib
import functools
import math
import os
import sys
import tempfile
import textwrap
from dataclasses import dataclass, field

import torch
from torch.utils._pytree import tree_map

from ._errors import error, tolerance
from ._location import Locator, OpMode, describe
from ._references import REFERENCES

# Ops whose result is not a function of their inputs (uninitialized memory) or that only move metadata.
_UNCOMPARABLE = {"aten::empty", "aten::empty_like", "aten::empty_strided", "aten::new_empty",
                 "aten::new_empty_strided", "aten::resize_", "aten::set_", "aten::record_stream",
                 "aten::_local_scalar_dense"}
# A random op's results are compared by mean and standard deviation when they have this many elements.
_MIN_RANDOM_NUMEL = 256


def op_name(func) -> str:
    return f"{func._schema.name}.{func._overloadname}"


def _is_rbln(x) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type == "rbln"


def tensors_in(values) -> list[torch.Tensor]:
    """The tensors among an op's arguments or results (a tensor or a list of them each): cheaper than a
    pytree walk, which matters at every op."""
    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            out += [t for t in v if isinstance(t, torch.Tensor)]
    return out


def results(out) -> list[torch.Tensor]:
    return tensors_in(out if isinstance(out, (list, tuple)) else (out,))


@functools.cache
def _writes(func) -> tuple:
    """(position, name) of the arguments the op writes (in place or out=)."""
    return tuple((i, a.name) for i, a in enumerate(func._schema.arguments)
                 if a.alias_info is not None and a.alias_info.is_write)


def _written(func, args, kwargs) -> list[torch.Tensor]:
    """The arguments the op writes, as tensors."""
    return tensors_in([args[i] if i < len(args) else kwargs.get(name) for i, name in _writes(func)])


@dataclass
class Divergence:
    """One op whose rbln result is off its reference by more than the tolerance."""

    op: str
    result: str  # "output 0" or "argument written 0"
    where: dict
    dtype: torch.dtype
    shape: tuple
    atol: float
    rtol: float
    figures: dict
    reproducer: str | None = None  # the script to run
    order: int = 0  # the op's position among those compared

    def __str__(self) -> str:
        f = self.figures
        if f.get("mismatch"):
            what = f["mismatch"]
        elif f.get("statistics"):
            what = f["statistics"]
        else:
            what = (f"max abs error {f['max_abs']:.4g}, max rel error {f['max_rel']:.4g} at index {f['index']} "
                    f"(rbln {_g(f['actual'])}, reference {_g(f['expected'])}); {f['count']} of {f['numel']} elements off "
                    f"(atol {self.atol:g}, rtol {self.rtol:g})")
        text = f"{self.op}: {self.result} ({str(self.dtype).removeprefix('torch.')}{list(self.shape)}) diverges: {what}\n"
        text += describe(self.where)
        if self.reproducer:
            text += f"\n  reproducer: python {self.reproducer}"
        return text


def _random(func, args, kwargs) -> bool:
    """A random op, unless its randomness is off for this call: dropout with p == 0 or not training
    (attention with dropout_p=0.0, native_dropout(train=False))."""
    if torch.Tag.nondeterministic_seeded not in func.tags:
        return False
    for i, a in enumerate(func._schema.arguments):
        value = args[i] if i < len(args) else kwargs.get(a.name, a.default_value)
        if (a.name in ("p", "dropout_p") and value == 0) or (a.name == "train" and value is False):
            return False
    return True


def _g(value) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


class DivergenceError(RuntimeError):
    """Raised by compare(mode="first") at the first divergence (`.divergence`)."""

    def __init__(self, divergence: Divergence):
        super().__init__(f"rbln diverges from the reference at op #{divergence.order}:\n{divergence}")
        self.divergence = divergence


@dataclass
class _Report:
    divergences: list = field(default_factory=list)
    skipped: dict = field(default_factory=dict)  # op -> reason
    compared: int = 0
    ops: set = field(default_factory=set)  # the overloads compared


class compare(contextlib.ContextDecorator):
    """Runs every op on rbln tensors also on CPU copies of its inputs and compares the results.

    reference: "cpu" (the only one here). dtype: e.g. torch.float64 to run the reference in that precision
    (floating inputs are cast; results are compared in float64). tolerances: {dtype or "aten::op" or
    "aten::op.overload": (atol, rtol)} over the defaults of `torch_rbln.debug.TOLERANCES`. mode: "first"
    raises DivergenceError at the first divergence; "all" records each one (`.divergences`) and prints a
    table ranked by error over tolerance when the block ends. The first divergence's inputs are saved
    with a script that replays the op on rbln and on CPU, in `repro_dir` (default: a new temporary
    directory). backward_stacks: turns on anomaly mode, so a backward op is reported with the forward
    lines that made it (slower). Use as `with compare(): ...` or `@compare()`.
    """

    def __init__(self, reference: str = "cpu", *, dtype: torch.dtype | None = None, tolerances=None,
                 mode: str = "first", repro_dir: str | None = None, backward_stacks: bool = False):
        if reference != "cpu":
            raise ValueError(f"reference={reference!r}: only 'cpu' is supported")
        if mode not in ("first", "all"):
            raise ValueError(f"mode={mode!r}: expected 'first' or 'all'")
        self.dtype, self.tolerances, self.mode = dtype, dict(tolerances or {}), mode
        self.repro_dir, self.backward_stacks = repro_dir, backward_stacks
        self.report = _Report()

    @property
    def divergences(self) -> list[Divergence]:
        return self.report.divergences

    def __enter__(self):
        self.report = _Report()
        self._stack = contextlib.ExitStack()
        self._locator = self._stack.enter_context(Locator())
        if self.backward_stacks:
            self._stack.enter_context(torch.autograd.set_detect_anomaly(True, check_nan=False))
        self._stack.enter_context(OpMode(self))
        return self

    def __exit__(self, *exc):
        self._stack.close()
        if self.mode == "all" and self.divergences:
            print(self.table(), file=sys.stderr)
        return False

    def table(self, top: int = 20) -> str:
        """The divergences, worst (error over tolerance) first."""
        rows = sorted(self.divergences, key=lambda d: -d.figures["ratio"])[:top]
        lines = [f"{len(self.divergences)} divergent op(s) of {self.report.compared} compared; worst first:",
                 f"{'#':>5}  {'op':<36} {'module':<32} {'phase':<8} {'max abs':>10} {'max rel':>10} {'x tol':>8}"]
        for d in rows:
            f = d.figures
            lines.append(f"{d.order:>5}  {d.op:<36} {str(d.where['module']):<32} {d.where['phase']:<8} "
                         f"{f['max_abs']:>10.3g} {f['max_rel']:>10.3g} {f['ratio']:>8.3g}")
        return "\n".join(lines)

    # ---------------------------------------------------------------- per op

    def _reference_input(self, x):
        if not _is_rbln(x):
            return x
        return x.detach().cpu()

    def _cast(self, x):
        if self.dtype is not None and isinstance(x, torch.Tensor) and x.is_floating_point():
            return x.to(self.dtype)
        return x

    def _dispatch(self, func, args, kwargs):
        device = kwargs.get("device")
        on_rbln = any(_is_rbln(t) for t in tensors_in((*args, *kwargs.values()))) or (
            device is not None and torch.device(device).type == "rbln")
        if not on_rbln:
            return func(*args, **kwargs)
        name = op_name(func)
        if name.rsplit(".", 1)[0] in _UNCOMPARABLE or func.is_view:
            return func(*args, **kwargs)
        saved = tree_map(self._reference_input, (args, kwargs))  # before the op: it may write its inputs
        out = func(*args, **kwargs)
        writes = bool(_writes(func))
        ref_args, ref_kwargs = tree_map(self._cast, saved)
        if writes:  # keep `saved` as the op's inputs, for the reproducer
            ref_args, ref_kwargs = tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x,
                                            (ref_args, ref_kwargs))
        if ref_kwargs.get("device") is not None and torch.device(ref_kwargs["device"]).type == "rbln":
            ref_kwargs["device"] = "cpu"
        try:
            ref_out = REFERENCES.get(func._schema.name, func)(*ref_args, **ref_kwargs)
        except Exception as e:  # e.g. no float64 kernel for the op on CPU
            self.report.skipped.setdefault(name, f"the reference raised {type(e).__name__}: {e}")
            return out
        self.report.compared += 1
        self.report.ops.add(name)
        pairs = [(f"output {i}", a, e) for i, (a, e) in enumerate(zip(_flat(out), _flat(ref_out)))]
        written, ref_written = _written(func, args, kwargs), _written(func, ref_args, ref_kwargs)
        pairs = [p for p in pairs if not any(p[1] is w for w in written)]  # an in-place op returns what it wrote
        pairs += [(f"argument written {i}", a, e) for i, (a, e) in enumerate(zip(written, ref_written))]
        random = _random(func, args, kwargs)
        for result, actual, expected in pairs:
            if not isinstance(actual, torch.Tensor) or not isinstance(expected, torch.Tensor):
                if isinstance(actual, (int, float, bool)) and isinstance(expected, (int, float, bool)):
                    actual, expected = torch.tensor(actual), torch.tensor(expected)
                else:
                    continue
            atol, rtol = tolerance(actual.dtype, name, self.tolerances)
            actual_cpu = actual.detach().cpu()
            expected = expected.detach()
            if self.dtype is None and expected.dtype != actual_cpu.dtype:
                figures = {"mismatch": f"dtype {actual_cpu.dtype} != reference's {expected.dtype}", "ratio": math.inf,
                           "max_abs": math.inf, "max_rel": math.inf}
            elif random:
                figures = self._statistics(name, actual_cpu, expected, atol)
            else:
                figures = error(actual_cpu, expected, atol, rtol)
            if figures is not None:
                self._diverged(Divergence(name, result, self._locator.where(), actual.dtype, tuple(actual.shape),
                                          atol, rtol, figures, order=self.report.compared), func, saved)
        return out

    def _statistics(self, name, actual, expected, atol) -> dict | None:
        """Random results: the mean and standard deviation, within 6 standard errors of the reference's."""
        n = actual.numel()
        if n < _MIN_RANDOM_NUMEL:
            self.report.skipped.setdefault(name, f"random op with fewer than {_MIN_RANDOM_NUMEL} elements")
            return None
        a, e = actual.double(), expected.double()
        std = float(e.std())
        bound, std_bound = 6 * std / math.sqrt(n) + atol, 6 * std * math.sqrt(2 / n) + atol
        d_mean, d_std = abs(float(a.mean()) - float(e.mean())), abs(float(a.std()) - std)
        if d_mean <= bound and d_std <= std_bound:
            return None
        return {"statistics": f"random op: mean {float(a.mean()):.4g} (reference {float(e.mean()):.4g}), "
                              f"std {float(a.std()):.4g} (reference {std:.4g}), over {n} elements",
                "max_abs": d_mean, "max_rel": d_mean / (abs(float(e.mean())) or 1.0),
                "ratio": max(d_mean / bound, d_std / std_bound)}

    def _diverged(self, divergence: Divergence, func, saved) -> None:
        if not self.divergences:
            divergence.reproducer = self._write_reproducer(divergence, func, saved)
        self.divergences.append(divergence)
        if self.mode == "first":
            raise DivergenceError(divergence)

    def _write_reproducer(self, divergence: Divergence, func, saved) -> str:
        directory = os.path.abspath(self.repro_dir or tempfile.mkdtemp(prefix="rbln_compare_"))
        os.makedirs(directory, exist_ok=True)
        stem = divergence.op.replace("::", "_").replace(".", "_")
        inputs = os.path.join(directory, f"{stem}.pt")
        args, kwargs = saved
        torch.save({"op": divergence.op, "args": args, "kwargs": kwargs, "atol": divergence.atol,
                    "rtol": divergence.rtol, "report": str(divergence)}, inputs)
        script = os.path.join(directory, f"{stem}.py")
        with open(script, "w") as f:
            f.write(REPRODUCER.format(op=divergence.op, inputs=os.path.basename(inputs)))
        return script


def _flat(out) -> list:
    """An op's results: tensors and numbers (`.item()`'s), in order."""
    return list(out) if isinstance(out, (list, tuple)) else [out]


REPRODUCER = textwrap.dedent('''\
    """Replays {op} on rbln and on CPU with the inputs torch_rbln.debug.compare saved ({inputs}).
    Exit status 1 when the results differ by more than the tolerance."""
    import os
    import sys

    import torch
    import torch_rbln  # noqa: F401
    from torch.utils._pytree import tree_flatten, tree_map

    saved = torch.load(os.path.join(os.path.dirname(os.path.abspath(__file__)), "{inputs}"), weights_only=False)
    namespace, name = saved["op"].split("::")
    packet, overload = name.split(".")
    op = getattr(getattr(getattr(torch.ops, namespace), packet), overload)


    def run(device):
        def move(x):
            if isinstance(x, torch.Tensor):
                return x.clone().to(device)
            return device if isinstance(x, torch.device) and x.type in ("cpu", "rbln") else x

        args, kwargs = tree_map(move, (saved["args"], saved["kwargs"]))
        out = op(*args, **kwargs)
        return [t.cpu() for t in tree_flatten((out, args, kwargs))[0] if isinstance(t, torch.Tensor)]


    print(saved["report"])
    worst = 0.0
    for actual, expected in zip(run("rbln"), run("cpu")):
        try:
            torch.testing.assert_close(actual, expected, atol=saved["atol"], rtol=saved["rtol"], equal_nan=True)
        except AssertionError as e:
            print(e)
            worst = 1.0
    print("replayed on rbln and cpu:", "results differ" if worst else "results match")
    sys.exit(int(worst))
''')
