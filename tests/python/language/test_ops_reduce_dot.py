"""Reductions (sum, max, min, argmax), dot, dot_scaled and tensor descriptors on the CPU
interpreter, against float64 numpy references with fresh random inputs.

Tolerances:
  max, min, argmax, integer sums and int8 dot       exact
  float sums (fp32 accumulation)                    |err| <= n * 2^-24 * sum|x|, the bound of
                                                    an fp32 sum in any order (the GPU sums in a
                                                    different order than the interpreter)
  dot / dot_scaled (fp32 accumulation, exact        |err| <= K * 2^-24 * (|A| @ |B|)
  products: every operand format here multiplies    (ops_common.dot_bound), elementwise
  exactly in fp32)
"""

import ml_dtypes
import numpy as np
import pytest
import tilefuse as tf
import tilefuse.language as tl
from ops_common import BF16, NP, R, dot_bound

from tests.shared_kernels import k_desc_fn


@pytest.fixture
def rng():
    return np.random.default_rng()


# --- reductions ---


@tf.jit
def k_reduce(
    x_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr, OP: tl.constexpr, AXIS: tl.constexpr, KEEP: tl.constexpr
):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    x = tl.load(x_ptr + rm[:, None] * N + rn[None, :])
    if OP == "sum":
        r = tl.sum(x, axis=AXIS, keep_dims=KEEP)
    elif OP == "max":
        r = tl.max(x, axis=AXIS, keep_dims=KEEP)
    elif OP == "min":
        r = tl.min(x, axis=AXIS, keep_dims=KEEP)
    elif OP == "argmax":
        r = tl.argmax(x, axis=AXIS, keep_dims=KEEP)
    else:
        r = x.sum(AXIS, keep_dims=KEEP)  # the method form
    if AXIS is None:
        if KEEP:
            tl.static_assert(len(r.shape) == 2 and r.shape[0] == 1 and r.shape[1] == 1)
            tl.store(out_ptr + tl.zeros((1, 1), tl.int32), r)
        else:
            tl.static_assert(len(r.shape) == 0)
            tl.store(out_ptr, r)
    elif AXIS == 0:
        if KEEP:
            tl.static_assert(len(r.shape) == 2 and r.shape[0] == 1 and r.shape[1] == N)
            tl.store(out_ptr + rn[None, :], r)
        else:
            tl.store(out_ptr + rn, r)
    else:
        if KEEP:
            tl.static_assert(len(r.shape) == 2 and r.shape[0] == M and r.shape[1] == 1)
            tl.store(out_ptr + rm[:, None], r)
        else:
            tl.store(out_ptr + rm, r)


REDUCE_OUT = {  # (op, input dtype) -> result dtype
    ("sum", tl.float32): np.float32,
    ("sum", tl.bfloat16): np.float32,
    ("sum", tl.float16): np.float32,
    ("sum", tl.int32): np.int32,
    ("sum", tl.int8): np.int32,
}


@pytest.mark.parametrize("keep", [False, True])
@pytest.mark.parametrize("axis", [0, 1, None])
@pytest.mark.parametrize("op", ["sum", "max", "min", "method_sum"])
@pytest.mark.parametrize("dtype", [tl.float32, tl.bfloat16, tl.float16, tl.int32, tl.int8])
def test_reductions(rng, dtype, op, axis, keep):
    M, N = 16, 32
    if dtype.is_int():
        info = np.iinfo(NP[dtype])
        x = rng.integers(info.min, info.max, (M, N), endpoint=True).astype(NP[dtype])
    else:
        x = (rng.standard_normal((M, N)) * np.exp2(rng.integers(-8, 8, (M, N)))).astype(NP[dtype])
    name = "sum" if op == "method_sum" else op
    out_np = REDUCE_OUT.get((name, dtype), NP[dtype])
    shape = {None: (), 0: (N,), 1: (M,)}[axis]
    out = np.zeros(max(1, int(np.prod(shape))), out_np)
    k_reduce[(1,)](x, out, M=M, N=N, OP=op, AXIS=axis, KEEP=keep)
    x64 = x.astype(np.float64) if not dtype.is_int() else x.astype(np.int64)
    if name == "sum":
        want = x64.sum(axis=axis)
        if dtype.is_int():  # sums of narrow ints accumulate in (and wrap at) int32
            np.testing.assert_array_equal(out, np.asarray(want).astype(np.int32).ravel())
        else:
            n = x.size if axis is None else x.shape[axis]
            tol = n * 2.0**-24 * np.abs(x64).sum(axis=axis)
            np.testing.assert_array_less(np.abs(out.astype(np.float64) - np.ravel(want)), np.ravel(tol) + 1e-30)
    else:
        want = x64.max(axis=axis) if name == "max" else x64.min(axis=axis)
        np.testing.assert_array_equal(out.astype(np.float64 if not dtype.is_int() else np.int64), np.ravel(want))


@pytest.mark.parametrize("keep", [False, True])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("dtype", [tl.float32, tl.int32, tl.bfloat16])
def test_argmax(rng, dtype, axis, keep):
    # Few distinct values, so most rows tie: the first maximal index wins (numpy, Triton).
    M, N = 16, 32
    x = rng.integers(-4, 4, (M, N)).astype(NP[dtype])
    out = np.full(M if axis == 1 else N, -1, np.int32)
    k_reduce[(1,)](x, out, M=M, N=N, OP="argmax", AXIS=axis, KEEP=keep)
    np.testing.assert_array_equal(out, np.argmax(x.astype(np.float64), axis=axis))


@tf.jit
def k_max_with_indices(x_ptr, v_ptr, i_ptr, M: tl.constexpr, N: tl.constexpr):
    rm = tl.arange(0, M)
    x = tl.load(x_ptr + rm[:, None] * N + tl.arange(0, N)[None, :])
    v, i = tl.max(x, axis=1, return_indices=True)
    tl.store(v_ptr + rm, v)
    tl.store(i_ptr + rm, i)


def test_max_return_indices(rng):
    x = rng.standard_normal((8, 64)).astype(np.float32)
    v = np.zeros(8, np.float32)
    i = np.zeros(8, np.int32)
    k_max_with_indices[(1,)](x, v, i, M=8, N=64)
    np.testing.assert_array_equal(v, x.max(axis=1))
    np.testing.assert_array_equal(i, x.argmax(axis=1))


# --- dot ---


@tf.jit
def k_dot(
    a_ptr,
    b_ptr,
    c_ptr,
    out_ptr,
    M: tl.constexpr,
    N: tl.constexpr,
    K: tl.constexpr,
    ACC: tl.constexpr,
    OUT: tl.constexpr,
):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    rk = tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    if ACC:
        c = tl.load(c_ptr + rm[:, None] * N + rn[None, :])
        r = tl.dot(a, b, c)
    elif OUT is None:
        r = tl.dot(a, b)
    else:
        r = tl.dot(a, b, out_dtype=OUT)
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], r)


def _operand(rng, npd, shape):
    if npd == np.int8:
        return rng.integers(-128, 128, shape).astype(np.int8)
    if npd in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2):
        v = rng.standard_normal(shape) * 4
        return v.astype(np.float32).astype(npd)  # ml_dtypes rounds (and saturates e4m3 to NaN: avoided here)
    return rng.standard_normal(shape).astype(npd)


DOT_CASES = [  # (a dtype, b dtype)
    (np.float32, np.float32),
    (BF16, BF16),
    (np.float16, np.float16),
    (np.int8, np.int8),
    (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fn),
    (ml_dtypes.float8_e5m2, ml_dtypes.float8_e5m2),
    (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2),
]


@pytest.mark.parametrize("acc", [False, True])
@pytest.mark.parametrize(("M", "N", "K"), [(16, 16, 32), (32, 16, 64), (16, 64, 128)])
@pytest.mark.parametrize(("adt", "bdt"), DOT_CASES, ids=lambda d: np.dtype(d).name)
def test_dot(rng, adt, bdt, M, N, K, acc):
    a = _operand(rng, adt, (M, K))
    b = _operand(rng, bdt, (K, N))
    integer = adt == np.int8
    acc_np = np.int32 if integer else np.float32
    c = (rng.integers(-1000, 1000, (M, N)) if integer else rng.standard_normal((M, N))).astype(acc_np)
    out = np.zeros((M, N), acc_np)
    k_dot[(1,)](a, b, c, out, M=M, N=N, K=K, ACC=acc, OUT=None)
    if integer:
        want = a.astype(np.int64) @ b.astype(np.int64) + (c if acc else 0)
        np.testing.assert_array_equal(out, want)  # exact: int32 accumulation does not overflow here
        return
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = a64 @ b64 + (c.astype(np.float64) if acc else 0)
    bound = _acc_bound(a64, b64, c if acc else None)
    err = np.abs(out.astype(np.float64) - want)
    assert (err <= bound).all(), f"max err/bound {np.max(err / bound):.3g}"


def _acc_bound(a64, b64, c):
    """dot_bound, or with an accumulator c the K additions onto it: (K + 1) * 2^-24 * (|A| @ |B| + |c|)."""
    if c is None:
        return dot_bound(a64, b64)
    k = a64.shape[1]
    return (k + 1) * 2.0**-24 * (np.abs(a64) @ np.abs(b64) + np.abs(c.astype(np.float64))) + 1e-30


def test_dot_out_dtype(rng):
    a = rng.standard_normal((16, 32)).astype(np.float16)
    b = rng.standard_normal((32, 16)).astype(np.float16)
    out = np.zeros((16, 16), np.float16)
    k_dot[(1,)](a, b, None, out, M=16, N=16, K=32, ACC=False, OUT=tl.float16)
    want = a.astype(np.float64) @ b.astype(np.float64)
    # An f16 accumulator, rounded after each 16 K elements and at the end (exact rule in
    # tests/python/test_dot_variants.py): within the dot bound plus 3 f16 roundings.
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    tol = dot_bound(a64, b64) + 3 * (np.abs(a64) @ np.abs(b64)) * 2.0**-11
    assert (np.abs(out.astype(np.float64) - want) <= tol).all()


# --- dot_scaled ---


@tf.jit
def k_dot_scaled(
    a_ptr,
    as_ptr,
    b_ptr,
    bs_ptr,
    c_ptr,
    out_ptr,
    M: tl.constexpr,
    N: tl.constexpr,
    K: tl.constexpr,
    AF: tl.constexpr,
    BF: tl.constexpr,
    ACC: tl.constexpr,
):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    KA: tl.constexpr = K // 2 if AF == "e2m1" else K  # e2m1 comes packed two per byte along K
    KB: tl.constexpr = K // 2 if BF == "e2m1" else K
    KS: tl.constexpr = K // 32
    a = tl.load(a_ptr + rm[:, None] * KA + tl.arange(0, KA)[None, :])
    b = tl.load(b_ptr + tl.arange(0, KB)[:, None] * N + rn[None, :])
    sa = tl.load(as_ptr + rm[:, None] * KS + tl.arange(0, KS)[None, :])
    sb = tl.load(bs_ptr + rn[:, None] * KS + tl.arange(0, KS)[None, :])
    if ACC:
        c = tl.load(c_ptr + rm[:, None] * N + rn[None, :])
        r = tl.dot_scaled(a, sa, AF, b, sb, BF, acc=c)
    else:
        r = tl.dot_scaled(a, sa, AF, b, sb, BF)
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], r)


_FMT = {
    "e4m3": ("f8e4m3", ml_dtypes.float8_e4m3fn),
    "e5m2": ("f8e5m2", ml_dtypes.float8_e5m2),
    "e2m1": ("f4e2m1", None),
}


def _scaled_operand(rng, fmt, shape, k_axis):
    """Random codes of format `fmt` (no NaN) for a [rows, K] or [K, cols] operand: the
    array the kernel takes (fp8 array, or e2m1 packed two per int8 along K with the even
    element in the low nibble) and the float64 values."""
    name, npd = _FMT[fmt]
    w = R.width(name)
    codes = rng.integers(0, 1 << w, shape)
    table = np.array(R.decode_all(name))
    codes[~np.isfinite(table[codes])] = 0  # no NaN or inf operands
    vals = table[codes]
    if npd is not None:
        return codes.astype(np.uint8).view(npd), vals
    c = codes if k_axis == 1 else codes.T
    packed = (c[:, 0::2] | (c[:, 1::2] << 4)).astype(np.uint8).view(np.int8)
    return (packed if k_axis == 1 else np.ascontiguousarray(packed.T)), vals


@pytest.mark.parametrize("acc", [False, True])
@pytest.mark.parametrize(
    ("af", "bf"),
    [("e4m3", "e4m3"), ("e5m2", "e5m2"), ("e2m1", "e2m1"), ("e4m3", "e2m1"), ("e2m1", "e5m2"), ("e5m2", "e4m3")],
)
@pytest.mark.parametrize(("M", "N", "K"), [(16, 16, 64), (32, 16, 128)])
def test_dot_scaled(rng, af, bf, M, N, K, acc):
    a, a64 = _scaled_operand(rng, af, (M, K), 1)
    b, b64 = _scaled_operand(rng, bf, (K, N), 0)
    sa_codes = rng.integers(127 - 6, 127 + 6, (M, K // 32))
    sb_codes = rng.integers(127 - 6, 127 + 6, (N, K // 32))
    sa = sa_codes.astype(np.uint8).view(ml_dtypes.float8_e8m0fnu)  # an e8m0 array ...
    sb = sb_codes.astype(np.uint8).view(np.int8)  # ... or raw codes in int8 (bitcast in dot_scaled)
    c = rng.standard_normal((M, N)).astype(np.float32)
    out = np.zeros((M, N), np.float32)
    k_dot_scaled[(1,)](a, sa, b, sb, c, out, M=M, N=N, K=K, AF=af, BF=bf, ACC=acc)
    # Dequantize in float64: element * 2^(scale - 127), one scale per 32 consecutive K.
    ad = a64 * np.exp2(np.repeat(sa_codes, 32, axis=1) - 127.0)
    bd = b64 * np.exp2(np.repeat(sb_codes, 32, axis=1).T - 127.0)
    want = ad @ bd + (c if acc else 0)
    bound = _acc_bound(ad, bd, c if acc else None)
    err = np.abs(out.astype(np.float64) - want)
    assert (err <= bound).all(), f"max err/bound {np.max(err / bound):.3g}"


# --- tensor descriptors ---


@tf.jit
def k_desc(x_ptr, y_ptr, blk_ptr, M, N, sx, sy, BM: tl.constexpr, BN: tl.constexpr):
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    dx = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[sx, 1], block_shape=[BM, BN])
    dy = tl.make_tensor_descriptor(y_ptr, shape=[M, N], strides=[sy, 1], block_shape=[BM, BN])
    blk = dx.load([pm * BM, pn * BN])
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    tl.store(blk_ptr + rm[:, None] * (tl.num_programs(1) * BN) + rn[None, :], blk)  # what the load saw
    dy.store([pm * BM, pn * BN], blk * 2 + 1)


def test_tensor_descriptors_pass_to_device_functions(rng):
    M, N = 40, 48
    x = rng.integers(-50, 50, (M, N)).astype(np.float32)
    y = np.full((M, N), 77, np.float32)
    k_desc_fn[(3, 3)](x, y, M, N, BM=16, BN=16)
    np.testing.assert_array_equal(y, x * 3 - 1)


@pytest.mark.parametrize("dtype", [np.float32, BF16, np.int32])
def test_tensor_descriptor_load_store(rng, dtype):
    # A 20 x 24 tensor inside padded buffers, read and written in 16 x 16 blocks: block
    # elements outside the tensor read 0 and are not written, even where the buffer has room.
    M, N, BM, BN = 20, 24, 16, 16
    gm, gn = -(-M // BM), -(-N // BN)
    x = (rng.integers(-50, 50, (M + 12, 40))).astype(dtype)
    y = np.full((M + 12, 40), 77, dtype)
    blk = np.full((gm * BM, gn * BN), 55, dtype)
    k_desc[(gm, gn)](x, y, blk, M, N, 40, 40, BM=BM, BN=BN)
    x64 = x.astype(np.float64)
    want_blk = np.zeros((gm * BM, gn * BN))
    want_blk[:M, :N] = x64[:M, :N]
    np.testing.assert_array_equal(blk.astype(np.float64), want_blk)
    want_y = np.full(y.shape, 77.0)
    want_y[:M, :N] = x64[:M, :N] * 2 + 1
    np.testing.assert_array_equal(y.astype(np.float64), want_y)


@tf.jit
def k_argmin(x_ptr, v_ptr, i_ptr, j_ptr, M: tl.constexpr, N: tl.constexpr):
    rm, rn = tl.arange(0, M), tl.arange(0, N)
    x = tl.load(x_ptr + rm[:, None] * N + rn[None, :])
    v, i = tl.min(x, axis=1, return_indices=True)
    tl.store(v_ptr + rm, v)
    tl.store(i_ptr + rm, i)
    tl.store(j_ptr + rn, x.argmin(0))


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int8])
def test_argmin_and_min_with_indices(rng, dtype):
    m, n = 16, 32
    if dtype == np.float32:
        x = rng.standard_normal((m, n)).astype(dtype)
    else:
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max, (m, n), endpoint=True).astype(dtype)
        x[0, :] = info.min  # ties at the type's minimum: the first index wins, and ~x cannot overflow
    v, i, j = np.zeros(m, dtype), np.full(m, -1, np.int32), np.full(n, -1, np.int32)
    k_argmin[(1,)](x, v, i, j, M=m, N=n)
    np.testing.assert_array_equal(v, x.min(axis=1))
    np.testing.assert_array_equal(i, x.argmin(axis=1))
    np.testing.assert_array_equal(j, x.argmin(axis=0))
