"""Kernels whose trip counts and exits depend on runtime data: break, continue and
return (in kernels, device functions and loops), short-circuiting and/or. Each case
builds its inputs from a seed and has a plain-Python reference; the interpreter tests
(tests/python/language/test_ops_exits.py) compare against the reference and the GPU
tests (tests/gpu/test_control_flow_gpu.py) against the interpreter, exactly."""

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import tilefuse as tf
import tilefuse.language as tl


class Case(NamedTuple):
    name: str
    kernel: object
    make: Callable  # rng -> (grid, arrays, scalars, constexprs); arrays are inputs and outputs
    ref: Callable  # (arrays, scalars) -> the expected arrays after the launch


@tf.jit
def first_above(x_ptr, out_ptr, steps_ptr, n, thresh):
    """Per row: the first column above thresh (-1 if none), and how many iterations ran."""
    row = tl.program_id(0)
    found = -1
    steps = 0
    for i in range(0, n):
        steps += 1
        if tl.load(x_ptr + row * n + i) > thresh:
            found = i
            break
    tl.store(out_ptr + row, found)
    tl.store(steps_ptr + row, steps)


def _first_above_ref(arrays, scalars):
    x, out, steps = arrays
    n, thresh = scalars
    for r in range(out.size):
        hits = np.nonzero(x[r * n : (r + 1) * n] > thresh)[0]
        out[r] = hits[0] if hits.size else -1
        steps[r] = hits[0] + 1 if hits.size else n
    return [x, out, steps]


@tf.jit
def skip_sum(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """Sums the rows (tiles of BLOCK) whose first element is positive, skipping the rest
    with continue; stops at a row starting with exactly 0 (break inside a nested if)."""
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    used = 0
    for r in range(n):
        head = tl.load(x_ptr + r * BLOCK)
        if head < 0:
            continue
        if head == 0:
            if used > 0:
                break
            continue
        acc += tl.load(x_ptr + r * BLOCK + offs)
        used += 1
    tl.store(out_ptr + offs, acc)
    tl.store(out_ptr + BLOCK, used.to(tl.float32))


def _skip_sum_ref(arrays, scalars):
    x, out = arrays
    (n,) = scalars
    block = out.size - 1
    acc, used = np.zeros(block, np.float32), 0
    for r in range(n):
        row = x[r * block : (r + 1) * block]
        if row[0] < 0:
            continue
        if row[0] == 0:
            if used > 0:
                break
            continue
        acc += row
        used += 1
    out[:block], out[block] = acc, used
    return [x, out]


@tf.jit
def collatz(x_ptr, out_ptr, limit):
    """Collatz steps of x until 1, or -1 past `limit` steps: while True with break."""
    pid = tl.program_id(0)
    v = tl.load(x_ptr + pid)
    steps = 0
    while True:
        if v == 1:
            break
        if steps >= limit:
            steps = -1
            break
        v = tl.where(v % 2 == 0, v // 2, 3 * v + 1)
        steps += 1
    tl.store(out_ptr + pid, steps)


def _collatz_ref(arrays, scalars):
    x, out = arrays
    (limit,) = scalars
    for i, v in enumerate(x.tolist()):
        s = 0
        while v != 1:
            if s >= limit:
                s = -1
                break
            v = v // 2 if v % 2 == 0 else 3 * v + 1
            s += 1
        out[i] = s
    return [x, out]


@tf.jit
def sign_of(v):
    if v < 0:
        return -1
    if v == 0:
        return 0
    return 1


@tf.jit(noinline=True)
def clipped(v, lo, hi):
    if v < lo:
        return lo, 1
    elif v > hi:
        return hi, 2
    return v, 0


@tf.jit
def early_return(x_ptr, out_ptr, n_valid, lo, hi):
    """Programs past n_valid return at once; the rest classify their element through
    device functions that return from inside ifs, and return early from a loop."""
    pid = tl.program_id(0)
    if pid >= n_valid:
        return
    v = tl.load(x_ptr + pid)
    c, why = clipped(v, lo, hi)
    tl.store(out_ptr + 3 * pid, sign_of(v))
    tl.store(out_ptr + 3 * pid + 1, c * 10 + why)
    for k in range(0, 100):
        if k * k > v:
            tl.store(out_ptr + 3 * pid + 2, k)
            return
    tl.store(out_ptr + 3 * pid + 2, -7)  # only when no k <= 99 has k * k > v


def _early_return_ref(arrays, scalars):
    x, out = arrays
    n_valid, lo, hi = scalars
    for p in range(min(n_valid, x.size)):
        v = int(x[p])
        c, why = (lo, 1) if v < lo else ((hi, 2) if v > hi else (v, 0))
        root = next((k for k in range(100) if k * k > v), -7)
        out[3 * p : 3 * p + 3] = [(v > 0) - (v < 0), c * 10 + why, root]
    return [x, out]


@tf.jit
def nested_and_static(x_ptr, out_ptr, n, m, STEPS: tl.constexpr):
    """A break that leaves only the inner loop; a break in a static_range on runtime data."""
    pid = tl.program_id(0)
    total = 0
    for i in range(n):
        for j in range(m):
            if tl.load(x_ptr + (pid * n + i) * m + j) < 0:
                break
            total += 1
    unrolled = 0
    for s in tl.static_range(STEPS):
        if tl.load(x_ptr + pid * n * m + s) < 0:
            break
        unrolled += s + 1
    tl.store(out_ptr + 2 * pid, total)
    tl.store(out_ptr + 2 * pid + 1, unrolled)


def _nested_ref(arrays, scalars, steps=6):
    x, out = arrays
    n, m = scalars
    for p in range(out.size // 2):
        rows = x[p * n * m : (p + 1) * n * m].reshape(n, m)
        total = sum(next((j for j in range(m) if row[j] < 0), m) for row in rows)
        flat = x[p * n * m :]
        unrolled = 0
        for s in range(steps):
            if flat[s] < 0:
                break
            unrolled += s + 1
        out[2 * p : 2 * p + 2] = [total, unrolled]
    return [x, out]


@tf.jit
def short_circuit(x_ptr, out_ptr, n, probe):
    """`i < n and load(x + i) > 0` must not load past n (the interpreter checks bounds)."""
    pid = tl.program_id(0)
    i = probe + pid
    hit = 0
    if i < n and tl.load(x_ptr + i) > 0:
        hit = 1
    if i >= n or tl.load(x_ptr + i) < 0:
        hit += 2
    tl.store(out_ptr + pid, hit)


def _short_circuit_ref(arrays, scalars):
    x, out = arrays
    n, probe = scalars
    for p in range(out.size):
        i = probe + p
        out[p] = int(i < n and x[i] > 0) + 2 * int(i >= n or x[i] < 0)
    return [x, out]


@tf.jit
def _double_until_negative(x_ptr, out_ptr, n):
    for i in range(n):
        v = tl.load(x_ptr + i)
        if v < 0:
            return
        tl.store(out_ptr + i, v * 2)


@tf.jit
def mixed_exits(x_ptr, out_ptr, out2_ptr, n, BLOCK: tl.constexpr):
    """continue in a while loop, a break in an else-branch leaving a loop that carries a
    tile, and a device function returning from inside its loop."""
    pid = tl.program_id(0)
    base = x_ptr + pid * n
    i = 0
    odd = 0
    while i < n:
        i += 1
        if tl.load(base + i - 1) % 2 == 0:
            continue
        odd += 1
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.int32)
    rows = 0
    for r in range(n // BLOCK):
        if tl.sum(acc) < 40:
            acc += tl.load(base + r * BLOCK + offs)
            rows += 1
        else:
            break
    out = out_ptr + pid * (BLOCK + 2)
    tl.store(out + offs, acc)
    tl.store(out + BLOCK, odd)
    tl.store(out + BLOCK + 1, rows)
    _double_until_negative(base, out2_ptr + pid * n, n)


def _mixed_ref(arrays, scalars, block=8):
    x, out, out2 = arrays
    (n,) = scalars
    for p in range(out.size // (block + 2)):
        row = x[p * n : (p + 1) * n]
        acc, rows = np.zeros(block, np.int32), 0
        for r in range(n // block):
            if acc.sum() >= 40:
                break
            acc += row[r * block : (r + 1) * block]
            rows += 1
        out[p * (block + 2) : (p + 1) * (block + 2)] = [*acc, int((row % 2 != 0).sum()), rows]
        for i, v in enumerate(row):
            if v < 0:
                break
            out2[p * n + i] = 2 * v
    return [x, out, out2]


def _make_mixed(rng):
    progs, n = 6, 8 * int(rng.integers(3, 9))
    x = rng.integers(-1, 9, progs * n).astype(np.int32)
    return (progs,), [x, np.zeros(progs * 10, np.int32), np.full(progs * n, -99, np.int32)], [n], {"BLOCK": 8}


@tf.jit
def while_and(init_ptr, bound_ptr, cut_ptr, out_ptr):
    """A while condition that loads behind 'and' (evaluated under an if in the condition)."""
    pid = tl.program_id(0)
    init = tl.load(init_ptr + pid)
    curr = init
    j = 0
    while curr == init and j < tl.load(bound_ptr + pid):
        curr = curr + (j == tl.load(cut_ptr + pid))
        j += 1
    tl.store(out_ptr + 2 * pid, curr)
    tl.store(out_ptr + 2 * pid + 1, j)


def _while_and_ref(arrays, scalars):
    init, bound, cut, out = arrays
    for p in range(init.size):
        curr, j = int(init[p]), 0
        while curr == init[p] and j < bound[p]:
            curr += int(j == cut[p])
            j += 1
        out[2 * p : 2 * p + 2] = [curr, j]
    return [init, bound, cut, out]


def _make_while_and(rng):
    n = 16
    ints = [rng.integers(lo, hi, n).astype(np.int32) for lo, hi in ((-5, 5), (0, 20), (0, 25))]
    return (n,), [*ints, np.zeros(2 * n, np.int32)], [], {}


def _make_first_above(rng):
    rows, n = 16, int(rng.integers(20, 60))
    x = rng.standard_normal(rows * n).astype(np.float32)
    return (rows,), [x, np.zeros(rows, np.int32), np.zeros(rows, np.int32)], [n, 1.5], {}


def _make_skip_sum(rng):
    n, block = int(rng.integers(10, 30)), 16
    x = rng.integers(-4, 5, (n, block)).astype(np.float32)
    x[rng.choice(n, 3, replace=False), 0] = 0
    return (1,), [x.ravel(), np.zeros(block + 1, np.float32)], [n], {"BLOCK": block}


def _make_collatz(rng):
    x = rng.integers(1, 200, 64).astype(np.int64)
    return (64,), [x, np.zeros(64, np.int64)], [int(rng.integers(30, 120))], {}


def _make_early_return(rng):
    x = rng.integers(-50, 11000, 48).astype(np.int32)
    out = np.full(3 * 48, -99, np.int32)
    return (48,), [x, out], [int(rng.integers(20, 48)), -10, 40], {}


def _make_nested(rng):
    progs, n, m = 8, int(rng.integers(3, 8)), int(rng.integers(4, 9))
    x = rng.integers(-1, 6, progs * n * m + 8).astype(np.int32)
    return (progs,), [x, np.zeros(2 * progs, np.int32)], [n, m], {"STEPS": 6}


def _make_short_circuit(rng):
    n = 40
    x = rng.integers(-3, 4, n).astype(np.int32)
    return (24,), [x, np.zeros(24, np.int32)], [n, n - 12], {}


CASES = [
    Case("first_above", first_above, _make_first_above, _first_above_ref),
    Case("skip_sum", skip_sum, _make_skip_sum, _skip_sum_ref),
    Case("collatz", collatz, _make_collatz, _collatz_ref),
    Case("early_return", early_return, _make_early_return, _early_return_ref),
    Case("nested_and_static", nested_and_static, _make_nested, _nested_ref),
    Case("short_circuit", short_circuit, _make_short_circuit, _short_circuit_ref),
    Case("mixed_exits", mixed_exits, _make_mixed, _mixed_ref),
    Case("while_and", while_and, _make_while_and, _while_and_ref),
]
