"""Accuracy debugging (docs/debugging.md, "Accuracy debugging"): which op's kernel computes a wrong
number, which op first made a NaN or an Inf, and how two runs' module-by-module dumps differ.

- `compare()`: each rbln op also runs on CPU copies of its inputs; the first divergence (or all, ranked) is
  reported with the op, the module path, forward or backward, the user's lines, the errors and a reproducer.
- `detect_nonfinite()`: the first op whose results hold a NaN or an Inf, from finite inputs.
- `dump()` / `dump_step()`: modules' inputs, outputs and gradients as safetensors files and a JSON index;
  `python -m torch_rbln.debug compare DIR_A DIR_B` compares two dumps.
- `inject_fault(op)`: a deliberately wrong rbln kernel for a block, to try the tools out and test them.
"""
from ._compare import Divergence, DivergenceError, compare
from ._dump import compare_dumps, dump, dump_step
from ._errors import TOLERANCES
from ._faults import add_to_first, inject_fault
from ._nonfinite import NonFiniteError, detect_nonfinite

__all__ = ["TOLERANCES", "Divergence", "DivergenceError", "NonFiniteError", "add_to_first", "compare",
           "compare_dumps", "detect_nonfinite", "dump", "dump_step", "inject_fault"]
