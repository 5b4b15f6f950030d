"""float64 references of the grouped GEMMs (SPEC-moe.md §7) and their checks, shared by the
interpreter tests and the GPU tests: per group numpy matmuls on the float64 values of the
bf16 inputs, the groups taken from the splits clamped as the kernels document (a negative
size is 0, the groups end at row R)."""

import ml_dtypes
import numpy as np

from tests.python.moe.errors import GEMM_RMS_BOUNDS, U32, assert_error_rms, assert_within

BF16 = ml_dtypes.bfloat16


def offsets(splits, rows):
    """Row offsets [G + 1] of the groups, clamped."""
    ends = np.minimum(np.cumsum(np.maximum(np.asarray(splits, np.int64), 0)), rows)
    return np.concatenate([[0], ends])


def forward(x, w, splits, bias=None, scale=None):
    """(y, bound) over the rows of the groups: y_g = x_g w_gᵀ (+ b_g (· s)); bound[r, n] =
    Σ_k |x w| (+ |b s|), the magnitude fp32 accumulation errors scale with."""
    x, w = x.astype(np.float64), np.asarray(w).astype(np.float64)
    off = offsets(splits, x.shape[0])
    y, mag = np.zeros((off[-1], w.shape[1])), np.zeros((off[-1], w.shape[1]))
    for g in range(len(off) - 1):
        a, e = off[g], off[g + 1]
        y[a:e], mag[a:e] = x[a:e] @ w[g].T, np.abs(x[a:e]) @ np.abs(w[g]).T
        if bias is not None:
            b = bias[g].astype(np.float64)[None, :] * (1.0 if scale is None else scale[a:e, None].astype(np.float64))
            y[a:e] += b
            mag[a:e] += np.abs(b)
    return y, mag


def dgrad(dy, w, splits):
    dy, w = dy.astype(np.float64), np.asarray(w).astype(np.float64)
    off = offsets(splits, dy.shape[0])
    dx, mag = np.zeros((off[-1], w.shape[2])), np.zeros((off[-1], w.shape[2]))
    for g in range(len(off) - 1):
        a, e = off[g], off[g + 1]
        dx[a:e], mag[a:e] = dy[a:e] @ w[g], np.abs(dy[a:e]) @ np.abs(w[g])
    return dx, mag


def wgrad(dy, x, splits):
    dy, x = dy.astype(np.float64), x.astype(np.float64)
    off = offsets(splits, dy.shape[0])
    g = len(off) - 1
    dw, mag = np.zeros((g, dy.shape[1], x.shape[1])), np.zeros((g, dy.shape[1], x.shape[1]))
    for i in range(g):
        a, e = off[i], off[i + 1]
        dw[i], mag[i] = dy[a:e].T @ x[a:e], np.abs(dy[a:e]).T @ np.abs(x[a:e])
    return dw, mag


def check(got, ref, mag, terms, out_dtype, what, recipe="bf16", block_error=0.0):
    """One rounding to the output dtype plus fp32 accumulation over `terms` products
    (|error| <= terms · 2^-24 · Σ|products|, the classical bound) plus `block_error` ·
    Σ|products| (the GPU's fp8 blocks), elementwise; and the error RMS of the recipe's
    bound (errors.GEMM_RMS_BOUNDS), the max error within 16 times that."""
    got = np.asarray(got)
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != {ref.shape}"
    if not ref.size:
        return
    assert_within(got, ref, ulps=1.0, floor=((terms + 2) * U32 + block_error) * mag, what=what)
    if np.any(ref):
        bound = GEMM_RMS_BOUNDS[(recipe, out_dtype)]
        assert_error_rms(got, ref, rms_bound=bound, max_bound=16 * bound, what=what)
