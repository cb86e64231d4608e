"""`torch.rbln.FloatStorage` and the other legacy typed storages, as torch.cuda's.

torch.storage's `_LegacyStorage` does the work: a subclass whose `__module__` is `torch.rbln` makes its
storages on rbln (`torch.storage._get_device_from_module` knows the PrivateUse1 name), `isinstance` checks
device and dtype, and `TypedStorage.type()` names these classes for rbln storages. As torch.cuda's, the
classes construct `TypedStorage`s (deprecated in torch: `torch.UntypedStorage(n, device="rbln")` and
tensors are the current API) and refuse what needs host memory of their own (`from_buffer`, shared memory).
"""
from __future__ import annotations

import torch
from torch._utils import classproperty
from torch.storage import _LegacyStorage, _warn_typed_storage_removal

__all__ = ["BFloat16Storage", "BoolStorage", "ByteStorage", "CharStorage", "ComplexDoubleStorage",
           "ComplexFloatStorage", "DoubleStorage", "FloatStorage", "HalfStorage", "IntStorage", "LongStorage",
           "ShortStorage"]


class _RBLNLegacyStorage(_LegacyStorage):
    """torch.cuda's `_CudaLegacyStorage`, for rbln: what a storage in device memory cannot be made from."""

    @classmethod
    def from_buffer(cls, *args, **kwargs):
        _warn_typed_storage_removal()
        raise RuntimeError("from_buffer: Not available for RBLN storage")

    @classmethod
    def _new_with_weak_ptr(cls, *args, **kwargs):
        raise RuntimeError("_new_with_weak_ptr: Not available for RBLN storage")

    @classmethod
    def _new_shared_filename(cls, manager, obj, size, *, device=None, dtype=None):
        raise RuntimeError("_new_shared_filename: Not available for RBLN storage")


def _storage_type(name: str, dtype: torch.dtype) -> type:
    def dtype_(cls):
        _warn_typed_storage_removal()
        return cls._dtype

    namespace = {"__module__": "torch.rbln", "__qualname__": name,
                 "dtype": classproperty(dtype_), "_dtype": classproperty(lambda cls: dtype)}
    return type(_RBLNLegacyStorage)(name, (_RBLNLegacyStorage,), namespace)


BFloat16Storage = _storage_type("BFloat16Storage", torch.bfloat16)
BoolStorage = _storage_type("BoolStorage", torch.bool)
ByteStorage = _storage_type("ByteStorage", torch.uint8)
CharStorage = _storage_type("CharStorage", torch.int8)
ComplexDoubleStorage = _storage_type("ComplexDoubleStorage", torch.cdouble)
ComplexFloatStorage = _storage_type("ComplexFloatStorage", torch.cfloat)
DoubleStorage = _storage_type("DoubleStorage", torch.float64)
FloatStorage = _storage_type("FloatStorage", torch.float32)
HalfStorage = _storage_type("HalfStorage", torch.float16)
IntStorage = _storage_type("IntStorage", torch.int32)
LongStorage = _storage_type("LongStorage", torch.int64)
ShortStorage = _storage_type("ShortStorage", torch.int16)
