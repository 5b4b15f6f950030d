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


def check(fn: str, name: str, a, kinds, ndim: int, like=None, company=("the other operands", "are")) -> str:
    """Checks argument `name` of `fn`, in this order: an array of the library (kind_of), of
    `like`'s kind of array and device (`company` names what `like` stands for, with its
    verb), of one of `kinds`, `ndim`-D, contiguous. Returns its kind."""
    try:
        kind = kind_of(name, a)
    except TypeError as e:
        raise TypeError(f"{fn}: {name} must be {' or '.join(kinds)} ({e})") from None
    if like is not None:
        what, verb = company
        if isinstance(a, np.ndarray) != isinstance(like, np.ndarray):
            raise TypeError(f"{fn}: {name} must be a {type(like).__name__} like {what}, got {type(a).__name__}")
        if is_torch_tensor(a) and a.device != like.device:
            raise ValueError(f"{fn}: {name} is on {a.device} but {what} {verb} on {like.device}")
    if kind not in kinds:
        raise TypeError(f"{fn}: {name} must be {' or '.join(kinds)}, got {kind}")
    if len(a.shape) != ndim:
        raise ValueError(f"{fn}: {name} must be {ndim}-D, got shape {tuple(a.shape)}")
    if not (a.flags.c_contiguous if isinstance(a, np.ndarray) else a.is_contiguous()):
        raise ValueError(f"{fn}: {name} must be contiguous")
    return kind


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
