"""moe.grouped_gemm / _dgrad / _wgrad on the interpreter against float64 references
(gemm_reference.py): several tiles per dim with partial tiles, empty experts (the last
too), one expert owning every row, G = 1, pad rows past the sum (left as they were),
splits clamped on the device (negative, summing past the rows), both weight forms, bias
and scaled bias, the device-side tile schedule, and bad input."""

import importlib

import numpy as np
import pytest
from tilefuse import moe

from kernels_dsl.moe import grouped_gemm as kernels
from tests.python.moe import gemm_reference as ref
from tests.python.moe.gemm_reference import BF16

# The host module (moe.grouped_gemm is its function).
host = importlib.import_module("tilefuse.moe.grouped_gemm")
SMALL = moe.GemmConfig(32, 32, 32, 4, 2)  # >= 2 tiles per dim at these shapes
# (rows R, K, N, splits): partial tiles everywhere; pad rows where the sum is below R.
CASES = {
    "several": (150, 96, 80, [40, 0, 61, 33, 0]),
    "one_owns_all": (100, 64, 48, [0, 100, 0]),
    "g1": (90, 72, 40, [77]),
    "sum_is_rows": (97, 40, 72, [32, 64, 1]),
    "past_the_rows": (100, 48, 40, [60, 70, 50]),
    "negative": (80, 48, 40, [30, -5, 40]),
    "no_rows": (0, 48, 40, [3, 0]),
}
SENTINEL = np.float32(-12352.0)  # exact in bf16


def bf16(rng, *shape):
    return rng.standard_normal(shape).astype(BF16)


def inputs(rng, name):
    rows, k, n, splits = CASES[name]
    return rows, k, n, np.array(splits, np.int32), bf16(rng, rows, k), bf16(rng, len(splits), n, k)


def prefilled(shape, out_dtype):
    return np.full(shape, SENTINEL, np.float32).astype(BF16 if out_dtype == "bfloat16" else np.float32)


def check_rows(got, expected, mag, terms, splits, out_dtype, what):
    """The groups' rows against float64; rows past the (clamped) sum still the sentinel."""
    end = ref.offsets(splits, got.shape[0])[-1]
    ref.check(got[:end], expected, mag, terms, out_dtype, what)
    assert (got[end:].astype(np.float32) == SENTINEL).all(), f"{what}: pad rows past row {end} were written"


@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("name", CASES)
def test_forward(rng, name, out_dtype):
    rows, k, n, splits, x, w = inputs(rng, name)
    y = moe.grouped_gemm(x, w, splits, out=prefilled((rows, n), out_dtype), out_dtype=out_dtype, config=SMALL)
    check_rows(y, *ref.forward(x, w, splits), k, splits, out_dtype, "y")


@pytest.mark.parametrize("scaled", [False, True])
@pytest.mark.parametrize("bias_dtype", [np.float32, BF16])
def test_forward_bias(rng, scaled, bias_dtype):
    rows, k, n, splits, x, w = inputs(rng, "several")
    bias = rng.standard_normal((len(splits), n)).astype(bias_dtype)
    probs = rng.random(rows).astype(np.float32) if scaled else None
    y = moe.grouped_gemm(
        x, w, splits, bias, probs, out=prefilled((rows, n), "float32"), out_dtype="float32", config=SMALL
    )
    check_rows(y, *ref.forward(x, w, splits, bias, probs), k + 1, splits, "float32", "y")


@pytest.mark.parametrize("name", ["several", "one_owns_all", "g1"])
def test_weight_list_is_bitwise_the_grouped_weight(rng, name):
    rows, k, n, splits, x, w = inputs(rng, name)
    # Separate allocations, one of them not 16-byte aligned relative to the others.
    experts = [np.ascontiguousarray(wg) for wg in w]
    odd = np.empty(n * k + 1, BF16)[1:].reshape(n, k)
    odd[...] = w[0]
    for ws in (experts, [odd, *experts[1:]]):
        for f, args in ((moe.grouped_gemm, (x,)), (moe.grouped_gemm_dgrad, (bf16(rng, rows, n),))):
            a = f(
                *args,
                w,
                splits,
                out=prefilled((rows, w.shape[1 if f is moe.grouped_gemm else 2]), "bfloat16"),
                config=SMALL,
            )
            b = f(*args, ws, splits, out=prefilled(a.shape, "bfloat16"), config=SMALL)
            assert np.array_equal(a.view(np.int16), b.view(np.int16)), f.__name__


@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("name", CASES)
def test_dgrad(rng, name, out_dtype):
    rows, k, n, splits, _, w = inputs(rng, name)
    dy = bf16(rng, rows, n)
    dx = moe.grouped_gemm_dgrad(dy, w, splits, out=prefilled((rows, k), out_dtype), out_dtype=out_dtype, config=SMALL)
    check_rows(dx, *ref.dgrad(dy, w, splits), n, splits, out_dtype, "dx")


@pytest.mark.parametrize("persistent", [False, True, "ws"])
@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("name", CASES)
def test_wgrad(rng, name, out_dtype, persistent):
    rows, k, n, splits, x, _ = inputs(rng, name)
    dy = bf16(rng, rows, n)
    # Pad rows hold huge values: any read of them would show.
    end = ref.offsets(splits, rows)[-1]
    x[end:], dy[end:] = 1e30, 1e30
    ws = persistent == "ws"  # warp-specialized: the persistent kernel
    config = SMALL._replace(persistent=None if ws else persistent, warp_specialize=int(ws))
    dw = moe.grouped_gemm_wgrad(dy, x, splits, out_dtype=out_dtype, config=config)
    expected, mag = ref.wgrad(dy, x, splits)
    assert dw.shape == expected.shape
    sizes = np.diff(ref.offsets(splits, rows))
    for g, size in enumerate(sizes):
        if size == 0:
            assert (dw[g].astype(np.float32) == 0).all(), f"dw[{g}] of an empty group"
        else:
            ref.check(dw[g], expected[g], mag[g], int(size), out_dtype, f"dw[{g}]")


@pytest.mark.parametrize("config", [moe.GemmConfig(16, 16, 16, 4, 2), moe.GemmConfig(64, 32, 16, 4, 2)])
def test_tile_configs(rng, config):
    rows, k, n, splits, x, w = inputs(rng, "several")
    y = moe.grouped_gemm(x, w, splits, out=prefilled((rows, n), "float32"), out_dtype="float32", config=config)
    check_rows(y, *ref.forward(x, w, splits), k, splits, "float32", "y")
    dy = bf16(rng, rows, n)
    expected, mag = ref.wgrad(dy, x, splits)
    for p in (False, True):
        dw = moe.grouped_gemm_wgrad(dy, x, splits, out_dtype="float32", config=config._replace(persistent=p))
        ref.check(dw.reshape(-1, k), expected.reshape(-1, k), mag.reshape(-1, k), rows, "float32", f"dw {p}")


@pytest.mark.parametrize("block_m", [16, 32])
def test_schedule(rng, block_m):
    # G = 70 spans three chunks of the prefix sums; sizes include zeros, a negative and a sum past R.
    rows, g = 900, 70
    splits = rng.integers(0, 30, g).astype(np.int32)
    splits[[3, 69]] = 0
    splits[10] = -7
    splits[40] = 400
    s = host._schedule(np.zeros(1, BF16), splits, rows, block_m)
    off = ref.offsets(splits, rows)
    sizes = np.diff(off)
    assert s.offsets.tolist() == off.tolist()
    assert s.padded.tolist() == np.concatenate([[0], np.cumsum((sizes + 7) // 8 * 8)]).tolist()
    tiles = [(i, off[i] + j * block_m) for i in range(g) for j in range(-(-sizes[i] // block_m))]
    assert s.tile_start.tolist() == np.concatenate([[0], np.cumsum(-(-sizes // block_m))]).tolist()
    assert len(tiles) <= s.slots and s.tiles[: len(tiles)].tolist() == [list(t) for t in tiles]


def test_new_routing_neither_recompiles_nor_syncs(rng):
    rows, k, n, splits, x, w = inputs(rng, "several")
    moe.grouped_gemm(x, w, splits, out_dtype="float32", config=SMALL)  # the specialization the loop uses
    before = {f: len(f.cache) for f in (kernels.grouped_gemm_kernel, kernels.group_offsets, kernels.group_tiles)}
    for _ in range(3):
        s = rng.multinomial(rng.integers(0, rows + 1), [0.2] * 5).astype(np.int32)
        y = moe.grouped_gemm(x, w, s, out=prefilled((rows, n), "float32"), out_dtype="float32", config=SMALL)
        check_rows(y, *ref.forward(x, w, s), k, s, "float32", "y")
    assert {f: len(f.cache) for f in before} == before


def test_bad_input(rng):
    rows, k, n, splits, x, w = inputs(rng, "several")
    gg = moe.grouped_gemm
    bad = [
        (lambda: gg(x.astype(np.float32), w, splits), TypeError, "x must be bfloat16"),
        (lambda: gg(x, w.astype(np.float32), splits), TypeError, "w must be bfloat16"),
        (lambda: gg(np.ascontiguousarray(x[:, :40]), w, splits), ValueError, "x has 40 columns"),
        (lambda: gg(x[:, ::2], w[:, :, ::2], splits), ValueError, "x must be contiguous"),
        (lambda: gg(x, w, splits.astype(np.int64)), TypeError, "splits must be int32"),
        (lambda: gg(x, w, splits[:3]), ValueError, "one size per group \\(5\\)"),
        (lambda: gg(x, w, [1, 2]), TypeError, "splits"),
        (lambda: gg(x, [w[0], np.ascontiguousarray(w[1][:8])], splits[:2]), ValueError, "w\\[1\\] has shape"),
        (lambda: gg(x, [], splits), ValueError, "at least one expert"),
        (lambda: gg(x, w, splits, np.zeros((5, n + 1), np.float32)), ValueError, "bias must have shape"),
        (lambda: gg(x, w, splits, None, np.zeros(rows, np.float32)), ValueError, "pass a bias"),
        (lambda: gg(x, w, splits, np.zeros((5, n), np.float32), np.zeros(rows, BF16)), TypeError, "bias_scale"),
        (lambda: gg(x, w, splits, out=np.zeros((rows, n + 1), BF16)), ValueError, "out must have shape"),
        (lambda: gg(x, w, splits, out_dtype="float16"), ValueError, "out_dtype"),
        (lambda: gg(x, w, splits, config=moe.GemmConfig(48, 32, 32)), ValueError, "block_m must be a power of two"),
        (lambda: gg(x, w, splits, config=(32, 32, 32)), TypeError, "moe.GemmConfig"),
        (lambda: moe.grouped_gemm_dgrad(x, w, splits), ValueError, "dy has 96 columns"),
        (lambda: moe.grouped_gemm_wgrad(x[:10], x, splits), ValueError, "x has 150 rows but dy has 10"),
        (lambda: moe.grouped_gemm_wgrad(x, x, splits.reshape(1, -1)), ValueError, "splits must be 1-D"),
        (
            lambda: moe.grouped_gemm_wgrad(x, x, splits, config=SMALL._replace(warp_specialize=2)),
            ValueError,
            "warp_specialize=2 \\(ping-pong\\) does not apply to the bf16 wgrad",
        ),
    ]
    for call, err, text in bad:
        with pytest.raises(err, match=text):
            call()


# MXFP8 needs K to be whole 32-blocks: the cases' K rounded up to 64.
def mx_inputs(rng, name, fx, fw):
    rows, k, n, s = CASES[name]
    k = -(-k // 64) * 64
    x, w = bf16(rng, rows, k), bf16(rng, len(s), n, k)
    qx, qw = moe.quantize(x, "mxfp8", fmt=fx), moe.quantize(w.reshape(-1, k), "mxfp8", fmt=fw)
    return rows, k, n, np.array(s, np.int32), qx, qw, moe.dequantize(qx), moe.dequantize(qw).reshape(w.shape)


@pytest.mark.parametrize("fx,fw", [("e4m3", "e4m3"), ("e4m3", "e5m2"), ("e5m2", "e4m3")])
@pytest.mark.parametrize("name", CASES)
def test_forward_mxfp8(rng, name, fx, fw):
    # Against the float64 product of the dequantized operands (what the kernel multiplies).
    rows, k, n, splits, qx, qw, xd, wd = mx_inputs(rng, name, fx, fw)
    for out_dtype in ("bfloat16", "float32"):
        y = moe.grouped_gemm(qx, qw, splits, out=prefilled((rows, n), out_dtype), out_dtype=out_dtype, config=SMALL)
        expected, mag = ref.forward(xd, wd, splits)
        end = ref.offsets(splits, rows)[-1]
        ref.check(y[:end], expected, mag, k, out_dtype, "y", recipe="mxfp8")
        assert (y[end:].astype(np.float32) == SENTINEL).all(), "pad rows were written"


@pytest.mark.parametrize("config", [SMALL, moe.GemmConfig(16, 16, 64, 4, 2)])
def test_forward_mxfp8_bias(rng, config):
    rows, k, n, splits, qx, qw, xd, wd = mx_inputs(rng, "several", "e4m3", "e4m3")
    bias, probs = rng.standard_normal((len(splits), n)).astype(BF16), rng.random(rows).astype(np.float32)
    y = moe.grouped_gemm(qx, qw, splits, bias, probs, out_dtype="float32", config=config)
    end = ref.offsets(splits, rows)[-1]
    ref.check(y[:end], *ref.forward(xd, wd, splits, bias, probs), k + 1, "float32", "y", recipe="mxfp8")


def test_bad_mxfp8_input(rng):
    rows, k, n, splits, qx, qw, xd, wd = mx_inputs(rng, "several", "e4m3", "e4m3")
    gg = moe.grouped_gemm
    bad = [
        (lambda: gg(qx, wd.astype(BF16), splits), TypeError, "w must be a moe.Quantized too"),
        (lambda: gg(xd.astype(BF16), qw, splits), TypeError, "x must be a moe.Quantized too"),
        (lambda: gg(moe.quantize(xd, "fp8_block"), qw, splits), ValueError, "x and w must share a recipe"),
        (
            lambda: gg(qx, moe.quantize(wd.reshape(-1, k)[:384], "mxfp8", axis=0), splits),
            ValueError,
            "rowwise MXFP8 or FP8-block",
        ),
        (lambda: gg(qx, qw, splits[:3]), ValueError, "w quantizes \\[G \\* N, K\\]"),
        (lambda: gg(qx, moe.quantize(xd[:, :64], "mxfp8"), splits), ValueError, "w quantizes"),
        (lambda: gg(qx, qw, splits, np.zeros((5, n + 1), np.float32)), ValueError, "bias must have shape"),
    ]
    for call, err, text in bad:
        with pytest.raises(err, match=text):
            call()


# K steps of 32 (within a 128-block) and of 256 (two 128-blocks a step, each promoted
# while the next one's wgmma run on the GPU).
@pytest.mark.parametrize("config", [SMALL, moe.GemmConfig(32, 32, 256, 4, 2)], ids=["k32", "k256"])
@pytest.mark.parametrize("w_block", [(128, 128), (1, 128)])
@pytest.mark.parametrize("name", ["several", "one_owns_all", "g1", "past_the_rows"])
def test_forward_fp8_block(rng, name, w_block, config):
    # FP8-block: x in 1 x 128 blocks, w in 128 x 128 (or 1 x 128) blocks of [G·N, K];
    # K = 256 (two blocks), N = 128.
    rows, _, _, s = CASES[name]
    k, n, splits = 256, 128, np.array(s, np.int32)
    x, w = bf16(rng, rows, k), bf16(rng, len(s), n, k)
    w[0, :, :128] *= 1e-3  # blocks of very different scales
    qx, qw = moe.quantize(x, "fp8_block"), moe.quantize(w.reshape(-1, k), "fp8_block", block=w_block)
    xd, wd = moe.dequantize(qx), moe.dequantize(qw).reshape(w.shape)
    bias = rng.standard_normal((len(s), n)).astype(np.float32)
    y = moe.grouped_gemm(qx, qw, splits, bias, out=prefilled((rows, n), "float32"), out_dtype="float32", config=config)
    end = ref.offsets(splits, rows)[-1]
    ref.check(y[:end], *ref.forward(xd, wd, splits, bias), k + 1, "float32", "y", recipe="mxfp8")
    assert (y[end:] == SENTINEL).all(), "pad rows were written"


DGRAD_FP8 = {  # (dy's options, w's columnwise options, N, K)
    "mxfp8": (dict(recipe="mxfp8"), dict(recipe="mxfp8", axis=0), 96, 80),
    "mxfp8_e5m2_dy": (dict(recipe="mxfp8", fmt="e5m2"), dict(recipe="mxfp8", axis=0), 64, 48),
    "fp8_block": (dict(recipe="fp8_block"), dict(recipe="fp8_block", axis=0, block=(128, 128)), 128, 128),
    "fp8_block_1x128": (dict(recipe="fp8_block"), dict(recipe="fp8_block", axis=0), 128, 72),
    "fp8_block_n256": (dict(recipe="fp8_block"), dict(recipe="fp8_block", axis=0, block=(128, 128)), 256, 128),
}


@pytest.mark.parametrize("recipe", DGRAD_FP8)
@pytest.mark.parametrize("name", ["several", "one_owns_all", "g1", "negative"])
def test_dgrad_fp8(rng, name, recipe):
    # dx = dy w on block-scaled copies: dy rowwise, w columnwise (stored [K, G·N]).
    rows, _, _, s = CASES[name]
    o_dy, o_w, n, k = DGRAD_FP8[recipe]
    splits = np.array(s, np.int32)
    dy, w = bf16(rng, rows, n), bf16(rng, len(s), n, k)
    dy[: rows // 3] *= 2.0**-20  # blocks of very different scales
    qd, qw = moe.quantize(dy, **o_dy), moe.quantize(w.reshape(-1, k), **o_w)
    dyd, wd = moe.dequantize(qd), moe.dequantize(qw).reshape(w.shape)
    for out_dtype in ("bfloat16", "float32"):
        cfg = moe.GemmConfig(32, 32, 256, 4, 2) if n == 256 else SMALL  # N = 256: one K step of two blocks
        dx = moe.grouped_gemm_dgrad(
            qd, qw, splits, out=prefilled((rows, k), out_dtype), out_dtype=out_dtype, config=cfg
        )
        check_rows(dx, *ref.dgrad(dyd, wd, splits), n, splits, out_dtype, "dx")


def test_bad_fp8_dgrad_input(rng):
    dy, w = bf16(rng, 64, 64), bf16(rng, 2, 64, 96)
    qd, qw_t = moe.quantize(dy, "mxfp8"), moe.quantize(w.reshape(-1, 96), "mxfp8", axis=0)
    splits = np.array([30, 34], np.int32)
    bad = [
        (lambda: moe.grouped_gemm_dgrad(qd, moe.quantize(w.reshape(-1, 96), "mxfp8"), splits), "columnwise"),
        (lambda: moe.grouped_gemm_dgrad(qd, qw_t, splits[:1].copy()), "G = 1 and N = 64"),
        (lambda: moe.grouped_gemm_dgrad(moe.quantize(bf16(rng, 64, 96), "mxfp8"), qw_t, splits), "N = 96"),
        (lambda: moe.grouped_gemm_dgrad(moe.quantize(bf16(rng, 64, 128), "fp8_block"), qw_t, splits), "share a recipe"),
    ]
    for call, text in bad:
        with pytest.raises(ValueError, match=text):
            call()
