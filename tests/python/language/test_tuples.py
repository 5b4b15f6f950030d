"""Tuples in kernels (issue 16 part 9): returned from @jit helpers, unpacked, indexed with
constexprs, passed to helpers, carried through loops and ifs; block pointers passed to
and returned from helpers; isinstance on constexprs, dtypes, tensors and tuples. Integer
data, exact references."""

import numpy as np
import pytest
import tilefuse as tf
import tilefuse.language as tl

N = 16


@tf.jit
def pair(x):
    return x + 1, x * 2


@tf.jit
def pick(t, k: tl.constexpr):
    return t[0] + t[k]


@tf.jit
def swap(t):
    return t[1], t[0]


@tf.jit
def tuple_kernel(x_ptr, y_ptr, n_iter, K: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    a, b = pair(x)  # unpacked
    t = pair(x)  # kept as a tuple
    acc = (a, b, 0)
    for _ in range(n_iter):  # a tuple carried by a for loop, its number becomes a tensor
        acc = (acc[0] + t[1], acc[1] - 1, acc[2] + 1)
    i = 0
    while i < n_iter:  # and by a while loop
        acc = swap((acc[0], acc[1])) + (acc[2],)
        i += 1
    if n_iter > 2:  # and merged by an if
        acc = (acc[0] * 3, acc[1], acc[2])
    tl.store(y_ptr + offs, pick(acc, K))
    tl.store(y_ptr + N + offs, acc[2] + tl.zeros_like(x))


def tuple_reference(x, n_iter, k):
    a, b = x + 1, x * 2
    acc = [a, b, 0]
    for _ in range(n_iter):
        acc = [acc[0] + b, acc[1] - 1, acc[2] + 1]
    for _ in range(n_iter):
        acc = [acc[1], acc[0], acc[2]]
    if n_iter > 2:
        acc[0] = acc[0] * 3
    return np.concatenate([acc[0] + acc[k], np.full(N, acc[2], x.dtype)])


@pytest.mark.parametrize("n_iter", [0, 1, 2, 5])
@pytest.mark.parametrize("k", [1, 2])
def test_tuples(n_iter, k):
    rng = np.random.default_rng(n_iter * 10 + k)
    x = rng.integers(-1000, 1000, N).astype(np.int32)
    y = np.zeros(2 * N, np.int32)
    tuple_kernel[(1,)](x, y, n_iter, K=k)
    np.testing.assert_array_equal(y, tuple_reference(x, n_iter, k))


@tf.jit
def moved(bp, by: tl.constexpr):
    return tl.advance(bp, (by,)), by


@tf.jit
def block_helper_kernel(x_ptr, y_ptr, n, BN: tl.constexpr):
    bp = tl.make_block_ptr(x_ptr, (n,), (1,), (0,), (BN,), (0,))
    bp, step = moved(bp, BN)  # a block pointer into and out of a helper
    tl.store(y_ptr + tl.arange(0, BN), tl.load(bp, boundary_check=(0,)) + step)


def test_block_pointers_through_helpers():
    x = np.random.default_rng(5).integers(-99, 99, 40).astype(np.int32)
    for n in (40, 20):
        y = np.zeros(16, np.int32)
        block_helper_kernel[(1,)](x, y, n, BN=16)
        ref = np.where(np.arange(16, 32) < n, x[16:32], 0) + 16
        np.testing.assert_array_equal(y, ref)


@tf.jit
def isinstance_kernel(y_ptr, D: tl.constexpr, V: tl.constexpr):
    x = tl.zeros((N,), D)
    r = 0
    if isinstance(D, tl.dtype):
        r += 1
    if isinstance(V, tl.constexpr):
        r += 2
    if isinstance(x, tl.tensor):
        r += 4
    if isinstance(x, tl.constexpr):
        r += 100
    if isinstance((x, V), tl.tuple):
        r += 8
    if isinstance(V, (int, float)):
        r += 16
    if isinstance(V, str):
        r += 32
    t = tl.tuple([V, V])
    tl.static_assert(len(t) == 2)
    tl.store(y_ptr + tl.arange(0, N), (x + r).to(tl.int32))


@pytest.mark.parametrize("v, bits", [(3, 16), (2.5, 16), ("s", 32)])
def test_isinstance(v, bits):
    y = np.zeros(N, np.int32)
    isinstance_kernel[(1,)](y, D=tl.float32, V=v)
    np.testing.assert_array_equal(y, np.full(N, 1 + 2 + 4 + 8 + bits))


@tf.jit
def bad_tuple_loop(y_ptr, n):
    t = (1, "a")
    for _ in range(n):
        t = (t[0] + 1, "b")
    tl.store(y_ptr, t[0])


def test_changing_compile_time_part_of_a_carried_tuple_is_an_error():
    with pytest.raises(tf.CompilationError, match="changes from the compile-time value 'a' to 'b'") as e:
        bad_tuple_loop[(1,)](np.zeros(1, np.int32), 3)
    assert e.value.file == __file__


@tf.jit
def clashing_names(a, a_0, y_ptr):
    tl.store(y_ptr, a[0] + a[1] + a_0)


def test_a_leaf_name_that_clashes_with_a_parameter_is_an_error():
    # A tuple's leaves are parameters "a_0", "a_1" of the kernel (its launch spec names
    # them so): a parameter of that name is refused, not silently shadowed.
    y = np.zeros(1, np.int32)
    with pytest.raises(tf.CompilationError, match=r"parameters \['a.0', 'a_0'\] are all named 'a_0'"):
        clashing_names[(1,)]((5, 7), 9, y)
