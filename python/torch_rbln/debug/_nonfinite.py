"""Non-finite origin: the first op on rbln whose results hold a NaN or an Inf, from finite inputs.

Each op's floating results are reduced on the device to their sum (one `sum` kernel, queued on the
op's stream after the op, accumulated in float32 at least: a NaN or an infinity makes the sum NaN or
infinite; finite values make it so only past float32's range, 3.4e38, which is then reported too); the
host reads the sums, stacked, once every `check_every` ops and when the block ends, so the check adds
one reduction per result and no host wait per op. Inputs first seen (parameters, data) are checked
once, so an op that received a NaN from outside is not blamed for it."""
from __future__ import annotations

import contextlib
import math

import torch
from ._compare import _written, op_name, results, tensors_in
from ._location import Locator, OpMode, describe


# The user's lines kept per op: each op's are taken before the host knows whether they are needed, and
# walking Python's stack is most of this check's host cost.
_LINES = 2


class NonFiniteError(RuntimeError):
    """Raised by detect_nonfinite at the first non-finite result (`.op`, `.where`, `.result`)."""

    def __init__(self, op: str, result: str, where: dict, from_input: bool):
        self.op, self.result, self.where, self.from_input = op, result, where, from_input
        if from_input:
            text = f"{result} of {op} was already non-finite when the op received it (it comes from outside the block)"
        else:
            text = f"{op} produced a NaN or Inf in its {result} from finite inputs"
        super().__init__(f"{text}\n{describe(where)}")


class detect_nonfinite(contextlib.ContextDecorator):
    """Raises NonFiniteError naming the first rbln op (its overload, module path, forward or backward,
    the user's lines) whose floating results hold a NaN or an Inf (float16 and bfloat16 overflow too).
    check_every: ops between host reads of the device flags (the error comes at the read, for the first
    op). An op given a non-finite number (masked_fill(mask, float("-inf")) for an attention mask) is not
    checked, nor are the ops in `skip` ("aten::masked_fill" or "aten::masked_fill.Scalar")."""

    def __init__(self, *, check_every: int = 512, skip=()):
        self.check_every, self.skip = check_every, set(skip)

    def __enter__(self):
        self._flags: list[torch.Tensor] = []
        self._entries: list[tuple] = []  # (op, result, where or a callable making it, from_input)
        self._known: set[int] = set()  # data pointers of tensors whose finiteness is already checked
        self._stack = contextlib.ExitStack()
        self._locator = self._stack.enter_context(Locator())
        self._stack.enter_context(OpMode(self))
        return self

    def __exit__(self, exc_type, *exc):
        self._stack.close()
        if exc_type is None:
            self.check()
        return False

    def check(self) -> None:
        """Reads the flags queued so far (one host wait) and raises for the first non-finite result."""
        if not self._flags:
            return
        finite, entries = torch.stack(self._flags).cpu().isfinite(), self._entries
        self._flags, self._entries = [], []
        bad = (~finite).nonzero()
        if len(bad):
            op, result, where, from_input = entries[int(bad[0])]
            raise NonFiniteError(op, result, where, from_input)

    def _dispatch(self, func, args, kwargs):
        if self._skips(func) or _nonfinite_scalar(args, kwargs):  # its results are taken as they are, also as
            # later ops' inputs: an op told to write an infinity (masked_fill(mask, -inf)) is no origin
            out = func(*args, **kwargs)
            self._known.update(_key(t) for t in results(out) if _floating_rbln(t))
            return out
        where = self._inputs(func, args, kwargs)
        out = func(*args, **kwargs)
        self._results(func, args, kwargs, out, where)
        return out

    def _skips(self, func) -> bool:
        name = op_name(func)
        return func.is_view or name in self.skip or name.split(".")[0] in self.skip

    def _inputs(self, func, args, kwargs) -> dict | None:
        """Checks the inputs not seen before (before the op: it may write them)."""
        where = None
        for i, t in enumerate(tensors_in((*args, *kwargs.values()))):
            if _floating_rbln(t) and _key(t) not in self._known:
                where = where or self._locator.where(_LINES)
                self._queue(t, op_name(func), f"input {i}", where, True)
        return where

    def _results(self, func, args, kwargs, out, where) -> None:
        written = results(out)
        written += [t for t in _written(func, args, kwargs) if not any(t is r for r in written)]
        for i, t in enumerate(written):
            if _floating_rbln(t):
                where = where or self._locator.where(_LINES)
                self._queue(t, op_name(func), f"output {i}", where, False)
        if len(self._entries) >= self.check_every:
            self.check()

    def _queue(self, t: torch.Tensor, op, result, where, from_input) -> None:
        self._known.add(_key(t))
        wide = t.dtype if t.dtype in (torch.float64, torch.complex128) else None
        self._flags.append(t.sum(dtype=wide or (torch.complex64 if t.is_complex() else torch.float32)))
        self._entries.append((op, result, where, from_input))


def _nonfinite_scalar(args, kwargs) -> bool:
    return any(isinstance(v, float) and not math.isfinite(v) for v in (*args, *kwargs.values()))


def _floating_rbln(t) -> bool:
    # cheapest tests first: this runs for every argument and result of every op
    return (isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex()) and not t.is_cpu
            and t.device.type == "rbln" and t.numel() > 0)


def _key(t: torch.Tensor) -> int:
    return t.data_ptr()  # a view at an offset of a checked result is checked again: harmless, and cheaper
