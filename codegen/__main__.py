"""python -m codegen [--ops ops.yaml] [--out DIR] [--check]"""
import argparse
import os
import sys

from .gen import render, stale, write
from .registry import ROOT, OpsYamlError, load


def main() -> int:
    p = argparse.ArgumentParser(description="Generate torch-rbln registrations, docs and tests from ops.yaml")
    p.add_argument("--ops", default=os.path.join(ROOT, "ops.yaml"))
    p.add_argument("--out", default=ROOT, help="root to write generated/ and docs/ under")
    p.add_argument("--check", action="store_true", help="fail if the files under --out are not up to date")
    args = p.parse_args()
    try:
        files = render(load(args.ops))
    except OpsYamlError as e:
        print(f"error: invalid ops registry\n{e}", file=sys.stderr)
        return 1
    if args.check:
        outdated = [rel for rel, text in files.items()
                    if not os.path.exists(os.path.join(args.out, rel)) or open(os.path.join(args.out, rel)).read() != text]
        outdated += stale(files, args.out)
        for rel in outdated:
            print(f"stale: {rel} differs from what codegen produces; run `python -m codegen`", file=sys.stderr)
        return 1 if outdated else 0
    for rel in write(files, args.out):
        print(f"codegen: wrote {rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
