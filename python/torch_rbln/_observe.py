"""Fallbacks and host syncs as the runtime reports them (runtime/observability/RBLNObserve.h): the "torch_rbln"
logger (TORCH_RBLN_LOG_LEVEL) and the call sites `torch.rbln.explain(with_stack=True)` collects.

The runtime calls `_on_fallback` and `_on_sync` on the thread that hit them, with the GIL, and only
while `_update()` asked it to: at log level INFO or below, or inside an explain(with_stack=True).
"""
from __future__ import annotations

import logging
import os
import sys

from . import _C

logger = logging.getLogger("torch_rbln")

_LEVELS = {"DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARNING": logging.WARNING, "ERROR": logging.ERROR}
_PACKAGE_DIRS = tuple(
    os.path.dirname(m.__file__) + os.sep for m in (sys.modules["torch"], sys.modules["torch_rbln"])
)

# Explanations of active explain(with_stack=True) blocks: each gets op -> {"file:line": count}.
_site_tables: list[dict[str, dict[str, int]]] = []
_level = logging.WARNING


def _parse_level(value: str) -> int:
    level = _LEVELS.get(value.strip().upper())
    if level is None:
        raise ValueError(f"TORCH_RBLN_LOG_LEVEL={value!r}: expected one of DEBUG, INFO, WARNING, ERROR")
    return level


def configure() -> None:
    """Reads TORCH_RBLN_LOG_LEVEL (once, at import) and checks TORCH_RBLN_DISABLE_FALLBACK."""
    global _level
    _C._disabled_fallbacks()  # raises on an unknown word
    value = os.environ.get("TORCH_RBLN_LOG_LEVEL")
    if value:
        _level = _parse_level(value)
        logger.setLevel(_level)
        if not logger.handlers:
            # Python's last-resort handler drops INFO and DEBUG: show what the user asked for on stderr.
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("[torch_rbln %(levelname)s] %(message)s"))
            logger.addHandler(handler)
            logger.propagate = False
    _C._set_log_level(_level)
    _update()


def _update() -> None:
    _C._set_observing(_level <= logging.INFO or bool(_site_tables), _level <= logging.DEBUG)


def user_site() -> str:
    """file:line of the innermost Python frame outside torch and torch_rbln ("<unknown>" on a thread
    without Python frames, such as autograd's device threads)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIRS):
        frame = frame.f_back
    return "<unknown>" if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"


def _on_fallback(op: str, kind: str, reason: str) -> None:
    site = user_site()
    for table in _site_tables:
        per_site = table.setdefault(op, {})
        per_site[site] = per_site.get(site, 0) + 1
    if _level <= logging.INFO:
        logger.info("fallback to the CPU: %s (%s, kind %s) at %s", op, reason, kind, site)


def _on_sync(kind: str) -> None:
    logger.debug("host sync: %s at %s", kind, user_site())


def capture_sites(table: dict[str, dict[str, int]]) -> None:
    _site_tables.append(table)
    _update()


def release_sites(table: dict[str, dict[str, int]]) -> None:
    del _site_tables[next(i for i, t in enumerate(_site_tables) if t is table)]  # by identity: tables may be equal
    _update()
