"""The persistent grouped GEMM (grouped_gemm_persistent_kernel) on the interpreter: bit for
bit the one-program-per-tile kernel (the same K loop per tile) on ragged splits (empty
experts, the last too, one expert owning every row, G = 1, sums past the rows, negative
sizes), the forward with each bias kind and the dgrad, with INTERP_PROGRAMS programs each
looping over several tiles; against float64 too; its tile order covers every tile once;
the rule and the refusals."""

import importlib
import os
import shutil

import numpy as np
import pytest
import tilefuse as tf
import tilefuse.language as tl
from tilefuse import gpu, moe

from kernels_dsl.moe import grouped_gemm as K
from tests.ptxas import PTXAS, assert_assembles
from tests.python.moe import gemm_reference as ref
from tests.python.moe.gemm_reference import BF16

host = importlib.import_module("tilefuse.moe.grouped_gemm")
TILES = dict(block_m=32, block_n=32, block_k=32, num_warps=4, num_stages=2)
PERSISTENT, PER_TILE = moe.GemmConfig(**TILES, persistent=True), moe.GemmConfig(**TILES, persistent=False)
# (rows R, K, N, splits); the dgrad's N (the K loop) a multiple of block_k.
CASES = {
    "ragged": (150, 96, 64, [40, 0, 61, 33, 0]),
    "one_owns_all": (100, 64, 96, [0, 100, 0]),
    "g1": (90, 72, 32, [77]),
    "past_the_rows": (100, 48, 64, [60, 70, 50]),
    "negative": (80, 40, 64, [30, -5, 40]),
    "many_groups": (200, 32, 64, [7, 0, 0, 19, 33, 1, 0, 64, 5, 40, 0, 31]),
}
SENTINEL = np.float32(-12352.0)  # exact in bf16


def inputs(rng, name):
    rows, k, n, splits = CASES[name]
    x = rng.standard_normal((rows, k)).astype(BF16)
    w = rng.standard_normal((len(splits), n, k)).astype(BF16)
    dy = rng.standard_normal((rows, n)).astype(BF16)
    return rows, k, n, np.array(splits, np.int32), x, w, dy


def prefilled(shape, out_dtype):
    return np.full(shape, SENTINEL, np.float32).astype(BF16 if out_dtype == "bfloat16" else np.float32)


def same_bits(a, b, what):
    assert a.dtype == b.dtype and a.shape == b.shape
    bits = np.uint16 if a.dtype == BF16 else np.uint32
    diff = np.flatnonzero(a.view(bits) != b.view(bits))
    assert diff.size == 0, f"{what}: {diff.size} elements differ, first at flat index {diff[:5]}"


@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("name", CASES)
def test_forward_bitwise_and_float64(rng, name, out_dtype):
    rows, k, n, splits, x, w, _ = inputs(rng, name)
    got = moe.grouped_gemm(x, w, splits, out=prefilled((rows, n), out_dtype), out_dtype=out_dtype, config=PERSISTENT)
    want = moe.grouped_gemm(x, w, splits, out=prefilled((rows, n), out_dtype), out_dtype=out_dtype, config=PER_TILE)
    same_bits(got, want, "y")
    end = ref.offsets(splits, rows)[-1]
    ref.check(got[:end], *ref.forward(x, w, splits), k, out_dtype, "y")
    assert (got[end:].astype(np.float32) == SENTINEL).all(), "pad rows past the sum were written"


@pytest.mark.parametrize("scaled", [False, True])
def test_forward_bias_bitwise(rng, scaled):
    rows, k, n, splits, x, w, _ = inputs(rng, "ragged")
    bias = rng.standard_normal((len(splits), n)).astype(np.float32)
    probs = rng.random(rows).astype(np.float32) if scaled else None
    got, want = (
        moe.grouped_gemm(x, w, splits, bias, probs, out=prefilled((rows, n), "float32"), out_dtype="float32", config=c)
        for c in (PERSISTENT, PER_TILE)
    )
    same_bits(got, want, "y")


@pytest.mark.parametrize("name", CASES)
def test_dgrad_bitwise_and_float64(rng, name):
    rows, k, n, splits, _, w, dy = inputs(rng, name)
    got, want = (
        moe.grouped_gemm_dgrad(dy, w, splits, out=prefilled((rows, k), "bfloat16"), config=c)
        for c in (PERSISTENT, PER_TILE)
    )
    same_bits(got, want, "dx")
    end = ref.offsets(splits, rows)[-1]
    ref.check(got[:end], *ref.dgrad(dy, w, splits), n, "bfloat16", "dx")


# 128-row tiles: a group's last tile whose rows end in its first half runs the 64-row K loop
# (tail_tiles): tails of 1, 63, 64 rows take it, 65 and 127 the full tile; empty groups too.
TAIL_SPLITS = [1, 64, 65, 0, 127, 128, 129, 63, 191]
WIDE = dict(block_m=128, block_n=64, block_k=32, num_warps=8, num_stages=2)


@pytest.mark.parametrize("scaled_bias", [False, True])
def test_tail_tiles_bitwise_and_float64(rng, monkeypatch, scaled_bias):
    monkeypatch.setattr(host, "TAIL_TILES", True)
    splits = np.array(TAIL_SPLITS, np.int32)
    rows, k, n = int(splits.sum()) + 20, 64, 96
    x, dy = rng.standard_normal((rows, k)).astype(BF16), rng.standard_normal((rows, n)).astype(BF16)
    w = rng.standard_normal((len(splits), n, k)).astype(BF16)
    bias = rng.standard_normal((len(splits), n)).astype(np.float32) if scaled_bias else None
    probs = rng.random(rows).astype(np.float32) if scaled_bias else None
    cfgs = [moe.GemmConfig(**WIDE, persistent=p) for p in (True, False)]
    assert host.tail_tiles(cfgs[0]) and not host.tail_tiles(cfgs[0]._replace(block_m=64))
    got, want = (
        moe.grouped_gemm(x, w, splits, bias, probs, out=prefilled((rows, n), "float32"), out_dtype="float32", config=c)
        for c in cfgs
    )
    same_bits(got, want, "y")
    end = ref.offsets(splits, rows)[-1]
    ref.check(got[:end], *ref.forward(x, w, splits, bias, probs), k, "float32", "y")
    assert (got[end:] == SENTINEL).all(), "rows past the sum were written"
    dx, dx_tile = (moe.grouped_gemm_dgrad(dy, w, splits, out=prefilled((rows, k), "bfloat16"), config=c) for c in cfgs)
    same_bits(dx, dx_tile, "dx")
    ref.check(dx[:end], *ref.dgrad(dy, w, splits), n, "bfloat16", "dx")


def fp8_block_inputs(rng, name, dgrad):
    """FP8-block operands of CASES[name] (K, N multiples of 128: whole scale blocks) and their
    dequantized values: the forward's x and w rowwise, the dgrad's dy and w columnwise."""
    rows, _, _, s = CASES[name]
    k, n = 256, 128
    splits = np.array(s, np.int32)
    a = rng.standard_normal((rows, n if dgrad else k)).astype(BF16)
    a[: rows // 3] *= 2.0**-12  # blocks of very different scales
    w = rng.standard_normal((len(s), n, k)).astype(BF16)
    qa = moe.quantize(a, "fp8_block")
    qw = moe.quantize(w.reshape(-1, k), "fp8_block", block=(128, 128), axis=0 if dgrad else -1)
    return rows, k, n, splits, qa, qw, moe.dequantize(qa), moe.dequantize(qw).reshape(w.shape)


FP8_TILES = dict(block_m=32, block_n=32, block_k=64, num_warps=4, num_stages=2)


@pytest.mark.parametrize("ws", [0, 1, 2])
@pytest.mark.parametrize("dgrad", [False, True])
@pytest.mark.parametrize("name", ["ragged", "one_owns_all", "past_the_rows", "negative", "many_groups"])
def test_fp8_block_bitwise_and_float64(rng, name, dgrad, ws):
    """grouped_gemm_fp8_kernel's PERSISTENT form (persistent=True, or warp_specialize 1 / 2, which
    imply it): bit for bit the per-tile fp8 kernel, the forward with a scaled bias and the
    dgrad; against float64 on the dequantized operands."""
    rows, k, n, splits, qa, qw, ad, wd = fp8_block_inputs(rng, name, dgrad)
    cfgs = [moe.GemmConfig(**FP8_TILES, persistent=ws == 0 or None, warp_specialize=ws), moe.GemmConfig(**FP8_TILES)]
    end = ref.offsets(splits, rows)[-1]
    if dgrad:
        got, want = (moe.grouped_gemm_dgrad(qa, qw, splits, out=prefilled((rows, k), "float32"),
                                            out_dtype="float32", config=c) for c in cfgs)  # fmt: skip
        ref.check(got[:end], *ref.dgrad(ad, wd, splits), n, "float32", "dx", recipe="mxfp8")
    else:
        bias = rng.standard_normal((len(splits), n)).astype(np.float32)
        probs = rng.random(rows).astype(np.float32)
        got, want = (moe.grouped_gemm(qa, qw, splits, bias, probs, out=prefilled((rows, n), "float32"),
                                      out_dtype="float32", config=c) for c in cfgs)  # fmt: skip
        ref.check(got[:end], *ref.forward(ad, wd, splits, bias, probs), k + 1, "float32", "y", recipe="mxfp8")
    same_bits(got, want, "dx" if dgrad else "y")
    assert (got[end:] == SENTINEL).all(), "rows past the sum were written"


@pytest.mark.parametrize("half", [32, 128])
@pytest.mark.parametrize("ws", [0, 1])
@pytest.mark.parametrize("dgrad", [False, True])
def test_fp8_block_two_halves(rng, monkeypatch, dgrad, ws, half):
    """A persistent tile wider than FP8_WIDEST_DOT runs as two halves (TWO): bit for bit
    the per-tile kernel at the halves' width, float64 on the dequantized operands. Halves
    of 128: the forward's second half lies past N = 128 (its one B scale, then, per
    column and masked: the interpreter checks every address)."""
    monkeypatch.setattr(host, "FP8_WIDEST_DOT", half)
    rows, k, n, splits, qa, qw, ad, wd = fp8_block_inputs(rng, "many_groups", dgrad)  # the last group has rows
    wide = moe.GemmConfig(**(FP8_TILES | dict(block_n=2 * half)), persistent=True, warp_specialize=ws)
    cfgs = [wide, moe.GemmConfig(**(FP8_TILES | dict(block_n=half)))]
    end = ref.offsets(splits, rows)[-1]
    call = moe.grouped_gemm_dgrad if dgrad else moe.grouped_gemm
    o = k if dgrad else n
    got, want = (call(qa, qw, splits, out=prefilled((rows, o), "float32"), out_dtype="float32", config=c) for c in cfgs)
    if dgrad:
        ref.check(got[:end], *ref.dgrad(ad, wd, splits), n, "float32", "dx", recipe="mxfp8")
    else:
        ref.check(got[:end], *ref.forward(ad, wd, splits), k, "float32", "y", recipe="mxfp8")
    same_bits(got, want, "dx" if dgrad else "y")
    assert (got[end:] == SENTINEL).all(), "rows past the sum were written"


def test_fp8_persistent_refusals(rng):
    x, w = rng.standard_normal((64, 128)).astype(BF16), rng.standard_normal((2, 64, 128)).astype(BF16)
    splits = np.array([30, 34], np.int32)
    qx, qw = moe.quantize(x, "mxfp8"), moe.quantize(w.reshape(-1, 128), "mxfp8")
    for cfg in (moe.GemmConfig(**FP8_TILES, persistent=True), moe.GemmConfig(**FP8_TILES, warp_specialize=2)):
        with pytest.raises(ValueError, match="take FP8-block operands at K steps up to 128"):
            moe.grouped_gemm(qx, qw, splits, config=cfg)


@pytest.mark.parametrize("programs", [1, 2, 7, 64])
def test_program_counts(rng, monkeypatch, programs):
    """Any number of programs gives the same bits: one doing every tile, more programs
    than tiles (some with none)."""
    monkeypatch.setattr(host, "INTERP_PROGRAMS", programs)
    rows, k, n, splits, x, w, _ = inputs(rng, "many_groups")
    got = moe.grouped_gemm(x, w, splits, config=PERSISTENT)
    same_bits(got, moe.grouped_gemm(x, w, splits, config=PER_TILE), "y")


def test_rule():
    cfg = moe.GemmConfig()
    like = np.zeros(1, BF16)
    assert not host.use_persistent(like, 10**6, 8, 4096, cfg), "the interpreter defaults to one program per tile"
    assert host.use_persistent(like, 10, 8, 64, cfg._replace(persistent=True))
    assert not host.fp8_persistent(10**6, cfg, True), "not asked for"
    assert host.fp8_persistent(10, cfg._replace(warp_specialize=2), True)
    assert not host.fp8_persistent(10, cfg._replace(warp_specialize=1, persistent=False), True), "refused"
    assert not host.fp8_persistent(0, cfg._replace(persistent=True), True), "no rows"
    assert host.fp8_default_config(like, "fp8_block") == host.default_config(like), "the interpreter's tiles"
    assert host.fp8_default_config(like, "mxfp8") == host.default_config(like)


def test_refusals(rng):
    rows, k, n, splits, x, w, dy = inputs(rng, "ragged")
    with pytest.raises(ValueError, match=r"persistent=True needs w as one \[G, N, K\] array"):
        moe.grouped_gemm(x, list(w), splits, config=PERSISTENT)
    with pytest.raises(ValueError, match=r"N \(48\) a multiple of config.block_k \(32\)"):
        moe.grouped_gemm_dgrad(dy[:, :48].copy(), w[:, :48].copy(), splits, config=PERSISTENT)
    with pytest.raises(ValueError, match="config.persistent must be None, True or False"):
        moe.grouped_gemm(x, w, splits, config=PERSISTENT._replace(persistent="yes"))


@tf.jit
def _order_kernel(offsets, tile_start, tiles, out, G, tiles_o, GROUP_M: tl.constexpr, BM: tl.constexpr):
    # out[t] = (group, first row, column tile) of each tile t, as the persistent kernel visits them.
    total = tl.load(tile_start + G) * tiles_o
    for t in range(tl.program_id(0), total, tl.num_programs(0)):
        g, m0, _, pid_o = K._persistent_tile(t, offsets, tile_start, tiles, tiles_o, GROUP_M, BM)
        tl.store(out + 3 * t, g)
        tl.store(out + 3 * t + 1, m0)
        tl.store(out + 3 * t + 2, pid_o)


@pytest.mark.parametrize("group_m", [1, 3, 8])
def test_tile_order_covers_each_tile_once(group_m):
    """Each (group, row tile, column tile) once; within a group, bands of group_m row tiles
    sweep the column tiles (the next band starts after the last column tile)."""
    splits = np.array([70, 0, 5, 200, 0, 33, 0], np.int32)
    rows, bm, tiles_o = int(splits.sum()), 32, 3
    s = host._schedule(np.zeros(1, BF16), splits, rows, bm)
    total = int(s.tile_start[-1]) * tiles_o
    out = np.full((total, 3), -1, np.int32)
    _order_kernel[(2,)](s.offsets, s.tile_start, s.tiles, out, len(splits), tiles_o, GROUP_M=group_m, BM=bm)
    want = [
        (g, int(s.offsets[g]) + i * bm, o)
        for g in range(len(splits))
        for i in range(-(-int(splits[g]) // bm))
        for o in range(tiles_o)
    ]
    assert sorted(map(tuple, out.tolist())) == sorted(want)
    g0 = out[: (int(s.tile_start[1]) * tiles_o), :]  # group 0: 3 row tiles
    band = g0[: min(group_m, 3) * tiles_o]
    assert set(band[:, 2]) == set(range(tiles_o)) and len(set(band[:, 1])) == min(group_m, 3)


@pytest.mark.skipif(not shutil.which("ptxas") and not os.path.exists(PTXAS), reason="needs ptxas")
@pytest.mark.parametrize("cfg", [moe.GemmConfig(persistent=True), moe.GemmConfig(128, 256, 64, 8, 3, persistent=True)])
@pytest.mark.parametrize("dgrad", [False, True])
@pytest.mark.parametrize("tail", [False, True])
def test_lowers_to_tma_and_wgmma(monkeypatch, tmp_path, rng, cfg, dgrad, tail):
    """As the host launches it for sm_90a: TMA copies of both operands, bf16 wgmma of the
    config's width, no local memory, no missed fast path; ptxas accepts it, spilling nothing.
    With tail tiles, the half-height K loop too: its two warpgroups split the columns."""
    monkeypatch.setattr(host, "TAIL_TILES", tail)
    seen = []
    monkeypatch.setattr(K, "grouped_gemm_persistent_kernel", Recorder(K.grouped_gemm_persistent_kernel, seen))
    x, dy = rng.standard_normal((256, 512)).astype(BF16), rng.standard_normal((256, 512)).astype(BF16)
    w, splits = rng.standard_normal((4, 512, 512)).astype(BF16), np.array([100, 0, 120, 0], np.int32)
    (moe.grouped_gemm_dgrad(dy, w, splits, config=cfg) if dgrad else moe.grouped_gemm(x, w, splits, config=cfg))
    ((kernel, args, meta),) = seen
    warps, stages = meta.pop("num_warps"), meta.pop("num_stages")
    low = gpu.lower(kernel.compile(*args, **meta), "sm_90a", warps, stages, keep_ir=False)
    assert low["hints"] == []
    assert "cp.async.bulk.tensor" in low["ptx"] and ".local" not in low["ptx"]
    assert f"wgmma.mma_async.sync.aligned.m64n{cfg.block_n}k16.f32.bf16.bf16" in low["ptx"]
    assert (f"wgmma.mma_async.sync.aligned.m64n{cfg.block_n // 2}k16.f32.bf16.bf16" in low["ptx"]) == tail
    assert meta["TAIL"] == tail
    report = assert_assembles(low["ptx"], "sm_90a", tmp_path, verbose=True)
    assert "0 bytes spill stores, 0 bytes spill loads" in report, report


FP8_GPU_CONFIGS = [
    moe.GemmConfig(128, 128, 128, 8, 3, persistent=True),
    moe.GemmConfig(128, 128, 128, 8, 3, warp_specialize=1),
    moe.GemmConfig(64, 128, 128, 4, 3, warp_specialize=2),
]


@pytest.mark.skipif(not shutil.which("ptxas") and not os.path.exists(PTXAS), reason="needs ptxas")
@pytest.mark.parametrize("cfg", FP8_GPU_CONFIGS, ids=["persistent", "ws", "pingpong"])
@pytest.mark.parametrize("dgrad", [False, True])
def test_fp8_block_lowers_to_tma_and_wgmma(monkeypatch, tmp_path, rng, cfg, dgrad):
    """The persistent FP8-block kernel as the host launches it for sm_90a: TMA copies of
    the codes, fp8 wgmma, setmaxnreg where warp-specialized, no missed fast path, and
    ptxas spills nothing (a ping-pong group of one warpgroup keeps 64 x 128 tiles)."""
    seen = []
    monkeypatch.setattr(K, "grouped_gemm_fp8_kernel", Recorder(K.grouped_gemm_fp8_kernel, seen))
    a = rng.standard_normal((256, 512)).astype(BF16)
    w, splits = rng.standard_normal((4, 512, 512)).astype(BF16), np.array([100, 0, 120, 0], np.int32)
    qa = moe.quantize(a, "fp8_block")
    qw = moe.quantize(w.reshape(-1, 512), "fp8_block", block=(128, 128), axis=0 if dgrad else -1)
    (moe.grouped_gemm_dgrad if dgrad else moe.grouped_gemm)(qa, qw, splits, config=cfg)
    ((kernel, args, meta),) = seen
    warps, stages = meta.pop("num_warps"), meta.pop("num_stages")
    assert meta["PERSISTENT"] and meta["WS"] == cfg.warp_specialize
    low = gpu.lower(kernel.compile(*args, **meta), "sm_90a", warps, stages, keep_ir=False)
    assert low["hints"] == []
    assert "cp.async.bulk.tensor" in low["ptx"] and ".local" not in low["ptx"]
    assert f"wgmma.mma_async.sync.aligned.m64n{cfg.block_n}k32.f32.e4m3.e4m3" in low["ptx"]
    assert ("setmaxnreg" in low["ptx"]) == bool(cfg.warp_specialize)
    report = assert_assembles(low["ptx"], "sm_90a", tmp_path, verbose=True)
    assert "0 bytes spill stores, 0 bytes spill loads" in report, report


class Recorder:
    """Records a launch instead of running it."""

    def __init__(self, kernel, seen):
        self.kernel, self.seen = kernel, seen

    def __getitem__(self, grid):
        return lambda *args, **meta: self.seen.append((self.kernel, args, meta))
