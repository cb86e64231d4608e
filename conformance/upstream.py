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
    """The op, module or optimizer a test is about (and its dtype), from its instantiated name."""
    m = re.search(r"_rbln_([a-z0-9]+)$", name)
    dtype = m.group(1) if m else None
    name = name[:m.start()] if m else name
    for prefix in ("test_compare_cpu_", "test_fn_grad_", "test_cpu_gpu_parity_", "test_step_matches_cpu_"):
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    return f"{name} ({dtype})" if dtype else name


# What is behind a failure, where it is known (investigated by hand; a failure no rule
# matches shows its message only). Each rule: (regex on the message, regex on the subject, text);
# the first rule whose given regexes all match wins.
DIAGNOSES = [
    (r"imaginary part of complex|e\^\{i phi\}|not positive-definite", r"",
     "complex numbers: the rbln copy_ ignores the conjugate and negative bits (x.conj().cpu() returns x), so lazy "
     "conjugations (backward formulas, A @ A.mH) are lost"),
    (r"", r"\(complex(64|128)\)$|^fft_|^polar",
     "complex numbers: the rbln copy_ ignores the conjugate and negative bits (x.conj().cpu() returns x)"),
    (r"_thnn_fused_(lstm|gru)_cell", r"",
     "LSTM/GRU cells call _thnn_fused_*_cell for PrivateUse1 inputs: no rbln kernel, and no CPU kernel to fall "
     "back to"),
    (r"", r"^nn_Lazy",
     "lazy modules: module.to('rbln') replaces each UninitializedParameter by a plain Parameter, because c10's "
     "has_compatible_shallow_copy_type lists no PrivateUse1 (Module._apply cannot use set_data)"),
    (r"[Ss]parse", r"", "sparse layouts: rbln has sparse COO, computed through the CPU fallback, and no CSR"),
    (r"", r"sparse|^Sparse", "sparse layouts: rbln has sparse COO, computed through the CPU fallback, and no CSR"),
    (r"", r"^rand|^normal|^bernoulli|^multinomial|dropout", "random output: CPU and rbln draw different numbers"),
    (r"not close", r"^nn_(Transformer|CrossEntropyLoss|LinearCrossEntropyLoss)",
     "rounding: 1e-5 (float32) or one-ulp (float16/bfloat16) differences, beyond upstream's default tolerance"),
]


def _diagnose(message: str, subject: str) -> str:
    for msg_re, subj_re, text in DIAGNOSES:
        if (not msg_re or re.search(msg_re, message or "")) and (not subj_re or re.search(subj_re, subject)):
            return text
    return ""


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
                if "Unexpected success" in message:  # upstream marks it an expected failure; it passes here
                    outcome, message = "xpassed", "passes where upstream's entry expects a failure"
            elif child.tag == "skipped":
                kind = child.get("type", "")
                outcome = "xfailed" if "xfail" in kind else "skipped"
                message = child.get("message") or ""
                if outcome == "xfailed" and not message.strip():
                    message = "upstream's own expected failure for this entry"
        classes[cls][outcome] += 1
        if outcome in ("failed", "xfailed", "xpassed"):
            subject = _subject(cls, name)
            diagnosis = _diagnose(message, subject) if outcome == "failed" else ""
            key = (cls, outcome, _cause(message), diagnosis)
            causes[key]["count"] += 1
            if len(causes[key]["tests"]) < 12:
                causes[key]["tests"].append(subject)
    return {
        "classes": {c: dict(v) for c, v in sorted(classes.items())},
        "causes": sorted(({"class": c, "outcome": o, "cause": m, "diagnosis": d, **v}
                          for (c, o, m, d), v in causes.items()),
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
