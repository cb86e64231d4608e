"""PyTorch's device-generic tests on rbln (tests/python/test_upstream.py), as a conformance stage.

`python -m conformance --upstream` runs that file under pytest with
TORCH_RBLN_UPSTREAM=full (every op_db, module_db and optim_db entry; `make test`
runs a bounded subset of the same file), reads pytest's JUnit XML and returns a
summary per test class with the failures grouped by cause. The summary goes into
report.json under "upstream" and into its own section of docs/conformance.md.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEST_FILE = os.path.join("tests", "python", "test_upstream.py")


def _cause(message: str) -> str:
    """A failure message reduced to its cause: the first line, numbers and tensor values dropped."""
    line = next((ln.strip() for ln in (message or "").splitlines() if ln.strip()), "unknown")
    line = re.sub(r"^(E\s+)", "", line)
    line = re.sub(r"tensor\(.*", "tensor(...)", line)
    line = re.sub(r"(?<![A-Za-z_])-?\d+(\.\d+)?(e-?\d+)?", "N", line)
    return line[:160]


def _subject(classname: str, name: str) -> str:
    """The op, module or optimizer a test is about, from its instantiated name."""
    name = re.sub(r"_rbln(_[a-z0-9]+)?$", "", name)
    for prefix in ("test_compare_cpu_", "test_fn_grad_", "test_cpu_gpu_parity_", "test_step_matches_cpu_"):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def parse_junit(path: str) -> dict:
    tree = ET.parse(path)
    classes = defaultdict(lambda: defaultdict(int))
    causes = defaultdict(lambda: {"count": 0, "tests": []})
    for case in tree.iter("testcase"):
        cls = case.get("classname", "").split(".")[-1] or "module"
        name = case.get("name", "")
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome, message = "failed", child.get("message") or child.text or ""
            elif child.tag == "skipped":
                kind = child.get("type", "")
                outcome = "xfailed" if "xfail" in kind else "skipped"
                message = child.get("message") or ""
        classes[cls][outcome] += 1
        if outcome in ("failed", "xfailed"):
            key = (cls, outcome, _cause(message))
            causes[key]["count"] += 1
            if len(causes[key]["tests"]) < 12:
                causes[key]["tests"].append(_subject(cls, name))
    return {
        "classes": {c: dict(v) for c, v in sorted(classes.items())},
        "causes": sorted(({"class": c, "outcome": o, "cause": m, **v} for (c, o, m), v in causes.items()),
                         key=lambda r: (r["class"], r["outcome"], -r["count"])),
    }


def run(mode: str = "full", timeout: float | None = None) -> dict:
    """Runs test_upstream.py (mode "full" or "subset") and returns the summary."""
    env = {**os.environ, "TORCH_RBLN_UPSTREAM": "full" if mode == "full" else ""}
    with tempfile.TemporaryDirectory() as tmp:
        xml = os.path.join(tmp, "upstream.xml")
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:warnings", "-p", "no:cacheprovider",
                        TEST_FILE, f"--junitxml={xml}", "-o", "junit_family=xunit1"],
                       cwd=ROOT, env=env, timeout=timeout, stdout=subprocess.DEVNULL)
        elapsed = time.perf_counter() - start
        summary = parse_junit(xml)
    summary["mode"] = mode
    summary["seconds"] = round(elapsed, 1)
    return summary
