"""Shared fixtures for the torch-rbln Python tests.

Tests run in this process against the emulated device with its environment
(two devices, 8 GiB each unless RBLN_DEVICE_COUNT / RBLN_DEVICE_MEMORY say
otherwise); behaviour that needs another environment runs in a subprocess
through `run_python`.
"""
from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# pytest's two workers keep both cores busy: a process that compiles (this one or a test's subprocess) compiles
# its kernels itself instead of first starting Inductor's pool of compile workers. One test compiles with the
# pool (test_compile.py, concurrent processes).
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import torch  # noqa: E402

import torch_rbln  # noqa: E402,F401  (registers the rbln device)

ROOT = Path(__file__).resolve().parents[2]


def _parse_bytes(text: str) -> int:
    for suffix, shift in (("KiB", 10), ("MiB", 20), ("GiB", 30), ("K", 10), ("M", 20), ("G", 30)):
        if text.endswith(suffix):
            return int(text[: -len(suffix)]) << shift
    return int(text)


@pytest.fixture(scope="session")
def configured():
    """What this process's environment asks for: device count (default 2) and capacity (default 8 GiB)."""
    return {"count": int(os.environ.get("RBLN_DEVICE_COUNT", "2")),
            "capacity": _parse_bytes(os.environ.get("RBLN_DEVICE_MEMORY", "8G"))}


@pytest.fixture(scope="module", autouse=True)
def _collect_module_garbage():
    """Garbage collection rescans only what the current test made. What survives a test's collection is
    frozen (gc.freeze), so the next test's collection skips it: a full collection after Hugging Face or
    Inductor is loaded takes 0.14 s, which every later test paid. After each file, all of it is collected
    once more (its module fixtures and Dynamo's caches are released then) and frozen again."""
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def _isolate_device_state():
    """Each test starts on rbln:0 with default streams, its async errors surface in it, and
    its garbage (tensors in reference cycles) is freed before the next test reads memory stats."""
    yield
    gc.collect()
    gc.freeze()
    for i in range(torch.rbln.device_count()):
        torch.rbln.set_stream(torch.rbln.default_stream(i))  # also makes device i current, as in torch.cuda
    torch.rbln.set_device(0)
    for i in range(torch.rbln.device_count()):
        torch.rbln.synchronize(i)


@pytest.fixture
def assert_device_works():
    """Checks that a device still computes correct results (after an error, say)."""

    def check(device="rbln"):
        x = torch.arange(12, dtype=torch.float32).view(3, 4)
        d = x.to(device)
        torch.testing.assert_close((d * 2 + 1).sum(0).cpu(), (x * 2 + 1).sum(0))
        torch.rbln.synchronize(torch.device(device))

    return check


@pytest.fixture
def cpu_rand():
    """Deterministic CPU tensors: cpu_rand(*shape, dtype=...)."""
    gen = torch.Generator().manual_seed(1234)

    def make(*shape, dtype=torch.float32):
        x = torch.randn(shape, generator=gen) * 10
        if dtype == torch.bool:
            return x > 0
        return x.to(dtype)

    return make


@pytest.fixture
def square(cpu_rand):
    """A 256x256 CPU matrix whose matrix powers stay O(1) (entries ~N(0, 1/16))."""
    return cpu_rand(256, 256) / 160


@pytest.fixture
def busy():
    """busy(d, steps): d multiplied by itself `steps` times; on rbln, real queued work."""

    def power(d, steps=4):
        for _ in range(steps):
            d = d @ d
        return d

    return power


@pytest.fixture(scope="session")
def run_python():
    """Runs `code` in a fresh interpreter with `env` added; `import torch, torch_rbln` comes first.

    The script prints one JSON document as its last line of stdout; that is returned.
    """

    def run(code: str, **env: str):
        # The same torch_rbln as this process: the installed package (or whatever
        # PYTHONPATH already points at).
        full_env = {**os.environ, **env}
        script = "import json, warnings, torch, torch_rbln\nwarnings.simplefilter('ignore')\n" + textwrap.dedent(code)
        proc = subprocess.run([sys.executable, "-c", script], env=full_env, capture_output=True, text=True,
                              timeout=120, cwd=ROOT)
        assert proc.returncode == 0, f"subprocess failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        return json.loads(proc.stdout.strip().splitlines()[-1])

    return run


# Test order for `make test`'s one pytest run on two workers (pytest-xdist, worksteal): each worker takes
# half of the collected list and, once done, steals from the other's tail. The long tests (compiled-op
# plans, torch.compile, torchrun, subprocess clients) go first, so the last minutes hold only short tests
# the two workers share evenly. A collection hook applies to every item of the session, generated/ too.
SLOW_FILES = ("tests/python/test_compile.py", "tests/python/test_distributed.py", "tests/python/test_clients.py",
              "tests/python/test_sanitizer.py", "tests/python/test_compiled_ops.py", "tests/conformance/",
              "tests/python/test_autocast.py", "tests/python/test_upstream.py", "tests/python/test_attention.py",
              "tests/python/test_trainer.py", "tests/python/test_vllm.py", "tests/python/test_quantized.py",
              "tests/python/test_aoti.py", "tests/python/test_patches.py", "tests/python/test_serving.py",
              "tests/python/test_graphs.py", "tests/python/test_profiler.py", "tests/python/test_streams.py",
              "tests/python/test_rng.py", "tests/codegen/")


def _slow(item) -> bool:
    callspec = getattr(item, "callspec", None)
    if callspec is not None and callspec.params.get("strategy") == "compile":  # a generated test of a compile entry
        return True
    return item.nodeid.startswith(SLOW_FILES)


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: not _slow(item))  # stable: the order within each group is kept
