"""tl.math, tl.extra.cuda.libdevice and Triton's top-level math names on the interpreter:
every function of tests/math_cases.py on fresh random inputs (with zeros, infinities and
NaN mixed in) in f32, f64, f16 and bf16 against a float64 numpy reference rounded to the
dtype. Correctly rounded functions (rounding to integers, sqrt, division, fmod, fmin,
copysign, ...) must match bit for bit; the others within one ulp for f32 and narrower
(computed in double, rounded once) and within glibc's bound plus numpy's for f64."""

import numpy as np
import pytest
import tilefuse as tf
import tilefuse.language as tl
from ops_common import NP, assert_ulp, to_dtype

from tests.math_cases import BINARY, UNARY, binary_kernel, inputs, reference, unary_kernel
from tests.ptxas import assert_assembles

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


@tf.jit
def _every_function(x_ptr, y_ptr, out_ptr, UNARY_NAMES: tl.constexpr, BINARY_NAMES: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    for i in tl.static_range(len(UNARY_NAMES)):
        tl.store(out_ptr + i * BLOCK + offs, getattr(tl.math, UNARY_NAMES[i])(x))
    for j in tl.static_range(len(BINARY_NAMES)):
        tl.store(out_ptr + (len(UNARY_NAMES) + j) * BLOCK + offs, getattr(tl.math, BINARY_NAMES[j])(x, y))


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("d", DTYPES, ids=str)
def test_every_function_assembles_with_libdevice_linked(d, target, tmp_path):
    npd = NP[d]
    x = np.ones(64, npd)
    out = np.zeros(64 * (len(UNARY) + len(BINARY)), npd)
    names = dict(UNARY_NAMES=tuple(c.name for c in UNARY), BINARY_NAMES=tuple(c.name for c in BINARY))
    k = _every_function.warmup(x, x, out, **names, BLOCK=64, grid=(1,), target=target)
    ptx = k.asm["ptx"]
    assert "__nv_" not in ptx, "a libdevice call was left unresolved"
    assert_assembles(ptx, target, tmp_path)


@tf.jit
def _conversions(x_ptr, d_ptr, f_out, i_out, d_out, l_out, BLOCK: tl.constexpr):
    lib = tl.extra.cuda.libdevice
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    d = tl.load(d_ptr + offs)
    tl.store(f_out + offs, lib.saturatef(x))
    tl.store(f_out + BLOCK + offs, lib.double2float_rn(d))
    tl.store(f_out + 2 * BLOCK + offs, lib.double2float_rz(d))
    tl.store(f_out + 3 * BLOCK + offs, lib.int_as_float(lib.float_as_int(x) ^ 1))
    tl.store(i_out + offs, lib.float_as_int(x))
    tl.store(l_out + offs, lib.llrint(x))
    tl.store(l_out + BLOCK + offs, lib.llround(x))
    tl.store(l_out + 2 * BLOCK + offs, lib.double_as_longlong(d))
    tl.store(d_out + offs, lib.longlong_as_double(lib.double_as_longlong(d) + 1))


def test_libdevice_conversions_are_exact(rng):
    n = 256
    x = (rng.standard_normal(n) * 3).astype(np.float32)
    x[:6] = [0.0, -0.5, 0.5, 1.5, 2.5, -3.0]  # ties of both roundings; finite (llrint of inf is undefined)
    d = rng.standard_normal(n) * 1e3
    f_out, i_out = np.zeros(4 * n, np.float32), np.zeros(n, np.int32)
    d_out, l_out = np.zeros(n, np.float64), np.zeros(3 * n, np.int64)
    _conversions[(1,)](x, d, f_out, i_out, d_out, l_out, BLOCK=n)
    bits = x.view(np.int32)
    np.testing.assert_array_equal(f_out[:n], np.clip(x, 0, 1))
    np.testing.assert_array_equal(f_out[n : 2 * n], d.astype(np.float32))
    rtz = d.astype(np.float32)
    rtz = np.where(np.abs(rtz.astype(np.float64)) > np.abs(d), np.nextafter(rtz, np.float32(0)), rtz)
    np.testing.assert_array_equal(f_out[2 * n : 3 * n], rtz)
    np.testing.assert_array_equal(f_out[3 * n :].view(np.int32), bits ^ 1)
    np.testing.assert_array_equal(i_out, bits)
    np.testing.assert_array_equal(l_out[:n], np.rint(x).astype(np.int64))
    np.testing.assert_array_equal(l_out[n : 2 * n], (np.sign(x) * np.floor(np.abs(x) + 0.5)).astype(np.int64))
    np.testing.assert_array_equal(l_out[2 * n :], d.view(np.int64))
    np.testing.assert_array_equal(d_out.view(np.int64), d.view(np.int64) + 1)


def test_saturatef_maps_nan_to_zero():
    x = np.array([np.nan, -1.0, 2.0, 0.5] * 16, np.float32)
    out = np.zeros_like(x)
    unary_kernel[(1,)](x, out, x.size, NAME="saturatef", BLOCK=64)
    np.testing.assert_array_equal(out, np.array([0.0, 0.0, 1.0, 0.5] * 16, np.float32))
