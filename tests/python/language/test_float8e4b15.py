"""Triton's float8e4b15 (issue 16 part 9), bit-exact against a reference written from
Triton's NVIDIA conversions: memory format (f16's bits without the top exponent bit:
bias 15, no inf or NaN, largest 1.875), decoding to f16 / f32, encoding from f16 (clamped
to 1.75, rounded half away from zero) and from f32 (rounded to f16 first, in the cast's
mode). Every f16 bit pattern and every e4b15 byte are checked."""

import numpy as np
import pytest
import tilefuse as tf
import tilefuse.language as tl


def decode_reference(b: np.ndarray) -> np.ndarray:
    """e4b15 bytes -> their f16 values."""
    b = b.astype(np.uint16)
    return (((b & 0x80) << 8) | ((b & 0x7F) << 7)).astype(np.uint16).view(np.float16)


def encode_f16_reference(h: np.ndarray) -> np.ndarray:
    """f16 values -> e4b15 bytes (Triton's Fp16_to_Fp8E4M3B15)."""
    bits = h.astype(np.float16).view(np.uint16).astype(np.uint32)
    mag = np.minimum(bits & 0x7FFF, 0x3F00)
    return (((bits >> 8) & 0x80) | ((mag + 0x40) >> 7)).astype(np.uint8)


def f32_to_f16_rtz(x: np.ndarray) -> np.ndarray:
    h = x.astype(np.float16)
    with np.errstate(invalid="ignore", over="ignore"):
        away = np.abs(h.astype(np.float32)) > np.abs(x)
    h = np.where(away, np.nextafter(h, np.float16(0)), h)
    return np.where(np.isinf(h) & ~np.isinf(x), np.copysign(np.float16(65504), x).astype(np.float16), h)


@tf.jit
def decode_kernel(b_ptr, h_ptr, f_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    v = tl.load(b_ptr + offs).to(tl.float8e4b15, bitcast=True)
    tl.store(h_ptr + offs, v.to(tl.float16))
    tl.store(f_ptr + offs, v.to(tl.float32))


@tf.jit
def encode_kernel(x_ptr, b_ptr, N: tl.constexpr, MODE: tl.constexpr):
    offs = tl.arange(0, N)
    v = tl.load(x_ptr + offs).to(tl.float8e4b15, fp_downcast_rounding=MODE)
    tl.store(b_ptr + offs, v.to(tl.uint8, bitcast=True))


@tf.jit
def copy_through_e4b15_pointers(x_ptr, y_ptr, N: tl.constexpr):
    # Loads and stores of the format itself: byte pointers viewed as float8e4b15 pointers.
    offs = tl.arange(0, N)
    src = x_ptr.to(tl.pointer_type(tl.float8e4b15))
    dst = y_ptr.to(tl.pointer_type(tl.float8e4b15))
    v = tl.load(src + offs)
    tl.store(dst + offs, (v.to(tl.float32) * 0.5).to(tl.float8e4b15))


ALL_BYTES = np.arange(256, dtype=np.uint8)


def test_decode_every_byte():
    h, f = np.zeros(256, np.float16), np.zeros(256, np.float32)
    decode_kernel[(1,)](ALL_BYTES, h, f, N=256)
    want = decode_reference(ALL_BYTES)
    np.testing.assert_array_equal(h.view(np.uint16), want.view(np.uint16))
    np.testing.assert_array_equal(f, want.astype(np.float32))
    assert np.isfinite(f).all() and f.max() == 1.875 and f[1] == 2.0**-17


def test_encode_every_f16():
    h = np.arange(2**16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    b = np.zeros(2**16, np.uint8)
    encode_kernel[(1,)](h, b, N=2**16, MODE="rtne")
    np.testing.assert_array_equal(b, encode_f16_reference(h))


def f32_cases(rng):
    x = np.concatenate(
        [
            rng.standard_normal(4000).astype(np.float32),
            (rng.standard_normal(2000) * 2.0**-14).astype(np.float32),  # around the subnormals
            rng.uniform(-2.5, 2.5, 1000).astype(np.float32),
            np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e30, -1e30, 1.75, 1.8125, 1.875, 2.0**-18],
                     np.float32),
            # halfway points between e4b15 values, and f16 halfway points next to them
            (decode_reference(ALL_BYTES[:120]).astype(np.float32)
             + decode_reference(ALL_BYTES[1:121]).astype(np.float32)) / 2,
        ]
    )  # fmt: skip
    n = 1 << int(np.ceil(np.log2(x.size)))
    return np.concatenate([x, np.zeros(n - x.size, np.float32)])


@pytest.mark.parametrize("mode", ["rtne", "rtz"])
def test_encode_f32(mode):
    x = f32_cases(np.random.default_rng(7))
    b = np.zeros(x.size, np.uint8)
    encode_kernel[(1,)](x, b, N=x.size, MODE=mode)
    with np.errstate(over="ignore"):
        h = x.astype(np.float16) if mode == "rtne" else f32_to_f16_rtz(x)
    np.testing.assert_array_equal(b, encode_f16_reference(h))


def test_memory_format_through_pointers():
    x = np.random.default_rng(2).integers(0, 256, 128).astype(np.uint8)
    y = np.zeros(128, np.uint8)
    copy_through_e4b15_pointers[(1,)](x, y, N=128)
    half = decode_reference(x).astype(np.float32) * np.float32(0.5)
    np.testing.assert_array_equal(y, encode_f16_reference(half.astype(np.float16)))


@tf.jit
def bad_e4b15(x_ptr, y_ptr):
    v = tl.load(x_ptr).to(tl.float8e4b15, bitcast=True)
    tl.store(y_ptr, v + v)


def test_arithmetic_needs_a_cast():
    with pytest.raises(tf.CompilationError, match="f8e4b15") as e:
        bad_e4b15[(1,)](np.zeros(1, np.uint8), np.zeros(1, np.uint8))
    assert e.value.file == __file__


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_assembles(arch, tmp_path):
    from tests.ptxas import assert_assembles

    b, h, f = np.zeros(256, np.uint8), np.zeros(256, np.float16), np.zeros(256, np.float32)
    for k in (
        decode_kernel.warmup(b, h, f, N=256, grid=(1,), target=arch),
        encode_kernel.warmup(f, b, N=256, MODE="rtz", grid=(1,), target=arch),
        encode_kernel.warmup(h, b, N=256, MODE="rtne", grid=(1,), target=arch),
        copy_through_e4b15_pointers.warmup(b, b, N=128, grid=(1,), target=arch),
    ):
        assert_assembles(k.asm["ptx"], arch, tmp_path)
