"""The grouped GEMMs on NVFP4 operands (kernels_dsl/moe/gemm_nvfp4.py, whose docstring has
the numerics): argument checks, allocation and launches for moe.grouped_gemm,
grouped_gemm_dgrad and grouped_gemm_wgrad when their operands are NVFP4 moe.Quantized.

Forward and dgrad: x (or dy) a rowwise copy, moe.quantize(x, "nvfp4"); w the rowwise copy
of w.reshape(G·N, K), moe.quantize(..., "nvfp4", tile2d=True) for weights (SPEC §3): one
copy serves both, since the dgrad reads it along its columns (a 16 x 16 tile's codes are
what the columnwise copy would hold). Wgrad: dy and x columnwise copies (axis=0) of
[R, N] and [R, K] with the same rows, the groups of splits; with rht=True on both, each
group must start on a multiple of 16 rows of the copies (the MLP's padded layout), or
the transform's chunks mix groups and the result is not dy_gᵀ x_g.
"""

from __future__ import annotations

from kernels_dsl.moe import gemm_nvfp4 as K

from .. import cdiv
from .grouped_gemm import _check_bias, _check_splits, _config, _out, _schedule, _wgrad_setup, bias_kind
from .quant import Quantized


def _check_q(fn, name, q, axis, text):
    if not isinstance(q, Quantized) or q.recipe != "nvfp4" or q.axis != axis:
        side = "rowwise" if axis == -1 else "columnwise (axis=0)"
        got = f"{q.recipe} axis={q.axis}" if isinstance(q, Quantized) else type(q).__name__
        raise ValueError(f"{fn}: {name} must be a {side} NVFP4 copy (moe.quantize({text}, 'nvfp4', ...)), got {got}")


def _step(c, block_k):
    """The K step: the config's, or the largest of 128 .. 16 that divides C."""
    return next(b for b in (block_k, 128, 64, 32, 16) if c % b == 0)


def gemm(fn, a, w, splits, bias, bias_scale, out, out_dtype, config, dgrad):
    """y = x wᵀ (+ bias) or, dgrad, dx = dy w, on NVFP4 copies (the module docstring)."""
    name = "dy" if dgrad else "x"
    _check_q(fn, name, a, -1, name)
    _check_q(fn, "w", w, -1, "w.reshape(G * N, K)")
    like = a.data
    _check_splits(fn, splits, like, None)
    groups, (rows, c) = int(splits.shape[0]), a.shape
    gn, k = w.shape
    n = gn // groups
    if gn % groups or (n if dgrad else k) != c:
        raise ValueError(
            f"{fn}: w quantizes [G * N, K] with G = {groups} and {'N' if dgrad else 'K'} = {c}, got shape {w.shape}"
        )
    o = k if dgrad else n
    _check_bias(fn, bias, bias_scale, like, groups, o, rows)
    y = _out(fn, out, like, (rows, o), out_dtype)
    cfg = _config(fn, config, like)
    sched = _schedule(like, splits, rows, cfg.block_m)
    K.grouped_gemm_nvfp4_kernel[(sched.slots, cdiv(o, cfg.block_n))](
        a.data,
        a.scale,
        a.tensor_scale,
        w.data,
        w.scale,
        w.tensor_scale,
        splits if bias is None else bias,
        splits if bias_scale is None else bias_scale,
        y,
        sched.offsets,
        sched.tile_start,
        sched.tiles,
        groups,
        c,
        o,
        n,
        *_row_strides(a),
        *_row_strides(w),
        DGRAD=dgrad,
        BIAS=bias_kind(bias, bias_scale),
        BM=cfg.block_m,
        BO=cfg.block_n,
        BC=_step(c, cfg.block_k),
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )
    return y


def wgrad(fn, dy, x, splits, out_dtype, config):
    """dw_g = dy_gᵀ x_g [G, N, K] from columnwise NVFP4 copies (the module docstring)."""
    _check_q(fn, "dy", dy, 0, "dy, axis=0")
    _check_q(fn, "x", x, 0, "x, axis=0")
    rows, n, k, groups, cfg, dw, offsets = _wgrad_setup(fn, dy, x, splits, out_dtype, config)
    K.grouped_wgrad_nvfp4_kernel[(cdiv(n, cfg.block_m) * cdiv(k, cfg.block_n), groups)](
        dy.data,
        dy.scale,
        dy.tensor_scale,
        x.data,
        x.scale,
        x.tensor_scale,
        dw,
        offsets,
        n,
        k,
        rows,
        *_row_strides(dy),
        BN=cfg.block_m,
        BK=cfg.block_n,
        BR=cfg.block_k,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )
    return dw


def _row_strides(q):
    """The row lengths of q's codes (cols/2 bytes) and scales (cols/16), kernel arguments so
    that the launch specializes on their alignment (16-byte rows: cp.async copies them)."""
    return int(q.data.shape[1]), int(q.scale.shape[1])


def is_nvfp4(*operands) -> bool:
    return any(isinstance(q, Quantized) and q.recipe == "nvfp4" for q in operands)
