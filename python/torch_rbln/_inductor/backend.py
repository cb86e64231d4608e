"""`torch.compile(model, backend="rbln")`, found by Dynamo through the `torch_dynamo_backends` entry point."""
from __future__ import annotations

from torch._inductor.compile_fx import compile_fx

from . import register


def rbln(gm, example_inputs, **kwargs):
    """Inductor with the rbln device registered: the same graphs, caches and options as the default backend."""
    register()
    return compile_fx(gm, example_inputs, **kwargs)
