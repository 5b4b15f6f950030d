"""The MoE tests' error helpers (errors.py) flag what they are meant to flag."""

import ml_dtypes
import numpy as np
import pytest

from tests.python.moe.errors import assert_error_rms, assert_within, error_stats, ulp

BF16 = ml_dtypes.bfloat16


@pytest.fixture
def ref():
    return np.random.default_rng().standard_normal(500) * 10.0


def test_ulp_is_the_spacing_of_the_format():
    x = np.array([1.0, 1.5, 2.0, -3.0, 0.0, 2.0**-130])
    assert ulp(x, BF16).tolist() == [2.0**-7, 2.0**-7, 2.0**-6, 2.0**-6, 2.0**-133, 2.0**-133]
    assert ulp(x, np.float32).tolist() == [2.0**-23, 2.0**-23, 2.0**-22, 2.0**-22, 2.0**-149, 2.0**-149]


@pytest.mark.parametrize("dtype", [BF16, np.float32])
def test_assert_within_takes_one_rounding_and_flags_two_ulps(ref, dtype):
    assert_within(ref.astype(dtype), ref)
    # Two representable steps away from zero (adding 2 ulp(ref) in float64 could round back
    # at a binade edge: 15.94 -> 15.9375 + 0.125 = 16.0625 -> 16.0 in bf16).
    off = ref.astype(dtype)
    bits = off.view(np.uint16 if dtype == BF16 else np.uint32)
    bits[7] += 2
    with pytest.raises(AssertionError, match="1 of 500 elements off; worst at \\(7,\\)"):
        assert_within(off, ref)
    assert_within(off, ref, floor=5 * ulp(ref, dtype))


def test_assert_within_matches_non_finite_references_exactly():
    ref = np.array([1.0, 1e39, -1e39, np.nan])  # 1e39 rounds to inf in fp32
    assert_within(np.array([1.0, np.inf, -np.inf, np.nan], np.float32), ref)
    with pytest.raises(AssertionError, match="non-finite references not matched"):
        assert_within(np.array([1.0, np.inf, np.inf, np.nan], np.float32), ref)
    with pytest.raises(AssertionError, match="NaN where the reference is finite"):
        assert_within(np.array([np.nan, np.inf, -np.inf, np.nan], np.float32), ref)


def test_error_stats_and_rms_bounds(ref):
    rng = np.random.default_rng()
    noise = rng.standard_normal(ref.size)
    noise *= 0.01 * np.sqrt(np.mean(ref**2)) / np.sqrt(np.mean(noise**2))  # error RMS exactly 1% of ref's
    s = error_stats(ref + noise, ref)
    assert s.rms == pytest.approx(0.01) and s.max >= s.rms and abs(s.mean) < s.rms
    assert_error_rms(ref + noise, ref, rms_bound=0.011, max_bound=1.0)
    with pytest.raises(AssertionError, match="error RMS"):
        assert_error_rms(ref + noise, ref, rms_bound=0.009, max_bound=1.0)
    with pytest.raises(AssertionError, match="max error"):
        assert_error_rms(ref + noise, ref, rms_bound=0.011, max_bound=s.max / 2)
    # Against a baseline: 2% error passes at 2.5x a 1% baseline, fails at 1.5x.
    assert_error_rms(ref + 2 * noise, ref, rms_bound=2.5, max_bound=1.0, baseline=s)
    with pytest.raises(AssertionError, match="error RMS"):
        assert_error_rms(ref + 2 * noise, ref, rms_bound=1.5, max_bound=1.0, baseline=s)
