"""Unsigned integers (uint8/16/32/64) on the CPU interpreter, against exact references.

Arithmetic is C's at the dtype's width: wrap-around, truncating division and remainder,
logical >> for unsigned types, unsigned comparisons, min/max and reductions; casts extend
by the source's signedness and convert to floats rounded to nearest even. Promotion is
Triton's (C's usual arithmetic conversions): equal widths take the unsigned type, a wider
signed type wins over a narrower unsigned one. Shifts by the width or more and float ->
int conversions out of range are undefined in C (and Triton); the interpreter and the GPU
saturate the latter (cvt.rzi.sat), tested as tilefuse's definition, not C's.
"""

import ml_dtypes
import numpy as np
import pytest
import tilefuse as tf
import tilefuse.language as tl
from tilefuse import _C

from tests.unsigned_kernels import (
    BINARY_OPS,
    COMPARISONS,
    INTS,
    TL,
    UINTS,
    N,
    add_scalar,
    atomics,
    binary,
    binary_reference,
    compare,
    convert,
    edge_values,
    masked_copy,
    reduce_all,
    round_int_to_float,
    unary,
)


@pytest.fixture
def rng():
    return np.random.default_rng()


def operands(op, d, rng):
    """x and y for `op` on dtype d: edge values; divisors nonzero (and above INT_MAX of the
    width, so signed division would differ); shift counts 0..bits-1."""
    x, y = edge_values(d, rng), edge_values(d, rng)
    bits = 8 * np.dtype(d).itemsize
    if op in ("shl", "shr"):
        y = (np.arange(N) % bits).astype(d)
    if op in ("floordiv", "mod"):
        y[y == 0] = 3
        if np.iinfo(d).min < 0:  # MIN / -1 overflows: undefined
            y[(y == -1) & (x == np.iinfo(d).min)] = 5
        else:
            y[:4] = [np.iinfo(d).max, (1 << (bits - 1)) + 7, 1, 2]
    return x, y


@pytest.mark.parametrize("op", BINARY_OPS)
@pytest.mark.parametrize("d", INTS)
def test_binary(op, d, rng):
    x, y = operands(op, d, rng)
    out = np.zeros(N, d)
    binary[(1,)](x, y, out, OP=op, N=N)
    np.testing.assert_array_equal(out, binary_reference(op, x, y), err_msg=f"{op} on {np.dtype(d)}")


@pytest.mark.parametrize("op", COMPARISONS)
@pytest.mark.parametrize("d", UINTS)
def test_compare_is_unsigned(op, d, rng):
    x, y = edge_values(d, rng), edge_values(d, rng)
    y[:8] = x[:8]  # equal pairs
    out = np.zeros(N, np.bool_)
    k = compare[(1,)](x, y, out, OP=op, N=N)
    want = {"lt": x < y, "le": x <= y, "gt": x > y, "ge": x >= y, "eq": x == y, "ne": x != y}[op]
    np.testing.assert_array_equal(out, want)
    if op not in ("eq", "ne"):
        assert f'predicate = "u{op}"' in k.asm["tile"]


@pytest.mark.parametrize("op", ["neg", "invert", "abs"])
@pytest.mark.parametrize("d", UINTS)
def test_unary(op, d, rng):
    x = edge_values(d, rng)
    out = np.zeros(N, d)
    unary[(1,)](x, out, OP=op, N=N)
    with np.errstate(over="ignore"):
        want = {"neg": (0 - x).astype(d), "invert": ~x, "abs": x}[op]
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("src", INTS)
@pytest.mark.parametrize("dst", INTS)
def test_int_to_int_casts(src, dst, rng):
    # C: truncation to the low bits; widening by the source's signedness.
    x = edge_values(src, rng)
    out = np.zeros(N, dst)
    convert[(1,)](x, out, TO=TL[np.dtype(dst)], N=N)
    np.testing.assert_array_equal(out, x.astype(dst))


@pytest.mark.parametrize("rounding", ["rne", "rtz"])
@pytest.mark.parametrize("src", INTS)
@pytest.mark.parametrize("dst", [np.float32, np.float64])
def test_int_to_float_casts(src, dst, rounding, rng):
    # Rounded to nearest even (or toward zero): uint64 values from 2^63 on too, as unsigned.
    x = edge_values(src, rng)
    out = np.zeros(N, dst)
    convert[(1,)](x, out, TO=TL[np.dtype(dst)], N=N, ROUND=rounding)
    mant = 24 if dst == np.float32 else 53
    want = np.array([round_int_to_float(int(v), mant, rounding == "rtz") for v in x], dst)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("src", INTS)
@pytest.mark.parametrize("dst", [np.float16, ml_dtypes.bfloat16])
def test_int_to_half_casts(src, dst, rng):
    # One rounding to nearest even (f16: to inf from 65520 on).
    x = edge_values(src, rng)
    out = np.zeros(N, dst)
    convert[(1,)](x, out, TO=tl.float16 if dst == np.float16 else tl.bfloat16, N=N)
    mant = 11 if dst == np.float16 else 8
    with np.errstate(over="ignore"):
        want = np.array([round_int_to_float(int(v), mant) for v in x], np.float64).astype(dst)
    np.testing.assert_array_equal(out.astype(np.float64), want.astype(np.float64))


@pytest.mark.parametrize("dst", UINTS)
@pytest.mark.parametrize("src", [np.float32, np.float64])
def test_float_to_uint_casts_in_range(src, dst, rng):
    # Truncation toward zero for values in [0, 2^bits): C defines exactly these.
    bits = 8 * np.dtype(dst).itemsize
    top = float(np.nextafter(src(2.0**bits), src(0)))  # the largest float below 2^bits
    x = np.concatenate([[0.0, 0.5, 1.0, 1.75, top, 2.0 ** (bits - 1)], rng.uniform(0, top, N - 6)]).astype(src)
    out = np.zeros(N, dst)
    convert[(1,)](x, out, TO=TL[np.dtype(dst)], N=N)
    np.testing.assert_array_equal(out, np.array([int(v) for v in x.astype(np.float64)], dtype=np.uint64).astype(dst))


@pytest.mark.parametrize("dst", UINTS)
def test_float_to_uint_out_of_range_saturates(dst):
    # Undefined in C and Triton; tilefuse's definition on both backends: cvt.rzi.sat,
    # negatives and NaN to 0, values from 2^bits on to the maximum.
    bits = 8 * np.dtype(dst).itemsize
    x = np.array([-1.0, -0.0, -1e30, np.nan, 2.0**bits, 1e30, np.inf, -np.inf] * (N // 8), np.float32)
    out = np.ones(N, dst)
    convert[(1,)](x, out, TO=TL[np.dtype(dst)], N=N)
    top = np.iinfo(dst).max
    np.testing.assert_array_equal(out, np.array([0, 0, 0, 0, top, top, top, 0] * (N // 8), dst))


@pytest.mark.parametrize("d", UINTS)
def test_reductions(d, rng):
    x = edge_values(d, rng)
    out = np.zeros(5, np.uint64)
    reduce_all[(1,)](x, out, N=N)
    acc_bits = max(32, 8 * np.dtype(d).itemsize)  # Triton sums narrow unsigned types in uint32
    total = sum(int(v) for v in x) % (1 << acc_bits)
    want = [total, int(x.max()), int(x.min()), int(np.argmax(x)), int(np.argmin(x))]
    np.testing.assert_array_equal(out, np.array(want, np.uint64))


@pytest.mark.parametrize("d", UINTS)
def test_masked_loads_and_stores(d, rng):
    x = edge_values(d, rng)
    other = int(np.iinfo(d).max)  # a literal the signed type of the width could not hold
    out = np.zeros(N, d)
    masked_copy[(1,)](x, out, 77, OTHER=other, N=N)
    np.testing.assert_array_equal(out, np.where(np.arange(N) < 77, x, np.array(other, d)))


@pytest.mark.parametrize("d", [np.uint32, np.uint64])
def test_atomics(d, rng):
    x = edge_values(d, rng)
    s, m = np.zeros(1, d), np.zeros(1, d)
    atomics[(1,)](x, s, m, N=N)
    assert int(s[0]) == sum(int(v) for v in x) % (1 << (8 * np.dtype(d).itemsize))
    assert int(m[0]) == int(x.max())  # unsigned: the values from 2^(bits-1) on are the largest


# --- promotion, literals and errors ---


@tf.jit
def promoted(x_ptr, y_ptr, out_ptr, WANT: tl.constexpr, N: tl.constexpr):
    offs = tl.arange(0, N)
    r = tl.load(x_ptr + offs) + tl.load(y_ptr + offs)
    tl.static_assert(r.dtype == WANT, "promoted to the wrong type")
    tl.store(out_ptr + offs, r)


PROMOTIONS = [
    (np.int32, np.uint32, np.uint32),
    (np.uint32, np.int32, np.uint32),
    (np.int8, np.uint32, np.uint32),
    (np.uint8, np.int32, np.int32),
    (np.uint32, np.int64, np.int64),
    (np.int64, np.uint64, np.uint64),
    (np.uint16, np.int16, np.uint16),
    (np.uint8, np.int8, np.uint8),
    (np.uint8, np.uint64, np.uint64),
    (np.bool_, np.uint8, np.uint8),
    (np.uint32, np.float32, np.float32),
]


@pytest.mark.parametrize("a,b,want", PROMOTIONS)
def test_promotion_is_tritons(a, b, want, rng):
    x = edge_values(a, rng) if a is not np.bool_ else rng.integers(0, 2, N).astype(np.bool_)
    y = edge_values(b, rng) if b is not np.float32 else rng.standard_normal(N).astype(np.float32)
    out = np.zeros(N, want)
    promoted[(1,)](x, y, out, WANT=TL[np.dtype(want)], N=N)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(out, x.astype(want) + y.astype(want))


@tf.jit
def literal_ops(x_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    r = x + 1  # a literal takes the tensor's type where it fits
    tl.static_assert(r.dtype == x.dtype)
    tl.store(out_ptr + offs, (r * 3) >> 1)


@pytest.mark.parametrize("d", UINTS)
def test_literals_take_the_unsigned_type(d, rng):
    x = edge_values(d, rng)
    out = np.zeros(N, d)
    literal_ops[(1,)](x, out, N=N)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(out, ((x + d(1)) * d(3)) >> d(1))


@tf.jit
def widened(x_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    r = tl.load(x_ptr + offs) + 3000000000  # uint32 alone, but beside an int32 tensor: int64
    tl.static_assert(r.dtype == tl.int64)
    tl.store(out_ptr + offs, r + (2**32 + 7))


def test_big_literals_beside_signed_tensors_widen_to_int64(rng):
    # Triton rejects these (out of range for int32); tilefuse keeps the value, as before unsigned types.
    x = edge_values(np.int32, rng)
    out = np.zeros(N, np.int64)
    widened[(1,)](x, out, N=N)
    np.testing.assert_array_equal(out, x.astype(np.int64) + 3000000000 + 2**32 + 7)


@tf.jit
def add_literal(x_ptr, V: tl.constexpr):
    tl.store(x_ptr, tl.load(x_ptr) + V)


@tf.jit
def divide(x_ptr, y_ptr, MOD: tl.constexpr):
    x, y = tl.load(x_ptr), tl.load(y_ptr)
    tl.store(x_ptr, x % y if MOD else x // y)


def test_unsigned_errors_are_tritons():
    u = np.zeros(1, np.uint8)
    with pytest.raises(tf.CompilationError, match="unsigned tensor and a negative scalar"):
        add_literal[(1,)](u, V=-1)
    with pytest.raises(tf.CompilationError, match="Scalar 256 is out of range for type tl.uint8"):
        add_literal[(1,)](u, V=256)
    i = np.zeros(1, np.int32)
    for mod in (False, True):
        with pytest.raises(tf.CompilationError, match="different signedness") as e:
            divide[(1,)](np.zeros(1, np.uint32), i, MOD=mod)
        assert "test_unsigned.py" in str(e.value)


def test_text_form_round_trips():
    for text in ("u8", "ptr<u16>", "tile<16xu32>", "tile<4x8xptr<u64>>"):
        assert str(_C.ir.Type.parse(text)) == text


def test_u64_scalars_beyond_int64():
    # A Python int from 2^63 on is a u64 argument, as in Triton; a literal too.
    out = np.zeros(2, np.uint64)
    v = (1 << 64) - 5
    k = store_pair[(1,)](out, v, BIG=(1 << 63) + 9)
    assert list(out) == [v, (1 << 63) + 9]
    assert "%v: u64" in k.asm["tile"]


@tf.jit
def store_pair(out_ptr, v, BIG: tl.constexpr):
    tl.store(out_ptr, v)
    tl.store(out_ptr + 1, v * 0 + BIG)


@pytest.mark.parametrize(
    "s,d",
    [
        (np.uint32(4000000000), np.uint32),
        (np.uint8(250), np.uint8),
        (np.uint64(2**64 - 3), np.uint64),
        (np.int16(-7), np.int16),
        (np.float64(0.1), np.float64),
        (np.float32(0.1), np.float32),
    ],
)
def test_numpy_scalar_arguments_keep_their_type(s, d, rng):
    # The scalar's own dtype: a u32 beyond INT32_MAX wraps as u32; a float64 keeps its
    # 53 bits (a Python float argument would be rounded to float32).
    x = edge_values(d, rng) if np.dtype(d).kind in "iu" else rng.standard_normal(N).astype(d)
    out = np.zeros(N, d)
    k = add_scalar[(1,)](x, out, s, N=N)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(out, x + s)
    assert f"%s: {_C.ir.dtype_name(TL[np.dtype(type(s))].ir)}" in k.asm["tile"]


def test_numpy_bool_scalar():
    out = np.zeros(N, np.int32)
    add_scalar[(1,)](np.arange(N, dtype=np.int32), out, np.bool_(True), N=N)
    np.testing.assert_array_equal(out, np.arange(N) + 1)


@tf.jit
def folded(out_ptr, A: tl.constexpr, B: tl.constexpr, D: tl.constexpr, N: tl.constexpr):
    # Constant operands: canonicalize folds these, so the folds must be unsigned too.
    a, b = tl.full((N,), A, D), tl.full((N,), B, D)
    r = tl.arange(0, N)
    vals = [a // b, a % b, a >> 3, tl.maximum(a, b), tl.minimum(a, b), (a < b).to(D), a.to(tl.uint64).to(D)]
    for j in tl.static_range(len(vals)):
        tl.store(out_ptr + j * N + r, vals[j])
    tl.store(out_ptr + len(vals) * N + r, a.to(tl.float64).to(tl.uint64).to(D))


@pytest.mark.parametrize("d", UINTS)
def test_constant_folding_is_unsigned(d):
    info = np.iinfo(d)
    a, b = int(info.max) - 6, (1 << (info.bits - 1)) + 3  # both beyond the signed range
    out = np.zeros(8 * 16, d)
    folded[(1,)](out, A=a, B=b, D=TL[np.dtype(d)], N=16)
    want = [a // b, a % b, a >> 3, max(a, b), min(a, b), int(a < b), a, int(float(a)) if d != np.uint64 else info.max]
    np.testing.assert_array_equal(out.reshape(8, 16), np.repeat(np.array(want, dtype=object)[:, None], 16, 1).astype(d))
