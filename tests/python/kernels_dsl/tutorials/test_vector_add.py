"""Tutorial 01 (kernels_dsl/tutorials/vector_add.py) against a float64 reference.

Inputs are fresh random data every run (the seed is printed and shown on failure)."""

import ml_dtypes
import numpy as np
import pytest

from kernels_dsl.tutorials.vector_add import add, add_kernel

# One rounding of the exact sum: |err| <= u * |x + y| with u the unit roundoff of the
# output type. bf16/f16 sums may be computed in f32 and rounded again, hence 2u. f16
# sums of opposite-signed values can be subnormal, where the error is absolute (2^-25).
TOLERANCES = {  # dtype: (rtol, atol)
    np.float32: (2 * 2.0**-24, 0.0),
    ml_dtypes.bfloat16: (2 * 2.0**-8, 0.0),
    np.float16: (2 * 2.0**-11, 2.0**-25),
    np.int32: (0.0, 0.0),
}


def _random(rng, n, dtype):
    if dtype is np.int32:
        return rng.integers(-(2**30), 2**30, size=n, dtype=np.int32)  # sums stay in range
    return (rng.standard_normal(n) * 3).astype(dtype)


@pytest.mark.parametrize("dtype", list(TOLERANCES), ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("n", [1, 97, 1000, 4096 + 3])
@pytest.mark.parametrize("block", [128, 1024])
def test_add(rng, n, dtype, block):
    x, y = _random(rng, n, dtype), _random(rng, n, dtype)
    out = np.full(n, -123456789 if dtype is np.int32 else np.nan, dtype=dtype)  # poison: unwritten elements fail
    result = add(x, y, BLOCK_SIZE=block, out=out)
    assert result is out
    ref = x.astype(np.float64) + y.astype(np.float64)
    rtol, atol = TOLERANCES[dtype]
    np.testing.assert_allclose(out.astype(np.float64), ref, rtol=rtol, atol=atol)


def test_add_returns_a_new_array(rng):
    x, y = _random(rng, 777, np.float32), _random(rng, 777, np.float32)
    before = x.copy(), y.copy()
    z = add(x, y)
    assert z.shape == x.shape and z.dtype == x.dtype
    assert z is not x and z is not y
    np.testing.assert_array_equal(x, before[0])
    np.testing.assert_array_equal(y, before[1])
    np.testing.assert_allclose(z, x.astype(np.float64) + y, rtol=TOLERANCES[np.float32][0])


def test_add_non_contiguous_inputs(rng):
    # The wrapper copies strided views to contiguous arrays before the launch.
    x, y = _random(rng, 2 * 301, np.float32)[::2], _random(rng, 3 * 301, np.float32)[1::3]
    np.testing.assert_allclose(add(x, y), x.astype(np.float64) + y, rtol=TOLERANCES[np.float32][0])


def test_add_empty():
    x = np.empty(0, np.float32)
    assert add(x, x).shape == (0,)


def test_add_kernel_writes_only_its_blocks(rng):
    # Launching fewer programs than needed leaves the tail untouched (poison survives),
    # i.e. the mask, not the grid, is what bounds the writes of the last program.
    x, y = _random(rng, 300, np.float32), _random(rng, 300, np.float32)
    out = np.full(300, np.nan, np.float32)
    add_kernel[(2,)](x, y, out, 300, BLOCK_SIZE=128)
    np.testing.assert_allclose(out[:256], x[:256].astype(np.float64) + y[:256], rtol=TOLERANCES[np.float32][0])
    assert np.isnan(out[256:]).all()


def test_add_rejects_mismatched_inputs():
    with pytest.raises(ValueError, match="one shape and dtype"):
        add(np.empty(3, np.float32), np.empty(4, np.float32))
    with pytest.raises(ValueError, match="one shape and dtype"):
        add(np.empty(3, np.float32), np.empty(3, np.float16))
