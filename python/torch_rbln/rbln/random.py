"""`torch.rbln.random`, as `torch.cuda.random`: the devices' generators."""
from __future__ import annotations

from typing import Any

import torch

from .. import _C
from ._device import _index, current_device, device_count

__all__ = ["default_generators", "get_rng_state", "get_rng_state_all", "initial_seed", "manual_seed",
           "manual_seed_all", "seed", "seed_all", "set_rng_state", "set_rng_state_all"]


def manual_seed(seed: int) -> None:
    _C._manual_seed(current_device(), int(seed) & 0xFFFF_FFFF_FFFF_FFFF)


def manual_seed_all(seed: int) -> None:
    for i in range(device_count()):
        _C._manual_seed(i, int(seed) & 0xFFFF_FFFF_FFFF_FFFF)


def seed() -> None:
    _C._seed(current_device())


def seed_all() -> None:
    s = _C._seed(0)
    for i in range(1, device_count()):
        _C._manual_seed(i, s)


def initial_seed() -> int:
    return _C._initial_seed(current_device())


default_generators: tuple[torch.Generator, ...] = _C._default_generators()


def _is_in_bad_fork() -> bool:
    """The driver refuses work in a forked child itself (see docs/runtime.md)."""
    return False


def get_rng_state(device: Any = "rbln") -> torch.Tensor:
    return torch.frombuffer(bytearray(_C._get_rng_state(_index(device))), dtype=torch.uint8)


def set_rng_state(new_state: torch.Tensor, device: Any = "rbln") -> None:
    if new_state.dtype != torch.uint8:  # Generator.set_state's check, as torch.cuda.set_rng_state reaches it
        raise TypeError("RNG state must be a torch.ByteTensor")
    _C._set_rng_state(_index(device), bytes(new_state.to("cpu", torch.uint8).contiguous().numpy().tobytes()))


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)
