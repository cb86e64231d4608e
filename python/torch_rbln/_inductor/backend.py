"""`torch.compile(model, backend="rbln")`, found by Dynamo through the `torch_dynamo_backends` entry point."""
from __future__ import annotations

from torch._inductor import list_mode_options
from torch._inductor.compile_fx import compile_fx

from . import register
from .graphs import GraphedCallable


def rbln(gm, example_inputs, mode: str | None = None, options: dict | None = None, **kwargs):
    """Inductor with the rbln device registered: the same graphs, caches and options as the default backend.
    `mode="reduce-overhead"` replays the compiled callable from rbln graphs (graphs.py)."""
    register()
    # Inductor's own cudagraphs serve CUDA only: reduce-overhead's graphs are GraphedCallable's.
    patches = {k: v for k, v in list_mode_options(mode).items() if k != "triton.cudagraphs"} if mode else {}
    patches = {**patches, **(options or {})} or None
    compiled = compile_fx(gm, example_inputs, config_patches=patches, **kwargs)
    return GraphedCallable(compiled) if mode == "reduce-overhead" else compiled
