"""moe.quantize / moe.dequantize on CUDA torch tensors: the same kernels as on the
interpreter, bit for bit equal to the interpreter and to the golden quantizers
(tests/python/moe/golden_quant.py) over a sweep of shapes (several tiles, partial row
tiles, non-square), both input dtypes, every recipe and option, the special blocks
(amax = 0, NaN, inf, subnormals, 448 and just above, every E2M1 tie) and the
stochastic-rounding stream; and no missed fast path reported by TILEFUSE_PERF_HINTS=1."""

import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from tilefuse import moe
from tilefuse.moe import quant

from tests.python.moe.quant_cases import (
    BF16,
    assert_codes,
    assert_matches,
    assert_same_floats,
    golden,
    observed,
    random_input,
    special_rows,
    tie_block,
)

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]

ROOT = Path(__file__).resolve().parents[2]
_ML_DTYPES = {n: getattr(ml_dtypes, n) for n in ("float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "bfloat16")}
OPTIONS = [
    dict(recipe="mxfp8"),
    dict(recipe="mxfp8", axis=0),
    dict(recipe="mxfp8", fmt="e5m2"),
    dict(recipe="mxfp8", axis=0, fmt="e5m2"),
    dict(recipe="fp8_block"),
    dict(recipe="fp8_block", axis=0),
    dict(recipe="fp8_block", block=(128, 128)),
    dict(recipe="fp8_block", block=(128, 128), axis=0),
    dict(recipe="nvfp4"),
    dict(recipe="nvfp4", axis=0),
    dict(recipe="nvfp4", tile2d=True),
    dict(recipe="nvfp4", tile2d=True, axis=0),
    dict(recipe="nvfp4", axis=0, rht=True),
    dict(recipe="nvfp4", stochastic=True, seed=2**40 + 17),
    dict(recipe="nvfp4", axis=0, rht=True, stochastic=True, seed=5),
]


def host(t):
    """A CUDA tensor's bytes as numpy, in the matching numpy / ml_dtypes dtype."""
    name = str(t.dtype).removeprefix("torch.")
    raw = t.detach().contiguous().cpu().view(torch.uint8).numpy()
    return raw.view(_ML_DTYPES.get(name, np.dtype(name))).reshape(tuple(t.shape))


def device(x):
    """A numpy array (float32 or bfloat16) as a CUDA tensor with the same bits."""
    if x.dtype == BF16:
        return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16).cuda()
    return torch.from_numpy(x).cuda()


def on_gpu(x, options):
    q = moe.quantize(device(x), **options)
    back = moe.dequantize(q)
    torch.cuda.synchronize()
    assert back.is_cuda and back.dtype == torch.float32 and tuple(back.shape) == x.shape
    return observed(q, back, host)


def shapes_for(options):
    """Shapes whose blocked axes fit the recipe: several tiles of 64 rows, partial tiles."""
    bc = {"mxfp8": 32, "fp8_block": 128, "nvfp4": 16}[options["recipe"]]
    br = 128 if options.get("block") == (128, 128) else 16 if options.get("tile2d") else 1
    rows = [1, 3, 5, 17] if br == 1 else [1, 3]  # times max(br, 32)
    cols = [1, 3, 7]  # times bc
    out = [(r * max(br, 32), c * bc) for r in rows for c in cols]
    return [s if options.get("axis", -1) == -1 else s[::-1] for s in out]


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["f32", "bf16"])
def test_sweep_against_interpreter_and_golden(options, dtype):
    rng = np.random.default_rng(len(str(options)) * 7 + (dtype == BF16))
    for shape in shapes_for(options):
        x = random_input(rng, shape, dtype, spread=6 if options.get("block") == (128, 128) else 20)
        what = f"{options} {shape} {np.dtype(dtype).name}"
        got = on_gpu(x, options)
        assert_matches(got, golden(x, **options), f"GPU vs golden {what}")
        if np.prod(shape) <= 160 * 224:  # the interpreter on the smaller shapes
            q = moe.quantize(x, **options)
            assert_matches(got, observed(q, moe.dequantize(q)), f"GPU vs interpreter {what}")


# MXFP8 program tiles (rows, columns) the host may pick: each gives the golden's bits.
MXFP8_TILES = [(64, 32), (16, 128), (32, 128), (8, 256), (16, 256), (32, 64), (128, 32)]


@pytest.mark.parametrize("tile", MXFP8_TILES, ids=lambda t: f"{t[0]}x{t[1]}")
@pytest.mark.parametrize("axis", [-1, 0])
def test_mxfp8_tiles_against_golden(tile, axis, monkeypatch):
    monkeypatch.setattr(quant, "MXFP8_TILE_ALONG", tile)
    monkeypatch.setattr(quant, "MXFP8_TILE_ACROSS", tile)
    options = dict(recipe="mxfp8", axis=axis)
    rng = np.random.default_rng(tile[0] * 1000 + tile[1] + axis)
    for shape in shapes_for(options):
        x = random_input(rng, shape, BF16, spread=20)
        assert_matches(on_gpu(x, options), golden(x, **options), f"GPU tile {tile} vs golden {shape} axis={axis}")


# NVFP4 program tiles (rows, 16-element blocks) of the 1 x 16 copies: each gives the golden's bits.
NVFP4_TILES = [(64, 1), (64, 8), (32, 4), (16, 16), (128, 2)]


@pytest.mark.parametrize("tile", NVFP4_TILES, ids=lambda t: f"{t[0]}x{t[1]}")
@pytest.mark.parametrize(
    "extra", [dict(), dict(axis=0, rht=True), dict(stochastic=True, seed=99)], ids=["rows", "rht", "stochastic"]
)
def test_nvfp4_tiles_against_golden(tile, extra, monkeypatch):
    monkeypatch.setattr(quant, "NVFP4_TILE", tile)
    options = dict(recipe="nvfp4", **extra)
    rng = np.random.default_rng(tile[0] * 100 + tile[1] + len(extra))
    # Rows in whole and partial tiles; blocks per row of V a multiple of 8, 4 and 2 (the
    # host halves a tile's blocks until they divide the row's).
    for rows, blocks in [(32, 8), (96, 24), (544, 56), (160, 6), (32, 5)]:
        shape = (rows, 16 * blocks) if options.get("axis", -1) == -1 else (16 * blocks, rows)
        x = random_input(rng, shape, BF16, spread=20)
        assert_matches(on_gpu(x, options), golden(x, **options), f"GPU tile {tile} vs golden {shape} {extra}")


@pytest.mark.parametrize("n", [0, 37, 544, 600])
def test_nvfp4_rows_used_against_interpreter(n):
    """rows_used read on the device: the tensor scale, codes and scales bit for bit the
    interpreter's (rows past the used ones 1000 times larger; all rows are encoded)."""
    x = random_input(np.random.default_rng(n), (544, 112), BF16, spread=3)
    x[n:] = (x[n:].astype(np.float32) * 1000).astype(BF16)
    used = np.array([n], np.int32)
    q = moe.quantize(device(x), "nvfp4", rows_used=torch.from_numpy(used).cuda())
    want = moe.quantize(x, "nvfp4", rows_used=used)
    torch.cuda.synchronize()
    for f in ("tensor_scale", "data", "scale"):
        got, ref = host(getattr(q, f)), getattr(want, f)
        assert got.shape == ref.shape and np.array_equal(got.view(np.uint8), ref.view(np.uint8)), f


def test_large_tensors_against_golden():
    rng = np.random.default_rng(3)
    x = random_input(rng, (2048, 1536), BF16, spread=10)
    for options in (OPTIONS[0], OPTIONS[1], OPTIONS[4], OPTIONS[9], OPTIONS[14]):
        assert_matches(on_gpu(x, options), golden(x, **options), f"GPU vs golden {options} (2048, 1536)")


@pytest.mark.parametrize("recipe, fmt, fmax", [("mxfp8", "e4m3", 448.0), ("mxfp8", "e5m2", 57344.0)])
@pytest.mark.parametrize("axis", [-1, 0])
def test_mxfp8_special_blocks(recipe, fmt, fmax, axis):
    rows = special_rows(fmax)
    x = np.tile(np.concatenate([rows, rows[::-1] * -1, rows[:4]], axis=0), (3, 2))  # [72, 64]
    x = x if axis == -1 else np.ascontiguousarray(x.T[:, :64])
    options = dict(recipe=recipe, fmt=fmt, axis=axis)
    assert_matches(on_gpu(x, options), golden(x, **options), f"special blocks {options}")


@pytest.mark.parametrize("block", [(1, 128), (128, 128)])
def test_fp8_block_special_blocks(block):
    rows = np.tile(special_rows(448.0), (1, 4))  # [10, 128]
    if block[0] == 1:
        x = np.tile(rows, (7, 1))
    else:
        x = np.concatenate([np.repeat(r[None], 128, axis=0) for r in rows[[0, 1, 2, 5, 6, 7]]], axis=1)
    options = dict(recipe="fp8_block", block=block)
    assert_matches(on_gpu(x, options), golden(x, **options), f"special blocks {options}")


@pytest.mark.parametrize("options", [dict(), dict(tile2d=True), dict(axis=0, rht=True)], ids=["1x16", "16x16", "rht"])
def test_nvfp4_special_blocks_and_ties(options):
    ties = np.stack([tie_block(2.0**k) for k in (0, -3, 4, 6)] + [tie_block(448.0)])
    x = np.concatenate([np.tile(ties, (4, 2)), np.tile(special_rows(2688.0)[:, :16], (4, 2))[:32]])  # [52, 32]
    x = np.concatenate([x, np.zeros((12, 32), np.float32)])  # [64, 32]
    options = dict(recipe="nvfp4", **options)
    assert_matches(on_gpu(x, options), golden(x, **options), f"specials {options}")


def test_stochastic_rounding_is_reproducible_and_seeded():
    x = random_input(np.random.default_rng(9), (256, 128), BF16, spread=2)
    a = on_gpu(x, dict(recipe="nvfp4", stochastic=True, seed=1234))
    b = on_gpu(x, dict(recipe="nvfp4", stochastic=True, seed=1234))
    c = on_gpu(x, dict(recipe="nvfp4", stochastic=True, seed=1235))
    np.testing.assert_array_equal(a["data"], b["data"])
    assert (a["data"] != c["data"]).mean() > 0.05


def test_host_tensors_and_other_devices_are_refused():
    with pytest.raises(TypeError, match="x: torch tensors must be on a CUDA device"):
        moe.quantize(torch.zeros(32, 32), "mxfp8")
    with pytest.raises(TypeError, match="x: .*float64"):
        moe.quantize(torch.zeros(32, 32, dtype=torch.float64, device="cuda"), "mxfp8")


def test_no_missed_fast_paths():
    code = (
        "import torch\n"
        "from tilefuse import moe\n"
        "x = torch.randn(512, 512, device='cuda').to(torch.bfloat16)\n"
        "for o in [dict(recipe='mxfp8'), dict(recipe='mxfp8', axis=0), dict(recipe='fp8_block'),\n"
        "          dict(recipe='fp8_block', block=(128, 128), axis=0), dict(recipe='nvfp4', tile2d=True),\n"
        "          dict(recipe='nvfp4', axis=0, rht=True, stochastic=True)]:\n"
        "    moe.dequantize(moe.quantize(x, **o))\n"
        "torch.cuda.synchronize()\n"
    )
    # A fresh process compiles afresh (and prints); it imports what this one does.
    env = dict(os.environ, TILEFUSE_PERF_HINTS="1", PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr
    assert "quantize.py" not in r.stderr, r.stderr


@pytest.mark.parametrize("axis", [-1, 0])
def test_offsets_past_2_to_the_31(axis):
    # 2^31 + 2^18 elements: the last rows' offsets overflow int32; their blocks (rowwise,
    # or columnwise in 32-row groups) depend on those rows alone, so the golden of the
    # last 64 rows is what those rows' codes must be.
    rows = 2**31 // 4096 + 64
    x = torch.randn(rows, 4096, device="cuda", dtype=torch.bfloat16)
    q = moe.quantize(x, "mxfp8", axis=axis)
    tail = host(x[-64:])
    want = golden(tail, "mxfp8", axis=axis)
    data, scale = (q.data[-64:], q.scale[-64:]) if axis == -1 else (q.data[:, -64:], q.scale[:, -2:])
    assert_codes(host(data).view(np.uint8), want["data"], f"mxfp8 axis={axis} past 2^31: data")
    assert_codes(host(scale).view(np.uint8), want["scale"], f"mxfp8 axis={axis} past 2^31: scales")
    back = moe.dequantize(q)
    assert_same_floats(host(back[-64:]), want["dequant"], f"mxfp8 axis={axis} past 2^31: dequantized")
