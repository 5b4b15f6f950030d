"""moe.quantize / moe.dequantize on the interpreter, bit for bit against the golden
quantizers of golden_quant.py (written from SPEC-moe.md §3 alone): data codes and scales,
on random inputs spanning many binades and on hand-made blocks (amax = 0, NaN, inf,
subnormals, 448 and just above, ties at every E2M1 edge)."""

import ml_dtypes
import numpy as np
import pytest
from tilefuse import moe
from tilefuse.moe import quant

from tests.python.moe import golden_quant as G
from tests.python.moe.quant_cases import (
    BF16,
    assert_codes,
    assert_matches,
    golden,
    observed,
    random_input,
    special_rows,
    tie_block,
)


@pytest.fixture
def rng(request):
    return np.random.default_rng(abs(hash(request.node.name)) % 2**32)


def codes(a):
    return a.view(np.uint8)


def check(x, recipe, **options):
    """Quantizes x on the interpreter, compares with the golden; the Quantized and x_hat."""
    q = moe.quantize(x, recipe, **options)
    back = moe.dequantize(q)
    assert back.dtype == np.float32 and back.shape == x.shape
    assert_matches(observed(q, back), golden(x, recipe, **options), f"{recipe} {options}")
    return q, back


# --- MXFP8 ---


def check_mxfp8(x, axis, fmt):
    q, back = check(x, "mxfp8", axis=axis, fmt=fmt)
    assert q.data.dtype == np.dtype(getattr(ml_dtypes, {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}[fmt]))
    assert q.scale.dtype == np.dtype(ml_dtypes.float8_e8m0fnu)
    return q, back


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
@pytest.mark.parametrize("axis", [-1, 0])
@pytest.mark.parametrize("dtype", [np.float32, BF16])
@pytest.mark.parametrize("shape", [(96, 160), (32, 64), (160, 32)])
@pytest.mark.parametrize("tile", [None, (16, 128), (8, 64)], ids=["default", "16x128", "8x64"])
def test_mxfp8_random(rng, fmt, axis, dtype, shape, tile, monkeypatch):
    # Other tiles of the kernel (partial column tiles: 160 = 128 + 32) give the same bits.
    if tile:
        monkeypatch.setattr(quant, "MXFP8_TILE_ALONG", tile)
        monkeypatch.setattr(quant, "MXFP8_TILE_ACROSS", tile)
    x = random_input(rng, shape, dtype)
    q, back = check_mxfp8(x, axis, fmt)
    assert q.data.shape == (shape if axis == -1 else shape[::-1])
    # The float64 check of the format: each element within half an ulp of its block's grid.
    m, emin = (3, -6) if fmt == "e4m3" else (2, -14)
    s = np.repeat(np.exp2(codes(q.scale).astype(np.float64) - 127), 32, axis=1)
    s = s if axis == -1 else s.T
    x64 = x.astype(np.float64)
    assert (np.abs(back - x64) <= np.abs(x64) * 2.0 ** -(m + 1) + s * 2.0 ** (emin - m - 1)).all()


@pytest.mark.parametrize("fmt, fmax", [("e4m3", 448.0), ("e5m2", 57344.0)])
@pytest.mark.parametrize("axis", [-1, 0])
def test_mxfp8_special_blocks(fmt, fmax, axis):
    rows = special_rows(fmax)
    x = np.tile(np.concatenate([rows, rows[::-1] * -1, rows[:4]], axis=0), (1, 2))  # [24, 64]: 48 blocks
    x = x if axis == -1 else np.ascontiguousarray(x.T)  # columnwise: the same blocks down columns
    q, _ = check_mxfp8(x, axis, fmt)
    s = codes(q.scale)
    nan_blocks = (s == 0xFF).sum()
    assert nan_blocks > 0 and (codes(q.data)[np.repeat(s == 0xFF, 32, axis=1)] == 0x7F).all()
    assert (s == 0).any() and (s == 254).any()  # amax = 0 blocks and inf blocks


def test_mxfp8_bfloat16_subnormals():
    # bf16 subnormals (below 2^-126) in one block, bf16 normals in the next.
    x = np.zeros((32, 64), np.float32)
    x[:, :32] = np.arange(-16, 16) * np.float32(2.0**-133)
    x[:, 32:] = np.arange(-16, 16) * np.float32(2.0**-120)
    check_mxfp8(x.astype(BF16), -1, "e4m3")
    check_mxfp8(x.astype(BF16), 0, "e5m2")


def test_mxfp8_strided_input(rng):
    # A non-contiguous input (a column slice) quantizes like its contiguous copy.
    big = random_input(rng, (64, 160))
    x = big[:, 32:128]
    assert not x.flags.c_contiguous
    q1, q2 = moe.quantize(x, "mxfp8"), moe.quantize(np.ascontiguousarray(x), "mxfp8")
    assert_codes(codes(q1.data), codes(q2.data), "strided data")
    assert_codes(codes(q1.scale), codes(q2.scale), "strided scales")


# --- FP8 block ---


@pytest.mark.parametrize("block, shape", [((1, 128), (160, 256)), ((1, 128), (32, 128)), ((128, 128), (256, 384))])
@pytest.mark.parametrize("axis", [-1, 0])
@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_fp8_block_random(rng, block, shape, axis, dtype):
    if axis == 0:
        shape = shape[::-1]  # keep the blocked axis a multiple of 128
    x = random_input(rng, shape, dtype, spread=6 if block[0] == 128 else 24)
    q, _ = check(x, "fp8_block", axis=axis, block=block)
    assert (np.frexp(q.scale)[0] == 0.5).all()  # powers of two


@pytest.mark.parametrize("block", [(1, 128), (128, 128)])
def test_fp8_block_special_blocks(block):
    rows = np.tile(special_rows(448.0), (1, 4))  # [10, 128]
    if block[0] == 1:
        x = rows
    else:  # one 128 x 128 block per special row, plus one of subnormals only
        x = np.concatenate([np.repeat(r[None], 128, axis=0) for r in rows[[0, 1, 2, 5, 6, 7]]], axis=1)
        x = np.concatenate([x, x[:, ::-1]], axis=0)  # [256, 768]
    q, _ = check(x, "fp8_block", block=block)
    s = q.scale
    assert np.isnan(s).any() and (s == 1.0).any() and (s == 2.0**-127).any()
    # 448 itself quantizes at scale 1; just above 448 halves the quant scale.
    if block[0] == 1:
        assert s[6, 0] == 1.0 and s[7, 0] == 2.0


# --- NVFP4 ---


def check_nvfp4(x, **options):
    q, _ = check(x, "nvfp4", **options)
    assert q.data.dtype == np.int8 and q.scale.dtype == np.dtype(ml_dtypes.float8_e4m3fn)
    return q


@pytest.mark.parametrize("axis", [-1, 0])
@pytest.mark.parametrize("tile2d", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, BF16])
@pytest.mark.parametrize("shape", [(96, 80), (16, 32), (80, 144), (32, 384)])
@pytest.mark.parametrize("tile", [None, (64, 1), (16, 4)], ids=["default", "64x1", "16x4"])
def test_nvfp4_random(rng, axis, tile2d, dtype, shape, tile, monkeypatch):
    # Other program tiles (partial block columns: 9 blocks = 4 + 4 + 1) give the same bits.
    if tile:
        monkeypatch.setattr(quant, "NVFP4_TILE", tile)
    x = random_input(rng, shape, dtype, spread=3)
    q = check_nvfp4(x, axis=axis, tile2d=tile2d)
    if tile2d:  # one scale per 16 x 16 tile, replicated over its rows
        s = codes(q.scale)
        assert (s.reshape(-1, 16, s.shape[1]) == s[::16][:, None, :]).all()


@pytest.mark.parametrize("dtype", [np.float32, BF16])
@pytest.mark.parametrize("shape", [(96, 48), (32, 16), (128, 32)])
@pytest.mark.parametrize("tile", [None, (64, 1), (16, 4)], ids=["default", "64x1", "16x4"])
def test_nvfp4_rht(rng, dtype, shape, tile, monkeypatch):
    if tile:
        monkeypatch.setattr(quant, "NVFP4_TILE", tile)
    x = random_input(rng, shape, dtype, spread=3)
    check_nvfp4(x, axis=0, rht=True)
    x[5, 7] = np.nan  # poisons its column's chunk of 16 tokens only
    x[21 % shape[0], 3] = np.inf  # spreads over its chunk as +-inf: block scale 448
    q = check_nvfp4(x, axis=0, rht=True)
    s = codes(q.scale)
    assert s[7, 0] == 0x7F and (s == 0x7F).sum() == 1
    assert s[3, (21 % shape[0]) // 16] == 0x7E and q.tensor_scale[0] == 1.0


def test_nvfp4_rht_is_the_hadamard_product():
    # Integers keep the float32 sums exact: the transform must equal u @ diag(s) H / 4.
    x = np.random.default_rng(7).integers(-8, 9, (64, 32)).astype(np.float32)
    h = np.array([[(-1) ** bin(i & j).count("1") for j in range(16)] for i in range(16)])
    m = np.diag(G.RHT_SIGNS) @ h / 4
    want = (x.T.reshape(32, 4, 16) @ m).reshape(32, 64)
    np.testing.assert_array_equal(G.rht(x.T), want)
    check_nvfp4(x, axis=0, rht=True)


def test_nvfp4_ties_at_every_e2m1_edge():
    # Tensor amax 2688 makes S_enc = 1; a block amax of 6 * 2^k then gives the e4m3 block
    # scale 2^k exactly and the factor 2^-k, so the scaled values are the ties themselves.
    rows = [tie_block(2.0**k) for k in (0, -3, 4, 6)] + [tie_block(448.0)]
    x = np.stack(rows * 4)  # [20, 16]
    x = np.concatenate([x, x[:, ::-1]], axis=1)  # [20, 32]
    x = np.concatenate([x, np.zeros((12, 32), np.float32)])  # amax = 0 blocks
    q = check_nvfp4(x)
    assert q.tensor_scale[0] == 1.0
    lo = codes(q.data)[0, :8] & 0xF
    hi = codes(q.data)[0, :8] >> 4
    # 6, .5 | ties 0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4 (even codes)
    np.testing.assert_array_equal(np.stack([lo, hi], 1).ravel(), [7, 1, 0, 2, 2, 4, 4, 6, 6, 8, 10, 10, 12, 12, 14, 14])


def test_nvfp4_special_blocks():
    x = np.tile(special_rows(448.0 * 6)[:, :16], (4, 3))[:32]  # [32, 48]
    x[24:, :] = np.arange(8 * 48).reshape(8, 48) * np.float32(1e-45)  # subnormals only
    check_nvfp4(x)
    check_nvfp4(x, tile2d=True)
    z = np.zeros((16, 32), np.float32)
    z[3, 5] = -0.0
    q = check_nvfp4(z)
    assert q.tensor_scale[0] == 1.0  # amax = 0
    inf = np.ones((16, 32), np.float32)
    inf[0, 0] = np.inf
    assert check_nvfp4(inf).tensor_scale[0] == 1.0  # amax = inf: S_enc = 1 (TE's rule)
    tiny = np.full((16, 16), 1e-44, np.float32)
    assert check_nvfp4(tiny).tensor_scale[0] == G.FLT_MAX  # 2688 / amax overflows


@pytest.mark.parametrize("rht", [False, True])
@pytest.mark.parametrize("tile", [None, (64, 1), (16, 4)], ids=["default", "64x1", "16x4"])
def test_nvfp4_stochastic_rounding_stream(rng, rht, tile, monkeypatch):
    if tile:
        monkeypatch.setattr(quant, "NVFP4_TILE", tile)
    x = random_input(rng, (96, 48), spread=2)
    q1 = check_nvfp4(x, axis=0, rht=rht, stochastic=True, seed=12345)
    q2 = check_nvfp4(x, axis=0, rht=rht, stochastic=True, seed=(7 << 32) | 99)
    assert (codes(q1.data) != codes(q2.data)).mean() > 0.05  # another seed, another stream
    q3 = moe.quantize(x, "nvfp4", axis=0, rht=rht, stochastic=True, seed=12345)
    assert_codes(codes(q3.data), codes(q1.data), "same seed")


def test_nvfp4_stochastic_rounding_is_unbiased():
    # 1.125 (after scaling) lies a quarter of the way from 1 to 1.5: up when the 8 random
    # bits are below 64, with probability 1/4; 3840 draws, 6 sigma.
    x = np.full((256, 16), 1.125, np.float32)
    x[:, 0] = 6.0  # block amax 6 and tensor amax 6: S_enc = 448, block scale 448, factor 1
    q = moe.quantize(x, "nvfp4", stochastic=True, seed=3)
    c = np.stack([codes(q.data) & 0xF, codes(q.data) >> 4], -1).reshape(256, 16)[:, 1:]
    assert set(np.unique(c)) <= {2, 3}  # 1.0 or 1.5
    up = (c == 3).mean()
    assert abs(up - 0.25) < 6 * np.sqrt(0.25 * 0.75 / c.size), up


@pytest.mark.parametrize("n", [0, 1, 37, 96, 200])
def test_nvfp4_rows_used_bounds_the_tensor_scale(rng, n):
    """rows_used = [n]: the tensor scale is the first n rows' (rows past them 1000 times
    larger, not a power of two), their codes and scales those of quantizing them alone;
    n past the rows: the whole tensor's."""
    x = random_input(rng, (96, 48), spread=3)
    m = min(n, 96)
    x[m:] = x[m:] * 1000
    q = moe.quantize(x, "nvfp4", rows_used=np.array([n, -7], np.int32))  # only the first element counts
    want = moe.quantize(x[:m] if m else np.zeros((1, 48), x.dtype), "nvfp4")
    assert codes(q.tensor_scale).tobytes() == codes(want.tensor_scale).tobytes()
    assert np.array_equal(codes(q.data[:m]), codes(want.data[:m]))
    assert np.array_equal(codes(q.scale[:m]), codes(want.scale[:m]))
    if m < 96:
        assert codes(q.tensor_scale).tobytes() != codes(moe.quantize(x, "nvfp4").tensor_scale).tobytes()


# --- the API's checks ---


@pytest.mark.parametrize(
    "args, kwargs, exc, words",
    [
        ((np.zeros((32, 32), np.float64), "mxfp8"), {}, TypeError, ["x", "float64"]),
        ((np.zeros((32, 32), np.int32), "mxfp8"), {}, TypeError, ["x", "int32"]),
        (([[1.0] * 32] * 32, "mxfp8"), {}, TypeError, ["x", "list"]),
        ((np.zeros((32,), np.float32), "mxfp8"), {}, ValueError, ["x", "2-D"]),
        ((np.zeros((32, 48), np.float32), "mxfp8"), {}, ValueError, ["x.shape[1]", "32", "48"]),
        ((np.zeros((48, 32), np.float32), "mxfp8"), {"axis": 0}, ValueError, ["x.shape[0]", "32", "48"]),
        ((np.zeros((32, 32), np.float32), "mxfp4"), {}, ValueError, ["recipe", "mxfp4"]),
        ((np.zeros((32, 32), np.float32), "mxfp8"), {"fmt": "e3m4"}, ValueError, ["fmt", "e3m4"]),
        ((np.zeros((32, 32), np.float32), "mxfp8"), {"axis": 2}, ValueError, ["axis"]),
        ((np.zeros((32, 128), np.float32), "fp8_block"), {"block": (1, 64)}, ValueError, ["block"]),
        ((np.zeros((64, 128), np.float32), "fp8_block"), {"block": (128, 128)}, ValueError, ["x.shape[0]", "128"]),
        ((np.zeros((32, 32), np.float32), "fp8_block"), {}, ValueError, ["x.shape[1]", "128"]),
        ((np.zeros((32, 24), np.float32), "nvfp4"), {}, ValueError, ["x.shape[1]", "16"]),
        ((np.zeros((24, 32), np.float32), "nvfp4"), {"tile2d": True}, ValueError, ["x.shape[0]", "16"]),
        ((np.zeros((32, 32), np.float32), "nvfp4"), {"rht": True}, ValueError, ["rht", "axis=0"]),
        ((np.zeros((32, 32), np.float32), "nvfp4"), {"seed": -1}, ValueError, ["seed"]),
        ((np.zeros((32, 32), np.float32), "mxfp8"), {"stochastic": True}, ValueError, ["stochastic"]),
        ((np.zeros((32, 32), np.float32), "nvfp4"), {"fmt": "e5m2"}, ValueError, ["fmt"]),
        ((np.zeros((32, 32), np.float32), "mxfp8"), {"rows_used": np.ones(1, np.int32)}, ValueError, ["rows_used"]),
        (
            (np.zeros((32, 32), np.float32), "nvfp4"),
            {"axis": 0, "rows_used": np.ones(1, np.int32)},
            ValueError,
            ["rowwise"],
        ),
        ((np.zeros((32, 32), np.float32), "nvfp4"), {"rows_used": np.ones(1, np.int64)}, ValueError, ["int32"]),
        ((np.zeros((32, 32), np.float32), "nvfp4"), {"rows_used": np.ones((), np.int32)}, ValueError, ["1-D"]),
        ((np.zeros((32, 32), np.float32), "nvfp4"), {"rows_used": 5}, ValueError, ["numpy array"]),
    ],
)
def test_bad_arguments(args, kwargs, exc, words):
    with pytest.raises(exc) as e:
        moe.quantize(*args, **kwargs)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_dequantize_checks_its_argument():
    with pytest.raises(TypeError, match="q: expected a moe.Quantized"):
        moe.dequantize(np.zeros((4, 4), np.float32))


def test_empty_inputs():
    x = np.zeros((0, 64), np.float32)
    q = moe.quantize(x, "mxfp8")
    assert q.data.shape == (0, 64) and q.scale.shape == (0, 2) and moe.dequantize(q).shape == (0, 64)
    q = moe.quantize(np.zeros((0, 32), np.float32), "nvfp4")
    assert q.tensor_scale[0] == 1.0 and moe.dequantize(q).shape == (0, 32)


@pytest.mark.parametrize(
    "recipe, options",
    [("mxfp8", {}), ("fp8_block", {"axis": 0}), ("nvfp4", {"tile2d": True}), ("nvfp4", {"axis": 0, "rht": True})],
)
def test_float16_inputs(rng, recipe, options):
    check(random_input(rng, (128, 128), np.float16, spread=4), recipe, **options)


def test_stochastic_seeds_share_one_kernel():
    # A fresh seed each call (the MLP's backward) must not compile anew: the seed halves are
    # int64 and not specialized (a value's type and divisibility would otherwise key them).
    from kernels_dsl.moe import quantize as kernels

    x = np.random.default_rng().standard_normal((32, 64)).astype(ml_dtypes.bfloat16)
    kernels.nvfp4_quantize.cache.clear()
    for seed in (0, 1, 16, 2**31 + 5, 2**40 + 17, 2**63 + 3):
        moe.quantize(x, "nvfp4", stochastic=True, seed=seed)
    assert len(kernels.nvfp4_quantize.cache) == 1
