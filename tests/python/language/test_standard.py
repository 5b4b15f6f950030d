"""tl.swizzle2d, tl.softmax, tl.add, tl.load_tensor_descriptor / store_tensor_descriptor,
tl.constexpr_function and TRITON_MAX_TENSOR_NUMEL on the interpreter, against exact
references (softmax: float64, within its float32 rounding)."""

import numpy as np
import pytest
import tilefuse as tf
import tilefuse.language as tl


def swizzle_reference(i, j, size_i, size_j, size_g):
    ij = i * size_j + j
    size_gj = size_g * size_j
    off_i = ij // size_gj * size_g
    g = min(size_i - off_i, size_g)
    ij %= size_gj
    return off_i + ij % g, ij // g


@tf.jit
def swizzle_kernel(out_ptr, size_i, size_j, size_g: tl.constexpr):
    i, j = tl.program_id(0), tl.program_id(1)
    ni, nj = tl.swizzle2d(i, j, size_i, size_j, size_g)
    tl.store(out_ptr + (i * size_j + j) * 2, ni)
    tl.store(out_ptr + (i * size_j + j) * 2 + 1, nj)


@pytest.mark.parametrize("si, sj, g", [(8, 8, 4), (7, 5, 3), (10, 3, 8), (1, 9, 2)])
def test_swizzle2d(si, sj, g):
    out = np.zeros(si * sj * 2, np.int32)
    swizzle_kernel[(si, sj)](out, si, sj, size_g=g)
    want = [v for i in range(si) for j in range(sj) for v in swizzle_reference(i, j, si, sj, g)]
    np.testing.assert_array_equal(out, want)
    assert sorted(zip(out[::2], out[1::2])) == [(i, j) for i in range(si) for j in range(sj)]  # a permutation


@tf.jit
def softmax_kernel(x_ptr, y_ptr, R: tl.constexpr, C: tl.constexpr, DIM: tl.constexpr):
    offs = tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :]
    tl.store(y_ptr + offs, tl.softmax(tl.load(x_ptr + offs), dim=DIM))


@pytest.mark.parametrize("dim", [None, 0, 1])
def test_softmax(dim):
    rng = np.random.default_rng(3 if dim is None else dim)
    x = (rng.standard_normal((8, 32)) * 4).astype(np.float32)
    y = np.zeros_like(x)
    softmax_kernel[(1,)](x, y, R=8, C=32, DIM=dim)
    d = 0 if dim is None else dim
    z = np.exp(x.astype(np.float64) - x.max(axis=d, keepdims=True))
    ref = z / z.sum(axis=d, keepdims=True)
    # exp (2 ulp), a sum of up to 32 terms and one correctly rounded division, in float32.
    assert np.abs(y - ref).max() <= (4 + 32) * 2.0**-24 * ref.max() + 1e-30


@tl.constexpr_function
def half_of(n):
    return n // 2


@tf.jit
def misc_kernel(x_ptr, y_ptr, N: tl.constexpr):
    tl.static_assert(N <= tl.TRITON_MAX_TENSOR_NUMEL)
    H: tl.constexpr = half_of(N)
    offs = tl.arange(0, H)
    desc = tl.make_tensor_descriptor(x_ptr, shape=[N], strides=[1], block_shape=[H])
    lo = tl.load_tensor_descriptor(desc, [0])
    hi = desc.load([H])
    out = tl.make_tensor_descriptor(y_ptr, shape=[N], strides=[1], block_shape=[H])
    tl.store_tensor_descriptor(out, [0], tl.add(lo, hi))
    tl.store(y_ptr + H + offs, tl.add(lo, 1, sanitize_overflow=False))


def test_descriptor_functions_add_and_constexpr_function():
    x = np.random.default_rng(0).integers(-1000, 1000, 64).astype(np.int32)
    y = np.zeros(64, np.int32)
    misc_kernel[(1,)](x, y, N=64)
    np.testing.assert_array_equal(y, np.concatenate([x[:32] + x[32:], x[:32] + 1]))
    assert half_of(9) == 4  # still a plain function outside kernels


@tf.jit
def bad_constexpr_call(x_ptr):
    tl.store(x_ptr, half_of(tl.load(x_ptr)))


def test_constexpr_function_refuses_tensors():
    with pytest.raises(tf.CompilationError, match="constexpr_function 'half_of' takes compile-time values only"):
        bad_constexpr_call[(1,)](np.zeros(1, np.int32))
