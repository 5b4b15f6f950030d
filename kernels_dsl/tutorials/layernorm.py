"""Tutorial 05: layer normalization, forward and backward.

Forward, one program per row: y = (x - mean) * rstd * w + b, with mean and
rstd = 1 / sqrt(var + eps) stored for the backward pass.

Backward: one program per row computes dx and that row's contributions
dy * xhat (to dw) and dy (to db). Summing those over all M rows in one buffer
would serialize every program on the same N addresses, so, as in Triton's
tutorial, row i adds into row (i % GROUP_SIZE_M) of a [GROUP_SIZE_M, N] fp32
buffer, and `_layer_norm_bwd_dwdb` reduces the GROUP_SIZE_M rows. Triton's
tutorial guards each buffer row with a spin lock (atomic_cas); here the rows are
accumulated with tl.atomic_add, which needs no lock (the lock pattern itself is
tests/atomic_kernels.py's spin_lock).
"""

import numpy as np
import tilefuse as tf
import tilefuse.language as tl


@tf.jit
def _layer_norm_fwd_fused(X, Y, W, B, Mean, Rstd, stride, N, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    Y += row * stride
    X += row * stride
    # Two passes over the row (mean, then variance of x - mean) in BLOCK_SIZE chunks:
    # more stable than E[x^2] - E[x]^2 and works for rows longer than one tile.
    _mean = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        a = tl.load(X + cols, mask=cols < N, other=0.0).to(tl.float32)
        _mean += a
    mean = tl.sum(_mean, axis=0) / N
    _var = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        x = tl.load(X + cols, mask=cols < N, other=0.0).to(tl.float32)
        # Padding lanes would contribute mean^2 each; zero them.
        x = tl.where(cols < N, x - mean, 0.0)
        _var += x * x
    var = tl.sum(_var, axis=0) / N
    rstd = 1 / tl.sqrt(var + eps)
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        mask = cols < N
        w = tl.load(W + cols, mask=mask)
        b = tl.load(B + cols, mask=mask)
        x = tl.load(X + cols, mask=mask, other=0.0).to(tl.float32)
        x_hat = (x - mean) * rstd
        y = x_hat * w + b
        tl.store(Y + cols, y, mask=mask)


@tf.jit
def _layer_norm_bwd_dx_fused(
    DX, DY, DW, DB, X, W, Mean, Rstd, stride, N, GROUP_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr
):
    # The whole row is one tile (BLOCK_SIZE_N >= N): dx needs two row-wide sums.
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE_N)
    mask = cols < N
    X += row * stride
    DY += row * stride
    DX += row * stride
    group_row = row % GROUP_SIZE_M
    DW = DW + group_row * N + cols
    DB = DB + group_row * N + cols
    x = tl.load(X + cols, mask=mask, other=0).to(tl.float32)
    dy = tl.load(DY + cols, mask=mask, other=0).to(tl.float32)
    w = tl.load(W + cols, mask=mask).to(tl.float32)
    mean = tl.load(Mean + row)
    rstd = tl.load(Rstd + row)
    # dx = rstd * (w*dy - (xhat * mean(xhat * w*dy) + mean(w*dy))); padding lanes must add 0 to the means.
    xhat = (x - mean) * rstd
    wdy = w * dy
    xhat = tl.where(mask, xhat, 0.0)
    wdy = tl.where(mask, wdy, 0.0)
    c1 = tl.sum(xhat * wdy, axis=0) / N
    c2 = tl.sum(wdy, axis=0) / N
    dx = (wdy - (xhat * c1 + c2)) * rstd
    tl.store(DX + cols, dx, mask=mask)
    # Partial dw/db stay fp32: the group buffers are fp32 so that the atomics and the
    # following reduction do not round at each step.
    # Relaxed: nothing in this kernel reads the sums, so Triton's default acq_rel fences buy nothing.
    tl.atomic_add(DW, dy * xhat, mask=mask, sem="relaxed")
    tl.atomic_add(DB, dy, mask=mask, sem="relaxed")


@tf.jit
def _layer_norm_bwd_dwdb(DW, DB, FINAL_DW, FINAL_DB, M, N, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr):
    # One program per BLOCK_SIZE_N columns sums the M rows of the partial buffers.
    pid = tl.program_id(0)
    cols = pid * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    dw = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    db = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for i in range(0, M, BLOCK_SIZE_M):
        rows = i + tl.arange(0, BLOCK_SIZE_M)
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        offs = rows[:, None] * N + cols[None, :]
        dw += tl.load(DW + offs, mask=mask, other=0.0)
        db += tl.load(DB + offs, mask=mask, other=0.0)
    sum_dw = tl.sum(dw, axis=0)
    sum_db = tl.sum(db, axis=0)
    tl.store(FINAL_DW + cols, sum_dw, mask=cols < N)
    tl.store(FINAL_DB + cols, sum_db, mask=cols < N)


def _rows(x: np.ndarray) -> np.ndarray:
    """x as a C-contiguous [M, N] array (leading dimensions flattened)."""
    return np.ascontiguousarray(x).reshape(-1, x.shape[-1])


def _check_out(name: str, a: np.ndarray, shape, dtype) -> np.ndarray:
    if a.shape != tuple(shape) or a.dtype != dtype or not a.flags.c_contiguous:
        raise ValueError(f"{name} must be a contiguous {tuple(shape)} {np.dtype(dtype)} array, got {a.shape} {a.dtype}")
    return a


def layer_norm_fwd(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray,
    eps: float = 1e-5,
    BLOCK_SIZE: int | None = None,
    out: tuple | None = None,
):
    """(y, mean, rstd) normalizing over the last axis of x: y has x's dtype and shape, mean
    and rstd are fp32 of shape x.shape[:-1]. They are new arrays, or written into
    out = (y, mean, rstd). BLOCK_SIZE defaults to the whole row (a power of two, at most
    64 KB); a smaller one makes each program loop over the row in chunks."""
    x2 = _rows(x)
    M, N = x2.shape
    if w.shape != (N,) or b.shape != (N,):
        raise ValueError(f"w and b must have shape ({N},), got {w.shape} and {b.shape}")
    w, b = np.ascontiguousarray(w), np.ascontiguousarray(b)
    if out is None:
        out = (np.empty(x.shape, x.dtype), np.empty(x.shape[:-1], np.float32), np.empty(x.shape[:-1], np.float32))
    y = _check_out("y", out[0], x.shape, x.dtype)
    mean = _check_out("mean", out[1], x.shape[:-1], np.float32)
    rstd = _check_out("rstd", out[2], x.shape[:-1], np.float32)
    if BLOCK_SIZE is None:
        BLOCK_SIZE = min(65536 // x2.itemsize, tf.next_power_of_2(N))
    _layer_norm_fwd_fused[(M,)](x2, y, w, b, mean, rstd, N, N, eps, BLOCK_SIZE=BLOCK_SIZE)
    return y, mean, rstd


def layer_norm_bwd(
    dy: np.ndarray,
    x: np.ndarray,
    w: np.ndarray,
    mean: np.ndarray,
    rstd: np.ndarray,
    GROUP_SIZE_M: int | None = None,
    BLOCK_SIZE_M: int = 32,
    BLOCK_SIZE_N: int = 128,
    out: tuple | None = None,
):
    """(dx, dw, db) for y = layer_norm(x, w, b) given dy = dL/dy and the forward's mean and
    rstd: dx has x's dtype and shape, dw and db have w's dtype. They are new arrays, or
    written into out = (dx, dw, db)."""
    x2, dy2 = _rows(x), _rows(dy)
    M, N = x2.shape
    if dy.shape != x.shape or dy.dtype != x.dtype:
        raise ValueError(f"dy must match x ({x.shape} {x.dtype}), got {dy.shape} {dy.dtype}")
    if tf.next_power_of_2(N) * x2.itemsize > 65536:
        raise ValueError("this layer norm backward keeps a row in one tile and supports rows up to 64 KB")
    if GROUP_SIZE_M is None:
        # Triton's choice: more buffer rows (less contention) for narrower rows.
        GROUP_SIZE_M = 64 if N > 8192 else 96 if N > 4096 else 128 if N > 1024 else 256
    if out is None:
        out = (np.empty(x.shape, x.dtype), np.empty(w.shape, w.dtype), np.empty(w.shape, w.dtype))
    dx = _check_out("dx", out[0], x.shape, x.dtype)
    dw = _check_out("dw", out[1], w.shape, w.dtype)
    db = _check_out("db", out[2], w.shape, w.dtype)
    # Zeroed because the dx kernel accumulates into them.
    _dw = np.zeros((GROUP_SIZE_M, N), dtype=np.float32)
    _db = np.zeros((GROUP_SIZE_M, N), dtype=np.float32)
    w = np.ascontiguousarray(w)
    mean = np.ascontiguousarray(mean, dtype=np.float32)
    rstd = np.ascontiguousarray(rstd, dtype=np.float32)
    _layer_norm_bwd_dx_fused[(M,)](
        dx, dy2, _dw, _db, x2, w, mean, rstd, N, N, GROUP_SIZE_M=GROUP_SIZE_M, BLOCK_SIZE_N=tf.next_power_of_2(N)
    )

    def grid(meta):
        return (tf.cdiv(N, meta["BLOCK_SIZE_N"]),)

    # Buffer rows past M were never written; reduce only the ones that were.
    _layer_norm_bwd_dwdb[grid](
        _dw, _db, dw, db, min(GROUP_SIZE_M, M), N, BLOCK_SIZE_M=BLOCK_SIZE_M, BLOCK_SIZE_N=BLOCK_SIZE_N
    )
    return dx, dw, db
