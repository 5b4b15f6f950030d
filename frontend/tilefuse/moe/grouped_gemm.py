"""moe.grouped_gemm / grouped_gemm_dgrad / grouped_gemm_wgrad (SPEC-moe.md §1, §7):
argument checks, output allocation and launches of kernels_dsl/moe/grouped_gemm.py, whose
docstring describes the device-side tile schedule.

x, dy: [R, K] / [R, N] bf16, contiguous. w: [G, N, K] bf16 or a list of G arrays [N, K]
(passed copy-free: the kernel addresses expert g at an element offset from w[0]'s
address; the table of offsets goes to the device once per distinct list). The forward
also takes block-scaled fp8 operands (moe.Quantized, MXFP8 or FP8-block), and all three
take NVFP4 operands (_gemm_nvfp4.py says which copies).
splits: int32 [G] on x's device, never read on the host: a negative size or sizes
summing past R cannot be refused without a device-to-host sync, so the kernels clamp
them (a negative size is 0; the groups end at row R). Rows past the sum are not written
in y and dx (pass `out` to keep their contents) and not read by the wgrad.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from kernels_dsl.moe import grouped_gemm as K

from .. import cdiv, next_power_of_2
from ..jit import interp_buffers
from . import _arrays, tuned
from .quant import Quantized

OUT_KINDS = ("bfloat16", "float32")
FP8_RECIPES = ("mxfp8", "fp8_block")


class GemmConfig(NamedTuple):
    """Tiles (powers of two) and launch options. block_m: rows per tile (the schedule's
    tile); block_n: output columns; block_k: the K loop's step (for the wgrad: rows).
    persistent (the bf16 GEMMs): True runs one program per SM looping over the tiles
    (grouped_gemm_persistent_kernel, grouped_wgrad_persistent_kernel), False one program
    per tile, None lets use_persistent decide (the wgrad: persistent on the GPU). The
    FP8-block forward and dgrad (K steps up to 128): True or warp_specialize runs
    grouped_gemm_fp8_kernel's PERSISTENT form (FP8-block's default config does), whose
    tiles wider than 128 columns are two dots of half the width.
    warp_specialize (the persistent bf16 and FP8-block forward and dgrad, the persistent
    bf16 wgrad, on sm_90a; implies persistent): True or 1, a producer warpgroup issues
    the TMA copies, num_warps consumer warps the rest (tl.range's warp_specialize); 2,
    two groups of num_warps consumer warps take the tiles in turns (ping-pong,
    num_consumer_groups=2; not the wgrad); elsewhere ignored."""

    block_m: int = 128
    block_n: int = 128
    block_k: int = 64
    num_warps: int = 8
    num_stages: int = 3
    persistent: bool | None = None
    warp_specialize: int = 0


def default_config(x) -> GemmConfig:
    """The GPU's wgmma tiles; small tiles on the interpreter (numpy), where a tile's
    cost is its size."""
    return GemmConfig(32, 32, 32, 4, 2) if isinstance(x, np.ndarray) else GemmConfig()


# FP8-block on the GPU where no tuned entry covers the call: 128-wide K steps (one scale a
# row and step, promoted from registers), warp-specialized persistent (bench/RESULTS.md,
# 2026-12-05: 1.5-1.6x the per-tile kernel on the H100).
FP8_BLOCK_CONFIG = GemmConfig(128, 256, 128, 8, 3, None, 1)


def fp8_default_config(x, recipe) -> GemmConfig:
    """default_config, but FP8-block's own on the GPU (FP8_BLOCK_CONFIG)."""
    return FP8_BLOCK_CONFIG if recipe == "fp8_block" and not isinstance(x, np.ndarray) else default_config(x)


def _config(fn, config, x, tuned_op=None, n=0, k=0, default=None) -> GemmConfig:
    """config, checked; where None, the tuned table's entry for tuned_op (a call of the kind
    moe.tuned measured, on the GPU, producing n columns from a k reduction), else `default`
    (None: default_config)."""
    cfg = config
    if cfg is None and tuned_op is not None and not isinstance(x, np.ndarray):
        cfg = tuned.lookup(_arch(x.device), tuned_op, n, k)
    if cfg is None:
        cfg = default_config(x) if default is None else default
    if not isinstance(cfg, GemmConfig):
        raise TypeError(f"{fn}: config must be a moe.GemmConfig, got {type(cfg).__name__}")
    for f in GemmConfig._fields[:4]:
        v = getattr(cfg, f)
        if not isinstance(v, int) or v < 1 or v & (v - 1):
            raise ValueError(f"{fn}: config.{f} must be a power of two, got {v!r}")
    if min(cfg.block_m, cfg.block_n, cfg.block_k) < 16:
        raise ValueError(f"{fn}: config tiles must be at least 16 (a dot's minimum), got {cfg}")
    if cfg.persistent not in (None, True, False):
        raise ValueError(f"{fn}: config.persistent must be None, True or False, got {cfg.persistent!r}")
    if cfg.warp_specialize not in (0, 1, 2):
        raise ValueError(f"{fn}: config.warp_specialize must be 0/False, 1/True or 2, got {cfg.warp_specialize!r}")
    return cfg


def _check(fn, name, a, like, kinds, ndim):
    _arrays.check(fn, name, a, kinds, ndim, like)


def _check_splits(fn, splits, like, groups):
    _check(fn, "splits", splits, like, ("int32",), 1)
    if groups is not None and splits.shape[0] != groups:
        raise ValueError(f"{fn}: splits must have one size per group ({groups}), got shape {tuple(splits.shape)}")
    if splits.shape[0] < 1:
        raise ValueError(f"{fn}: splits must name at least one group")


def _address(a) -> int:
    return a.ctypes.data if isinstance(a, np.ndarray) else a.data_ptr()


class _Weights(NamedTuple):
    ptr: object  # the array whose address the kernel starts from
    offsets: object  # int64 [G] element offsets of the experts (list form), else None
    aligned: bool  # every expert starts 16-byte aligned
    groups: int
    shape: tuple[int, int]  # [N, K] of one expert
    arrays: tuple = ()  # the list's arrays (the interpreter's bounds checks need them)


@functools.lru_cache(maxsize=64)
def _device_table(device, offsets: tuple):
    """The int64 offsets on `device`, copied once per distinct list: the copy from the host
    waits for the stream, which a call with the same weights then never does again."""
    import torch

    return torch.tensor(offsets, dtype=torch.int64, device=device)


def _weights(fn, w, like) -> _Weights:
    if not isinstance(w, (list, tuple)):
        _check(fn, "w", w, like, ("bfloat16",), 3)
        g, n, k = (int(d) for d in w.shape)
        return _Weights(w, None, True, g, (n, k))
    if not w:
        raise ValueError(f"{fn}: w must hold at least one expert's weight")
    for i, wi in enumerate(w):
        _check(fn, f"w[{i}]", wi, like, ("bfloat16",), 2)
        if tuple(wi.shape) != tuple(w[0].shape):
            raise ValueError(f"{fn}: w[{i}] has shape {tuple(wi.shape)} but w[0] has {tuple(w[0].shape)}")
    base = _address(w[0])
    deltas = [_address(wi) - base for wi in w]
    if any(d % 2 for d in deltas):
        raise ValueError(f"{fn}: the experts of w must be 2-byte aligned relative to each other")
    offsets = [d // 2 for d in deltas]
    aligned = base % 16 == 0 and all(o % 8 == 0 for o in offsets)
    table = np.array(offsets, np.int64) if isinstance(like, np.ndarray) else _device_table(like.device, tuple(offsets))
    n, k = (int(d) for d in w[0].shape)
    return _Weights(w[0], table, aligned, len(w), (n, k), tuple(w))


def _out(fn, out, like, shape, out_dtype):
    if out_dtype not in OUT_KINDS:
        raise ValueError(f"{fn}: out_dtype must be one of {OUT_KINDS}, got {out_dtype!r}")
    if out is None:
        return _arrays.empty(like, shape, out_dtype)
    _check(fn, "out", out, like, (out_dtype,), len(shape))
    if tuple(out.shape) != shape:
        raise ValueError(f"{fn}: out must have shape {shape}, got {tuple(out.shape)}")
    return out


class _Schedule(NamedTuple):
    offsets: object  # int32 [G + 1]
    padded: object  # int32 [G + 1]
    tile_start: object  # int32 [G + 1]
    tiles: object  # int32 [slots, 2]
    slots: int


def _schedule(like, splits, rows, block_m, pad=K.PAD) -> _Schedule:
    """The device-side schedule of splits for tiles of block_m rows (two tiny launches);
    `padded` aligns each group to a multiple of `pad` rows."""
    g = int(splits.shape[0])
    slots = max(1, cdiv(rows, block_m) + min(g, rows))
    s = _Schedule(*(_arrays.empty(like, (g + 1,), "int32") for _ in range(3)), None, slots)
    s = s._replace(tiles=_arrays.empty(like, (slots, 2), "int32"))
    K.group_offsets[(1,)](
        splits, s.offsets, s.padded, s.tile_start, g, rows, BM=block_m, BG=min(32, next_power_of_2(g)), PAD_TO=pad
    )
    K.group_tiles[(g,)](s.offsets, s.tile_start, s.tiles, BM=block_m, BT=128)
    return s


def _offsets(like, splits, rows):
    """The groups' row offsets [G + 1] from splits, on the device (one tiny launch)."""
    g = int(splits.shape[0])
    offsets, padded, tile_start = (_arrays.empty(like, (g + 1,), "int32") for _ in range(3))
    K.group_offsets[(1,)](splits, offsets, padded, tile_start, g, rows, BM=128, BG=min(32, next_power_of_2(g)))
    return offsets


# Programs of the persistent kernel on the interpreter: a few, so that tests see programs
# looping over several tiles and programs with none.
INTERP_PROGRAMS = 3
PERSISTENT_WAVES = 2  # the rule: persistent from this many waves of tiles per SM up
PERSISTENT_GROUP_M = 8  # row tiles side by side in the persistent order (Triton's GROUP_SIZE_M)
PERSISTENT_PROGRAMS_PER_SM = 1
# FP8-block's forward and dgrad codes through tensor descriptors (TMA on sm_90a), else
# pointer loads (cp.async).
FP8_DESCRIPTORS = True


def fp8_descriptors(block_scaled, block_c) -> bool:
    """Whether the fp8 GEMM reads its codes through descriptors: FP8-block at K steps up
    to 128 (ptxas spills MXFP8's overlapped 32-chunks and K steps of 256 through TMA)."""
    return FP8_DESCRIPTORS and block_scaled and block_c <= 128


def bias_kind(bias, scale) -> int:
    """The kernels' BIAS constexpr: 0 no bias, 1 a bias, 2 a bias scaled by `scale` (the probs)."""
    return 0 if bias is None else 1 if scale is None else 2


@functools.lru_cache(maxsize=8)
def _arch(device) -> str:
    from .. import gpu

    return gpu.arch_of_device(device.index)


@functools.lru_cache(maxsize=8)
def _sm_count(device) -> int:
    import torch

    return torch.cuda.get_device_properties(device).multi_processor_count


def num_programs(like) -> int:
    """The persistent kernel's grid: PERSISTENT_PROGRAMS_PER_SM programs per SM
    (INTERP_PROGRAMS on numpy). More than fit on an SM at once would leave the tiles of
    the programs that wait to the end."""
    if isinstance(like, np.ndarray):
        return INTERP_PROGRAMS
    return _sm_count(like.device) * PERSISTENT_PROGRAMS_PER_SM


def persistent_fits(wt: _Weights, rows, c, cfg, dgrad) -> bool:
    """Whether the persistent kernel computes this product: stacked weights (one
    descriptor over [G·N, K]), rows to read, and for the dgrad K steps within an expert."""
    return wt.offsets is None and rows > 0 and (not dgrad or c % cfg.block_k == 0)


def use_persistent(like, rows, groups, o, cfg) -> bool:
    """The rule when config.persistent is None: on the GPU, persistent once the tile
    schedule's upper bound is PERSISTENT_WAVES waves of tiles per SM (below that a grid
    of one program per tile runs in about one wave and a persistent loop saves nothing).
    bench/moe_bench.py measures both sides of it (its 'persistent' rows)."""
    if cfg.persistent is not None:
        return cfg.persistent
    if isinstance(like, np.ndarray):
        return False
    slots = cdiv(rows, cfg.block_m) + min(groups, rows)
    return slots * cdiv(o, cfg.block_n) >= PERSISTENT_WAVES * num_programs(like)


def wgrad_persistent(like, n, k, cfg) -> bool:
    """Whether the bf16 wgrad runs grouped_wgrad_persistent_kernel: config.persistent, or
    where None, on the GPU when dy's and x's rows are whole 16-element runs (its K steps
    are TMA copies of dy [R, N] and x [R, K]; the launch specializes N % 16 and K % 16;
    other shapes take the pointer kernel)."""
    if cfg.persistent is not None:
        return cfg.persistent
    return not isinstance(like, np.ndarray) and n % 16 == 0 and k % 16 == 0


# The persistent forward and dgrad run a group's last tile at block_m / 2 rows when its
# rows end in the first half. Off until verified on a GPU: tested on the interpreter (bit
# for bit the full tiles) and by ptxas (no spills) only; bench/moe_bench.py --tail-tiles.
TAIL_TILES = False


def tail_tiles(cfg) -> bool:
    """Whether TAIL_TILES applies: tiles of 128 rows and more (64-row tiles stay on wgmma),
    not warp-specialized (one K loop per role)."""
    return TAIL_TILES and cfg.block_m >= 128 and not cfg.warp_specialize


# The persistent fp8 kernel's tiles wider than this run as two halves, one dot each (its TWO):
# the partial sums of a 256-wide dot would not fit a consumer's registers beside the tile's.
FP8_WIDEST_DOT = 128


def fp8_persistent(rows, cfg, desc) -> bool:
    """Whether the fp8 GEMM runs grouped_gemm_fp8_kernel's PERSISTENT form: asked for
    (config.persistent or warp_specialize; FP8-block's default config asks for both)."""
    return rows > 0 and desc and cfg.persistent is not False and bool(cfg.persistent or cfg.warp_specialize)


def _persistent_gemm(a, wt: _Weights, splits, out, bias, scale, c, o, dgrad, cfg):
    rows = int(a.shape[0])
    sched = _schedule(a, splits, rows, cfg.block_m)
    K.grouped_gemm_persistent_kernel[(num_programs(a),)](
        a,
        wt.ptr,
        splits if bias is None else bias,
        splits if scale is None else scale,
        out,
        sched.offsets,
        sched.tile_start,
        sched.tiles,
        wt.groups,
        rows,
        c,
        o,
        DGRAD=dgrad,
        BIAS=bias_kind(bias, scale),
        BM=cfg.block_m,
        BO=cfg.block_n,
        BC=cfg.block_k,
        GROUP_M=PERSISTENT_GROUP_M,
        WS=int(cfg.warp_specialize),
        TAIL=tail_tiles(cfg),
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )
    return out


def _gemm(fn, a, wt: _Weights, splits, out, bias, scale, c, o, strides, cfg, dgrad=False):
    rows = int(a.shape[0])
    fits = persistent_fits(wt, rows, c, cfg, dgrad)
    if cfg.persistent and not fits and rows > 0:
        raise ValueError(
            f"{fn}: config.persistent=True needs w as one [G, N, K] array"
            + (f" and N ({c}) a multiple of config.block_k ({cfg.block_k})" if dgrad else "")
        )
    if fits and use_persistent(a, rows, wt.groups, o, cfg):
        return _persistent_gemm(a, wt, splits, out, bias, scale, c, o, dgrad, cfg)
    sched = _schedule(a, splits, rows, cfg.block_m)
    grid = (sched.slots, cdiv(o, cfg.block_n))
    with interp_buffers(*(x for x in wt.arrays if isinstance(x, np.ndarray))):
        K.grouped_gemm_kernel[grid](
            a,
            wt.ptr,
            splits if wt.offsets is None else wt.offsets,
            splits if bias is None else bias,
            splits if scale is None else scale,
            out,
            sched.offsets,
            sched.tile_start,
            sched.tiles,
            wt.groups,
            c,
            o,
            *strides,
            W_LIST=wt.offsets is not None,
            W_ALIGNED=wt.aligned,
            BIAS=bias_kind(bias, scale),
            BM=cfg.block_m,
            BO=cfg.block_n,
            BC=cfg.block_k,
            num_warps=cfg.num_warps,
            num_stages=cfg.num_stages,
        )
    return out


def grouped_gemm(x, w, splits, bias=None, bias_scale=None, *, out=None, out_dtype="bfloat16", config=None):
    """y [R, N]: y_g = x_g w_gᵀ (+ b_g, or + b_g · s_r with bias_scale s = probs [R] fp32)
    for x [R, K] bf16, w [G, N, K] (or G arrays [N, K]), bias [G, N] (bf16 or fp32).
    Block-scaled fp8 (MXFP8 or FP8-block): x and w moe.Quantized rowwise copies of x and
    of w.reshape(G·N, K); each 32-wide K block's products promoted to fp32 times their
    two scales (an FP8-block 128-block is four 32-blocks of one scale)."""
    fn = "grouped_gemm"
    if _gemm_nvfp4.is_nvfp4(x, w):
        return _gemm_nvfp4.gemm(fn, x, w, splits, bias, bias_scale, out, out_dtype, config, dgrad=False)
    if isinstance(x, Quantized) or isinstance(w, Quantized):
        return _fp8_gemm(fn, x, w, splits, bias, bias_scale, out, out_dtype, config, dgrad=False)
    _check(fn, "x", x, x, ("bfloat16",), 2)
    wt = _weights(fn, w, x)
    (n, k), rows = wt.shape, int(x.shape[0])
    if int(x.shape[1]) != k:
        raise ValueError(f"{fn}: x has {int(x.shape[1])} columns but w's experts are [N, K] = [{n}, {k}]")
    _check_splits(fn, splits, x, wt.groups)
    _check_bias(fn, bias, bias_scale, x, wt.groups, n, rows)
    y = _out(fn, out, x, (rows, n), out_dtype)
    cfg = _config(fn, config, x, None if bias is not None else "fwd bf16", n, k)  # moe.tuned: measured without bias
    return _gemm(fn, x, wt, splits, y, bias, bias_scale, k, n, (1, k), cfg)


def _check_bias(fn, bias, bias_scale, x, groups, n, rows):
    if bias is not None:
        _check(fn, "bias", bias, x, ("bfloat16", "float32"), 2)
        if tuple(bias.shape) != (groups, n):
            raise ValueError(f"{fn}: bias must have shape ({groups}, {n}), got {tuple(bias.shape)}")
    if bias_scale is not None:
        if bias is None:
            raise ValueError(f"{fn}: bias_scale scales the bias; pass a bias")
        _check(fn, "bias_scale", bias_scale, x, ("float32",), 1)
        if tuple(bias_scale.shape) != (rows,):
            raise ValueError(f"{fn}: bias_scale must have shape ({rows},), got {tuple(bias_scale.shape)}")


def _check_fp8(fn, name, q, axis, shape_text):
    if not isinstance(q, Quantized):
        raise TypeError(f"{fn}: with a quantized operand, {name} must be a moe.Quantized too, got {type(q).__name__}")
    if q.recipe not in FP8_RECIPES or q.axis != axis:
        side = "rowwise" if axis == -1 else "columnwise (axis=0)"
        raise ValueError(
            f"{fn}: {name} must be a {side} MXFP8 or FP8-block copy (moe.quantize({shape_text}, ...)), "
            f"got {q.recipe} axis={q.axis}"
        )
    # Scale rows per block: 0 for MXFP8's e8m0 codes, FP8-block's 1 or 128 (float32 scales).
    return 0 if q.recipe == "mxfp8" else q.block[0]


def _fp8_gemm(fn, a, w, splits, bias, bias_scale, out, out_dtype, config, dgrad):
    """The forward (y = x wᵀ) or the dgrad (dx = dy w) on block-scaled fp8 operands, one
    recipe: MXFP8 (e4m3 or e5m2 each) or FP8-block. a = moe.quantize(x or dy, ...) rowwise;
    w = moe.quantize(w.reshape(G·N, K), ...), rowwise for the forward, columnwise (axis=0,
    stored [K, G·N]) for the dgrad."""
    name = "dy" if dgrad else "x"
    sa_rows = _check_fp8(fn, name, a, -1, name)
    sw_rows = _check_fp8(fn, "w", w, 0 if dgrad else -1, "w.reshape(G * N, K)" + (", axis=0" if dgrad else ""))
    if a.recipe != w.recipe:
        raise ValueError(f"{fn}: {name} and w must share a recipe, got {a.recipe} and {w.recipe}")
    like, mx = a.data, a.recipe == "mxfp8"
    _check_splits(fn, splits, like, None)
    groups, (rows, c) = int(splits.shape[0]), a.shape
    (gn, k) = w.shape
    if gn % groups or (gn // groups if dgrad else k) != c:
        raise ValueError(
            f"{fn}: w quantizes [G * N, K] with G = {groups} and {'N' if dgrad else 'K'} = {c}, got shape {w.shape}"
        )
    n = gn // groups  # dy's rowwise blocks make N a multiple of 32: experts start on 32-blocks of Wq
    o = k if dgrad else n
    _check_bias(fn, bias, bias_scale, like, groups, o, rows)
    y = _out(fn, out, like, (rows, o), out_dtype)
    # moe.tuned measured them without bias, per recipe ("fwd mxfp8", "dgrad fp8_block", ...)
    tuned_op = None if bias is not None else f"{'dgrad' if dgrad else 'fwd'} {a.recipe}"
    cfg = _config(fn, config, like, tuned_op, o, c, fp8_default_config(like, a.recipe))
    # FP8-block: a step within one 128-block (one scale per row and step), or of whole
    # 128-blocks (each promoted while the next one's wgmma run).
    block_c = next(
        b for b in (cfg.block_k, 128, 64, 32) if c % b == 0 and b % 32 == 0 and (b <= 128 or b % 128 == 0 or mx)
    )
    sched = _schedule(like, splits, rows, cfg.block_m)
    codes = _arrays.as_int8 if mx else (lambda s: s)
    desc = fp8_descriptors(not mx, block_c)
    if (cfg.persistent or cfg.warp_specialize) and not desc:
        raise ValueError(
            f"{fn}: config.persistent / warp_specialize take FP8-block operands at K steps up to 128 "
            f"(the codes through descriptors), got {a.recipe} with block_k {block_c}"
        )
    args = (
        _arrays.as_int8(a.data),
        codes(a.scale),
        _arrays.as_int8(w.data),
        codes(w.scale),
        splits if bias is None else bias,
        splits if bias_scale is None else bias_scale,
        y,
        sched.offsets,
        sched.tile_start,
        sched.tiles,
        groups,
        c,
        o,
        *((0, n // 32, gn) if dgrad else (n, 0, k)),
        int(a.scale.shape[1]),
        int(w.scale.shape[1]),
        rows,
        int(w.data.shape[0]),
    )
    meta = dict(FA=a.fmt, FW=w.fmt, SA_ROWS=sa_rows, SW_ROWS=sw_rows, BIAS=bias_kind(bias, bias_scale))
    persistent = fp8_persistent(rows, cfg, desc)
    two = persistent and cfg.block_n > FP8_WIDEST_DOT
    bo = cfg.block_n // 2 if two else cfg.block_n
    # A dot's columns in one 128-block of Wq's rows: B's scale is one value a K step.
    # Two halves read the second's one scale unmasked: no half past O.
    meta["SW_ONE"] = (
        sw_rows == 128 and block_c <= 128 and bo <= 128 and (dgrad or n % 128 == 0) and (not two or o % (2 * bo) == 0)
    )
    meta |= dict(BM=cfg.block_m, BO=bo, BC=block_c, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    if persistent:
        meta |= dict(PERSISTENT=True, GROUP_M=PERSISTENT_GROUP_M, WS=int(cfg.warp_specialize), TWO=two)
        K.grouped_gemm_fp8_kernel[(num_programs(like),)](*args, DESC=True, **meta)
    else:
        K.grouped_gemm_fp8_kernel[(sched.slots, cdiv(o, cfg.block_n))](*args, DESC=desc, **meta)
    return y


def grouped_gemm_dgrad(dy, w, splits, *, out=None, out_dtype="bfloat16", config=None):
    """dx [R, K]: dx_g = dy_g w_g for dy [R, N] bf16, w [G, N, K] (or G arrays [N, K]).
    Block-scaled fp8: dy = moe.quantize(dy, ...) rowwise and w = moe.quantize(w.reshape(G·N,
    K), ..., axis=0) (the columnwise copy, stored transposed: K-major for the fp8 wgmma)."""
    fn = "grouped_gemm_dgrad"
    if _gemm_nvfp4.is_nvfp4(dy, w):
        return _gemm_nvfp4.gemm(fn, dy, w, splits, None, None, out, out_dtype, config, dgrad=True)
    if isinstance(dy, Quantized) or isinstance(w, Quantized):
        return _fp8_gemm(fn, dy, w, splits, None, None, out, out_dtype, config, dgrad=True)
    _check(fn, "dy", dy, dy, ("bfloat16",), 2)
    wt = _weights(fn, w, dy)
    (n, k), rows = wt.shape, int(dy.shape[0])
    if int(dy.shape[1]) != n:
        raise ValueError(f"{fn}: dy has {int(dy.shape[1])} columns but w's experts are [N, K] = [{n}, {k}]")
    _check_splits(fn, splits, dy, wt.groups)
    dx = _out(fn, out, dy, (rows, k), out_dtype)
    cfg = _config(fn, config, dy, "dgrad bf16", k, n)
    return _gemm(fn, dy, wt, splits, dx, None, None, n, k, (k, 1), cfg, dgrad=True)


def grouped_gemm_wgrad(dy, x, splits, *, out_dtype="bfloat16", config=None):
    """dw [G, N, K]: dw_g = dy_gᵀ x_g for dy [R, N], x [R, K] bf16 (an empty group's dw_g
    is zero). dy is read as it lies: the GEMM's A is the transpose of its row tiles, which
    wgmma reads M-major. Block-scaled fp8 (MXFP8, FP8-block 1 x 128): dy and x their
    columnwise copies (moe.quantize(·, axis=0), stored transposed: K-major), in which each
    group is whole scale blocks (32 rows; 128), as moe.fused and the MLP lay them out;
    each 32 rows' products promoted to fp32 times their scales. NVFP4: dy and x
    columnwise copies (_gemm_nvfp4.py)."""
    fn = "grouped_gemm_wgrad"
    if _gemm_nvfp4.is_nvfp4(dy, x):
        return _gemm_nvfp4.wgrad(fn, dy, x, splits, out_dtype, config)
    if isinstance(dy, Quantized) or isinstance(x, Quantized):
        return _fp8_wgrad(fn, dy, x, splits, out_dtype, config)
    _check(fn, "dy", dy, dy, ("bfloat16",), 2)
    _check(fn, "x", x, dy, ("bfloat16",), 2)
    rows, n = (int(d) for d in dy.shape)
    if int(x.shape[0]) != rows:
        raise ValueError(f"{fn}: x has {int(x.shape[0])} rows but dy has {rows}")
    k = int(x.shape[1])
    _check_splits(fn, splits, dy, None)
    groups = int(splits.shape[0])
    cfg = _config(fn, config, dy, "wgrad bf16", k, n)
    dw = _out(fn, None, dy, (groups, n, k), out_dtype)
    if cfg.warp_specialize == 2:
        raise ValueError(
            f"{fn}: config.warp_specialize=2 (ping-pong) does not apply to the bf16 wgrad: its masked last step "
            "stages operands outside the pipeline's rings, one buffer for both groups; use 1"
        )
    offsets = _offsets(dy, splits, rows)
    if rows > 0 and (wgrad_persistent(dy, n, k, cfg) or cfg.warp_specialize):
        K.grouped_wgrad_persistent_kernel[(num_programs(dy),)](
            dy,
            x,
            dw,
            offsets,
            groups,
            n,
            k,
            rows,
            BN=cfg.block_m,
            BK=cfg.block_n,
            BR=cfg.block_k,
            GROUP_N=PERSISTENT_GROUP_M,
            WS=int(cfg.warp_specialize),
            num_warps=cfg.num_warps,
            num_stages=cfg.num_stages,
        )
        return dw
    grid = (cdiv(n, cfg.block_m) * cdiv(k, cfg.block_n), groups)
    K.grouped_wgrad_kernel[grid](
        dy,
        x,
        dw,
        offsets,
        n,
        k,
        BN=cfg.block_m,
        BK=cfg.block_n,
        BR=cfg.block_k,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )
    return dw


def _wgrad_setup(fn, dy, x, splits, out_dtype, config):
    """(rows, N, K, G, config, dw [G, N, K], the groups' offsets) for a wgrad on columnwise
    copies dy (RP, N) and x (RP, K) of the same rows, checked."""
    (rows, n), (rows_x, k) = dy.shape, x.shape
    if rows_x != rows:
        raise ValueError(f"{fn}: x has {rows_x} rows but dy has {rows}")
    like = dy.data
    _check_splits(fn, splits, like, None)
    groups = int(splits.shape[0])
    cfg = _config(fn, config, like)
    dw = _out(fn, None, like, (groups, n, k), out_dtype)
    return rows, n, k, groups, cfg, dw, _schedule(like, splits, rows, cfg.block_k).offsets


def _fp8_wgrad(fn, dy, x, splits, out_dtype, config):
    """dw_g = dy_gᵀ x_g [G, N, K] from block-scaled fp8 columnwise copies (the docstring
    of grouped_gemm_wgrad): the groups of splits are rows of the copies, whole scale
    blocks, which the kernel does not check (the sizes are on the device). The K step is
    one block of 32 rows (MXFP8) or divides 128 (FP8-block): within one group's blocks."""
    s_rows = [_check_fp8(fn, name, q, 0, f"{name}, axis=0") for name, q in (("dy", dy), ("x", x))]
    if dy.recipe != x.recipe or s_rows[0] != s_rows[1]:
        raise ValueError(
            f"{fn}: dy and x must share a recipe and block, got {dy.recipe} {dy.block}, {x.recipe} {x.block}"
        )
    if s_rows[0] > 1:
        raise ValueError(f"{fn}: FP8-block wgrad copies take 1 x 128 blocks along the rows, got {dy.block}")
    rows, n, k, groups, cfg, dw, offsets = _wgrad_setup(fn, dy, x, splits, out_dtype, config)
    codes = _arrays.as_int8 if dy.recipe == "mxfp8" else (lambda a: a)
    K.grouped_wgrad_fp8_kernel[(cdiv(n, cfg.block_m) * cdiv(k, cfg.block_n), groups)](
        _arrays.as_int8(dy.data),
        codes(dy.scale),
        _arrays.as_int8(x.data),
        codes(x.scale),
        dw,
        offsets,
        n,
        k,
        rows,
        int(dy.scale.shape[1]),
        FD=dy.fmt,
        FX=x.fmt,
        S_ROWS=s_rows[0],
        BN=cfg.block_m,
        BK=cfg.block_n,
        BR=32 if dy.recipe == "mxfp8" else min(max(cfg.block_k, 32), 128),
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )
    return dw


from . import _gemm_nvfp4  # noqa: E402  (it imports the helpers above)
