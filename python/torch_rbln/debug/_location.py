"""Where an op ran: the module (its path in the model, in its forward or backward) and the user's Python
lines, for the reports of compare mode and of the non-finite check."""
from __future__ import annotations

import re
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.module_tracker import ModuleTracker

from .._observe import _PACKAGE_DIRS

_FRAME = re.compile(r'File "(.+?)", line (\d+), in (\S+)')


def user_stack(limit: int = 4) -> list[str]:
    """The innermost `limit` Python frames outside torch and torch_rbln, innermost first, as
    "file:line in function". Empty on autograd's device threads (backward ops run there without Python frames)."""
    frames, frame = [], sys._getframe(1)
    while frame is not None and len(frames) < limit:
        code = frame.f_code
        if not code.co_filename.startswith(_PACKAGE_DIRS):
            frames.append(f"{code.co_filename}:{frame.f_lineno} in {code.co_name}")
        frame = frame.f_back
    return frames


class Locator(ModuleTracker):
    """PyTorch's ModuleTracker (the modules running, in forward and in backward, through module and
    autograd hooks), answering with the innermost module's path relative to the outermost module
    (`model.layers.3.mlp.down_proj` for a LlamaForCausalLM) and the user's lines. In backward, the lines
    are those of the forward op whose gradient is being computed when anomaly mode recorded them
    (compare(backward_stacks=True)), else the autograd node's name."""

    def where(self, lines: int = 4) -> dict:
        names = self.parents - {"Global"}
        module = None
        if names:
            innermost = max(names, key=len)  # nested paths: the innermost is the longest
            module = innermost.split(".", 1)[1] if "." in innermost else innermost
        backward = self.is_bw
        stack = [] if backward else user_stack(lines)
        node = torch._C._current_autograd_node() if backward else None
        if node is not None:
            traceback = node.metadata.get("traceback_")
            stack = [f"backward of {node.name()}"] + (_user_lines(traceback) if traceback else [])
        return {"module": module, "phase": "backward" if backward else "forward", "stack": stack}


def _user_lines(traceback) -> list[str]:
    """The user's frames of a forward traceback that anomaly mode stored (traceback.format_stack()'s
    list, innermost last)."""
    text = "".join(traceback) if isinstance(traceback, (list, tuple)) else str(traceback)
    frames = _FRAME.findall(text)
    ours = [f"{file}:{line} in {name}" for file, line, name in frames if not file.startswith(_PACKAGE_DIRS)]
    return ["forward: " + line for line in reversed(ours[-4:])]


def describe(where: dict) -> str:
    module = where["module"] or "(no module)"
    lines = "\n".join(f"    {line}" for line in where["stack"]) or "    (no Python frames)"
    return f"  in {module} ({where['phase']})\n{lines}"


class OpMode(TorchDispatchMode):
    """A dispatch mode handing every op to its owner's `_dispatch(func, args, kwargs)` (compare mode, the
    non-finite check): it sees the ops of the thread that entered it and of autograd's threads."""

    def __init__(self, owner):
        super().__init__()
        self.owner = owner

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return self.owner._dispatch(func, args, kwargs or {})
