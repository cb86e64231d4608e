"""`torch.rbln`: the device module, shaped like `torch.cuda` (registered by torch_rbln/__init__.py).

Assembled here from one module per capability, which import only each other, never this package:

    _device.py        devices, the current device, synchronize, sync debug mode, properties
    streams.py        streams and events (`torch.rbln.streams`)
    memory.py         the caching allocator, memory pools, host memory, history and snapshots
                      (`torch.rbln.memory`; _memory_history.py)
    random.py         the devices' generators (`torch.rbln.random`)
    amp.py            autocast's dtypes and torch.cuda.amp's deprecated aliases (`torch.rbln.amp`)
    _tensor_types.py  the legacy tensor types (`torch.rbln.FloatTensor`, ...)
    _storage_types.py the legacy typed storages (`torch.rbln.FloatStorage`, ...)
    _health.py        device-health readings (`torch.rbln.utilization`, `memory_usage`, ...)
    _compile.py       torch.compile: Inductor's hooks, compile statistics, the compiled-op plan cache
    _accounting.py    `torch.rbln.explain()`: op accounting
    graphs.py         graph capture and replay (`torch.rbln.graphs`, as `torch.cuda.graphs`)

A submodule torch.cuda has and rbln gains goes beside them, its names taken here and, for
`import torch.rbln.<name>`, its sys.modules entry listed in torch_rbln._patches.
"""
import importlib

from . import amp, graphs, memory, random, streams
from ._accounting import *  # noqa: F401,F403
from ._compile import *  # noqa: F401,F403
from ._compile import _inductor_hook as __getattr__  # noqa: F401  (Inductor's lazy `torch.rbln.Scheduling`)
from ._device import *  # noqa: F401,F403
from ._health import *  # noqa: F401,F403
from ._storage_types import *  # noqa: F401,F403
from ._tensor_types import *  # noqa: F401,F403
from .amp import get_amp_supported_dtype, has_half, is_bf16_supported, is_tf32_supported  # noqa: F401
from .graphs import *  # noqa: F401,F403
from .memory import *  # noqa: F401,F403
from .memory import _dump_snapshot, _memory_viz, _record_memory_history, _snapshot  # noqa: F401  (torch.cuda's)
from .random import *  # noqa: F401,F403
from .random import _is_in_bad_fork  # noqa: F401
from .streams import *  # noqa: F401,F403


def _submodule(name: str):
    """The module sys.modules holds as `torch.rbln.<name>` (torch_rbln._patches adds the entries, as for torch.cuda)."""
    return importlib.import_module(f"{__name__}.{name.rpartition('.')[2]}")
