"""The last pieces of Triton's surface that its test_core.py uses (issue 16): Python numbers'
tensor attributes, Triton's indexing rules, ternaries on a runtime condition (one branch
runs), one-element conditions and x.item(), `is` / hasattr on tensors, constexpr-tuple
shapes, negative expand_dims axes, dtype.fp_mantissa_width / exponent_bias, tl.pi32_t and
addresses stored as int64, fp8 abs, float8e4b15 dots, triton.reinterpret and @jit(debug=).
Every result is exact (integers, bit patterns, or products exact in float64)."""

import ml_dtypes
import numpy as np
import pytest
import tilefuse as tf
import tilefuse.language as tl
from tilefuse.errors import CompilationError, KernelRuntimeError, LaunchError


@pytest.fixture
def rng():
    return np.random.default_rng()


# --- Python numbers in kernels ---


@tf.jit
def k_number_dtype(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    value = 7
    flag = True
    tl.store(out_ptr + offs, tl.full([BLOCK], value, dtype=value.dtype), mask=offs < n)
    tl.static_assert(value.dtype == tl.int32 and flag.dtype == tl.int1 and (2.5).dtype == tl.float32)


def test_number_dtype(rng):
    n = int(rng.integers(1, 64))
    out = np.full(64, -1, np.int32)
    k_number_dtype[(1,)](out, n, BLOCK=64)
    np.testing.assert_array_equal(out, [7] * n + [-1] * (64 - n))


# --- indexing ---


@tf.jit
def k_index(x_ptr, out_ptr, s_ptr, BLOCK: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    t = x[None, None:]
    tl.static_assert(t.shape == [1, BLOCK])
    t = x[None, None:None:None, None]
    tl.static_assert(t.shape == [1, BLOCK, 1])
    tl.store(out_ptr + tl.arange(0, BLOCK)[:, None] + tl.zeros([1, 1], tl.int32), x[:, None] + 1)
    s = tl.load(s_ptr)
    z = s_ptr[None, None, :]  # a scalar: ':' past the rank is ignored, as in Triton
    tl.static_assert(z.shape == [1, 1])
    tl.store(z, (s * 3)[None, None])


def test_index(rng):
    x = rng.integers(-1000, 1000, 32).astype(np.int32)
    out = np.zeros((32, 1), np.int32)
    s = rng.integers(-1000, 1000, 1).astype(np.int32)
    want = s * 3
    k_index[(1,)](x, out, s, BLOCK=32)
    np.testing.assert_array_equal(out[:, 0], x + 1)
    np.testing.assert_array_equal(s, want)


@tf.jit
def k_bad_slice(x_ptr):
    x_ptr[10:]


def test_unsupported_index():
    with pytest.raises(CompilationError, match="unsupported tensor index: slice\\(10, None, None\\)"):
        k_bad_slice[(1,)](np.zeros(16, np.float32))


# --- runtime conditions ---


@tf.jit
def k_ternary(c_ptr, a_ptr, b_ptr, out_ptr, hits_ptr):
    pid = tl.program_id(0)
    c = tl.load(c_ptr + pid)
    # Each side stores: only the branch the condition picks may run.
    tl.store(hits_ptr + 2 * pid, 1) if c > 0 else tl.store(hits_ptr + 2 * pid + 1, 1)
    v = tl.load(a_ptr + pid) if c > 0 else 0.5
    tl.store(out_ptr + pid, v)


def test_ternary_runs_one_branch(rng):
    n = 64
    c = rng.integers(-5, 5, n).astype(np.int32)
    a = rng.standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    hits = np.zeros((n, 2), np.int32)
    k_ternary[(n,)](c, a, a, out, hits)
    np.testing.assert_array_equal(out, np.where(c > 0, a, np.float32(0.5)))
    np.testing.assert_array_equal(hits, np.stack([c > 0, c <= 0], 1).astype(np.int32))


@tf.jit
def k_one_element_cond(x_ptr, EXPLICIT: tl.constexpr):
    cond = tl.load(x_ptr + tl.arange(0, 1)) > 42
    if EXPLICIT:
        cond = cond.item()
        tl.static_assert(cond.shape == [])
    if cond:
        tl.store(x_ptr, 42)


@pytest.mark.parametrize("explicit", [False, True])
def test_one_element_condition(rng, explicit):
    for v in rng.integers(0, 100, 6):
        x = np.array([v], np.int32)
        k_one_element_cond[(1,)](x, explicit)
        assert x[0] == min(v, 42)


@tf.jit
def k_item_of_many(x_ptr):
    tl.load(x_ptr + tl.arange(0, 2)).item()


def test_item_needs_one_element():
    with pytest.raises(CompilationError, match="item\\(\\) needs a tile of one element, got shape \\[2\\]"):
        k_item_of_many[(1,)](np.zeros(2, np.int32))


@tf.jit
def k_is_hasattr(x):
    if (x is not None) and hasattr(x, "dtype") and isinstance(x.dtype, tl.pointer_type) and (tl.load(x) > 42):
        tl.store(x, 42)


def test_is_and_hasattr(rng):
    k_is_hasattr[(1,)](None)
    k_is_hasattr[(1,)](3)
    v = int(rng.integers(43, 1000))
    x = np.array([v], np.int32)
    k_is_hasattr[(1,)](x)
    assert x[0] == 42


# --- shapes ---


@tf.jit
def k_reshape(x_ptr, z_ptr, SHAPE: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, 4)[:, None] * 8 + tl.arange(0, 8)[None, :])
    z = tl.reshape(x, SHAPE)
    tl.store(z_ptr + tl.arange(0, 2)[:, None] * 16 + tl.arange(0, 16)[None, :], z)


def test_reshape_constexpr_tuple(rng):
    x = rng.integers(-99, 99, (4, 8)).astype(np.int32)
    z = np.zeros((2, 16), np.int32)
    k_reshape[(1,)](x, z, (2, 16))
    np.testing.assert_array_equal(z, x.reshape(2, 16))


@tf.jit
def k_expand(N: tl.constexpr):
    x = tl.arange(0, N)
    tl.static_assert(tl.expand_dims(x, (0, -1)).shape == [1, N, 1])
    tl.static_assert(tl.expand_dims(x, (-4, 2, -1)).shape == [1, N, 1, 1])
    tl.static_assert(tl.expand_dims(tl.sum(x), -1).shape == [1])


@tf.jit
def k_expand_bad(AXES: tl.constexpr):
    tl.expand_dims(tl.arange(0, 8), AXES)


def test_expand_dims_axes():
    k_expand[(1,)](32)
    for axes, words in ((-3, "invalid axis -3. Expected -2 <= axis < 2"), ((0, -3), "normalized axes = [0, 0]")):
        with pytest.raises(CompilationError) as e:
            k_expand_bad[(1,)](axes)
        # Triton's tests read the words from the cause: the underlying error, without frames
        assert words in e.value.message and words in str(e.value.__cause__), e.value
        assert e.value.__cause__.__traceback__ is None


@tf.jit
def k_grid_axis(out_ptr, AXIS: tl.constexpr, NUM: tl.constexpr):
    tl.store(out_ptr, tl.num_programs(AXIS) if NUM else tl.program_id(AXIS))


@pytest.mark.parametrize("axis", [-1, 3, 20])
@pytest.mark.parametrize("num", [False, True])
def test_grid_axis_out_of_range(axis, num):
    with pytest.raises(CompilationError) as e:
        k_grid_axis[(1,)](np.zeros(1, np.int32), axis, num)
    words = f"{'num_programs' if num else 'program_id'} axis must be 0, 1, or 2 but got {axis}"
    assert words in str(e.value.__cause__) and "k_grid_axis" not in str(e.value.__cause__), e.value


# --- types ---


def test_fp_formats():
    # Mantissa bits and exponent bias against ml_dtypes / numpy's own descriptions.
    for d, np_d in [
        (tl.float16, np.float16),
        (tl.bfloat16, ml_dtypes.bfloat16),
        (tl.float32, np.float32),
        (tl.float64, np.float64),
        (tl.float8e4nv, ml_dtypes.float8_e4m3fn),
        (tl.float8e5, ml_dtypes.float8_e5m2),
    ]:
        info = ml_dtypes.finfo(np_d)
        assert d.fp_mantissa_width == info.nmant
        assert d.exponent_bias == 1 - info.minexp
    assert (tl.float8e4b15.fp_mantissa_width, tl.float8e4b15.exponent_bias) == (3, 15)
    with pytest.raises(AttributeError, match="not a floating-point type"):
        tl.int32.fp_mantissa_width  # noqa: B018


@tf.jit
def k_pointers(a_ptr, b_ptr, c_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    p = tl.where(tl.load(c_ptr + offs) != 0, a_ptr + offs, b_ptr + offs)
    tl.static_assert(p.dtype == tl.pi32_t)
    tl.store(out_ptr + offs, p)  # an int64 pointee: the addresses


def test_pointers_stored_as_int64(rng):
    a, b = np.zeros(16, np.int32), np.zeros(16, np.int32)
    c = rng.integers(0, 2, 16).astype(np.int8)
    out = np.zeros(16, np.int64)
    k_pointers[(1,)](a, b, c, out, BLOCK=16)
    offs = 4 * np.arange(16)
    np.testing.assert_array_equal(out, np.where(c != 0, a.ctypes.data + offs, b.ctypes.data + offs))


@tf.jit
def k_abs(x_ptr, z_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(z_ptr + offs, tl.abs(tl.load(x_ptr + offs)))


@pytest.mark.parametrize(
    "dtype, np_dtype",
    [(tl.float8e4nv, ml_dtypes.float8_e4m3fn), (tl.float8e5, ml_dtypes.float8_e5m2), (tl.float8e4b15, None)],
)
def test_fp8_abs(rng, dtype, np_dtype):
    bits = rng.permutation(256).astype(np.uint8)  # every byte
    out = np.zeros(256, np.uint8)
    k_abs[(1,)](tf.reinterpret(bits, dtype), tf.reinterpret(out, dtype), BLOCK=256)
    # The sign bit cleared. NaNs (e4b15 has none) stay NaNs of sign 0; the interpreter may
    # quiet their payload.
    nan = np.zeros(256, bool) if np_dtype is None else np.isnan(bits.view(np_dtype).astype(np.float32))
    np.testing.assert_array_equal(out[~nan], bits[~nan] & 0x7F)
    if nan.any():
        assert np.isnan(out[nan].view(np_dtype).astype(np.float32)).all() and (out[nan] & 0x80 == 0).all()


def e4b15_values(b: np.ndarray) -> np.ndarray:
    """e4b15 bytes as float64: f16's bit pattern without the top exponent bit."""
    b = b.astype(np.uint16)
    return (((b & 0x80) << 8) | ((b & 0x7F) << 7)).astype(np.uint16).view(np.float16).astype(np.float64)


@tf.jit
def k_dot(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    m, n, k = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + m[:, None] * K + k[None, :])
    b = tl.load(b_ptr + k[:, None] * N + n[None, :])
    tl.store(c_ptr + m[:, None] * N + n[None, :], tl.dot(a, b))


def test_e4b15_dot(rng):
    m, n, k = 32, 16, 64
    a = rng.integers(0, 256, (m, k)).astype(np.uint8)
    b = rng.integers(0, 256, (k, n)).astype(np.uint8)
    c = np.zeros((m, n), np.float32)
    k_dot[(1,)](tf.reinterpret(a, tl.float8e4b15), tf.reinterpret(b, tl.float8e4b15), c, m, n, k)
    ref = e4b15_values(a) @ e4b15_values(b)
    # Each product is exact in f32 (4 + 4 significant bits); the sum rounds at most K times.
    bound = k * np.finfo(np.float32).eps * (np.abs(e4b15_values(a)) @ np.abs(e4b15_values(b)))
    assert (np.abs(c - ref) <= bound).all()


def test_reinterpret():
    x = np.zeros(4, np.uint8)
    w = tf.reinterpret(x, tl.float8e4b15)
    assert (w.dtype, w.base, w.shape) == (tl.float8e4b15, x, (4,))
    assert tf.reinterpret(w, np.uint8) is x  # a numpy / torch dtype: the memory as it is
    with pytest.raises(TypeError, match="tl.float16 is 16 bits, the array's elements 8"):
        tf.reinterpret(x, tl.float16)


# --- @jit(debug=) ---


def _asserting(debug):
    def k(x_ptr):
        x = tl.load(x_ptr)
        tl.device_assert(x > 0, "x must be positive")
        assert x < 100, "x below 100"
        tl.store(x_ptr, x + 1)

    return tf.jit(debug=debug)(k)


@pytest.mark.parametrize("debug", [None, True, False])
def test_debug_flag(rng, debug):
    k = _asserting(debug)
    for v in (int(rng.integers(-50, 0)), int(rng.integers(100, 200))):
        x = np.array([v], np.int32)
        if debug is False:
            k[(1,)](x)
            assert x[0] == v + 1
        else:
            with pytest.raises(KernelRuntimeError):
                k[(1,)](x)
            assert x[0] == v
    with pytest.raises(TypeError, match="debug=...\\) takes True, False or None"):
        tf.jit(debug="yes")(lambda x: x)


# --- tuple arguments ---


@tf.jit
def k_tuples(ptrs, scales, out_ptr, n, BLOCK: tl.constexpr, PAIR: tl.constexpr):
    x_ptr, (y_ptr, z_ptr) = ptrs
    offs = tl.arange(0, BLOCK)
    m = offs < n
    x, y, z = tl.load(x_ptr + offs, mask=m), tl.load(y_ptr + offs, mask=m), tl.load(z_ptr + offs, mask=m)
    v = x * scales[0] + y * scales[1] + z * scales.c + PAIR[0] * PAIR[1]
    tl.store(out_ptr + offs, v, mask=m)


def test_tuple_arguments(rng):
    from typing import NamedTuple

    class S(NamedTuple):
        a: float
        b: int
        c: int

    n = int(rng.integers(1, 128))
    x, y, z = (rng.integers(-1000, 1000, 128).astype(np.int32) for _ in range(3))
    out = np.zeros(128, np.int32)
    s = S(3, int(rng.integers(-9, 9)), 1)  # 1: specialized to a constant, as a lone argument is
    k_tuples[(1,)]((x, (y, z)), s, out, n, BLOCK=128, PAIR=(2, 5))
    ref = x.astype(np.int64) * 3 + y * s.b + z + 10
    np.testing.assert_array_equal(out[:n], ref[:n])
    assert (out[n:] == 0).all()
    # The structure is part of the specialization: a float in the tuple compiles anew.
    f_out = np.zeros(128, np.float32)
    k_tuples[(1,)](
        (x.astype(np.float32), (y.astype(np.float32), z.astype(np.float32))), S(0.5, 2, 1), f_out, n, 128, (1, 1)
    )
    np.testing.assert_array_equal(f_out[:n], (x * 0.5 + y * 2 + z + 1)[:n].astype(np.float32))
    assert len(k_tuples.cache) == 2


@tf.jit
def k_tuple_len(t, out_ptr):
    tl.store(out_ptr, len(t))


def test_tuple_structure(rng):
    out = np.zeros(1, np.int32)
    for size in (0, 1, 3):
        k_tuple_len[(1,)](tuple(np.zeros(1, np.float32) for _ in range(size)), out)
        assert out[0] == size
    with pytest.raises(LaunchError, match="argument 't.1': cannot pass a object"):
        k_tuple_len[(1,)]((1, object()), out)


# --- JITFunction.src / _unsafe_update_src (Triton's test harness patches kernels so) ---


@tf.jit
def k_patchable(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, GENERATE_TEST_HERE)  # noqa: F821 - replaced before it compiles


def test_update_src(rng):
    k = tf.JITFunction(k_patchable.fn)
    assert "GENERATE_TEST_HERE" in k.src and k.src.startswith("@tf.jit\n")
    x = rng.integers(-1000, 1000, 16).astype(np.int32)
    for expr, ref in (("tl.load(x_ptr + offs) * 3", x * 3), ("tl.load(x_ptr + offs) + 7", x + 7)):
        k._unsafe_update_src(k_patchable.src.replace("GENERATE_TEST_HERE", expr))
        y = x.copy()
        k[(1,)](y, BLOCK=16)
        np.testing.assert_array_equal(y, ref)
    k._unsafe_update_src(k_patchable.src.replace("GENERATE_TEST_HERE", "undefined_name"))
    with pytest.raises(CompilationError, match="name 'undefined_name' is not defined") as e:
        k[(1,)](x, BLOCK=16)
    assert "undefined_name" in str(e.value)  # the updated text is quoted
