"""An independent reference for tilefuse's number formats (SPEC-moe.md section 3, Formats.h).

Pure Python with exact rational arithmetic (fractions.Fraction): it shares no code with
compiler/lib/interp/Formats.cpp and takes no rounding decision from ml_dtypes or the FPU.
Decoding builds each code's value from its sign/exponent/mantissa fields; rounding works
on a *table* of every representable value of the format: it finds the two neighbours that
bracket an exact rational and picks one by the rounding mode. This is a different algorithm
from the C++ one (which scales by the quantum of the binade), so the two check each other.

Formats (code = sign | exponent | mantissa, most significant first):
  f16    e5m10 bias 15, IEEE (inf, NaN)           bf16   e8m7 bias 127, IEEE
  f8e5m2 e5m2  bias 15, IEEE codes, max 57344     f8e4m3 e4m3 bias 7, no inf, NaN = S.1111.111, max 448
  f4e2m1 e2m1  bias 1, no inf/NaN, values ±{0, .5, 1, 1.5, 2, 3, 4, 6}
  e8m0   unsigned, 2^(b-127) for b = 0..254, 0xFF = NaN

Rounding modes ("rne", "rtz", "ru", "rs"), for |x| between neighbours lo < |x| < hi:
  rne  nearest; at a tie the neighbour with the even code (even mantissa LSB).
  rtz  lo.   ru  toward +inf (hi for positive x, lo in magnitude for negative x).
  rs   stochastic: hi iff frac * 2^32 > rbits, frac = (|x| - lo) / (hi - lo), i.e. the
       discarded fraction of |x|/ulp (Formats.h).
Range: fp8/fp4 casts saturate to ±max (inf too); f4e2m1 maps NaN to +0. f16/bf16 follow
IEEE: a result beyond max is inf, except rtz (and ru of a negative), which give ±max;
the neighbour above max is the value max + ulp(max) an unbounded exponent would give.
Results that underflow to zero keep the sign of x.
e8m0 rounds |x| (it has no sign): |x| <= 2^-127 (zero included) gives 2^-127, |x| >= 2^127
(inf included) gives 2^127. Its significand is the implicit 1 alone, so at an rne tie
(|x| = 1.5 * 2^k) the odd significand rounds up to 2^(k+1) -- what torch, ml_dtypes and
LLVM's APFloat do.
"""

from __future__ import annotations

import bisect
import functools
import math
from dataclasses import dataclass
from fractions import Fraction

MODES = ("rne", "rtz", "ru", "rs")
NAN = float("nan")


@dataclass(frozen=True)
class Format:
    name: str
    ebits: int
    mbits: int
    bias: int
    kind: str  # "ieee": all-ones exponent is inf/NaN; "fn": only all-ones code is NaN; "finite": no specials
    saturating: bool

    @property
    def width(self) -> int:
        return 1 + self.ebits + self.mbits

    @property
    def sign_bit(self) -> int:
        return 1 << (self.width - 1)


F16 = Format("f16", 5, 10, 15, "ieee", False)
BF16 = Format("bf16", 8, 7, 127, "ieee", False)
F8E5M2 = Format("f8e5m2", 5, 2, 15, "ieee", True)
F8E4M3 = Format("f8e4m3", 4, 3, 7, "fn", True)
F4E2M1 = Format("f4e2m1", 2, 1, 1, "finite", True)
E8M0 = "e8m0"  # handled separately: no sign, no mantissa

FORMATS = {f.name: f for f in (F16, BF16, F8E5M2, F8E4M3, F4E2M1)}
ALL_NAMES = (*FORMATS, E8M0)


def _fmt(name):
    return FORMATS[name] if isinstance(name, str) else name


def width(name) -> int:
    return 8 if name == E8M0 else _fmt(name).width


# --- decoding ---


def decode_exact(name, code: int):
    """A code's value: ('nan',), ('inf', sign) or ('num', sign, Fraction magnitude)."""
    if name == E8M0:
        code &= 0xFF
        return ("nan",) if code == 0xFF else ("num", 0, Fraction(2) ** (code - 127))
    f = _fmt(name)
    code &= (1 << f.width) - 1
    sign = code >> (f.width - 1)
    e = (code >> f.mbits) & ((1 << f.ebits) - 1)
    m = code & ((1 << f.mbits) - 1)
    emax_field = (1 << f.ebits) - 1
    if f.kind == "ieee" and e == emax_field:
        return ("nan",) if m else ("inf", sign)
    if f.kind == "fn" and e == emax_field and m == (1 << f.mbits) - 1:
        return ("nan",)
    if e == 0:  # zero and subnormals: 0.m * 2^(1 - bias)
        mag = Fraction(m, 1 << f.mbits) * Fraction(2) ** (1 - f.bias)
    else:  # normals: 1.m * 2^(e - bias)
        mag = Fraction((1 << f.mbits) + m, 1 << f.mbits) * Fraction(2) ** (e - f.bias)
    return ("num", sign, mag)


def to_float(v) -> float:
    """A decoded value as a Python float (exact: every value of these formats is a double)."""
    if v[0] == "nan":
        return NAN
    if v[0] == "inf":
        return -math.inf if v[1] else math.inf
    f = float(v[2])
    assert Fraction(f) == v[2], "value not exact in a double"
    return -f if v[1] else f


def decode(name, code: int) -> float:
    return to_float(decode_exact(name, code))


@functools.cache
def decode_all(name) -> tuple[float, ...]:
    """decode() of every code, by code."""
    return tuple(decode(name, c) for c in all_codes(name))


def is_nan_code(name, code: int) -> bool:
    return decode_exact(name, code)[0] == "nan"


def all_codes(name) -> range:
    return range(1 << width(name))


# --- the table of representable magnitudes ---


@functools.cache
def _table(name):
    """Sorted finite non-negative magnitudes, their codes, and the virtual value above
    max (what an unbounded exponent range would give)."""
    if name == E8M0:
        vals = [Fraction(2) ** (b - 127) for b in range(255)]
        return vals, list(range(255)), None
    f = _fmt(name)
    pairs = []
    for code in range(f.sign_bit):  # positive codes only
        v = decode_exact(f, code)
        if v[0] == "num":
            pairs.append((v[2], code))
    pairs.sort()
    vals = [p[0] for p in pairs]
    codes = [p[1] for p in pairs]
    for a, b in zip(vals, vals[1:]):
        assert a < b, f"{name}: duplicate or unordered values"
    top = vals[-1]
    # ulp(max): the spacing of the top binade, 2^(exp(max) - mbits).
    exp_max = top.numerator.bit_length() - top.denominator.bit_length()
    if Fraction(2) ** exp_max > top:
        exp_max -= 1
    virtual = top + Fraction(2) ** (exp_max - f.mbits)
    return vals, codes, virtual


def max_value(name) -> Fraction:
    return _table(name)[0][-1]


def representable(name) -> list[Fraction]:
    """Every finite non-negative value, ascending."""
    return list(_table(name)[0])


# --- rounding ---


def _as_exact(x):
    """x as ('nan',) / ('inf', sign) / ('num', sign, Fraction)."""
    if isinstance(x, Fraction):
        return ("num", int(x < 0), abs(x))
    x = float(x)
    if math.isnan(x):
        return ("nan",)
    sign = int(math.copysign(1.0, x) < 0)
    if math.isinf(x):
        return ("inf", sign)
    return ("num", sign, abs(Fraction(x)))


def _choose(mode, neg, a, lo, hi, lo_even, rbits):
    """True to take hi. a is strictly between lo and hi."""
    if mode == "rtz":
        return False
    if mode == "ru":
        return not neg
    if mode == "rne":
        d_lo, d_hi = a - lo, hi - a
        return d_hi < d_lo or (d_hi == d_lo and not lo_even)
    if mode == "rs":
        frac = (a - lo) / (hi - lo)
        return frac * (1 << 32) > rbits
    raise ValueError(f"unknown rounding mode {mode!r}")


def round_code(name, x, mode: str = "rne", rbits: int = 0) -> int:
    """The code of x (a float or a Fraction) rounded to format `name` under `mode`."""
    if mode not in MODES:
        raise ValueError(f"unknown rounding mode {mode!r}")
    if not 0 <= rbits < 1 << 32:
        raise ValueError("rbits must be a 32-bit unsigned integer")
    v = _as_exact(x)
    if name == E8M0:
        return _round_e8m0(v, mode, rbits)
    f = _fmt(name)
    vals, codes, virtual = _table(name)
    max_code = codes[-1]
    if v[0] == "nan":
        if f.kind == "finite":
            return 0
        if f.kind == "fn":
            return 0x7F  # S.1111.111 (the sign of a NaN carries no meaning; use +)
        return ((1 << f.ebits) - 1) << f.mbits | 1 << (f.mbits - 1)  # a quiet NaN
    neg = v[1]
    sbit = f.sign_bit if neg else 0
    inf_code = ((1 << f.ebits) - 1) << f.mbits
    if v[0] == "inf":
        return sbit | (max_code if f.saturating else inf_code)
    a = v[2]

    def overflow():
        # A result above max: saturate, or IEEE inf except where the mode rounds toward zero.
        if f.saturating or mode == "rtz" or (mode == "ru" and neg):
            return sbit | max_code
        return sbit | inf_code

    if a > vals[-1]:
        if a >= virtual:
            return overflow()
        if _choose(mode, neg, a, vals[-1], virtual, (max_code & 1) == 0, rbits):
            return overflow()
        return sbit | max_code
    i = bisect.bisect_left(vals, a)
    if vals[i] == a:
        return sbit | codes[i]
    lo, hi = vals[i - 1], vals[i]
    take_hi = _choose(mode, neg, a, lo, hi, (codes[i - 1] & 1) == 0, rbits)
    return sbit | (codes[i] if take_hi else codes[i - 1])


def _round_e8m0(v, mode, rbits) -> int:
    if v[0] == "nan":
        return 0xFF
    if v[0] == "inf":
        return 254
    a = v[2]
    vals = _table(E8M0)[0]
    if a <= vals[0]:
        return 0
    if a >= vals[-1]:
        return 254
    i = bisect.bisect_left(vals, a)
    if vals[i] == a:
        return i
    lo, hi = vals[i - 1], vals[i]
    if mode == "rne":
        take_hi = hi - a <= a - lo  # the tie goes up: the significand (the implicit 1) is odd
    else:
        take_hi = _choose(mode, False, a, lo, hi, True, rbits)
    return i if take_hi else i - 1


def round_value(name, x, mode: str = "rne", rbits: int = 0) -> float:
    return decode(name, round_code(name, x, mode, rbits))


# --- interesting inputs ---


def neighbours(name, a: Fraction) -> tuple[Fraction, Fraction] | None:
    """(lo, hi) bracketing a strictly inside the finite range, else None."""
    vals = _table(name)[0]
    i = bisect.bisect_left(vals, a)
    if i == 0 or i >= len(vals) or vals[i] == a:
        return None
    return vals[i - 1], vals[i]


def midpoints(name) -> list[Fraction]:
    """Midpoints of adjacent representable magnitudes, and between max and the value above it."""
    vals, _, virtual = _table(name)
    mids = [(a + b) / 2 for a, b in zip(vals, vals[1:])]
    if virtual is not None:
        mids.append((vals[-1] + virtual) / 2)
    return mids
