"""The small kernels of the grouped MLP's host API (frontend/tilefuse/moe/mlp.py) around
the GEMMs, activations and quantizers: a cast, the per-group padded layout of the
columnwise copies, the grouped bias gradients, the scaled bias's share of dprobs and the
split sizes' check. Every sum runs in a fixed
order (bitwise reproducible run to run)."""

from __future__ import annotations

import tilefuse as tf
import tilefuse.language as tl

from kernels_dsl.moe.grouped_gemm import _tile

SPLITS_OK, SPLITS_NEGATIVE, SPLITS_PAST_ROWS = 0, 1, 2


@tf.jit
def cast_rows(src_ptr, dst_ptr, R, N, BR: tl.constexpr, BN: tl.constexpr):
    # dst [R, N] = src [R, N] in dst's dtype (one rounding).
    rows = tl.program_id(0) * BR + tl.arange(0, BR)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    offs = rows.to(tl.int64)[:, None] * N + cols[None, :]
    m = (rows[:, None] < R) & (cols[None, :] < N)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=m).to(dst_ptr.dtype.element_ty), mask=m)


@tf.jit
def padded_sizes(offsets_ptr, sizes_ptr, G, BLOCK: tl.constexpr, BG: tl.constexpr):
    # sizes [G]: group g's rows (offsets [G + 1], clamped) rounded up to whole BLOCKs.
    g = tl.program_id(0) * BG + tl.arange(0, BG)
    rows = tl.load(offsets_ptr + g + 1, mask=g < G, other=0) - tl.load(offsets_ptr + g, mask=g < G, other=0)
    tl.store(sizes_ptr + g, (rows + BLOCK - 1) // BLOCK * BLOCK, mask=g < G)


@tf.jit
def scatter_groups(
    src_ptr, dst_ptr, offsets_ptr, padded_ptr, tile_start_ptr, tiles_ptr, G, N, BM: tl.constexpr, BN: tl.constexpr
):
    # dst[padded[g] + i] = src[offsets[g] + i] for the rows of a scheduled tile of group g
    # (dst's dtype): the groups of src [R, N] each from a row padded[g] of dst, whose other
    # rows the caller zeroed: the layout of a columnwise copy whose blocks never straddle
    # two groups (moe.fused's).
    valid, g, m0, end = _tile(offsets_ptr, tile_start_ptr, tiles_ptr, G)
    rows = m0 + tl.arange(0, BM)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    m = (rows < end)[:, None] & (cols[None, :] < N)
    v = tl.load(src_ptr + rows.to(tl.int64)[:, None] * N + cols[None, :], mask=m)
    to = tl.load(padded_ptr + g, mask=valid, other=0) - tl.load(offsets_ptr + g, mask=valid, other=0) + rows
    tl.store(dst_ptr + to.to(tl.int64)[:, None] * N + cols[None, :], v.to(dst_ptr.dtype.element_ty), mask=m)


@tf.jit
def grouped_bias_grad(dy_ptr, s_ptr, offsets_ptr, db_ptr, N, SCALED: tl.constexpr, BR: tl.constexpr, BN: tl.constexpr):
    # db [G, N]: db[g] = Σ over group g's rows of dy (· s_r when SCALED), fp32, the rows
    # in order BR at a time; program (column tile, group g). An empty group stores zeros.
    g = tl.program_id(1)
    cols = tl.program_id(0) * BN + tl.arange(0, BN)
    r0, r1 = tl.load(offsets_ptr + g), tl.load(offsets_ptr + g + 1)
    acc = tl.zeros((BN,), tl.float32)
    for r in range(r0, r1, BR):
        rows = r + tl.arange(0, BR)
        m = rows < r1
        v = tl.load(dy_ptr + rows.to(tl.int64)[:, None] * N + cols[None, :], mask=m[:, None] & (cols[None, :] < N))
        v = v.to(tl.float32)
        if SCALED:
            v = v * tl.load(s_ptr + rows, mask=m, other=0.0)[:, None]
        acc += tl.sum(tl.where(m[:, None], v, 0.0), axis=0)
    tl.store(db_ptr + g * N + cols, acc.to(db_ptr.dtype.element_ty), mask=cols < N)


@tf.jit
def scaled_bias_dprobs(
    dy_ptr, b_ptr, ds_ptr, offsets_ptr, tile_start_ptr, tiles_ptr, G, N, BM: tl.constexpr, BN: tl.constexpr
):
    # ds[r] += Σ_j dy[r, j]·b_g[j] for the rows r of a scheduled tile of group g (the scaled
    # bias b_g·s_r's share of dprobs), the columns in order BN at a time.
    valid, g, m0, end = _tile(offsets_ptr, tile_start_ptr, tiles_ptr, G)
    rows = m0 + tl.arange(0, BM)
    m = rows < end
    acc = tl.zeros((BM,), tl.float32)
    for c in range(0, tl.where(valid, N, 0), BN):
        cols = c + tl.arange(0, BN)
        v = tl.load(dy_ptr + rows.to(tl.int64)[:, None] * N + cols[None, :], mask=m[:, None] & (cols[None, :] < N))
        b = tl.load(b_ptr + g * N + cols, mask=cols < N, other=0.0)
        acc += tl.sum(tl.where(m[:, None], v.to(tl.float32) * b.to(tl.float32)[None, :], 0.0), axis=1)
    tl.store(ds_ptr + rows, tl.load(ds_ptr + rows, mask=m, other=0.0) + acc, mask=m)


@tf.jit
def check_splits(splits_ptr, flag_ptr, G, R, BG: tl.constexpr):
    # flag [1] = SPLITS_NEGATIVE if a size is negative, else SPLITS_PAST_ROWS if the sizes
    # sum past the R rows, else SPLITS_OK: the host reads it without a sync on the
    # interpreter and leaves it on the device on the GPU (the GEMMs clamp meanwhile).
    negative = tl.zeros((), tl.int32)
    total = tl.zeros((), tl.int64)
    for c in range(0, G, BG):
        g = c + tl.arange(0, BG)
        s = tl.load(splits_ptr + g, mask=g < G, other=0)
        negative = tl.maximum(negative, tl.max(tl.where(s < 0, 1, 0), axis=0))
        total += tl.sum(tl.maximum(s, 0).to(tl.int64), axis=0)
    past = tl.where(total > R, SPLITS_PAST_ROWS, SPLITS_OK)
    tl.store(flag_ptr, tl.where(negative > 0, SPLITS_NEGATIVE, past).to(tl.int32))
