"""Tutorial 02 (kernels_dsl/tutorials/softmax.py) against a float64 reference.

Inputs are fresh random data every run (the seed is printed and shown on failure)."""

import ml_dtypes
import numpy as np
import pytest

from kernels_dsl.tutorials.softmax import softmax

# The kernel computes in f32 whatever the input type. Relative error per element:
# the sum of n_cols positive terms (<= n_cols * u32), the rounding of x - max, which
# exp turns into a relative error of u32 * |x - max| (|x - max| < 16 here), and a few
# roundings (exp, divide): (n_cols + 24) * u32 in all. Then one rounding to the output
# type (u_out); f16 outputs below 2^-14 are subnormal, with absolute error <= 2^-25.
U_OUT = {np.float32: 0.0, ml_dtypes.bfloat16: 2.0**-8, np.float16: 2.0**-11}  # beyond f32
ATOL = {np.float32: 0.0, ml_dtypes.bfloat16: 0.0, np.float16: 2.0**-25}


def _rtol(dtype, n_cols):
    return U_OUT[dtype] + (n_cols + 24) * 2.0**-24


def _reference(x):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("dtype", list(U_OUT), ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(1, 1), (37, 100), (128, 781), (3, 1024), (2, 4099)], ids=str)
def test_softmax(rng, shape, dtype):
    # Scale 2 spreads the probabilities over several orders of magnitude.
    x = (rng.standard_normal(shape) * 2).astype(dtype)
    y = np.full(shape, np.nan, dtype=dtype)  # poison: unwritten elements fail
    assert softmax(x, out=y) is y
    np.testing.assert_allclose(y.astype(np.float64), _reference(x), rtol=_rtol(dtype, shape[1]), atol=ATOL[dtype])


def test_softmax_large_inputs_do_not_overflow(rng):
    # exp(800) overflows even in f64; the max subtraction keeps every exponent <= 0.
    x = (rng.standard_normal((5, 300)) * 4 + 800).astype(np.float32)
    y = softmax(x)
    assert np.isfinite(y).all()
    np.testing.assert_allclose(y, _reference(x), rtol=_rtol(np.float32, 300))


def test_softmax_strided_rows(rng):
    # Column slices of wider arrays: the input and output row strides differ from n_cols.
    wide = (rng.standard_normal((20, 150)) * 2).astype(np.float32)
    x = wide[:, 7:107]
    out_wide = np.full((20, 130), np.nan, np.float32)
    y = out_wide[:, 3:103]
    softmax(x, out=y)
    np.testing.assert_allclose(y, _reference(x), rtol=_rtol(np.float32, 100))
    assert np.isnan(out_wide[:, :3]).all() and np.isnan(out_wide[:, 103:]).all()  # nothing written outside


def test_softmax_returns_a_new_array(rng):
    x = (rng.standard_normal((9, 33)) * 2).astype(ml_dtypes.bfloat16)
    x_before = x.copy()
    y = softmax(x)
    assert y.shape == x.shape and y.dtype == x.dtype and y is not x
    np.testing.assert_array_equal(x, x_before)
    np.testing.assert_allclose(y.astype(np.float64), _reference(x), rtol=_rtol(ml_dtypes.bfloat16, 33))


def test_softmax_rejects_non_matrix():
    with pytest.raises(ValueError, match="2-D"):
        softmax(np.empty(5, np.float32))
