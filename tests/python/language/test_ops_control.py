"""Control flow and program structure on the CPU interpreter: static_range, range/for with
loop-carried scalars and tiles, while loops, if/else on scalars producing values, calls of
other @jit functions (one, several or no results), static_assert, device_print and
device_assert. Results are exact (integer or exactly representable float arithmetic)."""

import re

import numpy as np
import pytest
import tilefuse as tf
import tilefuse.language as tl

THIS_FILE = __file__


def _line_of(marker: str) -> int:
    with open(THIS_FILE) as f:
        hits = [i + 1 for i, text in enumerate(f.read().splitlines()) if text.rstrip().endswith(f"# {marker}")]
    assert len(hits) == 1, marker
    return hits[0]


@pytest.fixture
def rng():
    return np.random.default_rng()


# --- loops ---


@tf.jit
def k_static_range(x_ptr, out_ptr, BLOCK: tl.constexpr, STEPS: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    for i in tl.static_range(STEPS):
        acc += tl.load(x_ptr + i * BLOCK + offs) * (i + 1)  # i is a compile-time int
    for j in tl.static_range(1, 7, 3):  # 1, 4
        acc += j
    tl.store(out_ptr + offs, acc)


def test_static_range(rng):
    x = rng.integers(-8, 8, (4, 16)).astype(np.float32)
    out = np.zeros(16, np.float32)
    kernel = k_static_range[(1,)](x, out, BLOCK=16, STEPS=4)
    np.testing.assert_array_equal(out, (x * np.arange(1, 5)[:, None]).sum(axis=0) + 5)
    assert " for " not in kernel.asm["tile_raw"]  # unrolled while compiling


@tf.jit
def k_for(x_ptr, out_ptr, n, lo, step, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)  # a carried tile
    count = 0  # a carried scalar, starting as a Python int
    last = -1
    for i in range(lo, n, step):
        acc += tl.load(x_ptr + i * BLOCK + offs)
        count += 1
        last = i
    total = 0
    for i in tl.range(0, n, num_stages=3):  # pipelining hints do not change results
        for j in range(0, i):  # nested, with a bound that depends on the outer variable
            total += j
    tl.store(out_ptr + offs, acc)
    tl.store(out_ptr + BLOCK, count.to(tl.float32))
    tl.store(out_ptr + BLOCK + 1, last.to(tl.float32))
    tl.store(out_ptr + BLOCK + 2, total.to(tl.float32))


@pytest.mark.parametrize(("n", "lo", "step"), [(7, 0, 1), (9, 2, 3), (0, 0, 1), (5, 5, 2), (4, 6, 1)])
def test_for_loop_carried(rng, n, lo, step):
    rows = max(n, 1)
    x = rng.integers(-8, 8, (rows, 16)).astype(np.float32)
    out = np.full(19, np.nan, np.float32)
    k_for[(1,)](x, out, n, lo, step, BLOCK=16)
    idx = list(range(lo, n, step))
    np.testing.assert_array_equal(out[:16], x[idx].sum(axis=0) if idx else 0)
    assert out[16] == len(idx)
    assert out[17] == (idx[-1] if idx else -1)  # a zero-trip loop keeps the initial values
    assert out[18] == sum(j for i in range(n) for j in range(i))


@tf.jit
def k_while(x_ptr, out_ptr, n):
    # Collatz steps of each of n values, in a while loop per element (scalar code).
    for k in range(0, n):
        v = tl.load(x_ptr + k)
        steps = 0
        while v != 1:
            if v % 2 == 0:
                v = v // 2
            else:
                v = 3 * v + 1
            steps += 1
        tl.store(out_ptr + k, steps)


def _collatz(v):
    s = 0
    while v != 1:
        v = v // 2 if v % 2 == 0 else 3 * v + 1
        s += 1
    return s


def test_while_loop(rng):
    x = rng.integers(1, 1000, 12).astype(np.int32)
    x[0] = 1  # zero iterations
    out = np.full(12, -1, np.int32)
    k_while[(1,)](x, out, 12)
    np.testing.assert_array_equal(out, [_collatz(int(v)) for v in x])


# --- if / else on scalars ---


@tf.jit
def k_if(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    s = tl.load(x_ptr)  # a runtime scalar
    t = tl.load(x_ptr + 1 + offs)
    y = s * 0  # redefined below in one branch only
    if s > 0:
        a = s * 2
        tile = t + 1
        y = s
    elif s < -10:
        a = -s
        tile = t * 2
    else:
        a = s + 100
        tile = t - t
    if s == 3:  # no else: only the then-branch changes y
        y = y + 1000
    b = 7 if s > 5 else -7  # a ternary on a scalar tensor
    tl.store(out_ptr, a)
    tl.store(out_ptr + 1, y)
    tl.store(out_ptr + 2, b)
    tl.store(out_ptr + 3 + offs, tile)


@pytest.mark.parametrize("s", [3, 6, -11, -3, 0])
def test_if_else_values(rng, s):
    x = rng.integers(-50, 50, 9).astype(np.int32)
    x[0] = s
    out = np.zeros(11, np.int32)
    k_if[(1,)](x, out, BLOCK=8)
    t = x[1:].astype(np.int64)
    if s > 0:
        a, tile, y = s * 2, t + 1, s
    elif s < -10:
        a, tile, y = -s, t * 2, 0
    else:
        a, tile, y = s + 100, t * 0, 0
    y += 1000 if s == 3 else 0
    np.testing.assert_array_equal(out, [a, y, 7 if s > 5 else -7, *tile])


@tf.jit
def k_constexpr_if(out_ptr, MODE: tl.constexpr):
    if MODE == "a":
        v = 1
    elif MODE == "b":
        v = 2.5  # only the taken branch is compiled: types may differ between branches
    else:
        v = -1
    tl.store(out_ptr, v)


def test_compile_time_if():
    out = np.zeros(1, np.float32)
    for mode, want in (("a", 1), ("b", 2.5), ("c", -1)):
        k_constexpr_if[(1,)](out, MODE=mode)
        assert out[0] == want


# --- calls of @jit functions ---


@tf.jit
def _square(x):
    return x * x


@tf.jit
def _sum_and_diff(a, b):
    return a + b, a - b


@tf.jit(noinline=True)
def _scaled(x, K: tl.constexpr):
    return _square(x) * K  # a call inside a called function


@tf.jit
def _store_twice(ptr, v, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(ptr + offs, v)
    tl.store(ptr + BLOCK + offs, v * 2)


@tf.jit
def k_calls(x_ptr, y_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    s, d = _sum_and_diff(x, y)
    tl.store(out_ptr + offs, _square(s))
    tl.store(out_ptr + BLOCK + offs, d)
    tl.store(out_ptr + 2 * BLOCK + offs, _scaled(x, 3))
    tl.store(out_ptr + 3 * BLOCK + offs, _scaled(y, K=5))
    tl.store(out_ptr + 4 * BLOCK, _square(tl.load(x_ptr)))  # a scalar argument
    _store_twice(out_ptr + 5 * BLOCK, y, BLOCK)  # no result


def test_jit_function_calls(rng):
    B = 8
    x = rng.integers(-20, 20, B).astype(np.int32)
    y = rng.integers(-20, 20, B).astype(np.int32)
    out = np.zeros(7 * B, np.int32)
    kernel = k_calls[(1,)](x, y, out, BLOCK=B)
    np.testing.assert_array_equal(out[:B], (x + y) ** 2)
    np.testing.assert_array_equal(out[B : 2 * B], x - y)
    np.testing.assert_array_equal(out[2 * B : 3 * B], x * x * 3)
    np.testing.assert_array_equal(out[3 * B : 4 * B], y * y * 5)
    assert out[4 * B] == x[0] ** 2
    np.testing.assert_array_equal(out[5 * B : 6 * B], y)
    np.testing.assert_array_equal(out[6 * B :], y * 2)
    assert re.search(r"call @_scaled__", kernel.asm["tile"]), "the noinline function must stay a call"


# --- static_assert, device_print, device_assert ---


@tf.jit
def k_static_assert(x_ptr, BLOCK: tl.constexpr):
    tl.static_assert(BLOCK >= 16, "BLOCK must be at least 16")  # static-assert
    tl.store(x_ptr + tl.arange(0, BLOCK), tl.zeros((BLOCK,), tl.float32))


def test_static_assert():
    x = np.ones(16, np.float32)
    k_static_assert[(1,)](x, BLOCK=16)
    assert (x == 0).all()
    with pytest.raises(tf.CompilationError) as e:
        k_static_assert[(1,)](x, BLOCK=8)
    assert "BLOCK must be at least 16" in str(e.value)
    assert (e.value.file, e.value.line) == (THIS_FILE, _line_of("static-assert"))


@tf.jit
def k_print(x_ptr, i_ptr):
    offs = tl.arange(0, 4)
    tl.device_print("x: ", tl.load(x_ptr + offs))
    tl.device_print("pid ", tl.program_id(0), tl.load(i_ptr + tl.program_id(0)))


def test_device_print(capfd):
    x = np.array([1.5, -2.0, 0.1, 3e10], np.float32)
    i = np.array([7, -9], np.int32)
    k_print[(2,)](x, i)
    out = capfd.readouterr().out.splitlines()
    want = []
    for p in range(2):
        # Floats print with 9 significant digits, enough to tell float32 values apart.
        want += [
            f"pid ({p}, 0, 0) idx [{k}] x: {v}" for k, v in enumerate(["1.5", "-2", "0.100000001", "3.0000001e+10"])
        ]
        want += [f"pid ({p}, 0, 0) idx () pid {p}", f"pid ({p}, 0, 0) idx () pid {i[p]}"]
    assert out == want


@tf.jit
def k_device_assert(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=1)
    tl.device_assert(x > 0, "x must be positive")  # device-assert
    assert x < 100, "x below 100"  # assert-stmt
    tl.store(x_ptr + offs, x * 2, mask=offs < n)


def test_device_assert():
    x = np.array([1, 2, 3, 4, 5], np.int32)
    k_device_assert[(1,)](x, 5, BLOCK=8)
    np.testing.assert_array_equal(x, [2, 4, 6, 8, 10])
    x = np.array([1, 2, -3, 4, 5], np.int32)
    with pytest.raises(tf.KernelRuntimeError) as e:
        k_device_assert[(1,)](x, 5, BLOCK=8)
    assert (e.value.file, e.value.line) == (THIS_FILE, _line_of("device-assert"))
    assert "x must be positive" in e.value.message and "[2]" in e.value.message
    assert "tl.device_assert(x > 0" in str(e.value)  # the source line is shown
    np.testing.assert_array_equal(x, [1, 2, -3, 4, 5])  # nothing was stored
    x = np.array([1, 200, 3, 4, 5], np.int32)
    with pytest.raises(tf.KernelRuntimeError) as e:
        k_device_assert[(1,)](x, 5, BLOCK=8)
    assert e.value.line == _line_of("assert-stmt") and "x below 100" in e.value.message
