"""moe.route / dispatch / combine and their backwards: top-k routing to expert-contiguous
rows for the grouped MLP and back (kernels: kernels_dsl/moe/dispatch.py, whose docstring
gives the order and the dropped entries). numpy arrays (interpreter) or CUDA torch
tensors (GPU); nothing is read on the host but shapes: the counts, offsets and
permutation stay on the device, so routing changes need no sync and no recompile.

ids: int32 [T, K], weights: fp32 [T, K], x: [T, d]. On numpy, ids outside [0, E) other
than -1 are refused (host memory: no sync); on the GPU every such id is a dropped entry."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from kernels_dsl.moe import dispatch as K

from .. import cdiv, next_power_of_2
from . import _arrays

_ROWS, _COLS = 32, 64  # rows, columns of the gather and combine programs


class Routing(NamedTuple):
    """The expert-contiguous order of the T·K entries of a routing (all on the device):
    counts [E] (the grouped MLP's splits), offsets [E + 1] (offsets[E]: the valid
    entries), pos [T·K] (entry t·K + j -> its row, -1 dropped), src [T·K] (row -> entry,
    for rows below offsets[E]); tokens T and slots K."""

    counts: object
    offsets: object
    pos: object
    src: object
    tokens: int
    k: int


def _check(fn, name, a, kinds, ndim, like=None):
    return _arrays.check(fn, name, a, kinds, ndim, like, ("the routing", "is"))


def _block(experts: int) -> tuple[int, int]:
    """(entries per block, experts padded to a power of two): a one-hot tile of at most
    8192 elements."""
    ep = next_power_of_2(experts)
    return max(16, min(256, 8192 // ep)), ep


def _sort(ids, n, experts, like):
    """Routing's counts, offsets, pos, src for the n entries of ids (flat int32)."""
    block, ep = _block(experts)
    nb = max(1, cdiv(n, block))
    blk = _arrays.empty(like, (nb, experts), "int32")
    counts, offsets = _arrays.empty(like, (experts,), "int32"), _arrays.empty(like, (experts + 1,), "int32")
    pos, src = _arrays.empty(like, (n,), "int32"), _arrays.empty(like, (n,), "int32")
    K.block_counts[(nb,)](ids, blk, n, experts, BLOCK=block, EP=ep)
    K.expert_offsets[(1,)](blk, counts, offsets, nb, experts, BB=max(1, 2048 // ep), EP=ep)
    K.permute[(nb,)](ids, blk, offsets, pos, src, n, experts, BLOCK=block, EP=ep)
    return counts, offsets, pos, src


def route(ids, num_experts: int) -> Routing:
    """The expert-contiguous order of routing ids [T, K] over num_experts experts: by
    expert, then token, then slot."""
    fn = "moe.route"
    _check(fn, "ids", ids, ("int32",), 2)
    if isinstance(num_experts, bool) or not isinstance(num_experts, int) or num_experts < 1:
        raise ValueError(f"{fn}: num_experts must be a positive int, got {num_experts!r}")
    t, k = (int(v) for v in ids.shape)
    if k < 1:
        raise ValueError(f"{fn}: ids must have at least one slot per token, got shape {(t, k)}")
    if isinstance(ids, np.ndarray):
        bad = (ids != -1) & ((ids < 0) | (ids >= num_experts))
        if bad.any():
            t0, j0 = (int(v) for v in np.argwhere(bad)[0])
            raise ValueError(
                f"{fn}: ids[{t0}, {j0}] = {int(ids[t0, j0])} is not an expert in [0, {num_experts}) nor -1 (dropped)"
            )
    return Routing(*_sort(ids, t * k, num_experts, ids), t, k)


def segments(run_counts, rows: int, local: int):
    """int32 [rows]: the local expert (s % local) of each row, rows arriving in runs of
    run_counts[s] ([W·local], by source rank then local expert); -1 past the runs."""
    s = int(run_counts.shape[0])
    ids = _arrays.empty(run_counts, (rows,), "int32")
    if rows:
        K.segment_ids[(cdiv(rows, 128),)](run_counts, ids, rows, s, local, BR=128, SP=next_power_of_2(s))
    return ids


def _gather(x, src, total, rows, weights, k, out_kind):
    d = int(x.shape[1])
    out = _arrays.empty(x, (rows, d), out_kind)
    if rows and d:
        grid = (cdiv(rows, _ROWS), cdiv(d, _COLS))
        w = src if weights is None else weights
        K.gather_rows[grid](x, src, w, total, out, rows, d, k, WEIGHTED=weights is not None, BR=_ROWS, BD=_COLS)
    return out


def _combine(y, pos, tokens, k, weights, out_kind):
    d = int(y.shape[1])
    out = _arrays.empty(y, (tokens, d), out_kind)
    if tokens and d:
        grid = (cdiv(tokens, _ROWS), cdiv(d, _COLS))
        w = pos if weights is None else weights
        K.combine_rows[grid](y, pos, w, out, tokens, d, k, WEIGHTED=weights is not None, BT=_ROWS, BD=_COLS)
    return out


def _check_x(fn, r: Routing, x, rows):
    kind = _check(fn, "x" if rows == r.tokens else "rows", x, ("bfloat16", "float32"), 2, r.pos)
    if int(x.shape[0]) != rows:
        raise ValueError(f"{fn}: expected {rows} rows, got shape {tuple(x.shape)}")
    return kind


def _check_weights(fn, r: Routing, weights):
    if weights is not None:
        _check(fn, "weights", weights, ("float32",), 2, r.pos)
        if tuple(weights.shape) != (r.tokens, r.k):
            raise ValueError(
                f"{fn}: weights must have the routing's shape {(r.tokens, r.k)}, got {tuple(weights.shape)}"
            )


def dispatch(x, r: Routing, weights=None):
    """rows [T·K, d] in x's dtype: row p = x[token of src[p]] (· its weight in fp32, one
    rounding, when weights are given); zeros in the pad rows past offsets[E]."""
    fn = "moe.dispatch"
    kind = _check_x(fn, r, x, r.tokens)
    _check_weights(fn, r, weights)
    return _gather(x, r.src, r.offsets[-1:], r.tokens * r.k, weights, r.k, kind)


def dispatch_weights(weights, r: Routing):
    """fp32 [T·K]: each row's routing weight (0 in the pad rows)."""
    _check_weights("moe.dispatch_weights", r, weights)
    n = r.tokens * r.k
    return _gather(weights.reshape(n, 1), r.src, r.offsets[-1:], n, None, 1, "float32").reshape(n)


def dispatch_weights_backward(drow_weights, r: Routing):
    """d weights [T, K] from the rows' weight gradients [T·K] (the gather's adjoint)."""
    n = r.tokens * r.k
    _check("moe.dispatch_weights_backward", "drow_weights", drow_weights, ("float32",), 1, r.pos)
    return _combine(drow_weights.reshape(n, 1), r.pos, n, 1, None, "float32").reshape(r.tokens, r.k)


def dispatch_backward(drows, r: Routing):
    """dx [T, d]: each token's K row gradients summed in slot order (fp32, one rounding)."""
    kind = _check_x("moe.dispatch_backward", r, drows, r.tokens * r.k)
    return _combine(drows, r.pos, r.tokens, r.k, None, kind)


def combine(rows, r: Routing, weights=None):
    """out [T, d] in rows' dtype: out[t] = Σ_j (weights[t, j]·) rows[pos[t·K + j]], j in
    order, fp32 from zero, one rounding; dropped entries add nothing."""
    fn = "moe.combine"
    kind = _check_x(fn, r, rows, r.tokens * r.k)
    _check_weights(fn, r, weights)
    return _combine(rows, r.pos, r.tokens, r.k, weights, kind)


def combine_backward(dout, rows, r: Routing, weights=None):
    """(drows, dweights) for out = combine(rows, r, weights): drows [T·K, d] (dout of the
    row's token · its weight, one rounding; zeros in pad rows) and dweights [T, K] fp32
    (Σ_c dout[t, c]·rows[pos, c], columns in a fixed order; None without weights)."""
    fn = "moe.combine_backward"
    kind = _check_x(fn, r, dout, r.tokens)
    _check_x(fn, r, rows, r.tokens * r.k)
    _check_weights(fn, r, weights)
    n, d = r.tokens * r.k, int(dout.shape[1])
    drows = _gather(dout, r.src, r.offsets[-1:], n, weights, r.k, kind)
    if weights is None:
        return drows, None
    dw = _arrays.empty(dout, (n,), "float32")
    if n:
        K.combine_dweights[(cdiv(n, 128),)](dout, rows, r.pos, dw, n, d, r.k, BN=128, BD=_COLS)
    return drows, dw.reshape(r.tokens, r.k)
