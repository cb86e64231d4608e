"""Build-time benchmark (run by `make bench` before benchmarks/run.py).

Measures (1) `python -m codegen` on the whole ops.yaml, written to a scratch
directory, and (2) the incremental rebuild of an existing build tree after a
one-entry ops.yaml edit (one elementwise entry's dtypes narrowed), then the
rebuild after restoring it. ops.yaml is restored byte for byte, and generated/
regenerated from it, even if the build fails or the script is interrupted.
Writes benchmarks/build_time.json, which run.py's report includes.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EDIT_FROM = "- {func: exp2, kernel: unary_float, functor: exp2, dtypes: floating}"
EDIT_TO = "- {func: exp2, kernel: unary_float, functor: exp2, dtypes: [float32, float64]}"


def run(cmd, **kw) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, **kw)
    return time.perf_counter() - start


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build-dir", default=os.path.join(ROOT, "build", "cp311-cp311-linux_x86_64"),
                   help="an already configured and built CMake tree (default: the one `make install` uses)")
    p.add_argument("--jobs", type=int, default=os.cpu_count())
    args = p.parse_args()
    result = {"cpus": os.cpu_count(), "jobs": args.jobs}
    with tempfile.TemporaryDirectory() as scratch:
        result["codegen_s"] = run([sys.executable, "-m", "codegen", "--out", scratch], cwd=ROOT)
    if not os.path.exists(os.path.join(args.build_dir, "CMakeCache.txt")):
        print(f"build_time: no configured build tree at {args.build_dir}; incremental rebuild not measured")
    else:
        build = ["cmake", "--build", args.build_dir, "--", f"-j{args.jobs}"]
        run(build)  # bring the tree up to date first: only the edit is timed
        ops = os.path.join(ROOT, "ops.yaml")
        original = open(ops, "rb").read()
        assert EDIT_FROM.encode() in original, "build_time: the edited ops.yaml entry moved; update EDIT_FROM"
        try:
            with open(ops, "wb") as f:
                f.write(original.replace(EDIT_FROM.encode(), EDIT_TO.encode(), 1))
            result["rebuild_after_edit_s"] = run(build)
        finally:
            with open(ops, "wb") as f:
                f.write(original)
            result["rebuild_after_restore_s"] = run(build)  # regenerates generated/ as it was
        changed = subprocess.run(["git", "status", "--porcelain", "--", "ops.yaml", "generated", "docs/supported_ops.md"],
                                 cwd=ROOT, capture_output=True, text=True).stdout.strip()
        result["tree_restored"] = not changed
    result["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    with open(os.path.join(ROOT, "benchmarks", "build_time.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
