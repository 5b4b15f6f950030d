"""The two array kinds of the host API: numpy (interpreter) and CUDA torch tensors (GPU).
Allocation, int8 views and strides, nothing that touches the values."""

from __future__ import annotations

import sys

import ml_dtypes
import numpy as np

from ..arrays import is_torch_tensor

# Element kinds the library allocates, by numpy dtype and torch dtype name.
_NUMPY = {
    "float32": np.dtype(np.float32),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float16": np.dtype(np.float16),
    "int8": np.dtype(np.int8),
    "int32": np.dtype(np.int32),
    "e4m3": np.dtype(ml_dtypes.float8_e4m3fn),
    "e5m2": np.dtype(ml_dtypes.float8_e5m2),
    "e8m0": np.dtype(ml_dtypes.float8_e8m0fnu),
}
_TORCH = {
    "float32": "float32",
    "bfloat16": "bfloat16",
    "float16": "float16",
    "int8": "int8",
    "int32": "int32",
    "e4m3": "float8_e4m3fn",
    "e5m2": "float8_e5m2",
    "e8m0": "float8_e8m0fnu",
}


def kind_of(name: str, a) -> str:
    """The element kind of array `a` (argument `name`); TypeError for anything but a numpy
    array or a CUDA torch tensor of a kind the library knows."""
    if isinstance(a, np.ndarray):
        for k, d in _NUMPY.items():
            if a.dtype == d:
                return k
        raise TypeError(f"{name}: numpy arrays of dtype {a.dtype} are not supported")
    if is_torch_tensor(a):
        if a.device.type != "cuda":
            raise TypeError(f"{name}: torch tensors must be on a CUDA device (numpy arrays run on the interpreter)")
        for k, t in _TORCH.items():
            if str(a.dtype) == f"torch.{t}":
                return k
        raise TypeError(f"{name}: tensors of dtype {a.dtype} are not supported")
    raise TypeError(f"{name}: expected a numpy array or a CUDA torch tensor, got {type(a).__name__}")


def empty(like, shape, kind: str):
    """An uninitialized array of `kind` beside `like` (same library and device)."""
    if isinstance(like, np.ndarray):
        return np.empty(shape, _NUMPY[kind])
    torch = sys.modules["torch"]  # imported by whoever made `like`
    return torch.empty(shape, dtype=getattr(torch, _TORCH[kind]), device=like.device)


def as_int8(a):
    """The same memory as int8 (codes of 8-bit formats)."""
    return a.view(np.int8) if isinstance(a, np.ndarray) else a.view(sys.modules["torch"].int8)


def strides(a) -> tuple[int, ...]:
    """Strides in elements."""
    if isinstance(a, np.ndarray):
        return tuple(s // a.itemsize for s in a.strides)
    return tuple(a.stride())
