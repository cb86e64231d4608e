"""Build-time benchmark (run by `make bench` before benchmarks/run.py).

Measures (1) `python -m codegen` on the whole ops.yaml, written to a scratch
directory, and (2) the incremental rebuild of an existing build tree after a
one-entry ops.yaml edit (a new elementwise entry appended), then the rebuild
after restoring it. Elementwise shards are chosen by a hash of the op, so the
edit rewrites one shard and the generated tests, and recompiles one shard.
ops.yaml is restored byte for byte, and generated/ regenerated from it, even
if the build fails or the script is interrupted (Ctrl-C or SIGTERM). Writes
benchmarks/build_time.json (with the load average, as other jobs on the
machine slow the build down), which run.py's report includes.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# One new entry, as adding an op is (fix is trunc's alias; it is not in ops.yaml).
NEW_ENTRY = b"- {func: fix, kernel: unary, functor: trunc, dtypes: floating}\n"


def run(cmd, **kw) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, **kw)
    return time.perf_counter() - start


def _interrupted(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")  # unwinds through the restoring `finally`


def _changed_generated() -> list[str]:
    out = subprocess.run(["git", "status", "--porcelain", "--", "generated"], cwd=ROOT, capture_output=True, text=True)
    return sorted(line[3:] for line in out.stdout.splitlines())


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
        assert NEW_ENTRY not in original, "build_time: ops.yaml already has the benchmark's entry"
        assert not _changed_generated(), "build_time: generated/ has uncommitted changes; commit or restore them first"
        signal.signal(signal.SIGTERM, _interrupted)
        try:
            with open(ops, "wb") as f:
                f.write(original + (b"" if original.endswith(b"\n") else b"\n") + NEW_ENTRY)
            result["rebuild_after_edit_s"] = run(build)
            result["generated_files_changed"] = _changed_generated()
        finally:
            with open(ops, "wb") as f:
                f.write(original)
            result["rebuild_after_restore_s"] = run(build)  # regenerates generated/ as it was
        changed = subprocess.run(["git", "status", "--porcelain", "--", "ops.yaml", "generated", "docs/supported_ops.md"],
                                 cwd=ROOT, capture_output=True, text=True).stdout.strip()
        result["tree_restored"] = not changed
    result["load_average_1min"] = round(os.getloadavg()[0], 1)
    result["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    with open(os.path.join(ROOT, "benchmarks", "build_time.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
