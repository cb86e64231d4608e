"""torch-rbln: eager-mode PyTorch on the RBLN NPU (an emulated NPU by default).

Importing this package (PyTorch does it by itself through the `torch.backends`
entry point) registers the `rbln` device, `torch.rbln` and the tensor, module
and storage methods (`x.rbln()`, `x.is_rbln`, `model.rbln()`), and with
TORCH_RBLN_SANITIZER=1 starts the stream sanitizer (`torch_rbln.sanitizer`).
"""


def _autoload():
    """`torch.backends` entry point. Importing the package is the whole job; it
    is defined before `import torch` because `import torch_rbln` itself triggers
    torch's autoload, which looks this up on the partly imported module."""


import atexit  # noqa: E402
import os  # noqa: E402

# torch.compile's on-disk caches (docs/compile.md): TORCH_RBLN_CACHE_DIR names Inductor's cache
# directory unless TORCHINDUCTOR_CACHE_DIR already does; by default Inductor's per-user directory.
if os.environ.get("TORCH_RBLN_CACHE_DIR"):
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.environ["TORCH_RBLN_CACHE_DIR"])

import torch  # noqa: E402

from . import _C  # noqa: F401  (loads the runtime and the op registrations)
from . import _observe  # noqa: E402
from . import _own_ops  # noqa: E402, F401  (fake functions of the rbln:: operators)

_observe.configure()  # TORCH_RBLN_LOG_LEVEL and TORCH_RBLN_DISABLE_FALLBACK: a bad value raises here

if torch._C._get_privateuse1_backend_name() != "rbln":
    torch.utils.rename_privateuse1_backend("rbln")

from . import rbln as _rbln_module  # noqa: E402

if not hasattr(torch, "rbln"):
    torch._register_device_module("rbln", _rbln_module)
    torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True, for_storage=True)

from . import _patches  # noqa: E402

_patches.install()  # every replacement in torch is listed there (docs/patches.md)

from . import distributed  # noqa: E402

distributed.register()

from . import _compiled_ops  # noqa: E402

_compiled_ops.install()

# `with torch.device("rbln")` redirects the factories in torch's cached set of device constructors. The set is
# made on first use: made inside transformers' from_pretrained, which swaps torch.linspace for a wrapper while
# it builds a model under `torch.device("meta")`, it holds the wrapper, and torch.linspace stays on the CPU in
# every later device context of the process. Made here, it holds torch's own functions (replaces nothing).
import torch.utils._device  # noqa: E402

torch.utils._device._device_constructors()

if os.environ.get("TORCH_RBLN_SANITIZER", "0") not in ("", "0"):
    from . import sanitizer

    sanitizer.enable()

explain = _rbln_module.explain
compile_stats = _rbln_module.compile_stats


@atexit.register  # registered early, so it runs after the user's own handlers
def _quiesce_autograd_threads():
    """Lets autograd's rbln device threads finish with Python before the interpreter finalizes
    (python/csrc/Module.cpp says why); an exit handler must not raise."""
    used = any(torch.rbln.memory_stats(d)["allocation.all.allocated"] for d in range(torch.rbln.device_count()))
    if used:
        try:
            _C._quiesce_autograd_threads()
        except Exception:  # e.g. a forked child may not use the device
            pass

__all__ = ["compile_stats", "explain"]
