"""The tl.math functions with their float64 references, input domains and error bounds,
shared by the interpreter tests (tests/python/language/test_math.py) and the GPU tests
(tests/gpu/test_math_gpu.py).

`cuda` holds the maximum ulp error of libdevice's f32 and f64 functions as the CUDA C++
Programming Guide states it (appendix "Mathematical Functions", tables "Single- / Double-
Precision Mathematical Standard Library Functions with Maximum ULP Error"); 0 means
correctly rounded. `libm` is the bound of glibc's double functions (glibc manual, "Known
Maximum Errors in Math Functions", x86_64), which the interpreter computes with for f64;
for narrower dtypes it computes in double and rounds once, so it is within one ulp of
the correctly rounded value."""

import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import tilefuse as tf
import tilefuse.language as tl


class Case(NamedTuple):
    name: str  # the tl.math (and libdevice) name
    ref: Callable  # float64 numpy arrays -> float64 result
    domain: Callable  # (rng, n) -> float64 inputs, one array per operand
    cuda: tuple[int, int]  # libdevice's max ulp error for (f32, f64)
    libm: int  # glibc's max ulp error in double


def _uniform(lo, hi):
    return lambda rng, n: [rng.uniform(lo, hi, n)]


def _log_uniform(lo, hi, signed=False):
    def gen(rng, n):
        x = 10.0 ** rng.uniform(math.log10(lo), math.log10(hi), n)
        return [x * rng.choice([-1.0, 1.0], n) if signed else x]

    return gen


def _pair(a, b):
    return lambda rng, n: a(rng, n) + b(rng, n)


def _halves(lo, hi):
    """Values near and at the ties of rounding to integers (k / 2), and random ones."""

    def gen(rng, n):
        ties = rng.integers(2 * lo, 2 * hi, n) / 2.0
        return [np.where(rng.random(n) < 0.5, ties, rng.uniform(lo, hi, n))]

    return gen


_vec = np.vectorize


UNARY = [
    Case("exp", np.exp, _uniform(-80, 80), (2, 1), 1),
    Case("exp2", np.exp2, _uniform(-120, 120), (2, 1), 1),
    Case("exp10", lambda x: np.power(10.0, x), _uniform(-35, 35), (2, 1), 2),
    Case("expm1", np.expm1, _log_uniform(1e-7, 40, signed=True), (1, 1), 1),
    Case("log", np.log, _log_uniform(1e-30, 1e30), (1, 1), 1),
    Case("log2", np.log2, _log_uniform(1e-30, 1e30), (1, 1), 2),
    Case("log10", np.log10, _log_uniform(1e-30, 1e30), (2, 1), 2),
    Case(
        "log1p",
        np.log1p,
        lambda rng, n: [np.where(rng.random(n) < 0.5, rng.uniform(-0.99, 50, n), rng.uniform(-1e-6, 1e-6, n))],
        (1, 1),
        1,
    ),
    Case("sin", np.sin, _uniform(-100, 100), (2, 2), 1),
    Case("cos", np.cos, _uniform(-100, 100), (2, 2), 1),
    Case("tan", np.tan, _uniform(-10, 10), (4, 2), 1),
    Case("asin", np.arcsin, _uniform(-1, 1), (2, 2), 1),
    Case("acos", np.arccos, _uniform(-1, 1), (2, 2), 1),
    Case("atan", np.arctan, _log_uniform(1e-4, 1e4, signed=True), (2, 2), 1),
    Case("sinh", np.sinh, _uniform(-20, 20), (3, 2), 2),
    Case("cosh", np.cosh, _uniform(-20, 20), (2, 1), 2),
    Case("tanh", np.tanh, _uniform(-10, 10), (2, 1), 2),
    Case("asinh", np.arcsinh, _log_uniform(1e-4, 1e6, signed=True), (3, 2), 2),
    Case("acosh", np.arccosh, _log_uniform(1, 1e6), (4, 2), 2),
    Case("atanh", np.arctanh, _uniform(-0.999, 0.999), (3, 2), 2),
    Case("erf", _vec(math.erf), _uniform(-4, 4), (2, 2), 1),
    Case("erfc", _vec(math.erfc), _uniform(-3, 9), (4, 5), 5),
    Case("cbrt", np.cbrt, _log_uniform(1e-6, 1e6, signed=True), (1, 1), 4),
    Case("rsqrt", lambda x: 1.0 / np.sqrt(x), _log_uniform(1e-20, 1e20), (2, 1), 0),
    Case("sqrt", np.sqrt, _log_uniform(1e-20, 1e20), (0, 0), 0),
    Case("sqrt_rn", np.sqrt, _log_uniform(1e-20, 1e20), (0, 0), 0),
    Case("floor", np.floor, _halves(-100, 100), (0, 0), 0),
    Case("ceil", np.ceil, _halves(-100, 100), (0, 0), 0),
    Case("trunc", np.trunc, _halves(-100, 100), (0, 0), 0),
    Case("round", lambda x: np.sign(x) * np.floor(np.abs(x) + 0.5), _halves(-100, 100), (0, 0), 0),
    Case("rint", np.rint, _halves(-100, 100), (0, 0), 0),
    Case("nearbyint", np.rint, _halves(-100, 100), (0, 0), 0),
    Case("fabs", np.abs, _uniform(-100, 100), (0, 0), 0),
]

BINARY = [
    Case("atan2", np.arctan2, _pair(_uniform(-10, 10), _uniform(-10, 10)), (3, 2), 1),
    Case("pow", np.power, _pair(_log_uniform(1e-2, 1e2), _uniform(-8, 8)), (4, 2), 1),
    Case("hypot", np.hypot, _pair(_uniform(-100, 100), _uniform(-100, 100)), (3, 2), 1),
    Case("copysign", np.copysign, _pair(_uniform(-10, 10), _uniform(-10, 10)), (0, 0), 0),
    Case("fmod", np.fmod, _pair(_uniform(-1000, 1000), _log_uniform(0.1, 10, signed=True)), (0, 0), 0),
    Case("fmin", np.fmin, _pair(_uniform(-10, 10), _uniform(-10, 10)), (0, 0), 0),
    Case("fmax", np.fmax, _pair(_uniform(-10, 10), _uniform(-10, 10)), (0, 0), 0),
    Case(
        "fdim",
        lambda x, y: np.where(np.isnan(x) | np.isnan(y), np.nan, np.where(x > y, x - y, 0.0)),
        _pair(_uniform(-10, 10), _uniform(-10, 10)),
        (0, 0),
        0,
    ),
    Case("div_rn", np.divide, _pair(_uniform(-10, 10), _log_uniform(1e-3, 1e3, signed=True)), (0, 0), 0),
]

# Inputs every function also sees: zeros of both signs, infinities and NaN.
SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0])


@tf.jit
def unary_kernel(x_ptr, out_ptr, n, NAME: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(out_ptr + offs, getattr(tl.math, NAME)(x), mask=m)


@tf.jit
def binary_kernel(x_ptr, y_ptr, out_ptr, n, NAME: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.load(y_ptr + offs, mask=m)
    tl.store(out_ptr + offs, getattr(tl.math, NAME)(x, y), mask=m)


def inputs(case: Case, rng, n: int) -> list[np.ndarray]:
    """float64 inputs from the case's domain, with the special values mixed in."""
    xs = case.domain(rng, n)
    for x in xs:
        x[rng.choice(n, len(SPECIALS), replace=False)] = SPECIALS
    return xs


def reference(case: Case, xs: list[np.ndarray]) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(case.ref(*xs), np.float64)
