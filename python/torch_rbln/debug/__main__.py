"""python -m torch_rbln.debug compare DIR_A DIR_B: the first and the worst diverging modules of two dumps
(torch_rbln.debug.dump); exit status 1 when they diverge, 0 when they match."""
from __future__ import annotations

import argparse
import sys

import torch

from ._dump import compare_dumps, format_rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_rbln.debug")
    commands = parser.add_subparsers(dest="command", required=True)
    cmp = commands.add_parser("compare", help="compare two dumps (A against the reference B)")
    cmp.add_argument("dir_a")
    cmp.add_argument("dir_b")
    cmp.add_argument("--atol", type=float, help="for every floating dtype (default: per dtype)")
    cmp.add_argument("--rtol", type=float, help="for every floating dtype (default: per dtype)")
    cmp.add_argument("--top", type=int, default=20, help="rows of the ranked table")
    args = parser.parse_args(argv)
    overrides = None
    if args.atol is not None or args.rtol is not None:
        from ._errors import TOLERANCES

        overrides = {dt: (args.atol if args.atol is not None else a, args.rtol if args.rtol is not None else r)
                     for dt, (a, r) in TOLERANCES.items()}
    rows = compare_dumps(args.dir_a, args.dir_b, overrides)
    print(format_rows(rows, args.top))
    return 1 if rows else 0


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    sys.exit(main())
