"""Scans, reductions with a combine_fn, sort, flip, interleave, gather, histogram and
propagate_nan on the CPU interpreter, against numpy on fresh random inputs.

Order and tolerances. A scan is inclusive and sequential along the axis (Ops.def), so:
  integer scans, argmax, sort, flip, interleave, gather, histogram   exact
  float32 cumsum                          bit-equal to numpy's sequential np.cumsum in
                                          float32, and within k * 2^-24 * sum_{i<=k} |x_i|
                                          of the float64 cumsum at position k (the bound of
                                          k sequential fp32 additions)
  float16 cumsum                          k * 2^-11 * sum |x_i| (f16 additions)
  float32 cumprod, recurrences            k * 2^-23 relative to the float64 product of |x|
"""

import numpy as np
import pytest
import tilefuse as tf
import tilefuse.language as tl
from ops_common import BF16
from tilefuse.errors import CompilationError

from tests import combine_kernels as K
from tests.ptxas import assert_assembles


@pytest.fixture
def rng():
    return np.random.default_rng()


SIZES = [1, 2, 8, 32, 128, 1024]


def ref_scan(x, axis, reverse, f):
    """The sequential inclusive scan with combine f(acc, x) (acc: the later elements
    when reverse)."""
    x = np.moveaxis(np.asarray(x), axis, -1)
    out = np.empty_like(x)
    n = x.shape[-1]
    order = range(n - 1, -1, -1) if reverse else range(n)
    for row in np.ndindex(x.shape[:-1]):
        acc = None
        for k in order:
            acc = x[row + (k,)] if acc is None else f(acc, x[row + (k,)])
            out[row + (k,)] = acc
    return np.moveaxis(out, -1, axis)


def np_cumsum(x, axis, reverse):
    if reverse:
        return np.flip(np.cumsum(np.flip(x, axis), axis, dtype=x.dtype), axis)
    return np.cumsum(x, axis, dtype=x.dtype)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("n", SIZES)
def test_cumsum_1d_int_exact(rng, n, reverse):
    x = rng.integers(-(2**31), 2**31, n).astype(np.int32)  # wraps at int32, as numpy does
    out = np.empty_like(x)
    K.k_scan1d[(1,)](x, out, N=n, REV=reverse)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(out, np_cumsum(x, 0, reverse))


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("n", SIZES)
def test_cumsum_1d_float32(rng, n, reverse):
    x = (rng.standard_normal(n) * np.exp2(rng.integers(-6, 6, n))).astype(np.float32)
    out = np.empty_like(x)
    K.k_scan1d[(1,)](x, out, N=n, REV=reverse)
    # numpy's cumsum is the same sequential fp32 order: bit-equal.
    np.testing.assert_array_equal(out, np_cumsum(x, 0, reverse))
    x64 = x.astype(np.float64)
    want = np_cumsum(x64, 0, reverse)
    k = np.arange(1, n + 1) if not reverse else np.arange(n, 0, -1)
    tol = k * 2.0**-24 * np_cumsum(np.abs(x64), 0, reverse)
    assert (np.abs(out - want) <= tol).all()


@pytest.mark.parametrize("op", ["cumsum", "assoc", "method"])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize(("m", "n"), [(16, 64), (64, 16), (1, 32), (32, 1)])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_scan_2d_int_exact(rng, dtype, m, n, axis, reverse, op):
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, (m, n), endpoint=True, dtype=dtype)
    out = np.empty_like(x)
    K.k_scan[(1,)](x, out, M=m, N=n, AXIS=axis, OP=op, REV=reverse)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(out, np_cumsum(x, axis, reverse))


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.bool_])
def test_cumsum_promotes_small_ints_to_int32(rng, dtype):
    # As Triton: integers narrower than 32 bits (and bools) sum in int32, without wrapping.
    m, n = 4, 256
    x = rng.integers(0, 2, (m, n)).astype(dtype) if dtype is np.bool_ else rng.integers(-128, 127, (m, n)).astype(dtype)
    out = np.empty((m, n), np.int32)
    K.k_scan[(1,)](x, out, M=m, N=n, AXIS=1, OP="cumsum", REV=False)
    np.testing.assert_array_equal(out, np.cumsum(x.astype(np.int64), 1))


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize(
    ("dtype", "out_dtype", "u"), [(np.float16, np.float16, 2.0**-11), (BF16, np.float32, 2.0**-24)]
)
def test_cumsum_narrow_floats(rng, dtype, out_dtype, u, axis, reverse):
    # bfloat16 scans in float32 (Triton promotes it); float16 stays float16.
    m, n = 8, 128
    x = rng.standard_normal((m, n)).astype(dtype)
    out = np.empty((m, n), out_dtype)
    K.k_scan[(1,)](x, out, M=m, N=n, AXIS=axis, OP="cumsum", REV=reverse)
    x64 = x.astype(np.float64)
    length = x.shape[axis]
    k = np.arange(1, length + 1) if not reverse else np.arange(length, 0, -1)
    k = k[:, None] if axis == 0 else k[None, :]
    tol = k * u * np_cumsum(np.abs(x64), axis, reverse)
    assert (np.abs(out.astype(np.float64) - np_cumsum(x64, axis, reverse)) <= tol).all()


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("axis", [0, 1])
def test_cumprod(rng, axis, reverse):
    m, n = 16, 64
    xi = rng.integers(-3, 4, (m, n)).astype(np.int32)
    out = np.empty_like(xi)
    K.k_scan[(1,)](xi, out, M=m, N=n, AXIS=axis, OP="cumprod", REV=reverse)
    with np.errstate(over="ignore"):  # wraps at int32 like numpy's
        want = ref_scan(xi, axis, reverse, lambda a, b: np.int32(a * b))
    np.testing.assert_array_equal(out, want)
    x = rng.uniform(0.5, 1.5, (m, n)).astype(np.float32)
    outf = np.empty_like(x)
    K.k_scan[(1,)](x, outf, M=m, N=n, AXIS=axis, OP="cumprod", REV=reverse)
    want = ref_scan(x.astype(np.float64), axis, reverse, lambda a, b: a * b)
    length = x.shape[axis]
    k = np.arange(1, length + 1) if not reverse else np.arange(length, 0, -1)
    k = k[:, None] if axis == 0 else k[None, :]
    assert (np.abs(outf - want) <= k * 2.0**-23 * np.abs(want)).all()


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("axis", [0, 1])
def test_scan_of_tuples_non_commutative(rng, axis, reverse):
    # x_t = a_t * x_{t-1} + b_t as a scan of (a, b) pairs: order and argument sides matter.
    m, n = 8, 256
    a = rng.integers(-1, 2, (m, n)).astype(np.int32)
    b = rng.integers(-50, 51, (m, n)).astype(np.int32)
    out = np.empty_like(a)
    K.k_recurrence[(1,)](a, b, out, M=m, N=n, AXIS=axis, REV=reverse)
    pairs = np.empty((m, n), object)
    for i in np.ndindex(m, n):
        pairs[i] = (int(a[i]), int(b[i]))
    want = ref_scan(pairs, axis, reverse, lambda p, q: (p[0] * q[0], p[1] * q[0] + q[1]))
    np.testing.assert_array_equal(out, np.vectorize(lambda p: p[1])(want).astype(np.int32))


@pytest.mark.parametrize("keep", [False, True])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_reduce_user_argmax(rng, dtype, axis, keep):
    # Few distinct values: most lines tie, and the first maximal index must win.
    m, n = 16, 64
    x = rng.integers(-4, 4, (m, n)).astype(dtype)
    size = m if axis == 1 else n
    v, i = np.empty(size, dtype), np.full(size, -1, np.int32)
    K.k_argmax[(1,)](x, v, i, M=m, N=n, AXIS=axis, KEEP=keep)
    np.testing.assert_array_equal(i, np.argmax(x, axis=axis))
    np.testing.assert_array_equal(v, np.max(x, axis=axis))


def test_reduce_all_and_left_fold(rng):
    m, n = 8, 32
    x = rng.integers(-1000, 1000, (m, n)).astype(np.int32)
    x[rng.random((m, n)) < 0.6] = 0
    x[3] = 0  # a line with no non-zero element folds to 0
    total, last, mx = np.zeros(1, np.int32), np.empty(m, np.int32), np.zeros(1, np.int32)
    K.k_reduce_all[(1,)](x, total, last, mx, M=m, N=n)
    assert total[0] == x.sum()
    assert mx[0] == x.max()
    want = [next((v for v in reversed(row) if v != 0), 0) for row in x]
    np.testing.assert_array_equal(last, want)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
def test_reduce_or_and_xor_sum(rng, dtype):
    m, n = 16, 64
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, (m, n), endpoint=True, dtype=dtype)
    o, xo, a = np.empty(m, dtype), np.empty(n, dtype), np.zeros(1, dtype)
    K.k_bit_reduce[(1,)](x, o, xo, a, M=m, N=n)
    np.testing.assert_array_equal(o, np.bitwise_or.reduce(x, axis=1))
    np.testing.assert_array_equal(xo, np.bitwise_xor.reduce(x, axis=0))
    assert a[0] == np.bitwise_xor.reduce(x, axis=None)


def ref_bitonic(x, descending):
    """Triton's bitonic network on the rows of x: swap when (left > right) ^ descending."""
    y = np.array(x).reshape(-1)
    k = x.shape[-1].bit_length() - 1
    idx = np.arange(y.size)
    for stage in range(1, k + 1):
        for j in reversed(range(stage)):
            lo = idx[(idx >> j) & 1 == 0]
            hi = lo | (1 << j)
            desc = ((lo >> stage) & 1).astype(bool) if stage < k else np.full(lo.shape, bool(descending))
            swap = (y[lo] > y[hi]) ^ desc
            a, b = y[lo].copy(), y[hi].copy()
            y[lo], y[hi] = np.where(swap, b, a), np.where(swap, a, b)
    return y.reshape(x.shape)


@pytest.mark.parametrize("desc", [False, True])
@pytest.mark.parametrize(("m", "n"), [(1, 1), (1, 2), (1, 1024), (4, 256), (32, 8)])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float16])
def test_sort(rng, dtype, m, n, desc):
    x = rng.integers(-20, 20, (m, n)).astype(dtype) if dtype == np.int32 else rng.standard_normal((m, n)).astype(dtype)
    x[:, ::3] = x[:, :1]  # ties
    out = np.empty_like(x)
    K.k_sort[(1,)](x, out, M=m, N=n, DESC=desc)
    want = np.sort(x, axis=1)
    np.testing.assert_array_equal(out, want[:, ::-1] if desc else want)


@pytest.mark.parametrize("desc", [False, True])
def test_sort_nan_placement_as_triton(rng, desc):
    m, n = 4, 64
    x = rng.standard_normal((m, n)).astype(np.float32)
    x[rng.random((m, n)) < 0.2] = np.nan
    out = np.empty_like(x)
    K.k_sort[(1,)](x, out, M=m, N=n, DESC=desc)
    want = ref_bitonic(x, desc)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
    np.testing.assert_array_equal(out[~np.isnan(out)], want[~np.isnan(want)])


@pytest.mark.parametrize(("m", "n"), [(1, 1), (4, 64), (64, 4), (1, 1024)])
@pytest.mark.parametrize("dim", [0, 1, None])
def test_flip(rng, m, n, dim):
    x = rng.standard_normal((m, n)).astype(np.float32)
    out = np.empty_like(x)
    K.k_flip[(1,)](x, out, M=m, N=n, DIM=dim)
    np.testing.assert_array_equal(out, np.flip(x, 1 if dim is None else dim))


@pytest.mark.parametrize(("m", "n"), [(1, 1), (8, 32), (1, 512)])
def test_interleave(rng, m, n):
    a = rng.integers(-100, 100, (m, n)).astype(np.int16)
    b = rng.integers(-100, 100, (m, n)).astype(np.int16)
    out = np.empty((m, 2 * n), np.int16)
    K.k_interleave[(1,)](a, b, out, M=m, N=n)
    np.testing.assert_array_equal(out, np.stack([a, b], -1).reshape(m, 2 * n))


@pytest.mark.parametrize("idx_dtype", [np.int32, np.int64])
@pytest.mark.parametrize(("axis", "ishape"), [(0, (4, 32)), (0, (64, 32)), (1, (16, 8)), (1, (16, 128))])
def test_gather(rng, axis, ishape, idx_dtype):
    m, n = 16, 32
    src = rng.standard_normal((m, n)).astype(np.float32)
    index = rng.integers(0, src.shape[axis], ishape).astype(idx_dtype)
    out = np.empty(ishape, np.float32)
    K.k_gather[(1,)](src, index, out, M=m, N=n, IM=ishape[0], IN=ishape[1], AXIS=axis)
    np.testing.assert_array_equal(out, np.take_along_axis(src, index, axis))


def test_gather_out_of_range_names_the_line(rng):
    src = np.zeros((16, 32), np.float32)
    index = np.full((16, 8), 32, np.int32)
    with pytest.raises(Exception, match=r"gather index 32 .* out of range \[0, 32\) along axis 1") as e:
        K.k_gather[(1,)](src, index, np.empty((16, 8), np.float32), M=16, N=32, IM=16, IN=8, AXIS=1)
    assert "combine_kernels.py" in str(e.value)


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize(("n", "bins"), [(1, 1), (64, 16), (1024, 128), (256, 1024)])
def test_histogram(rng, n, bins, masked):
    # Values outside [0, bins) are not counted (Triton); neither are masked-off elements.
    x = rng.integers(-bins // 2 - 2, bins + bins // 2 + 2, n).astype(np.int32)
    valid = int(rng.integers(0, n + 1)) if masked else n
    out = np.full(bins, -1, np.int32)
    K.k_histogram[(1,)](x, out, valid, N=n, BINS=bins, MASKED=masked)
    v = x[:valid]
    want = np.bincount(v[(v >= 0) & (v < bins)], minlength=bins)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("prop", [tl.PropagateNan.NONE, tl.PropagateNan.ALL])
def test_minimum_maximum_propagate_nan(rng, prop):
    n = 256
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    x[rng.random(n) < 0.25] = np.nan
    y[rng.random(n) < 0.25] = np.nan
    out = np.empty(3 * n, np.float32)
    K.k_minmax_nan[(1,)](x, y, out, N=n, PROP=prop)
    if prop == tl.PropagateNan.ALL:
        want = [np.minimum(x, y), np.maximum(x, y), np.clip(x, -0.5, 0.5)]  # NaN in, NaN out
    else:  # IEEE minNum / maxNum: the number wins over a NaN
        want = [np.fmin(x, y), np.fmax(x, y), np.fmin(np.fmax(x, -0.5), 0.5)]
    np.testing.assert_array_equal(out, np.concatenate(want))


# --- errors ---


@tf.jit
def to_f32(a, b):
    return (a + b).to(tl.float32)


@tf.jit
def k_bad_combine(x_ptr, N: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N))
    tl.store(x_ptr + tl.arange(0, N), tl.associative_scan(x, 0, to_f32))


def test_combine_fn_wrong_result_dtype_is_reported_at_the_call():
    with pytest.raises(CompilationError, match=r"combine_fn 'to_f32' returns f32 as value #0; .* tl.int32") as e:
        k_bad_combine[(1,)](np.zeros(8, np.int32), N=8)
    assert "test_combine.py" in str(e.value)


@tf.jit
def k_sort_dim0(x_ptr):
    offs = tl.arange(0, 4)[:, None] * 4 + tl.arange(0, 4)[None, :]
    tl.store(x_ptr + offs, tl.sort(tl.load(x_ptr + offs), 0))


def test_sort_along_a_non_last_dim_is_refused():
    with pytest.raises(CompilationError, match=r"tl.sort works along the last dimension \(1\) only, got dim=0"):
        k_sort_dim0[(1,)](np.zeros(16, np.float32))


def plain_add(a, b):
    return a + b


@tf.jit
def k_plain_combine(x_ptr):
    x = tl.load(x_ptr + tl.arange(0, 8))
    tl.store(x_ptr, tl.reduce(x, 0, plain_add))


def test_combine_fn_must_be_jit():
    with pytest.raises(CompilationError, match="combine_fn must be a @tilefuse.jit function or a tl builtin"):
        k_plain_combine[(1,)](np.zeros(8, np.float32))


# --- the GPU lowering, statically: the PTX of every kernel above assembles ---

F32, I32 = np.zeros(2048, np.float32), np.zeros(2048, np.int32)
PTX_CASES = {
    "scan_rows": (K.k_scan, (F32, F32), dict(M=16, N=64, AXIS=1, OP="assoc", REV=True)),
    "scan_cols": (K.k_scan, (I32, I32), dict(M=64, N=16, AXIS=0, OP="cumprod", REV=False)),
    "scan_1d": (K.k_scan1d, (F32, F32), dict(N=1024, REV=False)),
    "recurrence": (K.k_recurrence, (I32, I32, I32), dict(M=8, N=256, AXIS=1, REV=False)),
    "argmax": (K.k_argmax, (F32, F32, I32), dict(M=16, N=64, AXIS=0, KEEP=True)),
    "reduce_all": (K.k_reduce_all, (I32, I32, I32, I32), dict(M=8, N=32)),
    "bit_reduce": (K.k_bit_reduce, (I32, I32, I32, I32), dict(M=16, N=64)),
    "sort": (K.k_sort, (F32, F32), dict(M=4, N=256, DESC=True)),
    "flip": (K.k_flip, (F32, F32), dict(M=4, N=64, DIM=0)),
    "interleave": (K.k_interleave, (I32, I32, I32), dict(M=8, N=32)),
    "gather": (K.k_gather, (F32, np.zeros(2048, np.int64), F32), dict(M=16, N=32, IM=16, IN=128, AXIS=1)),
    "histogram": (K.k_histogram, (I32, I32, 100), dict(N=1024, BINS=128, MASKED=True)),
    "minmax_nan": (K.k_minmax_nan, (F32, F32, F32), dict(N=256, PROP=tl.PropagateNan.ALL)),
}


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("case", sorted(PTX_CASES))
def test_gpu_lowering_assembles(case, arch, tmp_path):
    kernel, args, kw = PTX_CASES[case]
    for num_warps in (1, 4):
        k = kernel.warmup(*args, grid=(1,), target=arch, num_warps=num_warps, **kw)
        assert_assembles(k.asm["ptx"], arch, tmp_path)
