"""`torch.rbln.FloatTensor` and the other legacy tensor types, as torch.cuda's."""
from __future__ import annotations

import torch

from ._device import _DEVICE_TYPE, current_device

__all__ = ["BFloat16Tensor", "BoolTensor", "ByteTensor", "CharTensor", "DoubleTensor", "FloatTensor", "HalfTensor",
           "IntTensor", "LongTensor", "ShortTensor"]


class _TensorType(type):
    """isinstance(t, torch.rbln.FloatTensor): an rbln tensor of that dtype, as torch.cuda's types check."""

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, torch.Tensor) and obj.device.type == _DEVICE_TYPE and obj.dtype == cls.dtype


class _LegacyTensor(metaclass=_TensorType):
    """torch.rbln.FloatTensor(2, 3) (uninitialized), FloatTensor([1, 2]) (data) or FloatTensor() (empty), on
    the current device, as torch.cuda.FloatTensor constructs."""

    dtype: torch.dtype

    def __new__(cls, *args):
        target = torch.device(_DEVICE_TYPE, current_device())
        if len(args) == 1 and isinstance(args[0], torch.Size):
            args = tuple(args[0])
        if not args:
            args = (0,)
        if all(isinstance(a, int) for a in args):
            return torch.empty(args, dtype=cls.dtype, device=target)
        if len(args) == 1:
            return torch.tensor(args[0], dtype=cls.dtype, device=target)
        raise TypeError(f"{cls.__name__}(): expected sizes or one sequence of data, got {args!r}")


def _tensor_type(name: str, dtype: torch.dtype) -> type:
    return _TensorType(name, (_LegacyTensor,), {"dtype": dtype, "__module__": "torch.rbln", "__qualname__": name})


BFloat16Tensor = _tensor_type("BFloat16Tensor", torch.bfloat16)
BoolTensor = _tensor_type("BoolTensor", torch.bool)
ByteTensor = _tensor_type("ByteTensor", torch.uint8)
CharTensor = _tensor_type("CharTensor", torch.int8)
DoubleTensor = _tensor_type("DoubleTensor", torch.float64)
FloatTensor = _tensor_type("FloatTensor", torch.float32)
HalfTensor = _tensor_type("HalfTensor", torch.float16)
IntTensor = _tensor_type("IntTensor", torch.int32)
LongTensor = _tensor_type("LongTensor", torch.int64)
ShortTensor = _tensor_type("ShortTensor", torch.int16)
