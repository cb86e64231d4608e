"""A wrong device kernel on purpose, for testing the tools of this package (and trying them out): on
this emulator the device kernels agree with CPU, so a divergence has to be made."""
from __future__ import annotations

import contextlib
import warnings

import torch
from torch.utils._pytree import tree_map


def _op(op) -> torch._ops.OpOverload:
    """torch.ops.aten.mm.default, or "aten::mm" / "aten::mm.out" / "mm" (the default overload)."""
    if isinstance(op, torch._ops.OpOverload):
        return op
    if isinstance(op, torch._ops.OpOverloadPacket):
        return op.default
    name = op.split("::")[-1]
    packet, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, packet), overload or "default")


def add_to_first(delta: float = 1.0):
    """A fault: `delta` added to the first element of every floating result."""

    def perturb(t: torch.Tensor) -> torch.Tensor:
        if t.is_floating_point() and t.numel():
            t.view(-1)[0] += delta  # on the kernel's CPU result, which is contiguous
        return t

    return perturb


@contextlib.contextmanager
def inject_fault(op, perturb=None):
    """For the block, `op`'s rbln kernel (its PrivateUse1 registration) is replaced by one that computes
    on CPU copies of the inputs, passes each tensor result through `perturb` (default: add 1 to its first
    element) and returns it on rbln, writing into the op's in-place or out= arguments as the op would.
    The device's own kernel is registered again when the block ends (the dispatcher keeps it underneath).

        with inject_fault(torch.ops.aten.mm.default, add_to_first(0.5)):
            model(x)  # every mm on rbln is off by 0.5 in its first element
    """
    overload = _op(op)
    perturb = perturb or add_to_first()
    mutated = [i for i, a in enumerate(overload._schema.arguments) if a.alias_info is not None and a.alias_info.is_write]

    def kernel(*args, **kwargs):
        device = next((t.device for t in _tensors((args, kwargs)) if t.device.type == "rbln"), None)
        cpu_args, cpu_kwargs = tree_map(_to_cpu, (args, kwargs))
        if device is None:  # a factory: device= names it
            device, cpu_kwargs["device"] = kwargs["device"], torch.device("cpu")
        result = overload(*cpu_args, **cpu_kwargs)
        if not mutated:
            return tree_map(lambda t: perturb(t).to(device) if isinstance(t, torch.Tensor) else t, result)
        arguments = overload._schema.arguments
        written = []
        for i in mutated:
            name = arguments[i].name
            dev, cpu = (args[i], cpu_args[i]) if i < len(args) else (kwargs[name], cpu_kwargs[name])
            for d, c in zip(_tensors(dev), _tensors(cpu)):
                if d.shape != c.shape:  # an out= the op resized
                    d.resize_(c.shape)
                d.copy_(perturb(c) if c.is_floating_point() else c)
            written.append(dev)
        return written[0] if len(written) == 1 else tuple(written)

    lib = torch.library.Library("aten", "IMPL")
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="(?s).*Overriding a previously registered kernel")
            lib.impl(overload, kernel, "PrivateUse1")
        yield overload
    finally:
        lib._destroy()


def _to_cpu(x):
    return x.detach().cpu() if isinstance(x, torch.Tensor) else x


def _tensors(tree) -> list[torch.Tensor]:
    return [t for t in torch.utils._pytree.tree_leaves(tree) if isinstance(t, torch.Tensor)]
