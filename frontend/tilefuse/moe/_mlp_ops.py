"""The steps of the grouped MLP (mlp.py) around moe.fused's epilogues, each a launch of DSL
kernels: operand quantization, the wgrad and the bias gradients.

Quantized recipes (MXFP8, FP8-block): the forward and dgrad GEMMs take rowwise copies of
the activations and gradients, and of the weights rowwise (forward) or columnwise (dgrad,
stored transposed). The wgrads take columnwise copies of both operands in moe.fused's
layout: shape (RP, N), stored [N, RP], group g's rows from row padded[g], each group
zero-padded to whole blocks of the recipe's columnwise block (32 rows; FP8-block 128),
so that no block straddles two experts and pad rows never enter a scale: the fp8 wgrad
promotes each 32-row block (an FP8-block 128-block: four of one scale) of one group to
fp32, exactly at the groups' edges, over the padded groups.

NVFP4: activations quantized with round-to-nearest, gradients (dy, dh) with stochastic
rounding keyed by the seeds mlp_backward derives from its call's seed; the weights as
16 x 16 tiles, one rowwise copy for the forward and the dgrad; the wgrads' columnwise
copies with the random Hadamard transform, each group padded to whole chunks of 16 rows
(so a chunk never mixes two experts, and the transforms of dy's and x's copies cancel in
dyᵀx), on the NVFP4 wgrad kernel.
"""

from __future__ import annotations

import sys

import numpy as np

from kernels_dsl.moe import mlp as K

from .. import cdiv
from . import _arrays
from .grouped_gemm import _schedule, grouped_gemm_wgrad
from .quant import Quantized, quantize

# Rows per columnwise block, per recipe (the token dimension of the wgrad copies; NVFP4:
# the random Hadamard transform's chunks of 16 rows, which must not mix groups).
COL_BLOCK = {"mxfp8": 32, "fp8_block": 128, "nvfp4": 16}
_WEIGHT_OPTIONS = {"mxfp8": {}, "fp8_block": dict(block=(128, 128)), "nvfp4": dict(tile2d=True)}
_TILE = (32, 64)  # rows, columns of the cast and bias-gradient programs


def zeros(like, shape, kind):
    """A zero-filled array of `kind` beside `like` (outputs whose pad rows stay 0)."""
    if isinstance(like, np.ndarray):
        return np.zeros(shape, _arrays._NUMPY[kind])
    torch = sys.modules["torch"]
    return torch.zeros(shape, dtype=getattr(torch, _arrays._TORCH[kind]), device=like.device)


def cast_rows(src, kind, out=None):
    """src [R, N] as `kind` (into `out` when given), by cast_rows."""
    r, n = (int(d) for d in src.shape)
    dst = _arrays.empty(src, (r, n), kind) if out is None else out
    if r and n:
        K.cast_rows[(cdiv(r, _TILE[0]), cdiv(n, _TILE[1]))](src, dst, r, n, BR=_TILE[0], BN=_TILE[1])
    return dst


def padded_rows(rows, groups, recipe):
    """RP of a columnwise copy: each non-empty group adds at most block - 1 pad rows; a
    multiple of 512 (moe.fused's: 16-byte aligned rows of the scales)."""
    return cdiv(rows + (COL_BLOCK[recipe] - 1) * min(groups, rows), 512) * 512


def padded_splits(like, splits, rows, recipe):
    """int32 [G]: the groups' sizes (clamped to `rows`) rounded up to whole blocks: the
    groups of a columnwise copy, one after another."""
    g = int(splits.shape[0])
    sizes = _arrays.empty(like, (g,), "int32")
    K.padded_sizes[(cdiv(g, 32),)](
        _schedule(like, splits, rows, _TILE[0]).offsets, sizes, g, BLOCK=COL_BLOCK[recipe], BG=32
    )
    return sizes


def _nvfp4_options(recipe, seed, rht=False):
    """NVFP4's quantizer options: stochastic rounding keyed by `seed` where one is given
    (gradients), the random Hadamard transform on the columnwise copies."""
    if recipe != "nvfp4":
        return {}
    return dict(rht=rht) | ({} if seed is None else dict(stochastic=True, seed=seed))


def quantize_rows(a, recipe, splits, seed=None):
    """The rowwise copy of a [R, N] (seed: NVFP4's stochastic rounding, for gradients).
    NVFP4's tensor scale covers the rows up to the splits' sum only: rows past it are
    ignored (SPEC-moe.md), so their contents must not move the scale of the others."""
    if recipe != "nvfp4":
        return quantize(a, recipe)
    rows, g = int(a.shape[0]), int(splits.shape[0])
    used = _schedule(a, splits, rows, _TILE[0]).offsets[g:]  # the clamped sum, on the device
    return quantize(a, recipe, rows_used=used, **_nvfp4_options(recipe, seed))


def quantize_cols(a, recipe, splits, seed=None):
    """The columnwise (wgrad) copy of a [R, N] in the per-group padded layout (NVFP4: with
    the random Hadamard transform; seed: stochastic rounding)."""
    rows, n = (int(d) for d in a.shape)
    g = int(splits.shape[0])
    rp = padded_rows(rows, g, recipe)
    src = _schedule(a, splits, rows, _TILE[0])
    dst_offsets = _schedule(a, padded_splits(a, splits, rows, recipe), rp, _TILE[0]).offsets
    dst = zeros(a, (rp, n), "bfloat16")
    if n:
        grid = (src.slots, cdiv(n, _TILE[1]))
        args = (a, dst, src.offsets, dst_offsets, src.tile_start, src.tiles, g, n)
        K.scatter_groups[grid](*args, BM=_TILE[0], BN=_TILE[1])
    return quantize(dst, recipe, axis=0, **_nvfp4_options(recipe, seed, rht=True))


def expert_shape(w) -> tuple[int, int]:
    """[N, K] of one expert of w [G, N, K] or of a list of G [N, K]."""
    shape = w[0].shape if isinstance(w, (list, tuple)) else w.shape[1:]
    return int(shape[0]), int(shape[1])


def stacked(w):
    """A [G, N, K] weight as it is; a list of G [N, K] experts copied into one [G, N, K]
    (by cast_rows: the quantizers read one tensor)."""
    if not isinstance(w, (list, tuple)):
        return w
    n, k = expert_shape(w)
    out = _arrays.empty(w[0], (len(w), n, k), "bfloat16")
    for g, wg in enumerate(w):
        cast_rows(wg, "bfloat16", out[g])
    return out


def quantize_weight(w, recipe, axis):
    """The rowwise (axis -1: forward) or columnwise (axis 0: dgrad) copy of w [G, N, K]
    as the grouped GEMMs take them: w.reshape(G·N, K) quantized (FP8-block: 128 x 128;
    NVFP4: 16 x 16 tiles, the rowwise copy for both, which the dgrad reads transposed)."""
    w3 = stacked(w)
    g, n, k = (int(d) for d in w3.shape)
    return quantize(w3.reshape(g * n, k), recipe, -1 if recipe == "nvfp4" else axis, **_WEIGHT_OPTIONS[recipe])


def gemm_operands(a, w, recipe, splits, dgrad, seed=None):
    """(a, w) as the grouped GEMM (and moe.fused) take them under `recipe` (seed: a's
    stochastic rounding under NVFP4)."""
    if recipe == "bf16":
        return a, w
    return quantize_rows(a, recipe, splits, seed), quantize_weight(w, recipe, 0 if dgrad else -1)


def wgrad(dy, x, splits, rows):
    """dw [G, N, K] = dy_gᵀ x_g from bf16 arrays [rows, ·] or columnwise copies of them
    (over the padded groups, which start on whole blocks and whose pad rows are zeros;
    NVFP4's Hadamard transforms of the two copies cancel)."""
    if isinstance(dy, Quantized):
        splits = padded_splits(dy.data, splits, rows, dy.recipe)
    return grouped_gemm_wgrad(dy, x, splits)


def bias_grad(dy, splits, out_kind, scale=None):
    """db [G, N] = Σ over each group's rows of dy (· scale_r), fp32 sums, in out_kind."""
    rows, n = (int(d) for d in dy.shape)
    sched = _schedule(dy, splits, rows, _TILE[0])
    g = int(splits.shape[0])
    db = _arrays.empty(dy, (g, n), out_kind)
    if n:
        K.grouped_bias_grad[(cdiv(n, _TILE[1]), g)](
            dy, dy if scale is None else scale, sched.offsets, db, n, SCALED=scale is not None, BR=_TILE[0], BN=_TILE[1]
        )
    return db


def add_scaled_bias_dprobs(dprobs, dy, b, splits):
    """dprobs[r] += Σ_j dy[r, j]·b_g[j] (the scaled bias's share), in place."""
    rows, n = (int(d) for d in dy.shape)
    s = _schedule(dy, splits, rows, _TILE[0])
    K.scaled_bias_dprobs[(s.slots,)](
        dy, b, dprobs, s.offsets, s.tile_start, s.tiles, int(splits.shape[0]), n, BM=_TILE[0], BN=_TILE[1]
    )


def splits_status(splits, rows):
    """An int32 [1] flag on splits' device: K.SPLITS_OK, _NEGATIVE or _PAST_ROWS."""
    flag = _arrays.empty(splits, (1,), "int32")
    K.check_splits[(1,)](splits, flag, int(splits.shape[0]), rows, BG=32)
    return flag
