"""Scans, reductions with a combine_fn, sort, flip, interleave, gather, histogram and
propagate_nan on the GPU against the interpreter, on the same random inputs.

Integer results (and sort, flip, interleave, gather, histogram, argmax) are equal. A
scan on the GPU may split a line into runs (Ops.def; LowerReduce.cpp), an order equal
for associative combines and within rounding for floats: float scans are checked within
the float64 bounds of tests/python/language/test_combine.py (k * 2^-24 * sum |x| for a
cumsum at position k, any order of k fp32 additions).
"""

import numpy as np
import pytest

from tests import combine_kernels as K

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]

WARPS = [1, 4, 8]


@pytest.fixture
def rng():
    return np.random.default_rng()


def both(kernel, arrays, num_warps, **kw):
    """Runs kernel on the GPU and the interpreter on copies of `arrays` (numpy); returns
    the (gpu, interpreter) pairs of every array after the launch."""
    dev = [torch.from_numpy(a.copy()).cuda() for a in arrays]
    host = [a.copy() for a in arrays]
    scalars = kw.pop("scalars", ())
    kernel[(1,)](*dev, *scalars, num_warps=num_warps, **kw)
    torch.cuda.synchronize()
    kernel[(1,)](*host, *scalars, **kw)
    return [(d.cpu().numpy(), h) for d, h in zip(dev, host)]


@pytest.mark.parametrize("num_warps", WARPS)
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("n", [1, 2, 8, 32, 128, 1024])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32])
def test_cumsum_1d(rng, dtype, n, reverse, num_warps):
    if dtype == np.float32:
        x = rng.standard_normal(n).astype(dtype)
    else:
        x = rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, n, dtype=dtype)
    (_, _), (gpu, ref) = both(K.k_scan1d, [x, np.empty_like(x)], num_warps, N=n, REV=reverse)
    if dtype != np.float32:
        np.testing.assert_array_equal(gpu, ref)
        return
    x64 = x.astype(np.float64)
    cum = (lambda v: np.flip(np.cumsum(np.flip(v)))) if reverse else np.cumsum
    k = np.arange(n, 0, -1) if reverse else np.arange(1, n + 1)
    assert (np.abs(gpu - cum(x64)) <= k * 2.0**-24 * cum(np.abs(x64))).all()


@pytest.mark.parametrize("num_warps", WARPS)
@pytest.mark.parametrize("op", ["cumsum", "cumprod", "assoc"])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize(("m", "n"), [(16, 64), (64, 16), (1, 256), (256, 1), (128, 8)])
def test_scan_2d_int(rng, m, n, axis, reverse, op, num_warps):
    x = rng.integers(-(2**31), 2**31, (m, n)).astype(np.int32)
    _, (gpu, ref) = both(K.k_scan, [x, np.empty_like(x)], num_warps, M=m, N=n, AXIS=axis, OP=op, REV=reverse)
    np.testing.assert_array_equal(gpu, ref)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("axis", [0, 1])
def test_cumprod_float(rng, axis, reverse):
    m, n = 16, 64
    x = rng.uniform(0.5, 1.5, (m, n)).astype(np.float32)
    _, (gpu, ref) = both(K.k_scan, [x, np.empty_like(x)], 4, M=m, N=n, AXIS=axis, OP="cumprod", REV=reverse)
    length = x.shape[axis]
    k = np.arange(1, length + 1) if not reverse else np.arange(length, 0, -1)
    k = k[:, None] if axis == 0 else k[None, :]
    assert (np.abs(gpu.astype(np.float64) - ref) <= 2 * k * 2.0**-23 * np.abs(ref)).all()


@pytest.mark.parametrize("num_warps", WARPS)
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("axis", [0, 1])
def test_scan_of_tuples(rng, axis, reverse, num_warps):
    m, n = 8, 256
    a = rng.integers(-1, 2, (m, n)).astype(np.int32)
    b = rng.integers(-50, 51, (m, n)).astype(np.int32)
    *_, (gpu, ref) = both(K.k_recurrence, [a, b, np.empty_like(a)], num_warps, M=m, N=n, AXIS=axis, REV=reverse)
    np.testing.assert_array_equal(gpu, ref)


@pytest.mark.parametrize("num_warps", WARPS)
@pytest.mark.parametrize("keep", [False, True])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_reduce_user_argmax(rng, dtype, axis, keep, num_warps):
    m, n = 16, 64
    x = rng.integers(-4, 4, (m, n)).astype(dtype)
    size = m if axis == 1 else n
    _, v, i = both(
        K.k_argmax, [x, np.empty(size, dtype), np.empty(size, np.int32)], num_warps, M=m, N=n, AXIS=axis, KEEP=keep
    )
    np.testing.assert_array_equal(*v)
    np.testing.assert_array_equal(*i)
    np.testing.assert_array_equal(i[0], np.argmax(x, axis=axis))


def test_reduce_all_and_left_fold(rng):
    m, n = 8, 32
    x = rng.integers(-1000, 1000, (m, n)).astype(np.int32)
    x[rng.random((m, n)) < 0.6] = 0
    outs = [np.zeros(1, np.int32), np.empty(m, np.int32), np.zeros(1, np.int32)]
    _, *pairs = both(K.k_reduce_all, [x, *outs], 4, M=m, N=n)
    for gpu, ref in pairs:
        np.testing.assert_array_equal(gpu, ref)


@pytest.mark.parametrize("num_warps", WARPS)
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
def test_reduce_or_and_xor_sum(rng, dtype, num_warps):
    m, n = 16, 64
    x = rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, (m, n), endpoint=True, dtype=dtype)
    _, *pairs = both(
        K.k_bit_reduce, [x, np.empty(m, dtype), np.empty(n, dtype), np.zeros(1, dtype)], num_warps, M=m, N=n
    )
    for gpu, ref in pairs:
        np.testing.assert_array_equal(gpu, ref)


@pytest.mark.parametrize("num_warps", [1, 4])
@pytest.mark.parametrize("desc", [False, True])
@pytest.mark.parametrize(("m", "n"), [(1, 2), (1, 1024), (4, 256), (32, 8)])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float16])
def test_sort(rng, dtype, m, n, desc, num_warps):
    x = rng.integers(-20, 20, (m, n)).astype(dtype) if dtype == np.int32 else rng.standard_normal((m, n)).astype(dtype)
    if dtype != np.int32:
        x[rng.random((m, n)) < 0.1] = np.nan
    _, (gpu, ref) = both(K.k_sort, [x, np.empty_like(x)], num_warps, M=m, N=n, DESC=desc)
    np.testing.assert_array_equal(gpu.view(np.uint8), ref.view(np.uint8))  # NaNs in the same places


@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize(("m", "n"), [(4, 64), (64, 4), (1, 1024)])
def test_flip_interleave(rng, m, n, dim):
    x = rng.standard_normal((m, n)).astype(np.float32)
    _, (gpu, ref) = both(K.k_flip, [x, np.empty_like(x)], 4, M=m, N=n, DIM=dim)
    np.testing.assert_array_equal(gpu, ref)
    a = rng.integers(-100, 100, (m, n)).astype(np.int16)
    b = rng.integers(-100, 100, (m, n)).astype(np.int16)
    *_, (gpu, ref) = both(K.k_interleave, [a, b, np.empty((m, 2 * n), np.int16)], 4, M=m, N=n)
    np.testing.assert_array_equal(gpu, ref)


@pytest.mark.parametrize("num_warps", WARPS)
@pytest.mark.parametrize("idx_dtype", [np.int32, np.int64])
@pytest.mark.parametrize(("axis", "ishape"), [(0, (4, 32)), (0, (64, 32)), (1, (16, 8)), (1, (16, 128))])
def test_gather(rng, axis, ishape, idx_dtype, num_warps):
    m, n = 16, 32
    src = rng.standard_normal((m, n)).astype(np.float32)
    index = rng.integers(0, src.shape[axis], ishape).astype(idx_dtype)
    kw = dict(M=m, N=n, IM=ishape[0], IN=ishape[1], AXIS=axis)
    *_, (gpu, ref) = both(K.k_gather, [src, index, np.empty(ishape, np.float32)], num_warps, **kw)
    np.testing.assert_array_equal(gpu, ref)


@pytest.mark.parametrize("num_warps", WARPS)
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize(("n", "bins"), [(1, 1), (64, 16), (1024, 128), (256, 1024), (2048, 8)])
def test_histogram(rng, n, bins, masked, num_warps):
    x = rng.integers(-bins // 2 - 2, bins + bins // 2 + 2, n).astype(np.int32)
    valid = int(rng.integers(0, n + 1)) if masked else n
    kw = dict(N=n, BINS=bins, MASKED=masked)
    _, (gpu, ref) = both(K.k_histogram, [x, np.full(bins, -1, np.int32)], num_warps, scalars=(valid,), **kw)
    np.testing.assert_array_equal(gpu, ref)


@pytest.mark.parametrize("prop", ["NONE", "ALL"])
def test_minimum_maximum_propagate_nan(rng, prop):
    import tilefuse.language as tl

    n = 1024
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    x[rng.random(n) < 0.25] = np.nan
    y[rng.random(n) < 0.25] = np.nan
    *_, (gpu, ref) = both(K.k_minmax_nan, [x, y, np.empty(3 * n, np.float32)], 4, N=n, PROP=tl.PropagateNan[prop])
    np.testing.assert_array_equal(gpu, ref)
