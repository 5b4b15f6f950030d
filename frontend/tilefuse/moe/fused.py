"""moe.fc1_forward / moe.fc2_dgrad (SPEC-moe.md §4): the grouped GEMMs of the MLP with
their epilogues fused (kernels_dsl/moe/fused.py documents what they compute and the
layout of the quantized outputs); argument checks, allocation and launches.

Recipes: "bf16" (bf16 operands and outputs), "mxfp8" and "fp8_block" (operands
moe.Quantized as the grouped GEMMs take them; outputs e4m3 in the recipe's blocks, 32 or
1 x 128, a rowwise and a columnwise copy). A quantized output is a pair (rowwise,
columnwise) of moe.Quantized: the rowwise copy [R, width] is what moe.quantize gives for
the bf16-rounded values; the columnwise copy holds every group zero-padded to whole
blocks of rows (shape (RP, width), stored [width, RP]; group g from column padded[g], the
exclusive prefix sums of the groups' sizes rounded up to the block, rows past the
splits' sum belonging to no group). "nvfp4": x, w1 (dy, w2) NVFP4 rowwise copies as the
NVFP4 grouped GEMMs take them, y and dh pairs of NVFP4 copies (blocks of 16; columnwise
with the random Hadamard transform, dh's with stochastic rounding keyed by
fc2_dgrad's seeds = (rowwise, columnwise) when given): _fused_nvfp4.py.
"""

from __future__ import annotations

import math

import numpy as np

from kernels_dsl.moe import fused as K

from .. import cdiv, next_power_of_2
from ..jit import interp_buffers
from . import _arrays
from . import _fused_nvfp4 as NV
from .activations import _activation, _layout, _params
from .grouped_gemm import (
    PERSISTENT_GROUP_M,
    GemmConfig,
    _check,
    _check_fp8,
    _check_splits,
    _config,
    _schedule,
    _weights,
    bias_kind,
    num_programs,
)
from .grouped_gemm import _check_bias as _check_gemm_bias
from .quant import Quantized

RECIPES = ("bf16", "mxfp8", "fp8_block", "nvfp4")
MODES = ("exact", "accumulator")
OUT = {"bf16": 0, "mxfp8": 1, "fp8_block": 2}  # the kernels' OUT
# a quantized output's block
BLOCK = {"bf16": K.MX_BLOCK, "mxfp8": K.MX_BLOCK, "fp8_block": K.FP8_BLOCK, "nvfp4": K.NV_BLOCK}


def default_config(x, recipe="bf16") -> GemmConfig:
    """grouped_gemm's tiles; on the interpreter (numpy) 32 x 32 x 32, for FP8-block's
    128-blocks 128 x 128 x 32."""
    if not isinstance(x, np.ndarray):
        return GemmConfig(128, 128, 64, 8, 3)
    return GemmConfig(128, 128, 32, 4, 2) if recipe == "fp8_block" else GemmConfig(32, 32, 32, 4, 2)


def _recipe(fn, recipe):
    if recipe not in RECIPES:
        raise ValueError(f"{fn}: recipe must be one of {RECIPES}, got {recipe!r}")


def _fused_config(fn, config, like, recipe, quantized):
    cfg = _config(fn, default_config(like, recipe) if config is None else config, like)
    block = BLOCK[recipe] if quantized else 1
    if cfg.block_n < max(K.DS_CHUNK, block) or cfg.block_m < block:
        raise ValueError(
            f"{fn}: config.block_n must be >= {max(K.DS_CHUNK, block)} and config.block_m >= {block} "
            f"(dprobs runs of {K.DS_CHUNK}, the output's blocks), got {cfg}"
        )
    return cfg


def _persistent(fn, cfg, like, recipe, w, rows, d, split_runs, cross) -> bool:
    """Whether a fused GEMM runs its persistent kernel (bf16 only): config.persistent, or
    where None, on the GPU when the K loop's descriptors can be TMA copies (d % 16 == 0).
    It needs w as one [G, ·, ·] array, (split_runs false) each tile's weight columns as
    runs (FC1: the halves, an interleave block_n divides, or stride 1) and (cross false)
    K steps within an expert; config.persistent=True without them is an error."""
    fits = recipe == "bf16" and w.offsets is None and rows > 0 and not split_runs and not cross
    if cfg.persistent and not fits and rows > 0:
        raise ValueError(
            f"{fn}: config.persistent=True needs recipe 'bf16', the weights as one [G, ...] array, a GLU "
            f"interleave of 1 or that config.block_n ({cfg.block_n}) divides (or the halves) and, for the dgrad, d a "
            f"multiple of config.block_k ({cfg.block_k})"
        )
    if not fits or cfg.persistent is False:
        return False
    return bool(cfg.persistent) or (not isinstance(like, np.ndarray) and d % 16 == 0)


def _glu_meta(act, k, cfg, block, fn, width=None):
    """GLU_RUN and EVEN_ODD (kernels_dsl.moe.activations.load_glu) for interleave k, and
    PAIRS (fused.store_glu_grad: k divides the column tile, `width` or config.block_n);
    block: a quantized dh's (or 1)."""
    width = width or cfg.block_n
    pairs = width % k == 0
    if act.glu and not pairs and k % block:
        raise ValueError(
            f"{fn}: a quantized dh needs the interleave ({k}) to divide config.block_n ({cfg.block_n}) or to be a "
            f"multiple of {block} (its blocks run along C's columns)"
        )
    return dict(GLU_RUN=math.gcd(k, width), EVEN_ODD=act.glu and k == 1, PAIRS=pairs)


# The FC2 dgrad's epilogue on column halves where they fit (_dgrad_halves), else the whole
# tile (off: A/B, moe_bench.py --whole-dgrad-epilogue).
DGRAD_HALVES = True


def _dgrad_halves(act, k, cfg, recipe, block):
    """Whether the FC2 dgrad's epilogue runs on its tile's column halves (fused.dgrad_epilogue's
    HALVES: at 128 columns and more the whole tile's epilogue spilled): the halves hold whole
    dprobs runs (32) and dh blocks (not FP8-block's 128; NVFP4's epilogue is its own kernel), and a
    GLU's pairs or blocks fit them."""
    half = cfg.block_n // 2
    if not DGRAD_HALVES or cfg.block_n < 128 or recipe in ("fp8_block", "nvfp4"):
        return False
    return not act.glu or half % k == 0 or k % block == 0


def _operands(fn, recipe, a, w, name, wname, dgrad):
    """(like, rows, inner, weights, fp8 meta) of the GEMM's two operands."""
    if recipe == "bf16":
        if isinstance(a, Quantized) or isinstance(w, Quantized):
            raise TypeError(f"{fn}: recipe 'bf16' takes bf16 {name} and {wname}, not moe.Quantized")
        _check(fn, name, a, a, ("bfloat16",), 2)
        wt = _weights(fn, w, a)
        return a, int(a.shape[0]), int(a.shape[1]), wt, None
    sa = _check_fp8(fn, name, a, -1, name)
    sw = _check_fp8(fn, wname, w, 0 if dgrad else -1, f"{wname}.reshape(G * out, in)" + (", axis=0" if dgrad else ""))
    if a.recipe != recipe or w.recipe != recipe:
        raise ValueError(
            f"{fn}: recipe {recipe!r} takes {recipe} copies of {name} and {wname}, got {a.recipe}, {w.recipe}"
        )
    meta = dict(SA_ROWS=sa, SW_ROWS=sw, FA=a.fmt, FW=w.fmt)
    return a.data, a.shape[0], a.shape[1], w, meta


def _checked_operands(fn, recipe, a, w, splits, name, wname, dgrad):
    """(like, rows, inner size, the weights' output width, weights, fp8 meta) of the GEMM's
    operands, checked against each other and splits: forward x [R, d] with w1 [n1, d]
    experts, dgrad dy [R, d] with w2 [d, n] experts (NVFP4: weights and fp8 meta None)."""
    if recipe == "nvfp4":
        return (*NV.check_operands(fn, a, w, splits, name, wname, dgrad), None, None)
    like, rows, inner, wt, fp8 = _operands(fn, recipe, a, w, name, wname, dgrad)
    _check_splits(fn, splits, like, None if fp8 else wt.groups)
    if fp8:
        return like, rows, inner, _fp8_shape(fn, wt, wname, int(splits.shape[0]), inner, dgrad)[0], wt, fp8
    out, k = (wt.shape[1], wt.shape[0]) if dgrad else wt.shape
    if k != inner:
        shape = "[d, n]" if dgrad else "[n1, d]"
        raise ValueError(f"{fn}: {name} has {inner} columns but {wname}'s experts are {shape} = {list(wt.shape)}")
    return like, rows, inner, out, wt, fp8


def _fp8_shape(fn, w, wname, groups, inner, dgrad):
    """(N, D) of the quantized weights: forward [G·N1, D], dgrad [G·D, N] (stored [N, G·D])."""
    gn, k = w.shape
    if gn % groups or (dgrad and gn // groups != inner) or (not dgrad and k != inner):
        raise ValueError(f"{fn}: {wname} quantizes [G * out, in] with G = {groups} and in/out = {inner}, got {w.shape}")
    return (k, gn // groups) if dgrad else (gn // groups, k)


def _fp8_step(cfg, inner, recipe):
    """The K step: grouped_gemm's choice (FP8-block: within one 128-block)."""
    fits = (lambda b: b <= 128) if recipe == "fp8_block" else (lambda b: True)
    return next(b for b in (cfg.block_k, 128, 64, 32) if inner % b == 0 and b % 32 == 0 and fits(b))


def _gemm_args(a, w, splits, fp8, cfg, inner, recipe, names):
    """(the K loop's five operand arguments, scale strides, K step, the kernel's operand
    meta, weight arrays to keep alive) for bf16 or fp8 operands; names: the kernel's
    names of a's format and scale-rows meta (FX, SX_ROWS or FD, SD_ROWS)."""
    fa, sa = names
    if fp8:
        args = (_arrays.as_int8(a.data), _device(a.scale), _arrays.as_int8(w.data), splits, _device(w.scale))
        strides, bc = (int(a.scale.shape[1]), int(w.scale.shape[1])), _fp8_step(cfg, inner, recipe)
        meta = {"FP8": True, fa: fp8["FA"], "FW": fp8["FW"], sa: fp8["SA_ROWS"], "SW_ROWS": fp8["SW_ROWS"]}
        return args, strides, bc, meta | dict(W_LIST=False, W_ALIGNED=True), ()
    args = (a, splits, w.ptr, splits if w.offsets is None else w.offsets, splits)
    meta = {"FP8": False, fa: "e4m3", "FW": "e4m3", sa: 0, "SW_ROWS": 0}
    return args, (0, 0), cfg.block_k, meta | dict(W_LIST=w.offsets is not None, W_ALIGNED=w.aligned), w.arrays


def _scale_kind(recipe):
    return "e8m0" if recipe == "mxfp8" else "float32"


def _device(a):
    """The array as the kernels take it: 8-bit codes as int8."""
    return a if str(a.dtype).endswith("float32") else _arrays.as_int8(a)


def _columns(like, width, rp, recipe):
    """A columnwise copy [width, RP] of the recipe's codes and scales."""
    block = BLOCK[recipe]
    qt, qts = _arrays.empty(like, (width, rp), "e4m3"), _arrays.empty(like, (width, rp // block), _scale_kind(recipe))
    return (_device(qt), _device(qts)), Quantized(qt, qts, recipe, 0, (rp, width), block=(1, block))


def _outputs(like, rows, width, rp, recipe, quantized):
    """(the four arrays a kernel's store_out writes, the result): bf16 [R, width], or the
    rowwise and columnwise copies."""
    if not quantized:
        y = _arrays.empty(like, (rows, width), "bfloat16")
        return (y, y, y, y), y
    block = BLOCK[recipe]
    q, qs = _arrays.empty(like, (rows, width), "e4m3"), _arrays.empty(like, (rows, width // block), _scale_kind(recipe))
    cols, col = _columns(like, width, rp, recipe)
    return (_device(q), _device(qs), *cols), (Quantized(q, qs, recipe, -1, (rows, width), block=(1, block)), col)


def _padded_rows(rows, groups, block):
    """RP: the columns of a columnwise copy (each non-empty group adds at most block - 1
    pad rows), a multiple of 512: 16-byte aligned rows of its scales."""
    return cdiv(rows + (block - 1) * min(groups, rows), 512) * 512


def _check_probs(fn, probs, like, rows):
    _check(fn, "probs", probs, like, ("float32",), 1)
    if tuple(probs.shape) != (rows,):
        raise ValueError(f"{fn}: probs must have shape ({rows},) (one weight per row), got {tuple(probs.shape)}")


def fc1_forward(
    x,
    w1,
    splits,
    probs,
    activation,
    recipe="bf16",
    *,
    bias=None,
    bias_scale=None,
    interleave=0,
    act_params=None,
    mode="exact",
    quantize_out=True,
    config=None,
):
    """(C, y) of FC1 with its epilogue fused: C [R, n1] bf16 = x_g w1_gᵀ (+ bias [G, n1],
    · bias_scale [R] when given), y = probs · act(C) [R, n] (mode "exact": of the bf16 C;
    "accumulator": of the fp32 sum). recipe "bf16": x [R, d] bf16, w1 [G, n1, d] (or G
    arrays [n1, d]), y bf16. "mxfp8" / "fp8_block": x = moe.quantize(x, recipe), w1 =
    moe.quantize(w1.reshape(G·n1, d), recipe, ...) (FP8-block: 128 x 128 or 1 x 128
    blocks), y the pair (rowwise, columnwise) of quantized copies (module docstring), or
    bf16 with quantize_out=False. Rows past the splits' sum are not written."""
    fn = "fc1_forward"
    _recipe(fn, recipe)
    if mode not in MODES:
        raise ValueError(f"{fn}: mode must be one of {MODES}, got {mode!r}")
    act = _activation(fn, activation)
    params = _params(fn, act, act_params or {})
    like, rows, d, n1, w, fp8 = _checked_operands(fn, recipe, x, w1, splits, "x", "w1", dgrad=False)
    groups = int(splits.shape[0])
    n, k = _layout(fn, act, n1, interleave)
    _check_probs(fn, probs, like, rows)
    _check_gemm_bias(fn, bias, bias_scale, like, groups, n1, rows)
    quantized, block = recipe != "bf16" and bool(quantize_out), BLOCK[recipe]
    if quantized and n % block:
        raise ValueError(f"{fn}: a {recipe} y needs n (the activation's width) to be a multiple of {block}, got {n}")
    cfg = _fused_config(fn, config, like, recipe, quantized)
    glu = _glu_meta(act, k, cfg, 1, fn)
    if recipe == "nvfp4":
        a = dict(params=params, act_params=act_params or {}, interleave=interleave, bias=bias, bias_scale=bias_scale)
        return NV.fc1_forward(x, w1, splits, probs, act, a, n, k, glu, mode, quantized, cfg)
    sched = _schedule(like, splits, rows, cfg.block_m, block)
    rp = _padded_rows(rows, groups, block)
    c = _arrays.empty(like, (rows, n1), "bfloat16")
    ys, y = _outputs(like, rows, n, rp, recipe, quantized)
    tail = (groups, d, n, k, rp, n // block, rp // block)
    out_kind = OUT[recipe] if quantized else 0
    act_meta = dict(ACT=act, BIAS=bias_kind(bias, bias_scale), EXACT=mode == "exact", OUT=out_kind)
    act_meta |= {m: v for m, v in glu.items() if m != "PAIRS"}
    if _persistent(fn, cfg, like, recipe, w, rows, d, act.glu and k not in (1, n) and k % cfg.block_n, False):
        K.fc1_persistent_kernel[(num_programs(like),)](
            x, w.ptr, splits if bias is None else bias, splits if bias_scale is None else bias_scale, probs, c,
            *ys, sched.offsets, sched.padded, sched.tile_start, sched.tiles, groups, rows, *tail[1:], *params,
            **act_meta, BM=cfg.block_m, BO=cfg.block_n, BC=cfg.block_k, GROUP_M=PERSISTENT_GROUP_M,
            num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        )  # fmt: skip
        return c, y
    a_args, strides, bc, w_meta, arrays = _gemm_args(x, w, splits, fp8, cfg, d, recipe, ("FX", "SX_ROWS"))
    with interp_buffers(*(a for a in arrays if isinstance(a, np.ndarray))):
        K.fc1_kernel[(sched.slots, cdiv(n, cfg.block_n))](
            *a_args,
            splits if bias is None else bias,
            splits if bias_scale is None else bias_scale,
            probs,
            c,
            *ys,
            sched.offsets,
            sched.padded,
            sched.tile_start,
            sched.tiles,
            *tail,
            *strides,
            *params,
            **act_meta,
            **w_meta,
            BM=cfg.block_m,
            BO=cfg.block_n,
            BC=bc,
            num_warps=cfg.num_warps,
            num_stages=cfg.num_stages,
        )
    return c, y


def fc2_dgrad(
    dy,
    w2,
    splits,
    c,
    probs,
    activation,
    recipe="bf16",
    *,
    interleave=0,
    act_params=None,
    recompute=False,
    seeds=None,
    config=None,
):
    """(dh, dprobs, y_col) of the FC2 dgrad with its epilogue fused: g = bf16(dy_g w2_g)
    [R, n], dh = g · probs · act'(C) [R, n1] in C's layout (bf16, or for "mxfp8" and
    "fp8_block" the (rowwise, columnwise) pair), dprobs [R] fp32 = Σ_j g · act(C) in
    scaled_act_backward's fixed order (0 for rows past the splits' sum). recompute:
    y_col = probs · act(C) again, as fc1_forward's exact mode wrote it (bf16 [R, n], or
    its columnwise quantized copy, what the FC2 wgrad reads), else None. recipe "bf16":
    dy [R, d] bf16, w2 [G, d, n] (or G arrays [d, n]); quantized: dy = moe.quantize(dy,
    recipe), w2 = moe.quantize(w2.reshape(G·d, n), recipe, axis=0, ...). C [R, n1] bf16
    is fc1_forward's."""
    fn = "fc2_dgrad"
    _recipe(fn, recipe)
    act = _activation(fn, activation)
    params = _params(fn, act, act_params or {})
    like, rows, d, n, w, fp8 = _checked_operands(fn, recipe, dy, w2, splits, "dy", "w2", dgrad=True)
    groups = int(splits.shape[0])
    _check(fn, "c", c, like, ("bfloat16",), 2)
    n1 = 2 * n if act.glu else n
    if tuple(c.shape) != (rows, n1):
        raise ValueError(f"{fn}: c must be FC1's output [R, n1] = ({rows}, {n1}) for {activation!r}, got {c.shape}")
    _, k = _layout(fn, act, n1, interleave)
    _check_probs(fn, probs, like, rows)
    quantized, block = recipe != "bf16", BLOCK[recipe]
    if quantized and n % block:
        raise ValueError(f"{fn}: {recipe} outputs need n to be a multiple of {block}, got {n}")
    cfg = _fused_config(fn, config, like, recipe, quantized)
    dh_block = block if quantized else 1
    halves = _dgrad_halves(act, k, cfg, recipe, dh_block)
    glu = _glu_meta(act, k, cfg, dh_block, fn, cfg.block_n // 2 if halves else None)
    # The run sums' row: every column tile's runs, rounded up to 16 (aligned rows).
    n_runs, tile_runs = cdiv(n, K.DS_CHUNK), cfg.block_n // K.DS_CHUNK
    parts_width = cdiv(cdiv(n_runs, tile_runs) * tile_runs, 16) * 16
    parts = _arrays.empty(like, (rows, parts_width), "float32")
    if recipe == "nvfp4":
        a = dict(params=params, parts=(parts, parts_width))
        dh, y_col = NV.fc2_dgrad(dy, w2, splits, c, probs, act, a, n, k, glu, recompute, seeds, cfg)
        return dh, _dprobs(parts, splits, rows, n_runs, parts_width, like), y_col
    if seeds is not None:
        raise ValueError(f"{fn}: seeds (stochastic rounding) apply to recipe 'nvfp4' only, not {recipe!r}")
    sched = _schedule(like, splits, rows, cfg.block_m, block)
    rp = _padded_rows(rows, groups, block)
    dhs, dh = _outputs(like, rows, n1, rp, recipe, quantized)
    y_col, ys = None, (splits, splits, splits)
    if recompute and quantized:  # the columnwise copy only: the wgrad's operand
        cols, y_col = _columns(like, n, rp, recipe)
        ys = (splits, *cols)
    elif recompute:
        y_col = _arrays.empty(like, (rows, n), "bfloat16")
        ys = (y_col, y_col, y_col)
    outs = (c, probs, *dhs, parts, *ys, sched.offsets, sched.padded, sched.tile_start, sched.tiles)
    tail = (n, k, rp, n1 // block, rp // block, parts_width)
    meta = dict(ACT=act, OUT=OUT[recipe], RECOMPUTE=bool(recompute), HALVES=halves, **glu)
    if _persistent(fn, cfg, like, recipe, w, rows, d, False, d % cfg.block_k):
        K.fc2_dgrad_persistent_kernel[(num_programs(like),)](
            dy, w.ptr, *outs, groups, rows, d, *tail, *params, **meta, BM=cfg.block_m, BO=cfg.block_n,
            BC=cfg.block_k, GROUP_M=PERSISTENT_GROUP_M, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        )  # fmt: skip
        return dh, _dprobs(parts, splits, rows, n_runs, parts_width, like, sched.offsets), y_col
    a_args, strides, bc, w_meta, arrays = _gemm_args(dy, w, splits, fp8, cfg, d, recipe, ("FD", "SD_ROWS"))
    with interp_buffers(*(a for a in arrays if isinstance(a, np.ndarray))):
        K.fc2_dgrad_kernel[(sched.slots, cdiv(n, cfg.block_n))](
            *a_args,
            *outs,
            groups,
            d,
            *tail,
            *strides,
            *params,
            **meta,
            **w_meta,
            BM=cfg.block_m,
            BO=cfg.block_n,
            BC=bc,
            num_warps=cfg.num_warps,
            num_stages=cfg.num_stages,
        )
    return dh, _dprobs(parts, splits, rows, n_runs, parts_width, like, sched.offsets), y_col


def _dprobs(parts, splits, rows, n_runs, parts_width, like, offsets=None):
    """dprobs [R] fp32: each row's run sums added in order (dprobs_kernel)."""
    dprobs = _arrays.empty(like, (rows,), "float32")
    if rows:
        groups = int(splits.shape[0])
        offsets = _schedule(like, splits, rows, 128).offsets if offsets is None else offsets
        meta = dict(BR=128, RUNS=min(8, next_power_of_2(n_runs)))
        K.dprobs_kernel[(cdiv(rows, 128),)](parts, dprobs, offsets, groups, rows, n_runs, parts_width, **meta)
    return dprobs
