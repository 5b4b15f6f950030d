"""Error checks shared by the MoE tests (SPEC-moe.md §6).

- `assert_within`: elementwise, |got - ref| <= ulps · ulp_out(ref) + floor, for results
  computed in fp32 and rounded once to the output dtype; non-finite references must be
  matched exactly (after rounding to the output dtype).
- `error_stats` / `assert_error_rms`: the error-RMS check of §6.4: the RMS of the error
  relative to the reference tensor's RMS is what is bounded (per recipe, or against a
  baseline activation's own statistic); the max error only as a loose ceiling.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

U32 = 2.0**-24  # fp32 unit roundoff
# (explicit mantissa bits, smallest normal exponent) of the stored dtypes.
_FORMATS = {np.dtype(np.float32): (23, -126), np.dtype(ml_dtypes.bfloat16): (7, -126)}


def ulp(ref: np.ndarray, dtype) -> np.ndarray:
    """The spacing of `dtype` at |ref| (float64 values; subnormal spacing below the normals)."""
    mant, emin = _FORMATS[np.dtype(dtype)]
    with np.errstate(divide="ignore"):
        e = np.floor(np.log2(np.abs(ref)))
    e = np.where(np.isfinite(e), np.maximum(e, emin), emin)
    return np.exp2(e - mant)


def assert_within(got, ref, *, ulps=1.0, floor=0.0, what="result"):
    """got (any float dtype) against the float64 `ref`; `floor`: an absolute allowance
    (scalar or per element) for error that does not scale with |ref| (cancellation)."""
    dtype = got.dtype
    got64 = got.astype(np.float64)
    ref = np.asarray(ref, np.float64)
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != {ref.shape}"
    with np.errstate(over="ignore", invalid="ignore"):
        rounded = ref.astype(dtype).astype(np.float64)
    special = ~np.isfinite(rounded)
    bad_special = special & ~((got64 == rounded) | (np.isnan(got64) & np.isnan(rounded)))
    assert not bad_special.any(), (
        f"{what}: {bad_special.sum()} non-finite references not matched, e.g. got {got64[bad_special][:4]} "
        f"for {ref[bad_special][:4]}"
    )
    tol = np.broadcast_to(ulps * ulp(ref, dtype) + floor, ref.shape)
    err = np.where(special, 0.0, np.abs(got64 - ref))
    with np.errstate(invalid="ignore"):
        ratio = np.where(special, 0.0, err / tol)
    worst = tuple(int(i) for i in np.unravel_index(np.nanargmax(np.where(np.isnan(ratio), np.inf, ratio)), ratio.shape))
    assert not np.isnan(got64[~special]).any(), f"{what}: NaN where the reference is finite"
    assert ratio[worst] <= 1.0, (
        f"{what}: {(ratio > 1).sum()} of {ratio.size} elements off; worst at {worst}: got {float(got64[worst])!r}, "
        f"float64 {float(ref[worst])!r}, error {err[worst]:.3e} > tolerance {tol[worst]:.3e}"
    )


@dataclass(frozen=True)
class ErrorStats:
    """Error of a tensor against its reference, relative to the reference's RMS."""

    rms: float  # rms(got - ref) / rms(ref)
    max: float  # max|got - ref| / rms(ref)
    mean: float  # mean(got - ref) / rms(ref): ~0 when errors are unbiased


def error_stats(got, ref) -> ErrorStats:
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    assert got.shape == ref.shape and ref.size, f"shapes {got.shape} and {ref.shape}"
    scale = np.sqrt(np.mean(ref * ref))
    assert scale > 0 and np.isfinite(scale), "the reference must be finite and not all zero"
    err = got - ref
    assert np.isfinite(err).all(), "non-finite error"
    return ErrorStats(
        float(np.sqrt(np.mean(err * err)) / scale), float(np.abs(err).max() / scale), float(err.mean() / scale)
    )


def assert_error_rms(got, ref, *, rms_bound, max_bound, what="result", baseline: ErrorStats | None = None):
    """The error RMS relative to ref's RMS is <= rms_bound (times baseline.rms when a
    baseline is given, e.g. SReLU's under the same recipe); the max error <= max_bound
    (a loose ceiling on the tail, the same units). Returns the statistics."""
    s = error_stats(got, ref)
    limit = rms_bound * (baseline.rms if baseline is not None else 1.0)
    assert s.rms <= limit, f"{what}: error RMS {s.rms:.3e} of the tensor's RMS > {limit:.3e} ({s})"
    assert s.max <= max_bound, f"{what}: max error {s.max:.3e} of the tensor's RMS > {max_bound:.3e} ({s})"
    return s


# Error RMS of a GEMM output relative to the tensor's RMS, against the float64 product of
# the (dequantized) inputs, per recipe and output dtype: a bf16 store rounds once (at most
# 2^-9 relative, RMS about 2^-9/sqrt(3)); fp32 accumulation adds O(sqrt(K)·2^-24). MXFP8
# against the dequantized inputs: the same on the interpreter; the GPU's fp8 tensor cores
# add each 32-wide block's products with fewer bits (at most 2^-10 of their |sum|
# measured, bench/RESULTS.md) before the fp32 promotion.
GEMM_RMS_BOUNDS = {
    ("bf16", "bfloat16"): 2.0**-8,
    ("bf16", "float32"): 2.0**-16,
    ("mxfp8", "bfloat16"): 2.0**-8,
    ("mxfp8", "float32"): 2.0**-10,
}
