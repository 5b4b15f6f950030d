"""moe.fc1_forward / moe.fc2_dgrad with recipe "nvfp4" (kernels_dsl/moe/fused.py's
fc1_nvfp4_kernel, fc2_nvfp4_kernel): the NVFP4 grouped GEMM stores its output (C in bf16,
or in accumulator mode the fp32 accumulator; the dgrad's g in bf16), then the epilogue
kernel regenerates y = probs·act(C) (or dh = g·probs·act'(C)) tile by tile in registers
and quantizes it rowwise (1 x 16) and columnwise (random Hadamard transform over chunks
of 16 rows, each group padded to whole chunks: the NVFP4 wgrad's layout), never storing
it in bf16.

The two-level scale's S_enc needs the amax of the whole tensor before any block is
encoded, so the epilogue runs twice over the same tiles: pass 0 raises each copy's amax
by an atomic max of its float32 bits (non-negative floats order as their bits: the
result is exact and independent of the programs' order, so deterministic), a one-program
kernel turns the amaxes into S_enc on the device (no host sync), pass 1 encodes. The
outputs equal moe.quantize of the composition (grouped GEMM, scaled_act, quantize) bit
for bit, stochastic rounding included (the same Philox counters and keys); the copies
are zero-filled first, so the pad rows and blocks past the groups hold what quantizing
zeros gives.
"""

from __future__ import annotations

import numpy as np

from kernels_dsl.moe import fused as K

from .. import cdiv
from . import _arrays
from ._gemm_nvfp4 import _check_q
from ._mlp_ops import cast_rows, zeros
from .activations import scaled_act
from .grouped_gemm import _check_splits, _schedule, grouped_gemm, grouped_gemm_dgrad
from .quant import Quantized

BLOCK = K.NV_BLOCK
_M32 = 0xFFFFFFFF


def check_operands(fn, a, w, splits, name, wname, dgrad):
    """(like, rows, inner size, the weights' output width: n1 of w1 [G·n1, d] or n of w2
    [G·d, n]) of NVFP4 rowwise copies a [R, inner] and w = moe.quantize(w.reshape(G·out, in))."""
    _check_q(fn, name, a, -1, name)
    _check_q(fn, wname, w, -1, f"{wname}.reshape(G * out, in)")
    _check_splits(fn, splits, a.data, None)
    groups, (rows, inner), (gn, k) = int(splits.shape[0]), a.shape, w.shape
    if gn % groups or (gn // groups if dgrad else k) != inner:
        raise ValueError(f"{fn}: {wname} quantizes [G * out, in] with G = {groups} and in/out = {inner}, got {w.shape}")
    return a.data, int(rows), int(inner), k if dgrad else gn // groups


def _copies(like, rows, width, rp, row_seed=None, col_seed=None, rows_copy=True):
    """Zero-filled (rowwise, columnwise) NVFP4 copies of [rows, width], each with its own S_enc [1]."""
    col = Quantized(
        zeros(like, (width, rp // 2), "int8"),
        zeros(like, (width, rp // BLOCK), "e4m3"),
        "nvfp4",
        0,
        (rp, width),
        block=(1, BLOCK),
        tensor_scale=_arrays.empty(like, (1,), "float32"),
        rht=True,
        stochastic=col_seed is not None,
        seed=col_seed or 0,
    )
    if not rows_copy:
        return None, col
    row = Quantized(
        zeros(like, (rows, width // 2), "int8"),
        zeros(like, (rows, width // BLOCK), "e4m3"),
        "nvfp4",
        -1,
        (rows, width),
        block=(1, BLOCK),
        tensor_scale=_arrays.empty(like, (1,), "float32"),
        stochastic=row_seed is not None,
        seed=row_seed or 0,
    )
    return row, col


def _two_passes(kernel, grid, args, amax, copies, **meta):
    """Pass 0 (amax[i] of copies[i]), S_enc of each on the device, pass 1 (encode)."""
    kernel[grid](*args, PASS=0, **meta)
    for i, q in enumerate(copies):
        K.nvfp4_scale[(1,)](amax[i:], q.tensor_scale)
    kernel[grid](*args, PASS=1, **meta)


def fc1_forward(x, w1, splits, probs, act, a, n, k, glu, mode, quantize_out, cfg):
    """(C, y) as fused.fc1_forward documents, for NVFP4 operands (checked). a: the
    activation's arguments (params: the kernels', act_params, interleave, bias, bias_scale)."""
    bias, bias_scale = a["bias"], a["bias_scale"]
    like, rows = x.data, int(x.shape[0])
    n1 = 2 * n if act.glu else n
    if mode == "exact":
        h = grouped_gemm(x, w1, splits, bias, bias_scale, out=zeros(like, (rows, n1), "bfloat16"), config=cfg)
        c = h
    else:
        h = zeros(like, (rows, n1), "float32")
        grouped_gemm(x, w1, splits, bias, bias_scale, out=h, out_dtype="float32", config=cfg)
        c = cast_rows(h, "bfloat16")
    if not quantize_out:  # y in bf16, as the composition makes it
        y = scaled_act(act.name, h, probs, a["interleave"], **a["act_params"])
        return c, (y if mode == "exact" else cast_rows(y, "bfloat16"))
    groups = int(splits.shape[0])
    sched = _schedule(like, splits, rows, cfg.block_m, BLOCK)
    rp = cdiv(rows + (BLOCK - 1) * min(groups, rows), 512) * 512
    amax = zeros(like, (2,), "int32")
    row, col = _copies(like, rows, n, rp)
    args = (h, probs, row.data, _arrays.as_int8(row.scale), col.data, _arrays.as_int8(col.scale))
    args += (row.tensor_scale, col.tensor_scale, amax)
    args += (sched.offsets, sched.padded, sched.tile_start, sched.tiles, groups, n, k, rp, n // BLOCK, *a["params"])
    meta = dict(ACT=act, GLU_RUN=glu["GLU_RUN"], EVEN_ODD=glu["EVEN_ODD"], BM=cfg.block_m, BO=cfg.block_n)
    grid = (sched.slots, cdiv(n, cfg.block_n))
    _two_passes(K.fc1_nvfp4_kernel, grid, args, amax, (row, col), num_warps=cfg.num_warps, **meta)
    return c, (row, col)


def _keys(seeds):
    """(STOCH, the four 32-bit key words: rowwise lo, hi, columnwise lo, hi)."""
    if seeds is None:
        return False, (0, 0, 0, 0)
    r, c = seeds
    # int64 whatever the value: the key words' type must not depend on the seed.
    return True, tuple(np.int64(w) for w in (r & _M32, r >> 32, c & _M32, c >> 32))


def fc2_dgrad(dy, w2, splits, c, probs, act, a, n, k, glu, recompute, seeds, cfg):
    """(dh, y_col) as fused.fc2_dgrad documents, for NVFP4 operands (checked); a["parts"]:
    (the dprobs run sums [R, PARTS] the kernel writes, PARTS), for fused's dprobs_kernel."""
    like, rows = dy.data, int(dy.shape[0])
    n1 = 2 * n if act.glu else n
    g = grouped_gemm_dgrad(dy, w2, splits, out=zeros(like, (rows, n), "bfloat16"), config=cfg)
    groups = int(splits.shape[0])
    sched = _schedule(like, splits, rows, cfg.block_m, BLOCK)
    rp = cdiv(rows + (BLOCK - 1) * min(groups, rows), 512) * 512
    amax = zeros(like, (3,), "int32")
    stoch, keys = _keys(seeds)
    dh = _copies(like, rows, n1, rp, *(seeds or (None, None)))
    y_col = _copies(like, rows, n, rp, rows_copy=False)[1] if recompute else dh[1]
    parts, width = a["parts"]
    args = (g, c, probs, dh[0].data, _arrays.as_int8(dh[0].scale), dh[1].data, _arrays.as_int8(dh[1].scale), parts)
    args += (y_col.data, _arrays.as_int8(y_col.scale), dh[0].tensor_scale, dh[1].tensor_scale, y_col.tensor_scale)
    args += (amax, sched.offsets, sched.padded, sched.tile_start)
    args += (sched.tiles, groups, n, k, rp, n1 // BLOCK, width, *a["params"], *keys)
    meta = dict(ACT=act, RECOMPUTE=bool(recompute), STOCH=stoch, BM=cfg.block_m, BO=cfg.block_n, **glu)
    grid = (sched.slots, cdiv(n, cfg.block_n))
    _two_passes(
        K.fc2_nvfp4_kernel, grid, args, amax, (*dh, y_col)[: 3 if recompute else 2], num_warps=cfg.num_warps, **meta
    )
    return dh, y_col if recompute else None
