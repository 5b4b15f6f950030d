"""break, continue and return (early exits in kernels, device functions and loops) and
short-circuiting and/or on the interpreter: kernels whose trip counts and exits depend
on runtime data, against plain-Python references (exact), over several random inputs;
plus the IR shape (a loop that may break becomes a while loop) and the errors left."""

import numpy as np
import pytest
import tilefuse as tf
import tilefuse.language as tl

from tests.control_cases import CASES
from tests.ptxas import assert_assembles


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_exits_match_python(case, seed):
    rng = np.random.default_rng(seed * 7919 + 17)
    grid, arrays, scalars, constexprs = case.make(rng)
    want = case.ref([a.copy() for a in arrays], scalars)
    case.kernel[grid](*arrays, *scalars, **constexprs)
    for k, (got, exp) in enumerate(zip(arrays, want)):
        np.testing.assert_array_equal(got, exp, err_msg=f"{case.name}: array {k}")


def test_break_makes_a_while_loop_and_continue_keeps_the_for():
    case = {c.name: c for c in CASES}
    rng = np.random.default_rng(0)
    grid, arrays, scalars, constexprs = case["first_above"].make(rng)
    ir = case["first_above"].kernel[grid](*arrays, *scalars, **constexprs).asm["tile"]
    assert " while " in ir and " for " not in ir, ir

    @tf.jit
    def only_continue(x_ptr, out_ptr, n):
        acc = 0.0
        for i in range(n):
            v = tl.load(x_ptr + i)
            if v < 0:
                continue
            acc += v
        tl.store(out_ptr, acc)

    x = rng.standard_normal(37).astype(np.float32)
    out = np.zeros(1, np.float32)
    ir = only_continue[(1,)](x, out, x.size).asm["tile"]
    assert " for " in ir and " while " not in ir, ir
    acc = np.float32(0)
    for v in x:
        if v >= 0:
            acc = np.float32(acc + v)
    assert out[0] == acc


def test_compile_time_exits_leave_no_ops():
    """A return or break on a constexpr condition removes the rest at compile time."""

    @tf.jit
    def k(x_ptr, N: tl.constexpr):
        if N > 4:
            tl.store(x_ptr, 1.0)
            return
        for i in tl.static_range(8):
            if i == N:
                break
            tl.store(x_ptr + i, 2.0)

    x = np.zeros(8, np.float32)
    ir = k[(1,)](x, N=8).asm["tile_raw"]
    assert ir.count("store") == 1 and x[0] == 1.0
    x[:] = 0
    ir = k[(1,)](x, N=3).asm["tile_raw"]
    assert ir.count("store") == 3 and list(x) == [2, 2, 2, 0, 0, 0, 0, 0]


@tf.jit
def _loop_return_value(x_ptr, n):
    for i in range(n):
        if tl.load(x_ptr + i) > 0:
            return i  # E:loop_return
    return -1


@tf.jit
def _calls_loop_return(x_ptr, out_ptr, n):
    tl.store(out_ptr, _loop_return_value(x_ptr, n))


@tf.jit
def _some_paths(x_ptr):
    if tl.load(x_ptr) > 0:
        return 1  # E:some_paths


@tf.jit
def _calls_some_paths(x_ptr, out_ptr):
    tl.store(out_ptr, _some_paths(x_ptr))


def _line(marker):
    with open(__file__) as f:
        return next(i + 1 for i, t in enumerate(f.read().splitlines()) if t.rstrip().endswith(f"# {marker}"))


@pytest.mark.parametrize(
    "kernel,marker,words",
    [
        (_calls_loop_return, "E:loop_return", "'return' of a value inside a loop"),
        (_calls_some_paths, "E:some_paths", "not every path"),
    ],
)
def test_exit_errors_name_the_line(kernel, marker, words):
    x = np.ones(4, np.float32)
    out = np.zeros(1, np.float32)
    args = (x, out, 4) if kernel is _calls_loop_return else (x, out)
    with pytest.raises(tf.CompilationError) as info:
        kernel[(1,)](*args)
    assert info.value.line == _line(marker) and words in info.value.message, str(info.value)


@tf.jit
def _nested_return(c_ptr, v_ptr, out_ptr):
    val = 0
    if tl.load(c_ptr):
        if tl.load(c_ptr + 1):
            val = tl.load(v_ptr)
        else:
            return
    elif tl.load(c_ptr + 2):
        val = tl.load(v_ptr + 1)
    else:
        val = tl.load(v_ptr + 2)
    tl.store(out_ptr, val)


@pytest.mark.parametrize("conds", [(a, b, c) for a in (0, 1) for b in (0, 1) for c in (0, 1)])
def test_return_from_nested_ifs(conds):
    v = np.random.default_rng().integers(10, 99, 3).astype(np.int32)
    out = np.full(1, -1, np.int32)
    _nested_return[(1,)](np.array(conds, np.int32), v, out)
    a, b, c = conds
    want = (v[0] if b else -1) if a else (v[1] if c else v[2])
    assert out[0] == want


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_exits_lower_to_ptx_that_assembles(case, target, tmp_path):
    grid, arrays, scalars, constexprs = case.make(np.random.default_rng(1))
    k = case.kernel.warmup(*arrays, *scalars, **constexprs, grid=grid, target=target)
    assert_assembles(k.asm["ptx"], target, tmp_path)


def test_continue_in_a_static_range_skips_one_iteration():
    @tf.jit
    def k(x_ptr, out_ptr, STEPS: tl.constexpr):
        total = 0
        for s in tl.static_range(STEPS):
            v = tl.load(x_ptr + s)
            if v < 0:
                continue
            total += v * (s + 1)
        tl.store(out_ptr, total)

    x = np.random.default_rng().integers(-5, 6, 8).astype(np.int32)
    out = np.zeros(1, np.int32)
    k[(1,)](x, out, STEPS=8)
    assert out[0] == sum(int(v) * (s + 1) for s, v in enumerate(x) if v >= 0)
