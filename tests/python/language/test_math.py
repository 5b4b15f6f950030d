"""tl.math, tl.extra.cuda.libdevice and Triton's top-level math names on the interpreter:
every function of tests/math_cases.py on fresh random inputs (with zeros, infinities and
NaN mixed in) in f32, f64, f16 and bf16 against a float64 numpy reference rounded to the
dtype. Correctly rounded functions (rounding to integers, sqrt, division, fmod, fmin,
copysign, ...) must match bit for bit; the others within one ulp for f32 and narrower
(computed in double, rounded once) and within glibc's bound plus numpy's for f64."""

import numpy as np
import pytest
import tilefuse.language as tl
from ops_common import NP, assert_ulp, to_dtype

from tests.math_cases import BINARY, UNARY, binary_kernel, inputs, reference, unary_kernel

DTYPES = [tl.float32, tl.float64, tl.float16, tl.bfloat16]
N = 2000


@pytest.fixture
def rng():
    return np.random.default_rng()


def _tolerance(case, d) -> int:
    if case.cuda == (0, 0):
        return 0
    return case.libm + 1 if d == tl.float64 else 1


def _run(case, d, rng):
    npd = NP[d]
    xs = [to_dtype(x, npd) for x in inputs(case, rng, N)]
    want = to_dtype(reference(case, [x.astype(np.float64) for x in xs]), npd)
    out = np.full(N, np.nan, npd)
    kernel = unary_kernel if len(xs) == 1 else binary_kernel
    kernel[(N // 256 + 1,)](*xs, out, N, NAME=case.name, BLOCK=256)
    return xs, out, want


@pytest.mark.parametrize("d", DTYPES, ids=str)
@pytest.mark.parametrize("case", UNARY + BINARY, ids=lambda c: c.name)
def test_math_function(case, d, rng):
    xs, out, want = _run(case, d, rng)
    assert_ulp(out, want, _tolerance(case, d), f"tl.math.{case.name} on {d}", inputs=xs[0])


def test_rounding_ties_exactly(rng):
    """round halves away from zero, rint and nearbyint to even, on exact ties."""
    x = (rng.integers(-200, 200, 512) + 0.5).astype(np.float32)
    for name, want in (("round", np.sign(x) * np.floor(np.abs(x) + 0.5)), ("rint", np.rint(x))):
        out = np.zeros_like(x)
        unary_kernel[(2,)](x, out, x.size, NAME=name, BLOCK=256)
        np.testing.assert_array_equal(out, want.astype(np.float32), err_msg=name)


@pytest.mark.parametrize("d", [tl.float32, tl.float64, tl.float16], ids=str)
def test_classification(d, rng):
    """isnan / isinf / isfinited give int1, signbit an int32 that sees -0.0 and -nan."""
    import tilefuse as tf

    @tf.jit
    def classify(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        m = offs < n
        x = tl.load(x_ptr + offs, mask=m)
        lib = tl.extra.cuda.libdevice
        tl.static_assert(lib.isnan(x).dtype == tl.int1)
        tl.static_assert(lib.signbit(x).dtype == tl.int32)
        tl.store(out_ptr + offs, lib.isnan(x).to(tl.int32), mask=m)
        tl.store(out_ptr + n + offs, lib.isinf(x).to(tl.int32), mask=m)
        tl.store(out_ptr + 2 * n + offs, lib.isfinited(x).to(tl.int32), mask=m)
        tl.store(out_ptr + 3 * n + offs, lib.signbit(x), mask=m)

    npd = NP[d]
    x = (rng.standard_normal(256) * 10).astype(npd)
    x[rng.choice(256, 8, replace=False)] = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-30, -1e-30]
    out = np.full(4 * 256, -1, np.int32)
    classify[(1,)](x, out, 256, BLOCK=256)
    np.testing.assert_array_equal(out[:256], np.isnan(x))
    np.testing.assert_array_equal(out[256:512], np.isinf(x))
    np.testing.assert_array_equal(out[512:768], np.isfinite(x))
    np.testing.assert_array_equal(out[768:], np.signbit(x))


def test_names_are_the_same_functions():
    """Triton's top-level names, tl.math and libdevice share one implementation each."""
    lib = tl.extra.cuda.libdevice
    for name in ("sin", "cos", "exp", "log", "sqrt_rn", "div_rn", "fdiv", "erf", "floor", "ceil", "fma"):
        assert getattr(tl, name) is getattr(tl.math, name), name
    for case in UNARY + BINARY:
        assert getattr(lib, case.name) is getattr(tl.math, case.name), case.name
    assert tl.extra.libdevice is lib


def test_methods_and_integer_inputs(rng):
    """x.sin() and friends are tensor methods; integer inputs compute in float32."""
    import tilefuse as tf

    @tf.jit
    def methods(x_ptr, i_ptr, out_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs)
        i = tl.load(i_ptr + offs)
        tl.store(out_ptr + offs, x.sin() + x.cos().exp() - x.abs().sqrt_rn())
        tl.store(out_ptr + BLOCK + offs, tl.math.pow(i, 2) + tl.math.fmod(i, 7) + tl.math.div_rn(i, 4))

    x = rng.standard_normal(64).astype(np.float32)
    i = rng.integers(-1000, 1000, 64).astype(np.int32)
    out = np.zeros(128, np.float32)
    methods[(1,)](x, i, out, BLOCK=64)
    x64 = x.astype(np.float64)
    # Each op rounds to f32: a few ulp of the largest term.
    ref = np.sin(x64) + np.exp(np.cos(x64)) - np.sqrt(np.abs(x64))
    np.testing.assert_allclose(out[:64], ref, rtol=0, atol=8 * np.finfo(np.float32).eps * 4)
    i64 = i.astype(np.float64)
    np.testing.assert_array_equal(out[64:], (i64**2 + np.fmod(i64, 7) + i64 / 4).astype(np.float32))
