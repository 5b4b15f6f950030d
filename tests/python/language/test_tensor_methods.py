"""Triton's tensor methods (x.permute, x.view, x.cast, x.abs, x.ravel, x.sum, x.exp, ...),
Triton's indexing (fewer ':' than the rank), constexpr values that compare and compute,
tl.full(()) scalars and tl.assume, on the interpreter against numpy (exact: the data are
small integers or the ops are exact)."""

import numpy as np
import pytest
import tilefuse as tf
import tilefuse.language as tl


@pytest.fixture
def rng():
    return np.random.default_rng()


@tf.jit
def k_shape_methods(x_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr):
    rows = tl.arange(0, M)[:, None]
    cols = tl.arange(0, N)[None, :]
    x = tl.load(x_ptr + rows * N + cols)  # [M, N]
    t = x.permute(1, 0)  # [N, M]
    tl.store(out_ptr + tl.arange(0, N)[:, None] * M + tl.arange(0, M)[None, :], t)
    flat = x.ravel()
    tl.store(out_ptr + M * N + tl.arange(0, M * N), flat.abs())
    v = x.view(M * N)
    tl.store(out_ptr + 2 * M * N + tl.arange(0, M * N), v.cast(tl.int32).cast(tl.float32) * 2)
    s = x.sum(axis=1)  # [M]
    tl.store(out_ptr + 3 * M * N + tl.arange(0, M), s)
    e = x.expand_dims(0).broadcast_to(2, M, N)
    tl.store(out_ptr + 3 * M * N + M + tl.arange(0, 2 * M * N), e.reshape(2 * M * N))


def test_shape_methods(rng):
    M, N = 8, 16
    x = rng.integers(-50, 50, (M, N)).astype(np.float32)
    out = np.zeros(3 * M * N + M + 2 * M * N, np.float32)
    k_shape_methods[(1,)](x, out, M=M, N=N)
    np.testing.assert_array_equal(out[: M * N], x.T.ravel())
    np.testing.assert_array_equal(out[M * N : 2 * M * N], np.abs(x).ravel())
    np.testing.assert_array_equal(out[2 * M * N : 3 * M * N], 2 * x.ravel())
    np.testing.assert_array_equal(out[3 * M * N : 3 * M * N + M], x.sum(axis=1))
    np.testing.assert_array_equal(out[3 * M * N + M :], np.broadcast_to(x, (2, M, N)).ravel())


@tf.jit
def k_math_methods(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, x.floor() + x.ceil() + x.abs().sqrt() * 0 + x.exp2().log2())
    tl.store(out_ptr + BLOCK + offs, x.sigmoid() * 0 + x.max(axis=0) + x.min(axis=0))


def test_math_methods(rng):
    x = (rng.integers(-40, 40, 64) / 4).astype(np.float32)
    out = np.zeros(128, np.float32)
    k_math_methods[(1,)](x, out, BLOCK=64)
    # log2(exp2(x)) is x within an ulp or two of |x| <= 10; the sums add a few ulp of 30.
    np.testing.assert_allclose(out[:64], np.floor(x) + np.ceil(x) + x, rtol=0, atol=1e-5)
    np.testing.assert_array_equal(out[64:], np.full(64, x.max() + x.min(), np.float32))


@tf.jit
def k_index_and_constexpr(x_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    col = x[None]  # [1, N]: the trailing ':' is implied, as in Triton
    tl.static_assert(col.shape == [1, N])
    half = N // 2
    if N == 16 and half == 8 and N > half and -N < 0:
        y = col.reshape(N) * half
    else:
        y = col.reshape(N) * 0
    s = tl.full((), 3, tl.int32)
    tl.static_assert(s.shape == [])
    tl.assume(s > 0)
    tl.store(out_ptr + offs, y + s)


def test_indexing_constexpr_full_scalar_assume(rng):
    x = rng.integers(-9, 9, 16).astype(np.int32)
    out = np.zeros(16, np.int32)
    k_index_and_constexpr[(1,)](x, out, N=16)
    np.testing.assert_array_equal(out, x * 8 + 3)


def test_constexpr_compares_and_computes_like_its_value():
    c = tl.constexpr(16)
    assert c == 16 and 16 == c and c != 15 and c < 17 and c >= 16
    assert (c // 2) == 8 and (2 * c) == 32 and isinstance(c + 1, tl.constexpr)
    assert hash(c) == hash(16) and bool(tl.constexpr(0)) is False
    assert list(range(tl.constexpr(3))) == [0, 1, 2]


def test_assume_needs_a_boolean():
    @tf.jit
    def k(x_ptr):
        tl.assume(tl.load(x_ptr))

    with pytest.raises(tf.CompilationError, match="tl.assume needs a boolean"):
        k[(1,)](np.zeros(1, np.float32))


def test_and_or_on_tiles_are_elementwise_with_a_warning(rng):
    @tf.jit
    def k(x_ptr, out_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs)
        both = (x > 0) and (x < 5)
        either = (x < -3) or (x == 2)
        tl.store(out_ptr + offs, both.to(tl.int32) + 2 * either.to(tl.int32))

    x = rng.integers(-6, 8, 64).astype(np.int32)
    out = np.zeros(64, np.int32)
    with pytest.warns(UserWarning, match="elementwise and do not short-circuit"):
        k[(1,)](x, out, BLOCK=64)
    np.testing.assert_array_equal(out, ((x > 0) & (x < 5)) + 2 * ((x < -3) | (x == 2)))
