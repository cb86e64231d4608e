"""Dumps: each module's forward inputs and outputs and the gradients of its outputs, written as
safetensors files with a JSON index, and the offline comparison of two dumps (rbln here against CUDA or
CPU elsewhere): the first and the worst diverging modules."""
from __future__ import annotations

import contextlib
import functools
import json
import os

import torch
from torch.utils._pytree import keystr, tree_flatten_with_path

from ._errors import error, tolerance

INDEX = "index.json"
FORMAT = "torch_rbln.debug dump 1"


def _stats(t: torch.Tensor) -> dict:
    info = {"shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch.")}
    if t.numel() and not t.is_complex():
        x = t.double()
        finite = x[x.isfinite()]
        info.update(nan=int(x.isnan().sum()), inf=int(x.isinf().sum()))
        if finite.numel():
            info.update(min=float(finite.min()), max=float(finite.max()), mean=float(finite.mean()),
                        abs_max=float(finite.abs().max()),
                        std=float(finite.std()) if finite.numel() > 1 else 0.0)
    return info


def _tensors(prefix: str, tree) -> dict[str, torch.Tensor]:
    """Tensor leaves of args, kwargs, tuples, dicts and ModelOutputs, named by their path, as contiguous
    CPU copies (safetensors takes no views)."""
    out = {}
    for path, leaf in tree_flatten_with_path(tree)[0]:
        if isinstance(leaf, torch.Tensor) and not leaf.is_complex():
            out[prefix + keystr(path)] = leaf.detach().to("cpu", copy=True).contiguous()
    return out


class dump_step(contextlib.ContextDecorator):
    """Writes, for the modules of `model` that run in the block: their forward inputs and outputs, the
    gradients of their outputs when a backward runs in the block, and the parameters' gradients at the
    end, into `directory` (one safetensors file per module call, `index.json` with shapes, dtypes and
    statistics). A module called twice gets `name#1`; tied parameters are written once and listed."""

    def __init__(self, model: torch.nn.Module, directory: str, *, grads: bool = True):
        self.model, self.directory, self.grads = model, directory, grads

    def __enter__(self):
        os.makedirs(self.directory, exist_ok=True)
        self.entries, self._calls, self._pending = [], {}, {}
        self._handles = [m.register_forward_hook(functools.partial(self._forward, name), with_kwargs=True)
                         for name, m in self.model.named_modules()]
        return self

    def __exit__(self, *exc):
        for handle in self._handles:
            handle.remove()
        for key, tensors in self._pending.items():
            self._write(key, "backward", tensors)
        tied, grads = {}, {}
        first: dict[int, str] = {}
        for name, p in self.model.named_parameters(remove_duplicate=False):
            if id(p) in first:
                tied[name] = first[id(p)]
                continue
            first[id(p)] = name
            if p.grad is not None:
                grads.update(_tensors(name, p.grad))
        if grads:
            self._write("(parameters)", "parameter_grad", grads)
        with open(os.path.join(self.directory, INDEX), "w") as f:
            device = next((str(p.device) for p in self.model.parameters()), None)
            json.dump({"format": FORMAT, "torch": torch.__version__, "device": device, "entries": self.entries,
                       "tied": tied}, f, indent=1)
        return False

    def _forward(self, name, module, args, kwargs, output):
        call = self._calls.get(name, 0)
        self._calls[name] = call + 1
        key = (name or type(module).__name__) + (f"#{call}" if call else "")  # the root: its class, as in compare mode
        self._write(key, "forward", {**_tensors("input", args), **_tensors("input", kwargs),
                                     **_tensors("output", output)})
        if self.grads and torch.is_grad_enabled():
            for path, t in tree_flatten_with_path(output)[0]:
                if isinstance(t, torch.Tensor) and t.requires_grad:
                    t.register_hook(functools.partial(self._grad, key, "grad_output" + keystr(path)))

    def _grad(self, key, name, grad):
        self._pending.setdefault(key, {})[name] = grad.detach().to("cpu", copy=True).contiguous()

    def _write(self, key: str, kind: str, tensors: dict) -> None:
        from safetensors.torch import save_file

        file = f"{len(self.entries):05d}.safetensors"
        save_file(tensors, os.path.join(self.directory, file))
        self.entries.append({"module": key, "kind": kind, "file": file,
                             "tensors": {k: _stats(t) for k, t in tensors.items()}})


def dump(model: torch.nn.Module, inputs, directory: str):
    """Runs `model` on `inputs` (a tensor, a tuple of positional arguments or a dict of keyword
    arguments) under dump_step and returns its output."""
    with dump_step(model, directory):
        if isinstance(inputs, dict):
            return model(**inputs)
        return model(*inputs) if isinstance(inputs, (tuple, list)) else model(inputs)


def compare_dumps(dir_a: str, dir_b: str, tolerances=None) -> list[dict]:
    """One row per tensor of A whose counterpart in B differs beyond tolerance (or is missing), in A's
    order: {"module", "kind", "tensor", "figures", "order"}."""
    from safetensors.torch import load_file

    index_a, index_b = (json.load(open(os.path.join(d, INDEX))) for d in (dir_a, dir_b))
    by_key = {(e["module"], e["kind"]): e for e in index_b["entries"]}
    rows = []
    for order, entry in enumerate(index_a["entries"]):
        other = by_key.get((entry["module"], entry["kind"]))
        row = {"module": entry["module"], "kind": entry["kind"], "order": order}
        if other is None:
            rows.append({**row, "tensor": "*", "figures": _missing(f"not in {dir_b}")})
            continue
        a, b = load_file(os.path.join(dir_a, entry["file"])), load_file(os.path.join(dir_b, other["file"]))
        for name, actual in a.items():
            if name not in b:
                rows.append({**row, "tensor": name, "figures": _missing(f"not in {dir_b}")})
                continue
            atol, rtol = tolerance(actual.dtype, overrides=tolerances)
            figures = error(actual, b[name].to(actual.dtype) if b[name].dtype != actual.dtype else b[name], atol, rtol)
            if figures is not None:
                rows.append({**row, "tensor": name, "figures": figures})
    return rows


def _missing(why: str) -> dict:
    return {"mismatch": why, "ratio": float("inf"), "max_abs": float("inf"), "max_rel": float("inf")}


def format_rows(rows: list[dict], top: int = 20) -> str:
    if not rows:
        return "no divergence"
    first = rows[0]
    f = first["figures"]
    lines = [f"first diverging module: {first['module']} ({first['kind']}), {first['tensor']}: "
             + (f["mismatch"] or f"max abs error {f['max_abs']:.4g}, max rel error {f['max_rel']:.4g} "
                                 f"at index {f['index']} ({f['actual']:.6g} vs {f['expected']:.6g})"),
             f"{len(rows)} diverging tensor(s); worst (error over tolerance) first:",
             f"{'module':<40} {'kind':<15} {'tensor':<28} {'max abs':>10} {'max rel':>10} {'x tol':>8}"]
    for r in sorted(rows, key=lambda r: -r["figures"]["ratio"])[:top]:
        f = r["figures"]
        lines.append(f"{r['module']:<40} {r['kind']:<15} {r['tensor']:<28} {f['max_abs']:>10.3g} "
                     f"{f['max_rel']:>10.3g} {f['ratio']:>8.3g}")
    return "\n".join(lines)
