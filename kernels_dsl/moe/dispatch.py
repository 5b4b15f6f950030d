"""Token dispatch and combine around the grouped MLP (frontend/tilefuse/moe/dispatch.py):
from top-k routing (ids [T, K] int32: token t's k-th expert) to expert-contiguous rows
and back, all on the device and deterministic.

The flat entries i = t·K + j of ids are ordered stably by expert, then by i (token, then
slot): a counting sort in three launches with no atomics, so every result is the same
integer run to run. block_counts takes a histogram per block of BLOCK entries,
expert_offsets scans those per expert over the blocks (one program, in block order) and
the totals over the experts, and permute ranks each entry inside its block (an exclusive
cumsum of its one-hot row). Entries whose id is outside [0, E) are dropped: pos = -1,
no row, no share of the combine. Rows past the valid entries' count are pad rows: the
gathers store zeros there (the grouped MLP ignores rows past its splits' sum).

combine_rows sums a token's K rows in slot order in fp32 and rounds once; every other
sum (combine_dweights) runs over the columns BD at a time in a fixed order."""

from __future__ import annotations

import tilefuse as tf
import tilefuse.language as tl


@tf.jit
def block_counts(ids_ptr, blk_ptr, N, E, BLOCK: tl.constexpr, EP: tl.constexpr):
    # blk[b, e] = how many of the entries [b·BLOCK, (b+1)·BLOCK) of ids [N] name expert e.
    b = tl.program_id(0)
    i = b * BLOCK + tl.arange(0, BLOCK)
    ids = tl.load(ids_ptr + i, mask=i < N, other=-1)
    e = tl.arange(0, EP)
    hit = (ids[:, None] == e[None, :]).to(tl.int32)
    tl.store(blk_ptr + b * E + e, tl.sum(hit, axis=0), mask=e < E)


@tf.jit
def expert_offsets(blk_ptr, counts_ptr, offsets_ptr, NB, E, BB: tl.constexpr, EP: tl.constexpr):
    # In place, blk[b, e] becomes the entries of expert e in the blocks before b; counts [E]
    # the totals; offsets [E + 1] their exclusive scan (offsets[E]: the valid entries).
    e = tl.arange(0, EP)
    carry = tl.zeros((EP,), tl.int32)
    for b0 in range(0, NB, BB):
        b = b0 + tl.arange(0, BB)
        m = (b[:, None] < NB) & (e[None, :] < E)
        at = blk_ptr + b[:, None] * E + e[None, :]
        c = tl.load(at, mask=m, other=0)
        tl.store(at, tl.cumsum(c, axis=0) - c + carry[None, :], mask=m)
        carry += tl.sum(c, axis=0)
    tl.store(counts_ptr + e, carry, mask=e < E)
    tl.store(offsets_ptr + 1 + e, tl.cumsum(carry, axis=0), mask=e < E)
    tl.store(offsets_ptr + e, tl.zeros((EP,), tl.int32), mask=e == 0)


@tf.jit
def permute(ids_ptr, blk_ptr, offsets_ptr, pos_ptr, src_ptr, N, E, BLOCK: tl.constexpr, EP: tl.constexpr):
    # pos[i]: entry i's row in expert-contiguous order (-1: dropped); src[pos[i]] = i.
    b = tl.program_id(0)
    i = b * BLOCK + tl.arange(0, BLOCK)
    ids = tl.load(ids_ptr + i, mask=i < N, other=-1)
    e = tl.arange(0, EP)
    hit = (ids[:, None] == e[None, :]).to(tl.int32)
    rank = tl.sum((tl.cumsum(hit, axis=0) - hit) * hit, axis=1)
    base = tl.load(blk_ptr + b * E + e, mask=e < E, other=0) + tl.load(offsets_ptr + e, mask=e < E, other=0)
    start = tl.sum(hit * base[None, :], axis=1)
    valid = (ids >= 0) & (ids < E) & (i < N)
    dest = tl.where(valid, start + rank, -1)
    tl.store(pos_ptr + i, dest, mask=i < N)
    tl.store(src_ptr + dest, i, mask=valid)


@tf.jit
def segment_ids(counts_ptr, ids_ptr, R, S, L, BR: tl.constexpr, SP: tl.constexpr):
    # ids[r] = s % L for the run s holding row r, runs of counts[s] rows one after another
    # (rows received grouped by source rank, then local expert: their local expert); -1
    # past the runs.
    r = tl.program_id(0) * BR + tl.arange(0, BR)
    s = tl.arange(0, SP)
    ends = tl.cumsum(tl.load(counts_ptr + s, mask=s < S, other=0), axis=0)
    seg = tl.sum(((ends[None, :] <= r[:, None]) & (s[None, :] < S)).to(tl.int32), axis=1)
    tl.store(ids_ptr + r, tl.where(seg < S, seg % L, -1), mask=r < R)


@tf.jit
def gather_rows(
    x_ptr, src_ptr, w_ptr, total_ptr, out_ptr, R, D, K, WEIGHTED: tl.constexpr, BR: tl.constexpr, BD: tl.constexpr
):
    # out[r] = x[src[r] // K] (· w[src[r]] in fp32 when WEIGHTED), one rounding to out's
    # dtype, for the rows r < total[0]; zeros in the pad rows after them.
    r = tl.program_id(0) * BR + tl.arange(0, BR)
    cols = tl.program_id(1) * BD + tl.arange(0, BD)
    live = r < tl.load(total_ptr)
    i = tl.load(src_ptr + r, mask=live, other=0)
    m = live[:, None] & (cols[None, :] < D)
    v = tl.load(x_ptr + (i // K).to(tl.int64)[:, None] * D + cols[None, :], mask=m, other=0.0)
    if WEIGHTED:
        v = v.to(tl.float32) * tl.load(w_ptr + i, mask=live, other=0.0)[:, None]
    keep = (r[:, None] < R) & (cols[None, :] < D)
    tl.store(out_ptr + r.to(tl.int64)[:, None] * D + cols[None, :], v.to(out_ptr.dtype.element_ty), mask=keep)


@tf.jit
def combine_rows(y_ptr, pos_ptr, w_ptr, out_ptr, T, D, K, WEIGHTED: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr):
    # out[t] = Σ_j y[pos[t·K + j]] (· w[t·K + j] when WEIGHTED) over j = 0..K-1 in order,
    # in fp32 from zero, one rounding to out's dtype; a dropped entry (pos < 0) adds nothing.
    t = tl.program_id(0) * BT + tl.arange(0, BT)
    cols = tl.program_id(1) * BD + tl.arange(0, BD)
    acc = tl.zeros((BT, BD), tl.float32)
    for j in range(0, K):
        p = tl.load(pos_ptr + t * K + j, mask=t < T, other=-1)
        m = (p >= 0)[:, None] & (cols[None, :] < D)
        v = tl.load(y_ptr + p.to(tl.int64)[:, None] * D + cols[None, :], mask=m, other=0.0).to(tl.float32)
        if WEIGHTED:
            v = v * tl.load(w_ptr + t * K + j, mask=p >= 0, other=0.0)[:, None]
        acc += v
    keep = (t[:, None] < T) & (cols[None, :] < D)
    tl.store(out_ptr + t.to(tl.int64)[:, None] * D + cols[None, :], acc.to(out_ptr.dtype.element_ty), mask=keep)


@tf.jit
def combine_dweights(dout_ptr, y_ptr, pos_ptr, dw_ptr, N, D, K, BN: tl.constexpr, BD: tl.constexpr):
    # dw[i] = Σ_c dout[i // K, c]·y[pos[i], c] in fp32, the columns BD at a time (each
    # chunk a tl.sum), in order; 0 for a dropped entry.
    i = tl.program_id(0) * BN + tl.arange(0, BN)
    p = tl.load(pos_ptr + i, mask=i < N, other=-1)
    t = (i // K).to(tl.int64)
    acc = tl.zeros((BN,), tl.float32)
    for c0 in range(0, D, BD):
        cols = c0 + tl.arange(0, BD)
        m = (p >= 0)[:, None] & (cols[None, :] < D)
        g = tl.load(dout_ptr + t[:, None] * D + cols[None, :], mask=m, other=0.0).to(tl.float32)
        y = tl.load(y_ptr + p.to(tl.int64)[:, None] * D + cols[None, :], mask=m, other=0.0).to(tl.float32)
        acc += tl.sum(g * y, axis=1)
    tl.store(dw_ptr + i, acc, mask=i < N)
