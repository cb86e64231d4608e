"""Hugging Face's Trainer and accelerate on rbln, as on CUDA (docs/training.md); torch_rbln._patches installs
these when transformers' and accelerate's modules load.

accelerate finds rbln by itself through `torch.accelerator` (its single-process device, autocast, memory and
random-state calls); what it and transformers decide from their own lists of device types, rbln answers here:

- transformers' `TrainingArguments.device` falls back to `cuda:0` or the CPU when no device it lists is
  present, while accelerate moves the model to rbln: the batches stay on the CPU. For rbln it answers
  `rbln:0` (accelerate's device), as it answers `cuda:0` on CUDA.
- transformers refuses `bf16=True` unless a device it lists supports bfloat16; rbln does.
- accelerate launches a process per device (torchrun, `accelerate launch --multi_gpu`) as data parallel only
  for device types with a distributed backend in its table; for rbln: the rbln-ccl backend, each process on
  `rbln:<local rank>`. accelerate names one-process-per-device DDP on a listed device MULTI_<DEVICE>, on CUDA
  MULTI_GPU, and has no name for a device it does not list: rbln runs as MULTI_GPU, whose code paths are
  device-neutral (DDP, barriers, broadcasts by `state.device`) but for `set_device`, which rbln answers.
"""
from __future__ import annotations

import os

import torch

from . import _patches

SETUP_DEVICES = "transformers.training_args.TrainingArguments._setup_devices"


def rbln_accelerator() -> bool:
    """Whether the process's accelerator (what accelerate picks through torch.accelerator) is rbln."""
    accelerator = torch.accelerator.current_accelerator()
    return accelerator is not None and accelerator.type == "rbln" and torch.accelerator.is_available()


# ---- transformers ----------------------------------------------------------------------------------------
def trains_on_accelerator(args) -> bool:
    return not args.use_cpu and rbln_accelerator()


def setup_devices(args) -> torch.device:
    """TrainingArguments' device: upstream's, but where upstream falls back to the CPU in a single process and
    accelerate's state is on rbln, rbln:0 made current, one device per process (as upstream on XPU or NPU)."""
    from accelerate.utils import DistributedType

    device = _patches.originals[SETUP_DEVICES](args)
    state = args.distributed_state
    if (device.type == "cpu" and state is not None and state.distributed_type == DistributedType.NO
            and state.device.type == "rbln"):
        device = torch.device("rbln", 0 if state.device.index is None else state.device.index)
        torch.rbln.set_device(device)
        args._n_gpu = 1
    return device


def rbln_without_cuda(*args, **kwargs) -> bool:
    return rbln_accelerator() and not torch.cuda.is_available()


def bf16_supported(*args, **kwargs) -> bool:
    return torch.rbln.is_bf16_supported()


# ---- accelerate ------------------------------------------------------------------------------------------
def launched_on_rbln(state, cpu: bool = False, sagemaker_dp=False, backend: str | None = None) -> bool:
    """PartialState._prepare_backend's question: a process of a distributed launch (LOCAL_RANK) that is not
    asked to use the CPU, with rbln as its accelerator."""
    from accelerate.utils import is_torch_xla_available

    return (not cpu and not sagemaker_dp and int(os.environ.get("LOCAL_RANK", -1)) != -1 and rbln_accelerator()
            and not is_torch_xla_available())


def prepare_backend(state, cpu: bool = False, sagemaker_dp=False, backend: str | None = None):
    """(backend, distributed type): the backend asked for or rbln's default (rbln-ccl), and MULTI_GPU."""
    from accelerate.utils import DistributedType

    return backend or torch.distributed.get_default_backend_for_device("rbln"), DistributedType.MULTI_GPU


def distributed_on_rbln(state) -> bool:
    from accelerate.utils import DistributedType

    return state.device is None and state.distributed_type == DistributedType.MULTI_GPU and rbln_without_cuda()


def set_device(state) -> None:
    """The process's device: rbln:<local rank> (modulo the device count), made current, as upstream's for CUDA."""
    index = state.local_process_index % torch.rbln.device_count()
    state.device = torch.device("rbln", index)
    torch.rbln.set_device(index)
