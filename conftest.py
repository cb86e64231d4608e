"""Test order for `make test`'s one pytest run on two workers (pytest-xdist, worksteal).

Each worker takes half of the collected list and, once done, steals from the other's tail. The long
tests (compiled-op plans, torch.compile, torchrun, subprocess clients) go first, so the last minutes
hold only short tests that the two workers share evenly, instead of one worker finishing a minutes-long
test alone.
"""
from __future__ import annotations

SLOW_FILES = ("tests/python/test_compile.py", "tests/python/test_distributed.py", "tests/python/test_clients.py",
              "tests/python/test_sanitizer.py", "tests/python/test_compiled_ops.py", "tests/conformance/",
              "tests/python/test_autocast.py", "tests/python/test_upstream.py", "tests/python/test_attention.py")


def _slow(item) -> bool:
    callspec = getattr(item, "callspec", None)
    if callspec is not None and callspec.params.get("strategy") == "compile":  # a generated test of a compile entry
        return True
    return item.nodeid.startswith(SLOW_FILES)


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: not _slow(item))  # stable: the order within each group is kept
