"""Inputs and checks shared by the interpreter tests (test_moe_quantize.py) and the GPU
tests (tests/gpu/test_moe_quantize_gpu.py): what each quantizer must produce, from the
golden quantizers, and a comparison of a moe.Quantized with it, bit for bit."""

import ml_dtypes
import numpy as np

from tests.python.moe import golden_quant as G

BF16 = np.dtype(ml_dtypes.bfloat16)


def random_input(rng, shape, dtype=np.float32, spread=24):
    """Normal values times a random power of two per row and per column (so blocks of
    either orientation see many binades), a few large outliers, in dtype."""
    r, c = shape
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-spread, spread + 1, (r, 1)))
    x = x * np.exp2(rng.integers(-4, 5, (1, c)))
    x[rng.random(shape) < 0.01] *= 300.0
    top = float(ml_dtypes.finfo(dtype).max)
    return np.clip(x, -top, top).astype(dtype)


def special_rows(fmt_max):
    """Blocks of 32: zeros (with -0), a NaN, +inf, -inf and a NaN with an inf, fp32
    subnormals, values at the format's max and just above, midpoints between codes."""
    rows = np.zeros((10, 32), np.float32)
    rows[0, ::3] = -0.0
    rows[1, :] = np.linspace(-3, 3, 32)
    rows[1, 7] = np.nan
    rows[2, :] = np.linspace(-1e30, 1e30, 32)
    rows[2, 5] = np.inf
    rows[3, :] = np.linspace(-5, 5, 32)
    rows[3, 9] = -np.inf
    rows[4, :3] = [np.inf, np.nan, 1.0]
    rows[5, :] = np.arange(1, 33) * np.float32(1e-45)  # subnormal fp32 (multiples of 2^-149)
    rows[6, :] = np.float32(fmt_max) * np.linspace(-1, 1, 32, dtype=np.float32)
    rows[7, :] = np.nextafter(np.float32(fmt_max), np.float32(np.inf)) * np.linspace(1, -1, 32, dtype=np.float32)
    rows[8, :] = np.float32(fmt_max) * (1 + np.arange(32, dtype=np.float32) / 64)  # amax 1.48 * max
    # Midpoints between neighbouring E4M3 codes at scale 1 (amax 448): ties to even.
    rows[9, :] = (np.arange(32) + 0.5) * np.float32(0.125) + 1.0
    rows[9, 0] = fmt_max
    return rows


def tie_block(scale):
    """16 values that land exactly on every E2M1 midpoint (and on 6 and 0.5) once
    multiplied by 1/scale."""
    ties = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]
    return np.array([6.0, 0.5, *ties, *[-t for t in ties]], np.float32) * np.float32(scale)


def view(x, axis):
    """V: the matrix whose rows hold the blocks, as float32."""
    v = np.asarray(x).astype(np.float32)
    return v if axis == -1 else np.ascontiguousarray(v.T)


def golden(x, recipe, axis=-1, fmt="e4m3", block=(1, 128), tile2d=False, rht=False, stochastic=False, seed=0):
    """What moe.quantize(x, ...) must hold: data codes (uint8, as stored), scales (uint8
    codes, or float32 for fp8_block), the tensor scale (NVFP4) and the dequantized x."""
    v = view(x, axis)
    ts = None
    if recipe == "mxfp8":
        data, scale = G.mxfp8(v, fmt)
        back = G.mxfp8_dequant(data, scale, fmt)
    elif recipe == "fp8_block":
        data, scale = G.fp8_block(v, block[0])
        back = G.fp8_block_dequant(data, scale, block[0])
    else:
        data, scale, ts = G.nvfp4(v, 16 if tile2d else 1, rht, seed if stochastic else None)
        back = G.nvfp4_dequant(data, scale, ts)
        ts = np.array([ts], np.float32)
    scale = scale.astype(np.float32) if recipe == "fp8_block" else scale.astype(np.uint8)
    return dict(data=data.astype(np.uint8), scale=scale, tensor_scale=ts, dequant=back if axis == -1 else back.T)


def observed(q, back, host=np.asarray):
    """The same parts of a moe.Quantized and its dequantization; `host` brings an array
    to numpy with its dtype."""
    scale = host(q.scale)
    return dict(
        data=host(q.data).view(np.uint8),
        scale=scale if scale.dtype == np.float32 else scale.view(np.uint8),
        tensor_scale=None if q.tensor_scale is None else host(q.tensor_scale),
        dequant=host(back),
    )


def assert_codes(got, want, what):
    got, want = np.asarray(got).astype(np.int64), np.asarray(want).astype(np.int64)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    bad = np.argwhere(got != want)
    if len(bad):
        i = tuple(bad[0])
        raise AssertionError(f"{what}: {len(bad)} codes differ, first at {i}: {got[i]:#x} != {want[i]:#x}")


def assert_same_floats(got, want, what):
    """Equal float32 bit patterns, any NaN matching any NaN."""
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    bad = np.argwhere(~same)
    if len(bad):
        i = tuple(bad[0])
        raise AssertionError(f"{what}: {len(bad)} values differ, first at {i}: {got[i]!r} != {want[i]!r}")


def assert_matches(got: dict, want: dict, what: str):
    assert_codes(got["data"], want["data"], f"{what}: data")
    if want["scale"].dtype == np.float32:
        assert_same_floats(got["scale"], want["scale"], f"{what}: scales")
    else:
        assert_codes(got["scale"], want["scale"], f"{what}: scales")
    if want["tensor_scale"] is not None:
        assert_same_floats(got["tensor_scale"], want["tensor_scale"], f"{what}: tensor scale")
    assert_same_floats(got["dequant"], want["dequant"], f"{what}: dequantized")
