"""Tutorial 05 (kernels_dsl/tutorials/layernorm.py) against float64 reference formulas.

Inputs are fresh random data every run (the seed is printed and shown on failure)."""

import ml_dtypes
import numpy as np
import pytest

from kernels_dsl.tutorials.layernorm import layer_norm_bwd, layer_norm_fwd

EPS = 1e-5
U32 = 2.0**-24
# Every output is computed in f32 from inputs that are exact in f32. Each output is
# checked elementwise against |err| <= u_out * |ref| + n * U32 * scale, where u_out is
# the unit roundoff of the output's dtype (0 for f32: its rounding is part of n), scale
# is the sum of the magnitudes of the terms the output is built from, and n bounds the
# number of f32 roundings along the way: the row sums behind mean, var, c1 and c2 have
# N terms (plus a few roundings), and dw/db add M rows of those (atomics, then the
# dwdb reduction).
U_OUT = {np.float32: 0.0, ml_dtypes.bfloat16: 2.0**-8, np.float16: 2.0**-11}
SHAPES = [(13, 100), (64, 1024), (128, 257), (1, 7), (40, 33)]


def _inputs(rng, M, N, dtype):
    # Non-zero mean and non-unit spread so that centring and scaling both matter.
    x = (rng.standard_normal((M, N)) * 2.5 + 1.5).astype(dtype)
    w = (rng.standard_normal(N) * 0.5 + 1.0).astype(dtype)
    b = rng.standard_normal(N).astype(dtype)
    dy = rng.standard_normal((M, N)).astype(dtype)
    return x, w, b, dy


def _f64(*arrays):
    return [a.astype(np.float64) for a in arrays]


def _normalize(x):
    """mean, rstd and xhat = (x - mean) * rstd of each row, in float64."""
    x = x.astype(np.float64)
    mean = x.mean(axis=1)
    xc = x - mean[:, None]
    rstd = 1 / np.sqrt((xc * xc).mean(axis=1) + EPS)
    return mean, rstd, xc * rstd[:, None]


def _forward_reference(x, w, b):
    mean, rstd, xhat = _normalize(x)
    w, b = _f64(w, b)
    return xhat * w + b, mean, rstd, xhat


def _backward_reference(dy, x, w):
    """dL/dx, dL/dw, dL/db of y = xhat * w + b, xhat = (x - mean) * rstd, derived by hand:
    dx = rstd * (w dy - mean(w dy) - xhat * mean(xhat * w dy)) row-wise."""
    _, rstd, xhat = _normalize(x)
    dy, w = _f64(dy, w)
    wdy = w * dy
    dx = rstd[:, None] * (wdy - wdy.mean(axis=1, keepdims=True) - xhat * (xhat * wdy).mean(axis=1, keepdims=True))
    return dx, (dy * xhat).sum(axis=0), dy.sum(axis=0)


def _check(name, got, ref, scale, n, u_out):
    tol = u_out * np.abs(ref) + n * U32 * scale
    err = np.abs(got.astype(np.float64) - ref)
    bad = ~(err <= tol)  # NaN (an unwritten element) counts as bad
    assert not bad.any(), (
        f"{name}: {bad.sum()} of {bad.size} elements out of tolerance; first at {np.argwhere(bad)[0]}: "
        f"got {got[bad][0]}, want {ref[bad][0]}, |err| {err[bad][0]:.3g} > tol {tol[bad][0]:.3g}"
    )


def _check_forward(x, w, b, y, mean, rstd):
    N = x.shape[1]
    y_ref, mean_ref, rstd_ref, xhat = _forward_reference(x, w, b)
    n = N + 8
    _check("mean", mean, mean_ref, np.abs(x.astype(np.float64)).mean(axis=1), n, 0.0)
    _check("rstd", rstd, rstd_ref, rstd_ref, n, 0.0)
    # y = xhat * w + b: xhat carries rstd's relative error and mean's error times rstd,
    # which is O(n u) for these inputs (their mean is comparable to their spread): |xhat| + 1.
    aw, ab = np.abs(w.astype(np.float64)), np.abs(b.astype(np.float64))
    _check("y", y, y_ref, aw * (np.abs(xhat) + 1) + ab, n, U_OUT[y.dtype.type])


def _check_backward(dy, x, w, dx, dw, db):
    M, N = x.shape
    dx_ref, dw_ref, db_ref = _backward_reference(dy, x, w)
    _, rstd, xhat = _normalize(x)
    ady, axhat = np.abs(dy.astype(np.float64)), np.abs(xhat) + 1  # + 1: as for y above
    awdy = np.abs(w.astype(np.float64)) * ady
    # dx = rstd * (wdy - c2 - xhat * c1), with c1, c2 row means of N terms.
    dx_scale = rstd[:, None] * (
        awdy + awdy.mean(axis=1, keepdims=True) + axhat * (axhat * awdy).mean(axis=1, keepdims=True)
    )
    _check("dx", dx, dx_ref, dx_scale, N + 16, U_OUT[dx.dtype.type])
    # dw and db sum M rows of f32 partials; dw's partials carry xhat's error.
    _check("dw", dw, dw_ref, (ady * axhat).sum(axis=0), M + N + 16, U_OUT[dw.dtype.type])
    _check("db", db, db_ref, ady.sum(axis=0), M + 16, U_OUT[db.dtype.type])


def _fwd(x, w, b, **kw):
    M, N = x.shape
    out = (np.full((M, N), np.nan, x.dtype), np.full(M, np.nan, np.float32), np.full(M, np.nan, np.float32))
    res = layer_norm_fwd(x, w, b, EPS, out=out, **kw)
    assert all(r is o for r, o in zip(res, out))
    return res


def _bwd(dy, x, w, mean, rstd, **kw):
    M, N = x.shape
    out = (np.full((M, N), np.nan, x.dtype), np.full(N, np.nan, w.dtype), np.full(N, np.nan, w.dtype))
    res = layer_norm_bwd(dy, x, w, mean, rstd, out=out, **kw)
    assert all(r is o for r, o in zip(res, out))
    return res


DTYPES = [np.float32, ml_dtypes.bfloat16, np.float16]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("M,N", SHAPES, ids=str)
def test_layer_norm_forward(rng, M, N, dtype):
    x, w, b, _ = _inputs(rng, M, N, dtype)
    _check_forward(x, w, b, *_fwd(x, w, b))


@pytest.mark.parametrize("M,N,block", [(13, 100, 32), (8, 1000, 128), (5, 257, 256)], ids=str)
def test_layer_norm_forward_chunked_rows(rng, M, N, block):
    # BLOCK_SIZE < N: each program walks its row in chunks, with a ragged last chunk.
    x, w, b, _ = _inputs(rng, M, N, np.float32)
    _check_forward(x, w, b, *_fwd(x, w, b, BLOCK_SIZE=block))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("M,N", SHAPES, ids=str)
@pytest.mark.parametrize("group", [4, None], ids=["group4", "group_default"])
def test_layer_norm_backward(rng, M, N, dtype, group):
    # group=4: many rows share each row of the partial dw/db buffers (atomic accumulation);
    # the default (256 for these N) gives most rows a buffer row of their own.
    x, w, b, dy = _inputs(rng, M, N, dtype)
    _, mean, rstd = _fwd(x, w, b)
    _check_backward(dy, x, w, *_bwd(dy, x, w, mean, rstd, GROUP_SIZE_M=group))


def test_layer_norm_backward_reduction_tiles(rng):
    # Small dwdb tiles: several programs over N and several steps over the buffer rows.
    x, w, b, dy = _inputs(rng, 50, 300, np.float32)
    _, mean, rstd = _fwd(x, w, b)
    _check_backward(dy, x, w, *_bwd(dy, x, w, mean, rstd, GROUP_SIZE_M=20, BLOCK_SIZE_M=8, BLOCK_SIZE_N=64))


def test_layer_norm_leading_dims_and_new_arrays(rng):
    # A [2, 3, N] input is normalized over its last axis; outputs are new arrays.
    x, w, b, dy = _inputs(rng, 6, 48, ml_dtypes.bfloat16)
    x3, dy3 = x.reshape(2, 3, 48), dy.reshape(2, 3, 48)
    y, mean, rstd = layer_norm_fwd(x3, w, b, EPS)
    assert y.shape == (2, 3, 48) and mean.shape == rstd.shape == (2, 3)
    assert y.dtype == x.dtype and mean.dtype == rstd.dtype == np.float32
    _check_forward(x, w, b, y.reshape(6, 48), mean.reshape(6), rstd.reshape(6))
    dx, dw, db = layer_norm_bwd(dy3, x3, w, mean, rstd)
    assert dx.shape == (2, 3, 48) and dw.shape == db.shape == (48,) and dw.dtype == db.dtype == w.dtype
    _check_backward(dy, x, w, dx.reshape(6, 48), dw, db)


def test_layer_norm_rejects_bad_arguments():
    x = np.empty((4, 8), np.float32)
    with pytest.raises(ValueError, match="w and b"):
        layer_norm_fwd(x, np.empty(7, np.float32), np.empty(8, np.float32))
    with pytest.raises(ValueError, match="dy must match x"):
        layer_norm_bwd(np.empty((4, 8), np.float16), x, np.empty(8, np.float32), np.empty(4), np.empty(4))
    with pytest.raises(ValueError, match="up to 64 KB"):
        big = np.empty((1, 20000), np.float32)
        layer_norm_bwd(big, big, np.empty(20000, np.float32), np.empty(1), np.empty(1))
