"""Kernels and references of tl.dot's variants (issue 16 part 8), shared by the interpreter
tests (tests/python/test_dot_variants.py) and the GPU tests (tests/gpu/): f16 accumulators
(out_dtype=tl.float16), 3-D batched dots, input_precision ieee / tf32 / tf32x3 (and
allow_tf32), max_num_imprecise_acc, and M, N or K below 16."""

import ml_dtypes
import numpy as np
import tilefuse as tf
import tilefuse.language as tl

U32 = 2.0**-24  # unit roundoff of float32
U16 = 2.0**-11  # of float16


@tf.jit
def dot2d(
    a_ptr,
    b_ptr,
    c_ptr,
    o_ptr,
    M: tl.constexpr,
    N: tl.constexpr,
    K: tl.constexpr,
    OUT16: tl.constexpr,
    PREC: tl.constexpr,
    HAS_ACC: tl.constexpr,
):
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    out = tl.float16 if OUT16 else tl.float32
    if HAS_ACC:
        acc = tl.load(c_ptr + rm[:, None] * N + rn[None, :])
        o = tl.dot(a, b, acc, input_precision=PREC, out_dtype=out)
    else:
        o = tl.dot(a, b, input_precision=PREC, out_dtype=out)
    tl.store(o_ptr + rm[:, None] * N + rn[None, :], o)


@tf.jit
def dot2d_tf32_alias(a_ptr, b_ptr, o_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, ALLOW: tl.constexpr):
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    tl.store(o_ptr + rm[:, None] * N + rn[None, :], tl.dot(a, b, allow_tf32=ALLOW))


@tf.jit
def dot2d_imprecise(a_ptr, b_ptr, o_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, IMPRECISE: tl.constexpr):
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    tl.store(o_ptr + rm[:, None] * N + rn[None, :], tl.dot(a, b, max_num_imprecise_acc=IMPRECISE))


@tf.jit
def dot3d(
    a_ptr,
    b_ptr,
    c_ptr,
    o_ptr,
    B: tl.constexpr,
    M: tl.constexpr,
    N: tl.constexpr,
    K: tl.constexpr,
    OUT16: tl.constexpr,
    HAS_ACC: tl.constexpr,
):
    rb = tl.arange(0, B)[:, None, None]
    a = tl.load(a_ptr + rb * M * K + tl.arange(0, M)[None, :, None] * K + tl.arange(0, K)[None, None, :])
    b = tl.load(b_ptr + rb * K * N + tl.arange(0, K)[None, :, None] * N + tl.arange(0, N)[None, None, :])
    offs = rb * M * N + tl.arange(0, M)[None, :, None] * N + tl.arange(0, N)[None, None, :]
    out = tl.float16 if OUT16 else tl.float32
    if HAS_ACC:
        o = tl.dot(a, b, tl.load(c_ptr + offs), out_dtype=out)
    else:
        o = tl.dot(a, b, out_dtype=out)
    tl.store(o_ptr + offs, o)


def random_operand(rng, shape, dtype):
    """Fresh normal data in `dtype` (int8: uniform in [-128, 127])."""
    if dtype == np.int8:
        return rng.integers(-128, 128, shape).astype(np.int8)
    return rng.standard_normal(shape).astype(dtype)


def to_tf32(x: np.ndarray) -> np.ndarray:
    """float32 to the nearest tf32 (10 mantissa bits), ties away from zero (cvt.rna.tf32.f32)."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32)
    special = (bits & np.uint32(0x7F800000)) == np.uint32(0x7F800000)
    rounded = (bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)
    return np.where(special, bits, rounded).view(np.float32)


def f64(x):
    return np.asarray(x).astype(np.float64)


def f16_acc_reference(a, b, acc, step):
    """The interpreter's (and the GPU FMA path's) f16 accumulator, exactly: per element, the
    exact products summed in float32 in K order from the accumulator, rounded to f16 after
    every `step` K elements."""
    s = acc.astype(np.float32)
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    for k in range(a.shape[-1]):
        s = (s + a32[..., :, k : k + 1] * b32[..., k : k + 1, :]).astype(np.float32)
        if (k + 1) % step == 0 or k + 1 == a.shape[-1]:
            s = s.astype(np.float16).astype(np.float32)
    return s.astype(np.float16)


def magnitude(a, b, acc=None):
    """|a| |b| + |acc| in float64: what rounding errors of the sum scale with."""
    s = np.matmul(np.abs(f64(a)), np.abs(f64(b)))
    return s if acc is None else s + np.abs(f64(acc))


def f32_bound(a, b, acc=None, exact_products=True):
    """Error bound of a float32 dot of K terms (each product exact for 16-bit and 8-bit
    operands, else rounded once), plus rounding of the result."""
    k = a.shape[-1]
    return (k + 2 + (0 if exact_products else 1)) * U32 * magnitude(a, b, acc)


def f16_bound(a, b, acc=None):
    """Error bound of an f16 accumulator rounded every 16 K elements: one f16 rounding of a
    partial sum per step and of the result, on top of the float32 sums."""
    k = a.shape[-1]
    return ((k // 16 + 2) * U16 + (k + 2) * U32) * magnitude(a, b, acc)


DTYPES = {
    "float16": np.float16,
    "bfloat16": ml_dtypes.bfloat16,
    "float32": np.float32,
    "int8": np.int8,
    "float8e4nv": ml_dtypes.float8_e4m3fn,
}


@tf.jit
def matmul_f16_acc(a_ptr, b_ptr, o_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """A K loop of out_dtype=float16 dots (pipelined on sm_90a: wgmma's f16 accumulator
    carried in registers across iterations). M, N, K multiples of the blocks."""
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros([BM, BN], dtype=tl.float16)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc = tl.dot(a, b, acc, out_dtype=tl.float16)
    tl.store(o_ptr + rm[:, None] * N + rn[None, :], acc)
