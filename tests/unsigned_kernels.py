"""Kernels and exact numpy references for unsigned integers and Philox random numbers,
run by the CPU tests (tests/python/language: interpreter against the references) and the
GPU tests (tests/gpu: GPU against the interpreter and the references)."""

import numpy as np
import tilefuse as tf
import tilefuse.language as tl

UINTS = (np.uint8, np.uint16, np.uint32, np.uint64)
INTS = (np.int8, np.int16, np.int32, np.int64) + UINTS
TL = {
    np.dtype(np.int8): tl.int8,
    np.dtype(np.int16): tl.int16,
    np.dtype(np.int32): tl.int32,
    np.dtype(np.int64): tl.int64,
    np.dtype(np.uint8): tl.uint8,
    np.dtype(np.uint16): tl.uint16,
    np.dtype(np.uint32): tl.uint32,
    np.dtype(np.uint64): tl.uint64,
    np.dtype(np.float32): tl.float32,
    np.dtype(np.float64): tl.float64,
}
BINARY_OPS = ("add", "sub", "mul", "floordiv", "mod", "and", "or", "xor", "shl", "shr", "min", "max", "umulhi")
COMPARISONS = ("lt", "le", "gt", "ge", "eq", "ne")
N = 128


@tf.jit
def binary(x_ptr, y_ptr, out_ptr, OP: tl.constexpr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    if OP == "add":
        r = x + y
    elif OP == "sub":
        r = x - y
    elif OP == "mul":
        r = x * y
    elif OP == "floordiv":
        r = x // y
    elif OP == "mod":
        r = x % y
    elif OP == "and":
        r = x & y
    elif OP == "or":
        r = x | y
    elif OP == "xor":
        r = x ^ y
    elif OP == "shl":
        r = x << y
    elif OP == "shr":
        r = x >> y
    elif OP == "min":
        r = tl.minimum(x, y)
    elif OP == "max":
        r = tl.maximum(x, y)
    else:
        r = tl.umulhi(x, y)
    tl.store(out_ptr + offs, r)


@tf.jit
def compare(x_ptr, y_ptr, out_ptr, OP: tl.constexpr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    if OP == "lt":
        r = x < y
    elif OP == "le":
        r = x <= y
    elif OP == "gt":
        r = x > y
    elif OP == "ge":
        r = x >= y
    elif OP == "eq":
        r = x == y
    else:
        r = x != y
    tl.store(out_ptr + offs, r)


@tf.jit
def unary(x_ptr, out_ptr, OP: tl.constexpr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    if OP == "neg":
        r = -x
    elif OP == "invert":
        r = ~x
    else:
        r = tl.abs(x)
    tl.store(out_ptr + offs, r)


@tf.jit
def convert(x_ptr, out_ptr, TO: tl.constexpr, N: tl.constexpr, ROUND: tl.constexpr = "rne"):
    offs = tl.arange(0, N)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs).to(TO, fp_downcast_rounding=ROUND))


@tf.jit
def reduce_all(x_ptr, out_ptr, N: tl.constexpr):
    # [sum, max, min, argmax, argmin] of one row.
    x = tl.load(x_ptr + tl.arange(0, N))
    tl.store(out_ptr, tl.sum(x, axis=0).to(tl.uint64))
    tl.store(out_ptr + 1, tl.max(x, axis=0).to(tl.uint64))
    tl.store(out_ptr + 2, tl.min(x, axis=0).to(tl.uint64))
    tl.store(out_ptr + 3, tl.argmax(x, axis=0).to(tl.uint64))
    tl.store(out_ptr + 4, tl.argmin(x, axis=0).to(tl.uint64))


@tf.jit
def masked_copy(x_ptr, out_ptr, n, OTHER: tl.constexpr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n, other=OTHER))


@tf.jit
def atomics(x_ptr, sum_ptr, max_ptr, N: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N))
    tl.atomic_add(sum_ptr + tl.arange(0, N) * 0, x)
    tl.atomic_max(max_ptr + tl.arange(0, N) * 0, x)


@tf.jit
def philox_kat(c_ptr, k_ptr, out_ptr, N: tl.constexpr):
    # Philox4x32-10 of N counters (4 words each) under N keys (2 words each).
    r = tl.arange(0, N)
    c0, c1 = tl.load(c_ptr + r * 4), tl.load(c_ptr + r * 4 + 1)
    c2, c3 = tl.load(c_ptr + r * 4 + 2), tl.load(c_ptr + r * 4 + 3)
    k0 = tl.load(k_ptr + r * 2)
    k1 = tl.load(k_ptr + r * 2 + 1)
    o0, o1, o2, o3 = tl.philox_impl(c0, c1, c2, c3, k0, k1)
    tl.store(out_ptr + r * 4, o0)
    tl.store(out_ptr + r * 4 + 1, o1)
    tl.store(out_ptr + r * 4 + 2, o2)
    tl.store(out_ptr + r * 4 + 3, o3)


@tf.jit
def philox_seeded(c_ptr, out_ptr, seed, N: tl.constexpr):
    # tl.philox of N counters (4 words each, uint32 or uint64) keyed by a seed.
    r = tl.arange(0, N)
    c0, c1 = tl.load(c_ptr + r * 4), tl.load(c_ptr + r * 4 + 1)
    c2, c3 = tl.load(c_ptr + r * 4 + 2), tl.load(c_ptr + r * 4 + 3)
    o0, o1, o2, o3 = tl.philox(seed, c0, c1, c2, c3)
    tl.store(out_ptr + r * 4, o0)
    tl.store(out_ptr + r * 4 + 1, o1)
    tl.store(out_ptr + r * 4 + 2, o2)
    tl.store(out_ptr + r * 4 + 3, o3)


@tf.jit
def random_streams(out_ptr, seed, base, WIDE: tl.constexpr, N: tl.constexpr):
    # One block of offsets base + [0, N) (int64 when WIDE): randint4x's four blocks, then
    # rand, randn, randint, rand4x and randn4x, each N long, into out (u32 bits).
    offs = tl.arange(0, N)
    if WIDE:
        offs = offs.to(tl.int64) + base
    else:
        offs = offs + base
    i0, i1, i2, i3 = tl.randint4x(seed, offs)
    blocks = [i0, i1, i2, i3, tl.rand(seed, offs), tl.randn(seed, offs), tl.randint(seed, offs)]
    u0, u1, u2, u3 = tl.rand4x(seed, offs)
    n0, n1, n2, n3 = tl.randn4x(seed, offs)
    blocks += [u0, u1, u2, u3, n0, n1, n2, n3]
    for j in tl.static_range(len(blocks)):
        b = blocks[j]
        bits = b.to(tl.uint32, bitcast=True) if b.dtype == tl.float32 else b
        tl.store(out_ptr + j * N + tl.arange(0, N), bits)


@tf.jit
def add_scalar(x_ptr, out_ptr, s, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + s)


STREAM_NAMES = ("i0", "i1", "i2", "i3", "rand", "randn", "randint", "u0", "u1", "u2", "u3", "n0", "n1", "n2", "n3")


# --- numpy references ---


def edge_values(d, rng, n=N) -> np.ndarray:
    """0, 1, the maximum, values around 2^(bits-1) and random ones, shuffled."""
    info = np.iinfo(d)
    bits = info.bits
    edges = [0, 1, 2, info.max, info.max - 1, 1 << (bits - 1), (1 << (bits - 1)) + 1, (1 << (bits - 1)) - 1]
    if info.min < 0:
        edges = [0, 1, -1, info.max, info.min, info.min + 1, -2, 2]
    rand = rng.integers(info.min, info.max, n - len(edges), dtype=d, endpoint=True)
    v = np.concatenate([np.array(edges, dtype=d), rand])
    rng.shuffle(v)
    return v


def binary_reference(op, x, y):
    """C semantics at the dtype's width: wrap-around, truncating division, logical >> for
    unsigned types, and the high half of the unsigned product."""
    d = x.dtype
    bits = 8 * d.itemsize
    with np.errstate(over="ignore"):
        if op == "umulhi":
            mask = (1 << bits) - 1
            hi = [((int(a) & mask) * (int(b) & mask)) >> bits for a, b in zip(x, y)]
            return np.array(hi, dtype=np.uint64).astype(d)
        if op in ("floordiv", "mod"):
            q = np.array([_cdiv(int(a), int(b)) for a, b in zip(x, y)], dtype=object)
            r = np.array([int(a) - _cdiv(int(a), int(b)) * int(b) for a, b in zip(x, y)], dtype=object)
            return (q if op == "floordiv" else r).astype(d)
        fn = {
            "add": np.add,
            "sub": np.subtract,
            "mul": np.multiply,
            "and": np.bitwise_and,
            "or": np.bitwise_or,
            "xor": np.bitwise_xor,
            "shl": np.left_shift,
            "shr": np.right_shift,
            "min": np.minimum,
            "max": np.maximum,
        }[op]
        return fn(x, y).astype(d)


def _cdiv(a: int, b: int) -> int:
    """C's truncating quotient."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def round_int_to_float(v: int, mant: int, toward_zero=False) -> float:
    """The integer v rounded to nearest even (or toward zero) with `mant` significand bits
    (24: float32)."""
    if v == 0:
        return 0.0
    s, a = (-1 if v < 0 else 1), abs(v)
    shift = a.bit_length() - mant
    if shift <= 0:
        return float(v)
    q, rem = a >> shift, a & ((1 << shift) - 1)
    half = 1 << (shift - 1)
    if not toward_zero and (rem > half or (rem == half and q & 1)):
        q += 1
    return s * float(q << shift)


def philox4x32(c, k, rounds=10):
    """Philox4x32 (Salmon et al. 2011) of uint32 counters c[4] and keys k[2] (arrays of
    equal shape), written from the published round function."""
    m0, m1, w0, w1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85
    c = [np.asarray(x, np.uint64) for x in c]
    k0, k1 = (np.asarray(x, np.uint64) for x in k)
    mask = np.uint64(0xFFFFFFFF)
    for r in range(rounds):
        if r:
            k0, k1 = (k0 + np.uint64(w0)) & mask, (k1 + np.uint64(w1)) & mask
        p0, p1 = np.uint64(m0) * c[0], np.uint64(m1) * c[2]  # exact: 32 x 32 bits
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k0, p1 & mask, (p0 >> np.uint64(32)) ^ c[3] ^ k1, p0 & mask]
    return [x.astype(np.uint32) for x in c]


def philox4x64(c, k, rounds=10):
    """Philox4x64 of uint64 counters c[4] and keys k[2] (lists of Python ints), from the
    published round function with 128-bit products."""
    m0, m1, w0, w1 = 0xD2E7470EE14C6C93, 0xCA5A826395121157, 0x9E3779B97F4A7C15, 0xBB67AE8584CAA73B
    mask = (1 << 64) - 1
    c, (k0, k1) = list(c), k
    for r in range(rounds):
        if r:
            k0, k1 = (k0 + w0) & mask, (k1 + w1) & mask
        p0, p1 = m0 * c[0], m1 * c[2]
        c = [(p1 >> 64) ^ c[1] ^ k0, p1 & mask, (p0 >> 64) ^ c[3] ^ k1, p0 & mask]
    return c


def triton_streams(seed: int, offsets: np.ndarray) -> dict:
    """Triton's randint4x / rand / randn / rand4x / randn4x for a seed and int offsets,
    in float32 arithmetic as Triton's formulas do (Box-Muller in float64, rounded once:
    the tests compare it within ulps)."""
    seed &= (1 << 64) - 1
    off = offsets.astype(np.int64)
    lo = (off & 0xFFFFFFFF).astype(np.uint32)
    hi = ((off >> 32) & 0xFFFFFFFF).astype(np.uint32) if offsets.dtype.itemsize > 4 else np.zeros_like(lo)
    zero = np.zeros_like(lo)
    key = [np.full(lo.shape, seed & 0xFFFFFFFF, np.uint32), np.full(lo.shape, seed >> 32, np.uint32)]
    i = philox4x32([lo, hi, zero, zero], key)
    u = [uniform(x) for x in i]
    n = [normal(u[0], u[1]), normal(u[2], u[3])]
    return {
        "i0": i[0],
        "i1": i[1],
        "i2": i[2],
        "i3": i[3],
        "rand": u[0],
        "randn": n[0][0],
        "randint": i[0],
        "u0": u[0],
        "u1": u[1],
        "u2": u[2],
        "u3": u[3],
        "n0": n[0][0],
        "n1": n[0][1],
        "n2": n[1][0],
        "n3": n[1][1],
    }


def f32_ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How many float32 values lie between a and b (finite float32 arrays)."""

    def ordered(x):
        i = np.ascontiguousarray(x, np.float32).view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)

    return np.abs(ordered(a) - ordered(b))


def uniform(bits: np.ndarray) -> np.ndarray:
    """uint_to_uniform_float of uint32 bits: |x| (x < 0: -x - 1) of the int32 view, cast to
    float32, times float32(4.6566127342e-10), in float32."""
    x = bits.view(np.int32).astype(np.int64)
    x = np.where(x < 0, -x - 1, x)
    return x.astype(np.float32) * np.float32(4.6566127342e-10)


def normal(u1: np.ndarray, u2: np.ndarray):
    """pair_uniform_to_normal: max(1e-7, u1), th = 2pi u2 and -2 log(u1) rounded to float32
    as the kernel's float32 ops are, log/sqrt/cos/sin in float64 rounded once."""
    u1 = np.maximum(np.float32(1.0e-7), u1)
    th = (np.float32(6.283185307179586) * u2).astype(np.float32)
    lg = np.log(u1.astype(np.float64)).astype(np.float32)
    r = np.sqrt((np.float32(-2.0) * lg).astype(np.float64)).astype(np.float32)
    cos = np.cos(th.astype(np.float64)).astype(np.float32)
    sin = np.sin(th.astype(np.float64)).astype(np.float32)
    return r * cos, r * sin
