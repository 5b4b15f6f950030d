"""Kernels of the tl.cat and argmax/argmin tie_break_left tests (interpreter:
tests/python/language/test_cat_ties.py; GPU: tests/gpu/test_language_extras_gpu.py)."""

import numpy as np
import tilefuse as tf
import tilefuse.language as tl


@tf.jit
def cat_kernel(x_ptr, y_ptr, o_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(o_ptr + tl.arange(0, 2 * N), tl.cat(tl.load(x_ptr + offs), tl.load(y_ptr + offs), can_reorder=True))


@tf.jit
def arg_kernel(
    x_ptr, o_ptr, R: tl.constexpr, C: tl.constexpr, AXIS: tl.constexpr, LEFT: tl.constexpr, MIN: tl.constexpr
):
    x = tl.load(x_ptr + tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :])
    if MIN:
        i = tl.argmin(x, AXIS, tie_break_left=LEFT, keep_dims=True)
        v, j = tl.min(x, AXIS, return_indices=True, return_indices_tie_break_left=LEFT, keep_dims=True)
    else:
        i = x.argmax(AXIS, tie_break_left=LEFT, keep_dims=True)
        v, j = x.max(AXIS, return_indices=True, return_indices_tie_break_left=LEFT, keep_dims=True)
    n = R * C
    if AXIS is None:
        tl.store(o_ptr + tl.arange(0, 1)[:, None], i)
        tl.store(o_ptr + n + tl.arange(0, 1)[:, None], j)
    elif AXIS == 0:
        tl.store(o_ptr + tl.arange(0, C)[None, :], i)
        tl.store(o_ptr + n + tl.arange(0, C)[None, :], j)
    else:
        tl.store(o_ptr + tl.arange(0, R)[:, None], i)
        tl.store(o_ptr + n + tl.arange(0, R)[:, None], j)


def arg_reference(x, axis, left, is_min):
    """The first (left) or last index of the min / max along axis (None: flattened)."""
    a = x.ravel() if axis is None else x
    ax = 0 if axis is None else axis
    f = np.argmin if is_min else np.argmax
    if left:
        return f(a, axis=ax)
    return a.shape[ax] - 1 - f(np.flip(a, ax), axis=ax)


def tie_heavy(rng, dtype, shape):
    """Values from a handful of levels, so most lines hold ties of their extreme."""
    levels = rng.integers(0, 4, shape)
    d = np.dtype(dtype)
    if d.kind == "f":
        return (levels.astype(np.float64) * 0.5 - 1).astype(d)
    if d.kind == "u":
        return (levels * 50).astype(d)
    return (levels * 50 - 100).astype(d)
