"""moe.quantize / moe.dequantize / moe.Quantized (SPEC-moe.md §3, §7): argument checks,
output allocation and launches of the kernels in kernels_dsl/moe/quantize.py, which
document the numerics (scales, NaN and inf blocks, the random stream).

Shapes: x is 2-D [M, K] and must be a whole number of blocks along the blocked axes
(no padding is defined: other shapes are refused). axis=-1 quantizes rows, data [M, K];
axis=0 quantizes columns, stored transposed: data [K, M] (K-major for wgrad's fp8 GEMMs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kernels_dsl.moe import quantize as K

from .. import language as tl
from . import _arrays

RECIPES = ("mxfp8", "nvfp4", "fp8_block")
INPUT_KINDS = ("float32", "bfloat16", "float16")
# Rows of V per program (1-D blocks and NVFP4's 16 x 16 tiles); FP8's 128 x 128 blocks take one block row.
TILE_ROWS = 64
# MXFP8's (rows, columns) of V per program where V's rows are contiguous (ALONG: wide
# tiles read whole runs of a row) and where its columns are (ACROSS: the columnwise copy
# of a row-major x, tall tiles).
MXFP8_TILE_ALONG = (8, 256)  # H100: 2673 GB/s (64 x 32: 1898)
MXFP8_TILE_ACROSS = (TILE_ROWS, 32)
# NVFP4's (rows, 16-element blocks along them) of V per program, 1 x 16 blocks (16 x 16
# tiles take one block column); the blocks halve until they divide V's row.
NVFP4_TILE = (32, 8)  # H100: 723 GB/s rowwise, 510 the RHT copy (64 x 1: 473, 350)
_MXFP8_FORMATS = {"e4m3": (tl.float8e4nv, 8), "e5m2": (tl.float8e5, 15)}
# One partial per thread of the one program (4 warps): no vector access the mask cannot prove.
_SCALE_PARTIALS_BLOCK = 128


@dataclass
class Quantized:
    """A block-quantized copy of x [M, K].

    data: codes, [M, K] (axis=-1) or [K, M] (axis=0); NVFP4 packs two E2M1 codes per int8
      byte along the blocked axis (even element in the low nibble): [M, K/2] or [K, M/2].
    scale: per block, laid out like data with the blocked axis divided by the block:
      MXFP8 e8m0 [rows, cols/32]; NVFP4 e4m3 [rows, cols/16] (16 x 16 tiles replicate
      theirs over the tile's rows); FP8 block float32 dequant multipliers [rows/BR, cols/128].
    tensor_scale: NVFP4's S_enc, float32 [1], on the device; None otherwise.
    An RHT copy dequantizes to the transformed values (what its GEMMs consume).
    """

    data: Any
    scale: Any
    recipe: str
    axis: int
    shape: tuple[int, int]
    fmt: str = "e4m3"
    block: tuple[int, int] = (1, 32)
    tensor_scale: Any = None
    rht: bool = False
    stochastic: bool = False
    seed: int = 0


def quantize(
    x, recipe, axis=-1, *, fmt="e4m3", block=None, tile2d=False, rht=False, stochastic=False, seed=0, rows_used=None
):
    """x [M, K] (float32, bfloat16 or float16) block-quantized by `recipe`; see Quantized.

    mxfp8: fmt "e4m3" or "e5m2" (gradients), blocks of 32 along the axis.
    nvfp4: 1 x 16 blocks, or 16 x 16 tiles (tile2d, weights); rht: the random Hadamard
      transform of the columnwise copy (axis=0 only); stochastic rounding with 8 random
      bits per element from Philox4x32-10 keyed by `seed` (an int in [0, 2^64)).
      rows_used (rowwise only): an int32 array on x's device whose first element n says
      that only x's first n rows count: the tensor scale is their amax's (rows past n are
      still encoded, with it); read on the device, so ragged MoE rows need no host sync.
    fp8_block: block (1, 128) or (128, 128) along the axis, e4m3.
    """
    kind = _arrays.kind_of("x", x)
    if kind not in INPUT_KINDS:
        raise TypeError(f"x: dtype must be one of {', '.join(INPUT_KINDS)}, got {kind}")
    if len(x.shape) != 2:
        raise ValueError(f"x: must be 2-D [M, K], got shape {tuple(x.shape)}")
    if recipe not in RECIPES:
        raise ValueError(f"recipe: must be one of {', '.join(map(repr, RECIPES))}, got {recipe!r}")
    if axis not in (-1, 0, 1):
        raise ValueError(f"axis: must be -1 (rowwise) or 0 (columnwise), got {axis!r}")
    axis = 0 if axis == 0 else -1
    st = _arrays.strides(x)
    if min(st) < 0:
        raise ValueError(f"x: negative strides {st} are not supported")
    _check_options(recipe, fmt, block, tile2d, rht, stochastic, seed, axis)
    _check_rows_used(rows_used, x, recipe, axis)
    m, k = (int(d) for d in x.shape)
    # V: the matrix whose rows hold the blocks.
    rows, cols, s_r, s_c = (m, k, st[0], st[1]) if axis == -1 else (k, m, st[1], st[0])
    if recipe == "mxfp8":
        return _mxfp8(x, rows, cols, s_r, s_c, axis, fmt)
    if recipe == "fp8_block":
        return _fp8_block(x, rows, cols, s_r, s_c, axis, (1, 128) if block is None else tuple(block))
    return _nvfp4(x, rows, cols, s_r, s_c, axis, tile2d, rht, stochastic, int(seed), rows_used)


def _check_options(recipe, fmt, block, tile2d, rht, stochastic, seed, axis):
    if recipe == "mxfp8" and fmt not in _MXFP8_FORMATS:
        raise ValueError(f"fmt: mxfp8 takes 'e4m3' or 'e5m2', got {fmt!r}")
    if recipe != "mxfp8" and fmt != "e4m3":
        raise ValueError(f"fmt: {recipe} has no fmt option (got {fmt!r})")
    if block is not None and (recipe != "fp8_block" or tuple(block) not in ((1, 128), (128, 128))):
        raise ValueError(f"block: fp8_block takes (1, 128) or (128, 128); {recipe} takes none (got {block!r})")
    if recipe != "nvfp4" and (tile2d or rht or stochastic):
        raise ValueError(f"tile2d, rht, stochastic: nvfp4 options, not {recipe}'s")
    if rht and axis != 0:
        raise ValueError("rht: the random Hadamard transform applies to the columnwise copy (axis=0)")
    if rht and tile2d:
        raise ValueError("rht: the 16 x 16 weight tiles (tile2d) take no Hadamard transform")
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**64:
        raise ValueError(f"seed: an int in [0, 2^64), got {seed!r}")


def _need_multiple(what, n, b, axis_name):
    if n % b:
        raise ValueError(f"x: {what} needs {axis_name} to be a multiple of {b}, got {n}")


def _axis_names(axis):
    return ("x.shape[0]", "x.shape[1]") if axis == 0 else ("x.shape[1]", "x.shape[0]")


def _grid(rows, cols, tr, bc):
    return (-(-rows // tr), cols // bc)


def _launch(kernel, grid, *args, **meta):
    if grid[0] and grid[1]:
        kernel[grid](*args, **meta)


def _mxfp8(x, rows, cols, s_r, s_c, axis, fmt):
    _need_multiple("mxfp8 (blocks of 32)", cols, 32, _axis_names(axis)[0])
    data, scale = _arrays.empty(x, (rows, cols), fmt), _arrays.empty(x, (rows, cols // 32), "e8m0")
    dt, max_exp = _MXFP8_FORMATS[fmt]
    tr, tc = MXFP8_TILE_ALONG if s_c == 1 else MXFP8_TILE_ACROSS
    g = (-(-rows // tr), -(-cols // tc))
    q8, s8 = _arrays.as_int8(data), _arrays.as_int8(scale)
    _launch(K.mxfp8_quantize, g, x, q8, s8, rows, cols, s_r, s_c, FMT=dt, MAX_EXP=max_exp, TR=tr, TC=tc)
    return Quantized(data, scale, "mxfp8", axis, tuple(x.shape), fmt=fmt, block=(1, 32))


def _fp8_block(x, rows, cols, s_r, s_c, axis, block):
    br = block[0]
    row_name, col_name = _axis_names(axis)
    _need_multiple(f"fp8_block {block}", cols, 128, row_name)
    if br > 1:
        _need_multiple(f"fp8_block {block}", rows, br, col_name)
    tr = br if br > 1 else TILE_ROWS
    data, scale = _arrays.empty(x, (rows, cols), "e4m3"), _arrays.empty(x, (-(-rows // br), cols // 128), "float32")
    g = _grid(rows, cols, tr, 128)
    _launch(K.fp8_block_quantize, g, x, _arrays.as_int8(data), scale, rows, cols, s_r, s_c, BR=br, TR=tr, num_warps=8)
    return Quantized(data, scale, "fp8_block", axis, tuple(x.shape), block=block)


def _check_rows_used(n, x, recipe, axis):
    if n is None:
        return
    if recipe != "nvfp4" or axis != -1:
        raise ValueError("rows_used: only NVFP4's rowwise copy has a tensor scale over rows")
    host = isinstance(x, np.ndarray)
    if isinstance(n, np.ndarray) != host or (not host and getattr(n, "device", None) != x.device):
        where = "a numpy array" if host else f"a tensor on {x.device}"
        raise ValueError(f"rows_used: must be {where}, like x")
    if str(n.dtype).removeprefix("torch.") != "int32" or len(n.shape) != 1 or int(n.shape[0]) < 1:
        raise ValueError(f"rows_used: must be a 1-D int32 array of at least one element, got {n.dtype}{tuple(n.shape)}")


def _nvfp4(x, rows, cols, s_r, s_c, axis, tile2d, rht, stochastic, seed, rows_used=None):
    row_name, col_name = _axis_names(axis)
    _need_multiple("nvfp4 (blocks of 16)", cols, 16, row_name)
    br = 16 if tile2d else 1
    if tile2d:
        _need_multiple("nvfp4 16 x 16 tiles", rows, 16, col_name)
    tr, nb = (TILE_ROWS, 1) if tile2d else NVFP4_TILE
    while (cols // 16) % nb:  # whole block columns per program: no column masks
        nb //= 2
    g = _grid(rows, cols, tr, 16 * nb)
    partials = _arrays.empty(x, (max(g[0] * g[1], 1),), "float32")
    tensor_scale = _arrays.empty(x, (1,), "float32")
    data = _arrays.empty(x, (rows, cols // 2), "int8")
    scale = _arrays.empty(x, (rows, cols // 16), "e4m3")
    bounded = rows_used is not None
    n_ptr = rows_used if bounded else partials  # not read unless BOUNDED
    _launch(K.nvfp4_amax, g, x, partials, rows, cols, s_r, s_c, n_ptr, RHT=rht, TR=tr, BOUNDED=bounded, NB=nb)
    n = g[0] * g[1]
    _launch(K.nvfp4_tensor_scale, (1, 1), partials, n, tensor_scale, BLOCK=_SCALE_PARTIALS_BLOCK)
    seeds = (np.int64(seed & 0xFFFFFFFF), np.int64(seed >> 32))  # one type whatever the seed
    meta = dict(BR=br, RHT=rht, STOCHASTIC=stochastic, TR=tr, NB=nb)
    _launch(K.nvfp4_quantize, g, x, tensor_scale, data, _arrays.as_int8(scale), rows, cols, s_r, s_c, *seeds, **meta)
    return Quantized(
        data,
        scale,
        "nvfp4",
        axis,
        tuple(x.shape),
        block=(br, 16),
        tensor_scale=tensor_scale,
        rht=rht,
        stochastic=stochastic,
        seed=seed,
    )


def dequantize(q: Quantized):
    """The float32 values q stands for, in x's orientation [M, K]."""
    if not isinstance(q, Quantized):
        raise TypeError(f"q: expected a moe.Quantized, got {type(q).__name__}")
    m, k = q.shape
    out = _arrays.empty(q.data, (m, k), "float32")
    rows, cols = (m, k) if q.axis == -1 else (k, m)
    trans = q.axis == 0  # the data is xᵀ: write its transpose
    if q.recipe == "mxfp8":
        g = _grid(rows, cols, TILE_ROWS, 32)
        _launch(K.mxfp8_dequantize, g, q.data, _arrays.as_int8(q.scale), out, rows, cols, TRANS=trans, TR=TILE_ROWS)
    elif q.recipe == "fp8_block":
        br = q.block[0]
        tr = br if br > 1 else TILE_ROWS
        g = _grid(rows, cols, tr, 128)
        meta = dict(BR=br, TRANS=trans, TR=tr, num_warps=8)
        _launch(K.fp8_block_dequantize, g, q.data, q.scale, out, rows, cols, **meta)
    elif q.recipe == "nvfp4":
        g = _grid(rows, cols, TILE_ROWS, 16)
        args = (q.data, q.scale, q.tensor_scale, out, rows, cols)
        _launch(K.nvfp4_dequantize, g, *args, TRANS=trans, TR=TILE_ROWS)
    else:
        raise ValueError(f"q.recipe: must be one of {', '.join(map(repr, RECIPES))}, got {q.recipe!r}")
    return out
