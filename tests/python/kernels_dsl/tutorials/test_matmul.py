"""Tutorial 03 (kernels_dsl/tutorials/matmul.py) against a float64 reference.

Inputs are fresh random data every run (the seed is printed and shown on failure)."""

import ml_dtypes
import numpy as np
import pytest

from kernels_dsl.tutorials.matmul import matmul

# Products of bf16/f16 values are exact in f32; f32 products round once. A K-term f32
# sum in any order is within (K - 1) * u32 * sum_k |a_ik| |b_kj| of the exact value
# (Higham's bound); a few more roundings (f32 products, the accumulator update,
# leaky_relu's 0.01 * x) make it (K + 4) * u32. Then C is rounded once to its dtype:
# u_out * |c|. f16 results are all far above the subnormal range here.
U32 = 2.0**-24
U_OUT = {np.float32: U32, ml_dtypes.bfloat16: 2.0**-8, np.float16: 2.0**-11}
# Half the spacing of the output's subnormals: the absolute error of rounding a tiny result.
SUB_OUT = {np.float32: 2.0**-150, ml_dtypes.bfloat16: 2.0**-134, np.float16: 2.0**-25}
SHAPES = [(64, 64, 64), (100, 77, 50), (256, 192, 128), (1, 1, 1), (3, 130, 70)]


def _reference(a, b, activation):
    c = a.astype(np.float64) @ b.astype(np.float64)
    return np.where(c >= 0, c, 0.01 * c) if activation == "leaky_relu" else c


def _check(c, a, b, activation):
    ref = _reference(a, b, activation)
    K = a.shape[1]
    scale = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    tol = U_OUT[c.dtype.type] * np.abs(ref) + SUB_OUT[c.dtype.type] + (K + 4) * U32 * scale
    err = np.abs(c.astype(np.float64) - ref)
    bad = ~(err <= tol)  # NaN (an unwritten element) counts as bad
    assert not bad.any(), (
        f"{bad.sum()} of {bad.size} elements out of tolerance; first at {np.argwhere(bad)[0]}: "
        f"got {c[bad][0]}, want {ref[bad][0]}, |err| {err[bad][0]:.3g} > tol {tol[bad][0]:.3g}"
    )
    # The bound above is worst-case; rounding errors mostly cancel, so the RMS error must
    # also be small: output roundings are <= u_out relative, f32 accumulation ~ sqrt(K) u32.
    rms = np.sqrt(np.mean(err**2) / np.mean(scale**2))
    assert rms <= U_OUT[c.dtype.type] + 2 * np.sqrt(K) * U32, f"relative RMS error {rms:.3g}"


def _random(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("activation", ["", "leaky_relu"])
@pytest.mark.parametrize("dtype", list(U_OUT), ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("M,N,K", SHAPES, ids=lambda s: str(s))
def test_matmul(rng, M, N, K, dtype, activation):
    a, b = _random(rng, (M, K), dtype), _random(rng, (K, N), dtype)
    c = np.full((M, N), np.nan, dtype=dtype)  # poison: unwritten elements fail
    assert matmul(a, b, activation, out=c) is c
    _check(c, a, b, activation)


# Small tiles give many programs, so the grouped ordering runs full groups and a short
# last group (num_pid_m % GROUP_M != 0), and M, N, K are ragged against every tile size.
@pytest.mark.parametrize(
    "M,N,K,tiles",
    [
        (100, 77, 50, (16, 32, 16, 3)),
        (96, 64, 48, (32, 16, 16, 2)),
        (70, 90, 33, (16, 16, 32, 1)),
        (50, 40, 20, (16, 16, 16, 64)),  # one group larger than the whole grid
    ],
    ids=str,
)
def test_matmul_tile_configs(rng, M, N, K, tiles):
    BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M = tiles
    a, b = _random(rng, (M, K), np.float32), _random(rng, (K, N), np.float32)
    c = np.full((M, N), np.nan, np.float32)
    matmul(a, b, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M, out=c)
    _check(c, a, b, "")


def test_matmul_strided_operands(rng):
    # A transposed (column-major) A, a column slice of B, and C written into a slice of a
    # larger poisoned buffer: the kernel must use all six strides.
    M, N, K = 90, 70, 60
    a = _random(rng, (K, M), ml_dtypes.bfloat16).T
    b = _random(rng, (K, 2 * N), ml_dtypes.bfloat16)[:, 1::2]
    big = np.full((M + 5, N + 9), np.nan, ml_dtypes.bfloat16)
    c = big[2 : M + 2, 4 : N + 4]
    matmul(a, b, "leaky_relu", out=c)
    _check(c, a, b, "leaky_relu")
    outside = np.full(big.shape, True)
    outside[2 : M + 2, 4 : N + 4] = False
    assert np.isnan(big[outside].astype(np.float32)).all()  # nothing written outside C


def test_matmul_returns_a_new_array(rng):
    a, b = _random(rng, (33, 20), np.float16), _random(rng, (20, 45), np.float16)
    c = matmul(a, b)
    assert c.shape == (33, 45) and c.dtype == np.float16
    _check(c, a, b, "")


def test_matmul_rejects_bad_arguments():
    a = np.empty((4, 5), np.float32)
    with pytest.raises(ValueError, match="incompatible shapes"):
        matmul(a, np.empty((4, 5), np.float32))
    with pytest.raises(ValueError, match="one dtype"):
        matmul(a, np.empty((5, 3), np.float16))
    with pytest.raises(ValueError, match="unknown activation"):
        matmul(a, np.empty((5, 3), np.float32), "gelu")
