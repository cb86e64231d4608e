"""The Python half of ops.yaml's `compile` strategy (runtime/compiled/RBLNCompiledOps.h).

Installed at import; both callbacks run only on a plan miss, so Inductor (seconds
to import) loads the first time an op needs a plan that is neither in memory
nor on disk.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import torch

from . import _C

_INDUCTOR_SOURCES = Path(__file__).parent / "_inductor"


def backend_version() -> str:
    """A hash of torch's version and the compile sources: a changed backend never reads what the old one cached."""
    digest = hashlib.sha256(torch.__version__.encode())
    for path in sorted(_INDUCTOR_SOURCES.glob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _compile(name: str, overload: str, args: list, path: str) -> tuple[str, str]:
    from ._inductor.op_compiler import compile_op

    return compile_op(name, overload, args, path)


def _cache_dir() -> str:
    """Plans live beside Inductor's caches (TORCH_RBLN_CACHE_DIR, docs/compile.md), one directory per version."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return os.path.join(cache_dir(), "rbln_ops", backend_version()[:16])


def install() -> None:
    _C._set_op_compiler(_compile, _cache_dir)
