"""Fallback logging and control (TORCH_RBLN_LOG_LEVEL, TORCH_RBLN_DISABLE_FALLBACK by kind), explain()'s
syncs, call sites and report(), and torch.rbln.set_sync_debug_mode.

The environment variables are read once per process: those tests run a script in a fresh interpreter."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

from conftest import ROOT

# Real ops of each fallback kind (docs/supported_ops.md): hash_tensor is not in ops.yaml, _histogramdd_from_bin_tensors
# is listed as `strategy: fallback`, and hardtanh's dtypes (`numeric`) have no int16.
SCRIPT_OPS = """
import torch, torch_rbln
x = torch.arange(20.0).view(4, 5).rbln()
def unlisted(): return torch.hash_tensor(x)
def listed(): return torch.histogramdd(x, [x[0, :3]] * 5).hist
def dtype(): return torch.nn.functional.hardtanh(x.to(torch.int16), 2, 9)
"""


def run(tmp_path, body: str, **env: str) -> subprocess.CompletedProcess:
    """Runs SCRIPT_OPS + body as tmp_path/script.py with env added."""
    script = tmp_path / "script.py"
    script.write_text(SCRIPT_OPS + textwrap.dedent(body))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_RBLN_")} | env
    return subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120,
                          cwd=ROOT)


def line_of(tmp_path, text: str) -> int:
    lines = (tmp_path / "script.py").read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


# ---- TORCH_RBLN_LOG_LEVEL -----------------------------------------------------------------------
def test_info_logs_every_fallback_with_the_user_line(tmp_path):
    proc = run(tmp_path, """
        for _ in range(2):
            unlisted()
        dtype()
        """, TORCH_RBLN_LOG_LEVEL="info")
    assert proc.returncode == 0, proc.stderr
    # the innermost frame outside torch and torch_rbln: the script's one-line functions
    site = f"{tmp_path / 'script.py'}:{line_of(tmp_path, 'def unlisted')}"
    logged = [line for line in proc.stderr.splitlines() if line.startswith("[torch_rbln INFO]")]
    assert logged == [f"[torch_rbln INFO] fallback to the CPU: aten::hash_tensor.out (not in ops.yaml, kind unlisted) at {site}"] * 2 + [
        "[torch_rbln INFO] fallback to the CPU: aten::hardtanh (dtype not supported on the device, kind dtype) at "
        f"{tmp_path / 'script.py'}:{line_of(tmp_path, 'def dtype')}"]
    # INFO includes WARNING: the once-per-op warnings are still there
    assert proc.stderr.count("UserWarning: aten::hash_tensor.out is not supported") == 1


def test_logs_go_to_the_users_handler(tmp_path):
    proc = run(tmp_path, """
        import logging
        records = []
        handler = logging.Handler()
        handler.emit = records.append
        logging.getLogger("torch_rbln").addHandler(handler)
        listed()
        print([(r.levelname, r.getMessage().split(" at ")[0]) for r in records])
        """, TORCH_RBLN_LOG_LEVEL="INFO")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str([("INFO", "fallback to the CPU: aten::_histogramdd_from_bin_tensors (listed as fallback in "
                                                 "ops.yaml, kind listed)")])


def test_default_level_warns_once_and_logs_nothing(tmp_path):
    proc = run(tmp_path, """
        import warnings
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            unlisted(); unlisted()
        print(len(seen), "aten::hash_tensor.out" in str(seen[0].message))
        """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["1", "True"]
    assert "[torch_rbln" not in proc.stderr


def test_error_level_does_not_warn(tmp_path):
    proc = run(tmp_path, """
        import warnings
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            out = unlisted()
        print(len(seen), out.cpu().tolist() == torch.hash_tensor(x.cpu()).tolist())
        """, TORCH_RBLN_LOG_LEVEL="ERROR")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0", "True"]


def test_debug_logs_host_syncs(tmp_path):
    proc = run(tmp_path, """
        value = x.sum().item()  # the sync
        """, TORCH_RBLN_LOG_LEVEL="DEBUG")
    assert proc.returncode == 0, proc.stderr
    assert (f"[torch_rbln DEBUG] host sync: item at {tmp_path / 'script.py'}:{line_of(tmp_path, '# the sync')}"
            in proc.stderr.splitlines())


def test_bad_log_level_fails_the_import(tmp_path):
    proc = run(tmp_path, "", TORCH_RBLN_LOG_LEVEL="verbose")
    assert proc.returncode != 0
    assert "TORCH_RBLN_LOG_LEVEL='verbose': expected one of DEBUG, INFO, WARNING, ERROR" in proc.stderr


# ---- TORCH_RBLN_DISABLE_FALLBACK ------------------------------------------------------------------
DISABLE_CASES = """
import json
result = {}
def compile():  # a complex Scalar is no plan's argument: CPU's kernel runs it and raises CPU's own error
    try:
        torch.renorm(x, complex(2, 0), 0, 1.0)
    except RuntimeError as e:
        if "p must be real-valued" not in str(e):
            raise
for kind, fn in {"unlisted": unlisted, "listed": listed, "dtype": dtype, "compile": compile}.items():
    try:
        fn()
        result[kind] = "ran"
    except RuntimeError as e:
        result[kind] = str(e)
print(json.dumps(result))
"""


@pytest.mark.parametrize("value, disabled", [
    ("dtype", {"dtype"}),
    ("unlisted", {"unlisted"}),
    ("listed, dtype", {"listed", "dtype"}),
    ("compile", {"compile"}),
    ("all", {"unlisted", "listed", "dtype", "compile"}),
    ("1", {"unlisted", "listed", "dtype", "compile"}),
    ("0", set()),
])
def test_disable_fallback_by_kind(tmp_path, value, disabled):
    proc = run(tmp_path, DISABLE_CASES, TORCH_RBLN_DISABLE_FALLBACK=value)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.splitlines()[-1])
    ops = {"unlisted": "aten::hash_tensor.out", "listed": "aten::_histogramdd_from_bin_tensors", "dtype": "aten::hardtanh", "compile": "aten::renorm"}
    for kind, outcome in result.items():
        if kind in disabled:
            assert ops[kind] in outcome and f"TORCH_RBLN_DISABLE_FALLBACK={value}" in outcome, outcome
            assert f"fallback kind '{kind}'" in outcome
        else:
            assert outcome == "ran"


def test_unknown_fallback_kind_fails_the_import(tmp_path):
    proc = run(tmp_path, "", TORCH_RBLN_DISABLE_FALLBACK="dtype,unlistd")
    assert proc.returncode != 0
    assert ("TORCH_RBLN_DISABLE_FALLBACK=dtype,unlistd: unknown fallback kind 'unlistd'; expected 0, 1, all, or a "
            "comma-separated list of unlisted, listed, dtype, compile") in proc.stderr


# ---- explain(): syncs, call sites, report() -------------------------------------------------------
def test_explain_counts_syncs_by_kind(cpu_rand):
    x = cpu_rand(4, 5)
    d = x.rbln()
    with torch.rbln.explain() as ex:
        assert d.sum().item() == pytest.approx(x.sum().item(), rel=1e-5)  # item
        torch.testing.assert_close(d.cpu(), x)  # device_to_host
        torch.testing.assert_close(torch.nonzero(d > 0).cpu(), torch.nonzero(x > 0))  # data_dependent + d2h
        torch.testing.assert_close(torch.masked_select(d, d > 0).cpu(), torch.masked_select(x, x > 0))
        torch.rbln.synchronize()
        torch.rbln.current_stream().synchronize()
    assert ex.syncs == {"item": 1, "device_to_host": 3, "data_dependent": 2, "synchronize": 2}


def test_non_blocking_copies_and_cpu_tensors_are_not_syncs(cpu_rand):
    d = cpu_rand(64).rbln()
    pinned = torch.empty(64).pin_memory()
    with torch.rbln.explain() as ex:
        pinned.copy_(d, non_blocking=True)
        torch.ones(3).sum().item()
    assert ex.syncs == {}
    torch.rbln.synchronize()
    torch.testing.assert_close(pinned, d.cpu())


def test_a_fallbacks_own_copies_are_not_syncs(cpu_rand):
    d = cpu_rand(8).rbln()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.rbln.explain() as ex:
            torch.hash_tensor(d)
    assert ex.fallback_ops == {"aten::hash_tensor.out": 1}
    assert ex.syncs == {}


def test_explain_with_stack_records_fallback_sites(cpu_rand):
    d = cpu_rand(8).rbln()
    here = __file__
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.rbln.explain(with_stack=True) as outer:
            for _ in range(2):
                torch.hash_tensor(d); line_a = sys._getframe().f_lineno  # noqa: E702
            with torch.rbln.explain() as inner:  # without with_stack: counts only
                torch.hash_tensor(d); line_b = sys._getframe().f_lineno  # noqa: E702
    assert outer.fallback_sites == {"aten::hash_tensor.out": {f"{here}:{line_a}": 2, f"{here}:{line_b}": 1}}
    assert outer.fallback_ops == {"aten::hash_tensor.out": 3}
    assert inner.fallback_sites == {} and inner.fallback_ops == {"aten::hash_tensor.out": 1}


def test_report_orders_by_cost_with_advice(cpu_rand):
    d = cpu_rand(4, 5).rbln()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.rbln.explain(with_stack=True) as ex:
            for _ in range(3):
                torch.hash_tensor(d); line = sys._getframe().f_lineno  # noqa: E702
            torch.nn.functional.hardtanh(d.to(torch.int16), 2, 9)
            for _ in range(2):
                d.sum().item()
            d.cpu()
    device_calls = sum(ex.device_ops.values())
    assert str(ex) == ex.report()
    rows = [line.split() for line in ex.report().splitlines()]  # columns are padded to the widest entry
    busiest = sorted(ex.device_time.items(), key=lambda kv: -kv[1])[:torch.rbln._accounting._DEVICE_TIME_ROWS]
    total = sum(ex.device_time.values())
    assert busiest, "the device ran the ops that stayed on it"
    assert rows == [line.split() for line in [
        f"torch.rbln.explain(): {device_calls} device op calls, 4 CPU fallbacks, 3 host syncs, "
        f"{total:.3f} ms of device time",
        "  calls  what  detail",
        "      3  fallback aten::hash_tensor.out not in ops.yaml [unlisted]",
        f"      3                               at {__file__}:{line}",
        "      1  fallback aten::hardtanh  dtype not supported on the device [dtype]",
        f"      1                               at {__file__}:{line + 1}",
        "      2  sync item",
        "      1  sync device_to_host",
        *(f"{ex.device_launches[name]} device {name} {ms:.3f} ms on the device ({ms / total:.0%})"
          for name, ms in busiest),
        "advice:",
        "  unlisted: " + torch.rbln._accounting._ADVICE["unlisted"],
        "  dtype: " + torch.rbln._accounting._ADVICE["dtype"],
        "  item: " + torch.rbln._accounting._ADVICE["item"],
        "  device_to_host: " + torch.rbln._accounting._ADVICE["device_to_host"],
        "  device_time: " + torch.rbln._accounting._ADVICE["device_time"],
    ]]


def test_report_of_clean_code_lists_only_device_time(cpu_rand):
    d = cpu_rand(4).rbln()
    with torch.rbln.explain() as ex:
        d + d
    assert ex.device_ops["aten::add.Tensor"] == 1
    lines = ex.report().splitlines()
    assert lines[0] == (f"torch.rbln.explain(): {sum(ex.device_ops.values())} device op calls, 0 CPU fallbacks, "
                        f"0 host syncs, {ex.device_time['aten::add.Tensor']:.3f} ms of device time")
    assert lines[2].split()[:3] == ["1", "device", "aten::add.Tensor"]  # the only problem worth a row


# ---- set_sync_debug_mode --------------------------------------------------------------------------
@pytest.fixture
def sync_mode():
    yield torch.rbln.set_sync_debug_mode
    torch.rbln.set_sync_debug_mode(0)


def test_sync_debug_mode_values(sync_mode):
    assert torch.rbln.get_sync_debug_mode() == 0
    for value, expected in (("warn", 1), ("error", 2), ("default", 0), (1, 1), (2, 2), (0, 0)):
        sync_mode(value)
        assert torch.rbln.get_sync_debug_mode() == expected
    with pytest.raises(RuntimeError, match="invalid value of debug_mode, expected one of `default`, `warn`, `error`"):
        sync_mode("loud")


def test_sync_debug_mode_warns_on_each_host_sync(sync_mode, cpu_rand):
    x = cpu_rand(6)
    d = x.rbln()
    sync_mode("warn")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        value = d.sum().item()
        host = d.cpu()
        idx = torch.nonzero(d > 0)  # one warning: its read-back is part of the op
        torch.rbln.current_stream().synchronize()
        torch.rbln.synchronize()  # as on CUDA: device and event synchronize do not warn
        e = torch.rbln.Event()
        e.record()
        e.synchronize()
        d + d  # no sync
    messages = [str(w.message).split(" (Triggered internally")[0] for w in seen]
    assert messages == [f"called a synchronizing rbln operation ({k})"
                        for k in ("item", "device_to_host", "data_dependent", "synchronize")]
    assert value == pytest.approx(x.sum().item(), rel=1e-5)
    torch.testing.assert_close(host, x)
    sync_mode(0)
    torch.testing.assert_close(idx.cpu(), torch.nonzero(x > 0))


def test_sync_debug_mode_error_raises_and_the_device_stays_usable(sync_mode, cpu_rand, assert_device_works):
    x = cpu_rand(6)
    d = x.rbln()
    sync_mode("error")
    for fn in (lambda: d.sum().item(), lambda: d.cpu(), lambda: torch.masked_select(d, d > 0),
               lambda: torch.rbln.current_stream().synchronize()):
        with pytest.raises(RuntimeError, match=r"called a synchronizing rbln operation"):
            fn()
    y = d * 2  # device work still runs
    sync_mode("default")
    torch.testing.assert_close(y.cpu(), x * 2)
    assert_device_works()
