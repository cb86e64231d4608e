"""torch.distributed on rbln: the "rbln-ccl" backend (docs/distributed.md).

Registered when torch_rbln is imported, for the rbln and cpu devices, so
`init_process_group()` picks it for rbln as it picks NCCL for CUDA, and
`init_process_group("rbln-ccl")` also serves CPU tensors. Its transport is Gloo:
a ProcessGroupGloo on the group's store, driven from C++
(runtime/distributed/RBLNProcessGroup.cpp), which stages rbln tensors through pinned host
memory on the device's communication streams.
"""

import torch.distributed as dist

from . import _C

NAME = "rbln-ccl"


def _create_backend(options, backend_options):
    host = dist.ProcessGroupGloo(options.store, options.group_rank, options.group_size, options.timeout)
    host.options.global_ranks_in_group = options.global_ranks_in_group
    host.options.group_name = options.group_id
    host._set_sequence_number_for_group()
    return _C._ccl_backend(host)


def register():
    if dist.is_available() and NAME not in dist.Backend.backend_list:
        dist.Backend.register_backend(NAME, _create_backend, extended_api=True, devices=["rbln", "cpu"])


def bf16_compress_hook(state, bucket):
    """DDP's `default_hooks.bf16_compress_hook` for rbln: DDP refuses that hook by name unless
    CUDA with NCCL or XPU with XCCL is present (nn/parallel/distributed.py, _check_comm_hook),
    although nothing in it needs them. Same hook, another name."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    return default_hooks.bf16_compress_hook(state, bucket)


bf16_compress_hook.__name__ = bf16_compress_hook.__qualname__ = "rbln_bf16_compress_hook"
