"""Helpers shared by the per-op tests: ulp distances, exact rounding references, array dtypes."""

import sys
from fractions import Fraction
from pathlib import Path

import ml_dtypes
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/python, for golden/
import tilefuse.language as tl  # noqa: E402
from golden import formats_reference as R  # noqa: E402

BF16 = np.dtype(ml_dtypes.bfloat16)
NP = {
    tl.float32: np.dtype(np.float32),
    tl.float16: np.dtype(np.float16),
    tl.bfloat16: BF16,
    tl.float64: np.dtype(np.float64),
    tl.int8: np.dtype(np.int8),
    tl.int16: np.dtype(np.int16),
    tl.int32: np.dtype(np.int32),
    tl.int64: np.dtype(np.int64),
}
_UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def to_dtype(x64: np.ndarray, d: np.dtype) -> np.ndarray:
    """float64 values correctly rounded (to nearest even) to float dtype d. numpy rounds
    double to float32 and float16 directly; bfloat16 goes through the golden reference,
    since double -> float32 -> bfloat16 could round twice."""
    x64 = np.asarray(x64, np.float64)
    if d == BF16:
        codes = [R.round_code("bf16", float(v)) for v in x64.ravel()]
        return np.array(codes, np.uint16).view(BF16).reshape(x64.shape)
    with np.errstate(over="ignore"):  # overflow to inf is the rounding we want
        return x64.astype(d)


def ulp_distance(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """How many representable values of their (equal) float dtype lie between got and want:
    0 when equal (+0 and -0 are equal), a huge number when exactly one is NaN."""
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    size = got.dtype.itemsize
    sign = 1 << (8 * size - 1)

    def ordered(a):  # bit patterns mapped to integers that increase with the value
        b = np.ascontiguousarray(a).view(_UINT[size])
        mag = (b & _UINT[size](sign - 1)).astype(np.int64)
        return np.where(b >> _UINT[size](8 * size - 1) != 0, -mag, mag)

    d = np.abs(ordered(got) - ordered(want))
    gn, wn = np.isnan(got.astype(np.float64)), np.isnan(want.astype(np.float64))
    d = np.where(gn & wn, 0, d)
    return np.where(gn ^ wn, 1 << 40, d)


def assert_ulp(got, want, max_ulp: int, what: str, inputs=None):
    d = ulp_distance(got, want)
    if (d > max_ulp).any():
        i = int(np.argmax(d))
        at = f" at input {inputs.ravel()[i]!r}" if inputs is not None else ""
        raise AssertionError(
            f"{what}: {int((d > max_ulp).sum())} elements off by more than {max_ulp} ulp; worst "
            f"{int(d.ravel()[i])} ulp{at}: got {got.ravel()[i]!r}, want {want.ravel()[i]!r}"
        )


def round_f32(v: Fraction) -> float:
    """An exact rational correctly rounded (nearest even) to float32, overflow to inf."""
    if v == 0:
        return 0.0
    sign = -1.0 if v < 0 else 1.0
    a = abs(v)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    q = Fraction(2) ** (max(e, -126) - 23)
    n = a / q
    fl = n.numerator // n.denominator
    rem = n - fl
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and fl % 2):
        fl += 1
    r = fl * q
    if r > Fraction(2) ** 127 * (2 - Fraction(1, 2**23)):
        return sign * float("inf")
    return sign * float(r)


def dot_bound(a64: np.ndarray, b64: np.ndarray) -> np.ndarray:
    """|error| bound of an fp32-accumulated a @ b with exact products, in any summation
    order: K * 2^-24 * (|a| @ |b|) (each of the K - 1 additions rounds once)."""
    return a64.shape[1] * 2.0**-24 * (np.abs(a64) @ np.abs(b64)) + 1e-30
