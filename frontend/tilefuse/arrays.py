"""Array arguments (numpy, torch, DLPack producers, __cuda_array_interface__): their
tile-IR dtype and address. Shared by jit (specialization, the interpreter) and gpu
(launch), so that neither imports the other for it."""

from __future__ import annotations

import numpy as np

from . import _C
from .errors import LaunchError

_D = _C.ir.DType

try:
    import ml_dtypes as _mld
except ImportError:  # ml_dtypes is a dependency; without it only numpy's own dtypes work
    _mld = None

_NUMPY_DTYPES = {
    np.dtype(np.bool_): _D.i1,
    np.dtype(np.int8): _D.i8,
    np.dtype(np.int16): _D.i16,
    np.dtype(np.int32): _D.i32,
    np.dtype(np.int64): _D.i64,
    np.dtype(np.uint8): _D.u8,
    np.dtype(np.uint16): _D.u16,
    np.dtype(np.uint32): _D.u32,
    np.dtype(np.uint64): _D.u64,
    np.dtype(np.float16): _D.f16,
    np.dtype(np.float32): _D.f32,
    np.dtype(np.float64): _D.f64,
}
if _mld is not None:
    _NUMPY_DTYPES.update(
        {
            np.dtype(_mld.bfloat16): _D.bf16,
            np.dtype(_mld.float8_e4m3fn): _D.f8e4m3,
            np.dtype(_mld.float8_e5m2): _D.f8e5m2,
            np.dtype(_mld.float8_e8m0fnu): _D.e8m0,
        }
    )
_TORCH_DTYPES = {
    "torch.bool": _D.i1,
    "torch.int8": _D.i8,
    "torch.int16": _D.i16,
    "torch.int32": _D.i32,
    "torch.int64": _D.i64,
    "torch.uint8": _D.u8,
    "torch.uint16": _D.u16,
    "torch.uint32": _D.u32,
    "torch.uint64": _D.u64,
    "torch.float16": _D.f16,
    "torch.bfloat16": _D.bf16,
    "torch.float32": _D.f32,
    "torch.float64": _D.f64,
    "torch.float8_e4m3fn": _D.f8e4m3,
    "torch.float8_e5m2": _D.f8e5m2,
    "torch.float8_e8m0fnu": _D.e8m0,
}
_CAI_DTYPES = {
    "|b1": _D.i1,
    "|i1": _D.i8,
    "<i2": _D.i16,
    "<i4": _D.i32,
    "<i8": _D.i64,
    "|u1": _D.u8,
    "<u2": _D.u16,
    "<u4": _D.u32,
    "<u8": _D.u64,
    "<f2": _D.f16,
    "<f4": _D.f32,
    "<f8": _D.f64,
}


def is_torch_tensor(x) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "data_ptr") and hasattr(x, "dtype")


def is_dlpack(v) -> bool:
    """A DLPack producer other than numpy and torch; __cuda_array_interface__ wins when both exist."""
    # torch first: its __cuda_array_interface__ raises KeyError for dtypes like float8.
    if isinstance(v, np.ndarray) or is_torch_tensor(v):
        return False
    return hasattr(v, "__dlpack__") and not hasattr(v, "__cuda_array_interface__")


class DLPackArg:
    """What a `__dlpack__` producer (JAX, CuPy, ...) describes, read from a fresh capsule."""

    _DTYPES = {
        (0, 8): _D.i8,
        (0, 16): _D.i16,
        (0, 32): _D.i32,
        (0, 64): _D.i64,
        (1, 8): _D.u8,
        (1, 16): _D.u16,
        (1, 32): _D.u32,
        (1, 64): _D.u64,
        (2, 16): _D.f16,
        (2, 32): _D.f32,
        (2, 64): _D.f64,
        (4, 16): _D.bf16,
        (6, 8): _D.i1,
    }

    def __init__(self, name, v):
        try:
            capsule = v.__dlpack__()
        except Exception as e:
            raise LaunchError(f"argument '{name}': its __dlpack__() raised {type(e).__name__}: {e}") from None
        if type(capsule).__name__ != "PyCapsule":
            raise LaunchError(
                f"argument '{name}': __dlpack__() returned {type(capsule).__name__}, not a DLPack capsule"
            )
        try:
            first, low, nbytes, dev_type, dev_id, code, bits, lanes = _C.dlpack.describe(capsule)
        except ValueError as e:
            raise LaunchError(f"argument '{name}': {e}") from None
        d = self._DTYPES.get((code, bits))
        if d is None or lanes != 1:
            raise LaunchError(f"argument '{name}': DLPack dtype code {code}, {bits} bits x{lanes} is not supported")
        if dev_type not in (1, 2, 3):
            raise LaunchError(f"argument '{name}': DLPack device type {dev_type} is neither CPU nor CUDA")
        self.ptr, self.low, self.nbytes, self.dtype = first, low, nbytes, d
        self.on_gpu, self.device = dev_type == 2, dev_id


def array_arg(name, v):
    """(dtype, address of the first element) of an array argument; None for anything else.
    Raises LaunchError for arrays of dtypes tilefuse has no type for."""
    if isinstance(v, np.ndarray):
        d = _NUMPY_DTYPES.get(v.dtype)
        if d is None:
            raise LaunchError(f"argument '{name}': arrays of dtype {v.dtype} are not supported")
        return d, v.ctypes.data
    if is_torch_tensor(v):
        d = _TORCH_DTYPES.get(str(v.dtype))
        if d is None:
            raise LaunchError(f"argument '{name}': tensors of dtype {v.dtype} are not supported")
        return d, v.data_ptr()
    if is_dlpack(v):
        info = DLPackArg(name, v)
        return info.dtype, info.ptr
    if hasattr(v, "__cuda_array_interface__"):
        cai = v.__cuda_array_interface__
        d = _CAI_DTYPES.get(cai["typestr"])
        if d is None:
            raise LaunchError(f"argument '{name}': __cuda_array_interface__ typestr {cai['typestr']} is not supported")
        return d, cai["data"][0]
    return None
