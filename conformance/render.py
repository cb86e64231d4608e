"""Markdown for the conformance report: a summary line per dtype, a row per op."""
from __future__ import annotations

import json
from collections import defaultdict

SYMBOL = {"device": "D", "fallback": "F", "mismatch": "M", "error": "E", "skipped": "S"}


def summarize(results, dtype: str, variants=("function", "all")) -> dict[str, int]:
    """Counts per status of the forward (function variant) entries in one dtype."""
    counts = defaultdict(int)
    for r in results:
        if r["dtype"] == dtype and r["variant"] in variants:
            counts[r["status"]] += 1
    return counts


def summary_line(dtype: str, c: dict[str, int]) -> str:
    ran = sum(c[s] for s in ("device", "fallback", "mismatch", "error"))
    if not ran:
        return f"| {dtype} | 0 | | | | | | {c['skipped']} |"
    pct = lambda n: f"{100 * n / ran:.1f}%"  # noqa: E731
    return (f"| {dtype} | {ran} | {c['device']} ({pct(c['device'])}) | {c['fallback']} | "
            f"{c['device'] + c['fallback']} ({pct(c['device'] + c['fallback'])}) | {c['mismatch']} | {c['error']} | "
            f"{c['skipped']} |")


def gradient_summary(results, seconds=None) -> list[str]:
    """The gradient column's summary: how many differentiable entries agree with CPU, and on the device."""
    grads = [r for r in results if r["variant"] == "gradient"]
    if not grads:
        return []
    c = defaultdict(int)
    for r in grads:
        c[r["status"]] += 1
    ran = sum(c[s] for s in ("device", "fallback", "mismatch", "error"))
    agree = c["device"] + c["fallback"]
    pct = lambda n: f"{100 * n / ran:.1f}%" if ran else "-"  # noqa: E731
    reasons = defaultdict(int)
    for r in grads:
        if r["status"] == "skipped":
            reasons[r.get("reason", "").split(" (")[0]] += 1
    skipped = ", ".join(f"{n} {why}" for why, n in sorted(reasons.items(), key=lambda kv: -kv[1]))
    dtype = grads[0]["dtype"]
    return [
        "",
        f"### Gradients ({dtype}" + (f", {seconds} s)" if seconds is not None else ")"),
        "",
        "Per differentiable entry (autograd supported in float32): each sample made on rbln with `requires_grad=True`,",
        "the same values on CPU; the same pseudo-random grad_output backpropagated (`torch.autograd.grad`) through",
        "every differentiable floating output to every input that requires grad. D = gradients match and every op",
        "of the backward ran on the device, F = match but some backward op fell back (named per op below),",
        "M = mismatch, E = rbln raised where CPU did not. Samples CPU cannot differentiate are not counted.",
        "",
        f"**{pct(agree)} of differentiable entries' gradients agree with CPU ({agree} of {ran}); "
        f"{pct(c['device'])} with the backward on the device ({c['device']} of {ran}).**"
        + (f" Skipped: {skipped}." if skipped else ""),
        "",
        "| dtype | differentiable entries run | backward on device (D) | backward fell back (F) | agree (D+F) "
        "| mismatch | error | skipped |",
        "|---|---|---|---|---|---|---|---|",
        f"| {dtype} | {ran} | {c['device']} ({pct(c['device'])}) | {c['fallback']} | {agree} ({pct(agree)}) "
        f"| {c['mismatch']} | {c['error']} | {c['skipped']} |",
    ] + _gradient_failures(grads)


def cuda_section(results, seconds=None) -> list[str]:
    """The CUDA column: CUDA's dtypes beyond CPU's, per dtype and per case."""
    rows = sorted((r for r in results if r["variant"] == "cuda"), key=lambda r: (r["op"], r["dtype"]))
    if not rows:
        return []
    c = defaultdict(int)
    for r in rows:
        c[r["status"]] += 1
    ran = sum(c[s] for s in ("device", "fallback", "mismatch", "error"))
    lines = [
        "",
        "### CUDA's dtypes beyond CPU's" + (f" ({seconds} s)" if seconds is not None else ""),
        "",
        "Per entry, each dtype it supports on CUDA and not on CPU (`dtypesIfCUDA`), function variant: samples",
        "made on rbln in that dtype, against CPU's result in the nearest dtype CPU supports (the reference",
        "column) rounded to the tested dtype, at the tested dtype's tolerance, or for complex32 the entry's own",
        "where PyTorch's complex32 reference test overrides it (convolutions, FFTs), as for float16 FFTs, which",
        "compute in complex32 on CUDA too (conformance/cuda_dtypes.py).",
        "D/F/M/E as above; S = no reference (CPU raised on every sample in the reference dtype).",
        "",
        f"**{len(rows)} (entry, dtype) cases in {len({r['op'] for r in rows})} entries: {ran} run, "
        f"{c['device'] + c['fallback']} correct, {c['device']} of them on the device.**",
        "",
        "| dtype | cases run | on device (D) | fallback (F) | correct (D+F) | mismatch | error | skipped |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [summary_line(d, summarize(rows, d, ("cuda",))) for d in sorted({r["dtype"] for r in rows})]
    lines += ["", "| op | dtype | reference | status | fell back through | first failing sample |",
              "|---|---|---|---|---|---|"]
    for r in rows:
        why = "; ".join(r.get("detail", [])) or (r.get("reason", "") if r["status"] == "skipped" else "")
        lines.append(f"| {r['op']} | {r['dtype']} | {r.get('reference_dtype') or ''} | {SYMBOL[r['status']]} | "
                     f"{', '.join(r.get('fallback_ops', []))} | {why.replace('|', '/')[:200]} |")
    return lines


def _gradient_failures(grads) -> list[str]:
    bad = [r for r in grads if r["status"] in ("mismatch", "error")]
    if not bad:
        return []
    lines = ["", "Gradient mismatches and errors (first failing sample):", ""]
    for r in sorted(bad, key=lambda r: r["op"]):
        detail = "; ".join(r.get("detail", [])) or r.get("reason", "")
        lines.append(f"- `{r['op']}` {SYMBOL[r['status']]}: " + detail.replace("|", "/").replace("\n", " ")[:300])
    return lines


UPSTREAM_NOTES = [
    "The torch wheel ships the machinery of PyTorch's device-generic suites (`torch.testing._internal`), not",
    "the suites in PyTorch's test/ directory. tests/python/test_upstream.py instantiates, for rbln through",
    "`instantiate_device_type_tests(..., only_for=\"privateuse1\")` and `PrivateUse1TestBase`:",
    "",
    "- `TestCommon.test_compare_cpu` (`@ops(op_db)`, one dtype per op as upstream picks it): each OpInfo's",
    "  reference inputs made on rbln, compared with the op on CPU copies at upstream's 1e-3 tolerances;",
    "- `TestBwdGradients.test_fn_grad` (`@ops(op_db)`, float64 and complex128): gradcheck on the device;",
    "- `TestModule.test_cpu_gpu_parity` (`@modules(module_db)`): forward, input and parameter gradients",
    "  against CPU;",
    "- `TestOptim.test_step_matches_cpu` (`@optims(optim_db)`): three optimizer steps against CPU, per",
    "  optimizer input (fused and capturable inputs are CUDA's and left out);",
    "- `TestAutocastRBLN`: upstream's `TestAutocast` helper over `AutocastTestLists` built on rbln.",
    "",
    "The classes keep upstream's class and test names, so the OpInfo/ModuleInfo entries' own skips and",
    "expected failures apply. Not instantiated: common_nn's module_tests (hard-wired to CUDA through",
    "`test_cuda`), the distributed, FSDP, JIT and quantization bases (no rbln backend for them).",
    "`make test` runs a bounded subset of the same classes; known failures there are strict expected",
    "failures (xfail below), each naming its backend bug.",
]


def upstream_section(upstream) -> list[str]:
    if not upstream:
        return []
    lines = ["", "## PyTorch's device-generic tests on rbln", "",
             f"`python -m conformance --upstream` ({'every op_db, module_db and optim_db entry' if upstream['mode'] == 'full' else 'the bounded subset make test runs'}"
             f", {upstream['seconds']} s).", ""]
    lines += UPSTREAM_NOTES
    lines += ["", "| class | tests | passed | failed | expected failure | passed, upstream expects failure | skipped |",
              "|---|---|---|---|---|---|---|"]
    total = defaultdict(int)
    for cls, c in upstream["classes"].items():
        n = sum(c.values())
        for k, v in c.items():
            total[k] += v
        total["tests"] += n
        lines.append(f"| {cls} | {n} | {c.get('passed', 0)} | {c.get('failed', 0)} | {c.get('xfailed', 0)} "
                     f"| {c.get('xpassed', 0)} | {c.get('skipped', 0)} |")
    lines.append(f"| all | {total['tests']} | {total['passed']} | {total['failed']} | {total['xfailed']} "
                 f"| {total['xpassed']} | {total['skipped']} |")
    if upstream["causes"]:
        lines += ["", "Failures, expected failures and unexpected passes by cause (tests named by op, module or",
                  "optimizer, and dtype; up to 12 per cause):", "",
                  "| class | outcome | count | message | diagnosis | tests |", "|---|---|---|---|---|---|"]
        for r in upstream["causes"]:
            cause = r["cause"].replace("|", "/")
            tests = ", ".join(r["tests"]) + (", ..." if r["count"] > len(r["tests"]) else "")
            diagnosis = r.get("diagnosis", "").replace("|", "/")
            lines.append(f"| {r['class']} | {r['outcome']} | {r['count']} | {cause} | {diagnosis} | {tests} |")
    return lines


def known_mismatches(results, notes: dict[str, str]) -> list[str]:
    """Every op that mismatched or raised, in any dtype or in the gradient column, with its ops.yaml note."""
    bad, first = defaultdict(list), {}
    for r in results:
        if r["status"] in ("mismatch", "error") and r["variant"] in ("function", "all", "gradient"):
            what = "gradient" if r["variant"] == "gradient" else r["dtype"]
            bad[r["op"]].append(f"{what} {SYMBOL[r['status']]}")
            if r["variant"] != "gradient" and r.get("detail"):
                first.setdefault(r["op"], f"{what}: {r['detail'][0]}")
    if not bad:
        return []
    lines = ["", "## Mismatches and errors, with their ops.yaml notes", ""]
    for op in sorted(bad):
        note = notes.get(op, "no ops.yaml note: not yet explained")
        lines.append(f"- `{op}` ({', '.join(bad[op])}): {note}")
        if op in first:
            lines.append("  - first failing sample, " + first[op].replace("|", "/")[:300])
    return lines


def render_markdown(meta, results, upstream=None, notes=None) -> str:
    has_grad = any(r["variant"] == "gradient" for r in results)
    dtypes = list(dict.fromkeys(r["dtype"] for r in results if r["variant"] not in ("gradient", "cuda")))
    lines = [
        "<!-- @generated by `make conformance` (python -m conformance). Do not edit. -->",
        "# Conformance: PyTorch's OpInfo database on rbln",
        "",
        f"{meta['entries']} OpInfo entries, torch {meta['torch']}, {meta.get('seconds', '-')} s"
        + (" (the bounded slice `make test` runs)" if meta.get("slice") else "") + ".",
        "Each entry's sample and reference inputs run on CPU and on rbln with identical inputs;",
        "outputs are compared with `torch.testing.assert_close` (tolerances in `torch_rbln/testing.py`, or the",
        "op's ops.yaml `tolerance:` where its summation order differs from CPU's, as in the generated tests).",
        "The summary counts the function variant (forward) per dtype; D = ran on the device and matched,",
        "F = fell back to the CPU for some op and matched, M = mismatched, E = raised where CPU did not,",
        "S = skipped (random output, uninitialized memory, or a sparse CSR entry: rbln has sparse COO only).",
        "",
        "| dtype | entries run | on device (D) | fallback (F) | correct (D+F) | mismatch | error | skipped |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [summary_line(d, summarize(results, d)) for d in dtypes]
    counts = [summarize(results, d) for d in dtypes]
    ran = sum(c["device"] + c["fallback"] + c["mismatch"] + c["error"] for c in counts)
    if ran:
        device, correct = sum(c["device"] for c in counts), sum(c["device"] + c["fallback"] for c in counts)
        lines += ["", f"**Every (entry, dtype) pair CPU supports: {device} of {ran} on the device "
                      f"({100 * device / ran:.1f}%), {correct} correct ({100 * correct / ran:.1f}%).**"]
    lines += gradient_summary(results, meta.get("gradient_seconds"))
    lines += cuda_section(results, meta.get("cuda_seconds"))
    lines += known_mismatches(results, notes or {})
    grad_cols = " | grad | backward fell back through" if has_grad else ""
    lines += ["", "## Per op", "", "Status per dtype as function/method/in-place/out= (`-`: variant not declared)"
              + ("; grad: the float32 gradient column (blank: not differentiable)." if has_grad else "."), "",
              "| op | " + " | ".join(dtypes) + " | fell back through" + grad_cols + " |",
              "|---|" + "---|" * (len(dtypes) + 1 + 2 * has_grad)]
    by_op = defaultdict(dict)
    fallbacks = defaultdict(set)
    grad = {}
    for r in results:
        if r["variant"] == "gradient":
            grad[r["op"]] = r
            continue
        if r["variant"] == "cuda":
            continue
        by_op[r["op"]].setdefault(r["dtype"], {})[r["variant"]] = r["status"]
        fallbacks[r["op"]].update(r.get("fallback_ops", []))
    for op in grad:
        by_op.setdefault(op, {})
    for op in sorted(by_op):
        cells = []
        for d in dtypes:
            v = by_op[op].get(d)
            if not v:
                cells.append("")
            elif "all" in v:
                cells.append(SYMBOL[v["all"]])
            else:
                cells.append("".join(SYMBOL[v[k]] if k in v else "-" for k in ("function", "method", "inplace", "out")))
        row = f"| {op} | " + " | ".join(cells) + " | " + ", ".join(sorted(fallbacks[op]))
        if has_grad:
            g = grad.get(op)
            row += " | " + (SYMBOL[g["status"]] if g else "") + " | " + (", ".join(g.get("fallback_ops", [])) if g else "")
        lines.append(row + " |")
    return "\n".join(lines[:_per_op_start(lines)] + upstream_section(upstream) + lines[_per_op_start(lines):]) + "\n"


def _per_op_start(lines) -> int:
    """The upstream section goes before the long per-op table."""
    return lines.index("## Per op") - 1


ERROR_CATEGORY_NOTES = {
    "crash": "rbln killed the worker (signal)",
    "hang": "rbln did not return within the timeout",
    "raised_where_cpu_returned": "rbln raised where CPU returned",
    "returned_where_cpu_raised": "rbln returned where CPU raised",
    "returned_where_cuda_raises": "rbln returned where CUDA's device check raises",
    "exception_type": "both raised, different exception types",
    "error_message": "rbln's message does not match the ErrorInput's regex (CPU's does)",
    "dtype": "both returned, different dtypes",
    "shape": "both returned, different shapes",
    "value": "both returned, different values",
    "warning": "out= resize warning on one side only",
}


def render_error_parity(report, top=15, listed=200) -> str:
    """docs/error_parity.md from conformance/errors_report.json."""
    from .errors import DISTRIBUTION_LEVEL, DISTRIBUTION_MIN_ELEMENTS

    meta, bad = report["meta"], report["disagreements"]
    lines = [
        "<!-- @generated by `python -m conformance.errors`. Do not edit. -->",
        "# Error parity: rbln against CPU (and CUDA's device rule)",
        "",
        f"{meta['ops']} OpInfo entries, {meta['calls']} calls, torch {meta['torch']}, seed {meta['seed']}, "
        f"{meta['seconds']} s with {meta['workers']} worker processes (at most {meta['max_calls_per_op']} calls per "
        f"entry, {meta['timeout']} s per call). Each call runs on CPU and on rbln with identical inputs: the",
        "entry's `error_inputs`, and mutations of its first samples (see conformance/errors.py). rbln must do what",
        "CPU does (return equal results, or raise the same exception type), or, for tensors on two devices, what",
        "CUDA's device check does. Random outputs drawn element by element are compared by distribution (a",
        f"two-sample Kolmogorov-Smirnov test at level {DISTRIBUTION_LEVEL:g} on results of {DISTRIBUTION_MIN_ELEMENTS} "
        "elements or more).",
        "",
        f"**{len(bad)} disagreements in {meta['calls']} calls**"
        + (f" ({1e4 * len(bad) / meta['calls']:.1f} per 10,000)." if meta["calls"] else "."),
        "",
        "| category | what | calls |",
        "|---|---|---|",
    ]
    lines += [f"| {c} | {ERROR_CATEGORY_NOTES.get(c, '')} | {n} |" for c, n in report["categories"].items()]
    lines += ["", "| mutation | calls | CPU (or CUDA) raised | disagreements |", "|---|---|---|---|"]
    lines += [f"| {k} | {v['calls']} | {v['cpu_raised']} | {v['disagreements']} |" for k, v in report["kinds"].items()
              if v["calls"]]
    offenders = sorted(((v["disagreements"], op) for op, v in report["ops"].items() if v["disagreements"]),
                       key=lambda x: (-x[0], x[1]))[:top]
    if offenders:
        first = {}
        for d in bad:
            first.setdefault(d["op"], d)
        lines += ["", "## Top offenders", "", "| op | disagreements | first | reproducer |", "|---|---|---|---|"]
        for n, op in offenders:
            d = first[op]
            lines.append(f"| {op} | {n} | {d['category']}: {_cell(d.get('call', ''), 120)} | "
                         f"`{_cell(d['repro'], 300)}` |")
    for title, rows in (("Calls CPU itself crashed or hung on (not counted)", report["cpu_failures"]),
                        ("Entries whose calls could not be made", report["op_errors"]),
                        ("Harness errors", report["harness_errors"])):
        if rows:
            lines += ["", f"## {title}", ""] + [f"- {_cell(json.dumps(r), 300)}" for r in rows]
    behaviours = report.get("cpu_behaviours", [])
    if behaviours:
        lines += ["", "## CPU's own behaviour (not counted)", "",
                  "Disagreements where CPU's outcome is its undefined behaviour or a quirk CUDA does not share "
                  "(conformance/errors.py `CPU_BEHAVIOURS`):", "", "| id | category | call | why |", "|---|---|---|---|"]
        lines += [f"| {d['id']} | {d['category']} | {_cell(d.get('call', ''), 120)} | {_cell(d['cpu_behaviour'], 200)} |"
                  for d in behaviours]
    if bad:
        lines += ["", "## All disagreements", "", "| id | category | call | CPU | rbln | reproducer |",
                  "|---|---|---|---|---|---|"]
        for d in bad[:listed]:
            lines.append(f"| {d['id']} | {d['category']} | {_cell(d.get('call', ''), 160)} | "
                         f"{_cell(d.get('cpu', ''), 120)} | {_cell(d.get('rbln', '') or d.get('detail', ''), 160)} | "
                         f"`{_cell(d['repro'], 400)}` |")
        if len(bad) > listed:
            lines.append(f"\n{len(bad) - listed} more in conformance/errors_report.json.")
    return "\n".join(lines) + "\n"


def _cell(text, n) -> str:
    text = str(text).replace("|", "/").replace("\n", " ")
    return text if len(text) <= n else text[:n - 3] + "..."
