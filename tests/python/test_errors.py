"""Errors a kernel author sees: compile errors point at file:line:col of this file with
the source line and a caret and no compiler internals; launch-time errors name the
load/store, the buffer and the program; bad launch arguments raise LaunchError."""

import re

import ml_dtypes
import numpy as np
import pytest
import tilefuse as tf
import tilefuse.language as tl

THIS_FILE = __file__
INTERNALS = (".cpp", ".h:", "tilefuse::", "Builder", "_C.", "Traceback", "internal compiler error")


def _marker_line(marker: str) -> tuple[int, str]:
    """The 1-based number and text of the single line of this file holding `marker`."""
    with open(THIS_FILE) as f:
        lines = f.read().splitlines()
    pattern = re.compile(rf"# {re.escape(marker)}(?![\w])")
    hits = [i for i, text in enumerate(lines) if pattern.search(text)]
    assert len(hits) == 1, f"marker {marker!r} must appear on exactly one line, found {len(hits)}"
    return hits[0] + 1, lines[hits[0]]


def _expect_compile_error(kernel, args, kwargs, marker, token, *, contains=(), grid=(1,)):
    """Launching `kernel` raises CompilationError at the line holding `marker`, at the
    column where `token` starts on that line."""
    line, text = _marker_line(marker)
    col = text.index(token) + 1
    with pytest.raises(tf.CompilationError) as info:
        kernel[grid](*args, **kwargs)
    e = info.value
    rendered = str(e)
    assert rendered.startswith(f"{THIS_FILE}:{line}:{col}: error:"), rendered
    assert (e.file, e.line, e.col) == (THIS_FILE, line, col)
    out = rendered.splitlines()
    assert out[1] == text, rendered
    assert out[2] == " " * (col - 1) + "^", rendered
    assert len(out) == 3, rendered
    for bad in INTERNALS:
        assert bad not in rendered, f"compiler internal {bad!r} leaked into:\n{rendered}"
    for want in contains:
        assert want in e.message, rendered
    return e


@pytest.fixture
def rng():
    return np.random.default_rng()


# --- unsupported syntax ---


@tf.jit
def k_try(x_ptr, n):
    try:  # E:try
        tl.store(x_ptr, 1.0)
    except ValueError:
        pass


@tf.jit
def k_with(x_ptr, n):
    with open("f"):  # E:with
        pass


@tf.jit
def k_lambda(x_ptr, n):
    f = lambda v: v + 1  # E:lambda
    tl.store(x_ptr, f(1.0))


@tf.jit
def k_listcomp(x_ptr, n):
    xs = [i * 2 for i in range(4)]  # E:listcomp
    tl.store(x_ptr, xs[0])


@tf.jit
def k_while_else(x_ptr, n):
    i = 0
    while i < n:  # E:while_else
        i += 1
    else:
        i = 0


@tf.jit
def k_pow(x_ptr, n):
    x = tl.load(x_ptr + tl.arange(0, 16))
    tl.store(x_ptr + tl.arange(0, 16), x**2)  # E:pow


@tf.jit
def k_chained(x_ptr, n):
    offs = tl.arange(0, 16)
    mask = 0 <= offs < n  # E:chained
    tl.store(x_ptr + offs, 1.0, mask=mask)


@tf.jit
def k_code_after_return(x_ptr, n):
    return
    tl.store(x_ptr, 2.0)  # E:after_return


@tf.jit
def k_return_value(x_ptr, n):
    x = tl.load(x_ptr)
    return x  # E:return_value


def plain_python_helper(v):
    return v * 2


@tf.jit
def k_python_call(x_ptr, n):
    x = tl.load(x_ptr + tl.arange(0, 16))
    y = plain_python_helper(x)  # E:python_call
    tl.store(x_ptr + tl.arange(0, 16), y)


SYNTAX_CASES = [
    (k_try, "try", "try", "try"),
    (k_with, "with", "with", "with"),
    (k_lambda, "lambda", "lambda", "lambda"),
    (k_listcomp, "listcomp", "[i", "list comprehension"),
    (k_while_else, "while_else", "while", "while ... else"),
    (k_pow, "pow", "x**2", "'**'"),
    (k_chained, "chained", "0 <=", "chained comparison"),
    (k_code_after_return, "after_return", "tl.store", "after 'return'"),
    (k_return_value, "return_value", "return", "cannot return a value"),
    (k_python_call, "python_call", "plain_python_helper", "plain_python_helper"),
]


@pytest.mark.parametrize("kernel,marker,token,words", SYNTAX_CASES, ids=[c[1] for c in SYNTAX_CASES])
def test_unsupported_syntax(kernel, marker, token, words):
    x = np.random.default_rng().standard_normal(16).astype(np.float32)
    _expect_compile_error(kernel, (x, 8), {}, f"E:{marker}", token, contains=(words,))


@tf.jit
def k_arange_runtime(x_ptr, n):
    offs = tl.arange(0, n)  # E:arange_runtime
    tl.store(x_ptr + offs, 1.0)


def test_arange_with_a_runtime_bound_says_constexpr():
    x = np.zeros(16, np.float32)
    e = _expect_compile_error(k_arange_runtime, (x, 16), {}, "E:arange_runtime", "tl.arange")
    assert "arange's arguments must be of type tl.constexpr" in e.message and "end" in e.message, e.message


def test_compilation_error_traceback_starts_at_the_users_line():
    """No frame of the code generator: the launch line, then the compiler's entry; the
    printed chain holds the cause's message line and no frame of it."""
    import traceback

    x = np.zeros(16, np.float32)
    with pytest.raises(tf.CompilationError) as info:
        k_arange_runtime[(1,)](x, 16)  # E:launch_line
    frames = traceback.extract_tb(info.value.__traceback__)
    assert frames[0].filename == THIS_FILE and frames[0].lineno == _marker_line("E:launch_line")[0]
    assert not any(f.filename.endswith(("codegen.py", "core.py")) for f in frames), frames
    assert len(frames) <= 4, frames
    # The underlying error is chained as the cause (Triton's tests read its words there), with
    # no frames of its own and nothing chained further.
    cause = info.value.__cause__
    assert cause is not None and cause.__traceback__ is None and cause.__cause__ is None
    assert cause.__suppress_context__ and str(cause) in info.value.message
    printed = "".join(traceback.format_exception(info.value))
    assert "codegen.py" not in printed and "core.py" not in printed, printed


# --- type and shape errors reported by the C++ builder ---


@tf.jit
def k_shape_mismatch(x_ptr):
    a = tl.arange(0, 64)
    b = tl.arange(0, 32)
    c = a + b  # E:shape_mismatch
    tl.store(x_ptr + a, c)


@tf.jit
def k_dot_mismatch(x_ptr):
    a = tl.load(x_ptr + tl.arange(0, 16)[:, None] * 8 + tl.arange(0, 8)[None, :])
    b = tl.load(x_ptr + tl.arange(0, 16)[:, None] * 16 + tl.arange(0, 16)[None, :])
    c = tl.dot(a, b)  # E:dot_mismatch
    tl.store(x_ptr + tl.arange(0, 16)[:, None] * 16 + tl.arange(0, 16)[None, :], c)


@tf.jit
def k_fp8_arith(x_ptr):
    offs = tl.arange(0, 16)
    x = tl.load(x_ptr + offs)
    y = x * x  # E:fp8_arith
    tl.store(x_ptr + offs, y)


@tf.jit
def k_load_non_pointer(x_ptr, n):
    offs = tl.arange(0, 16)
    v = tl.load(n + offs)  # E:load_non_pointer
    tl.store(x_ptr + offs, v)


@tf.jit
def k_bad_index(x_ptr):
    offs = tl.arange(0, 16)
    o2 = offs[:, :, None]  # E:bad_index
    tl.store(x_ptr + o2, 1.0)


@tf.jit
def k_loop_type_change(x_ptr, n):
    acc = 0
    for i in range(n):  # E:loop_type_change
        acc = acc + tl.load(x_ptr + i)
    tl.store(x_ptr, acc)


@tf.jit
def k_if_type_mismatch(x_ptr, n):
    if n > 3:  # E:if_type_mismatch
        v = tl.arange(0, 16)
    else:
        v = tl.arange(0, 16).to(tl.float32)
    tl.store(x_ptr + tl.arange(0, 16), v)


@tf.jit
def k_undefined(x_ptr):
    tl.store(x_ptr, not_defined_anywhere + 1.0)  # E:undefined  # noqa: F821


@tf.jit
def k_static_assert(x_ptr, BLOCK: tl.constexpr):
    tl.static_assert(BLOCK % 32 == 0, "BLOCK must be a multiple of 32")  # E:static_assert
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


@tf.jit
def k_arange_npot(x_ptr):
    offs = tl.arange(0, 48)  # E:arange_npot
    tl.store(x_ptr + offs, 1.0)


def _f32(n):
    return np.random.default_rng().standard_normal(n).astype(np.float32)


def _f8(n):
    return np.random.default_rng().standard_normal(n).astype(ml_dtypes.float8_e4m3fn)


TYPE_CASES = [
    (k_shape_mismatch, lambda: ((_f32(64),), {}), "shape_mismatch", "a + b", ("64", "32")),
    (k_dot_mismatch, lambda: ((_f32(256),), {}), "dot_mismatch", "tl.dot", ("not compatible for matmul", "[16, 8]")),
    (k_fp8_arith, lambda: ((_f8(16),), {}), "fp8_arith", "x * x", ("f8e4m3",)),
    (k_load_non_pointer, lambda: ((_f32(16), 16), {}), "load_non_pointer", "tl.load", ("pointer",)),
    (k_bad_index, lambda: ((_f32(16),), {}), "bad_index", "offs[", ("rank 1",)),
    (k_loop_type_change, lambda: ((_f32(16), 4), {}), "loop_type_change", "for", ("'acc'", "i32", "f32")),
    (k_if_type_mismatch, lambda: ((_f32(16), 4), {}), "if_type_mismatch", "if", ("'v'", "i32", "f32")),
    (k_undefined, lambda: ((_f32(16),), {}), "undefined", "not_defined_anywhere", ("not_defined_anywhere",)),
    (k_static_assert, lambda: ((_f32(48),), {"BLOCK": 48}), "static_assert", "tl.static_assert", ("multiple of 32",)),
    (k_arange_npot, lambda: ((_f32(48),), {}), "arange_npot", "tl.arange", ("48", "power of two")),
]


@pytest.mark.parametrize("kernel,make_args,marker,token,words", TYPE_CASES, ids=[c[2] for c in TYPE_CASES])
def test_type_and_shape_errors(kernel, make_args, marker, token, words):
    args, kwargs = make_args()
    _expect_compile_error(kernel, args, kwargs, f"E:{marker}", token, contains=words)


def test_error_in_indented_kernel_has_file_column():
    # A kernel defined inside a function: columns count the indentation in the file.
    @tf.jit
    def nested(x_ptr):
        tl.store(x_ptr + tl.arange(0, 24), 1.0)  # E:nested

    _expect_compile_error(nested, (_f32(32),), {}, "E:nested", "tl.arange", contains=("24",))


@tf.jit
def helper_with_error(x):
    return x + tl.arange(0, 32)  # E:in_device_fn


@tf.jit
def k_calls_bad_helper(x_ptr):
    offs = tl.arange(0, 64)
    tl.store(x_ptr + offs, helper_with_error(offs))


def test_error_inside_device_function_points_into_it():
    _expect_compile_error(k_calls_bad_helper, (_f32(64),), {}, "E:in_device_fn", "x + tl", contains=("64", "32"))


def test_compilation_error_is_a_tilefuse_error():
    assert issubclass(tf.CompilationError, tf.TilefuseError)
    assert issubclass(tf.KernelRuntimeError, tf.TilefuseError)
    assert issubclass(tf.LaunchError, tf.TilefuseError)


def test_failed_compile_is_not_cached():
    with pytest.raises(tf.CompilationError):
        k_arange_npot[(1,)](_f32(48))
    assert len(k_arange_npot.cache) == 0


# --- errors while the kernel runs on the interpreter ---


@tf.jit
def k_copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr, MASKED: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if MASKED:
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask, other=0.0)
        tl.store(y_ptr + offs, x, mask=mask)
    else:
        x = tl.load(x_ptr + offs)  # E:oob_load
        tl.store(y_ptr + offs, x)


@tf.jit
def k_store_only(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs % n)
    tl.store(y_ptr + offs, x * 2.0)  # E:oob_store


def _runtime_error_location(e, marker, token):
    line, text = _marker_line(marker)
    assert e.file == THIS_FILE and e.line == line and e.col == text.index(token) + 1, str(e)
    rendered = str(e)
    assert rendered.startswith(f"{THIS_FILE}:{line}:{e.col}: error:"), rendered
    assert text in rendered.splitlines(), rendered
    for bad in INTERNALS:
        assert bad not in rendered, rendered


def test_out_of_bounds_load_names_line_buffer_and_program(rng):
    n = 40  # the last of three programs reads past the end of x
    x = rng.standard_normal(n).astype(np.float32)
    y = np.zeros(64, np.float32)
    with pytest.raises(tf.KernelRuntimeError) as info:
        k_copy[(3,)](x, y, n, BLOCK=16, MASKED=False)
    e = info.value
    _runtime_error_location(e, "E:oob_load", "tl.load")
    assert "out-of-bounds" in e.message and "'x_ptr'" in e.message, str(e)
    assert "program 2, 0, 0" in e.message, str(e)


def test_out_of_bounds_store_names_line_buffer_and_program(rng):
    n = 24
    x = rng.standard_normal(n).astype(np.float32)
    y = np.zeros(24, np.float32)
    with pytest.raises(tf.KernelRuntimeError) as info:
        k_store_only[(2,)](x, y, n, BLOCK=16)
    e = info.value
    _runtime_error_location(e, "E:oob_store", "tl.store")
    assert "out-of-bounds" in e.message and "'y_ptr'" in e.message, str(e)
    assert "program 1, 0, 0" in e.message, str(e)


def test_masked_off_lanes_out_of_bounds_do_not_raise(rng):
    n = 37
    x = rng.standard_normal(n).astype(np.float32)
    y = np.full(n, np.nan, np.float32)
    k_copy[(tf.cdiv(n, 16),)](x, y, n, BLOCK=16, MASKED=True)
    np.testing.assert_array_equal(y, x)


@tf.jit
def k_assert(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.device_assert(x < n, "x must stay below n")  # E:device_assert
    tl.store(x_ptr + offs, x + 1)


def test_device_assert_failure_raises_with_message(rng):
    x = rng.integers(0, 100, 16).astype(np.int32)
    x[rng.integers(0, 16)] = 500
    with pytest.raises(tf.KernelRuntimeError) as info:
        k_assert[(1,)](x, 200, BLOCK=16)
    assert "x must stay below n" in info.value.message
    _runtime_error_location(info.value, "E:device_assert", "tl.device_assert")


def test_device_assert_that_holds_does_not_raise(rng):
    x = rng.integers(0, 100, 16).astype(np.int32)
    before = x.copy()
    k_assert[(1,)](x, 200, BLOCK=16)
    np.testing.assert_array_equal(x, before + 1)


@tf.jit
def k_int_div(x_ptr, y_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    q = tl.load(x_ptr + offs) // tl.load(y_ptr + offs)  # E:div_zero
    tl.store(out_ptr + offs, q)


def test_integer_division_by_zero_raises(rng):
    x = rng.integers(1, 1000, 16).astype(np.int32)
    y = rng.integers(1, 9, 16).astype(np.int32)
    out = np.zeros(16, np.int32)
    k_int_div[(1,)](x, y, out, BLOCK=16)
    np.testing.assert_array_equal(out, x // y)
    y[rng.integers(0, 16)] = 0
    with pytest.raises(tf.KernelRuntimeError) as info:
        k_int_div[(1,)](x, y, out, BLOCK=16)
    assert "division by zero" in info.value.message
    assert info.value.line == _marker_line("E:div_zero")[0]


# --- launch errors ---


@tf.jit
def k_scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 3.0, mask=mask)


def test_wrong_argument_count():
    x = _f32(16)
    with pytest.raises(tf.LaunchError, match="k_scale"):
        k_scale[(1,)](x, x, BLOCK=16)
    with pytest.raises(tf.LaunchError, match="k_scale"):
        k_scale[(1,)](x, x, 16, 16, 16, BLOCK=16)
    with pytest.raises(tf.LaunchError, match="k_scale"):
        k_scale[(1,)](x, x, 16, BLOCK=16, nonsense=3)


def test_unsupported_numpy_dtype_is_named():
    x = np.random.default_rng().standard_normal(16).astype(np.complex64)
    with pytest.raises(tf.LaunchError) as info:
        k_scale[(1,)](x, x, 16, BLOCK=16)
    msg = str(info.value)
    assert "'x_ptr'" in msg and "complex64" in msg


def test_unsupported_python_argument():
    with pytest.raises(tf.LaunchError, match="'n'"):
        k_scale[(1,)](_f32(16), _f32(16), [16], BLOCK=16)


@pytest.mark.parametrize("grid", [(-1,), (1, 1, 1, 1), (), (2, -3)])
def test_bad_grid(grid):
    x = _f32(16)
    y = np.zeros(16, np.float32)
    with pytest.raises(tf.LaunchError, match="grid"):
        k_scale[grid](x, y, 16, BLOCK=16)
    assert not y.any()


def test_bogus_backend_env(monkeypatch):
    monkeypatch.setenv("TILEFUSE_BACKEND", "bogus")
    x = _f32(16)
    with pytest.raises(tf.LaunchError, match="bogus"):
        k_scale[(1,)](x, np.zeros(16, np.float32), 16, BLOCK=16)


def test_calling_kernel_directly_is_a_clear_error():
    with pytest.raises(RuntimeError, match=r"k_scale\[grid\]"):
        k_scale(_f32(16), _f32(16), 16, 16)


def test_builtins_outside_a_kernel_are_a_clear_error():
    x = _f32(16)
    with pytest.raises(RuntimeError, match="tl.load can only be called inside a @tilefuse.jit kernel"):
        tl.load(x)
    with pytest.raises(RuntimeError, match="inside a @tilefuse.jit kernel"):
        tl.arange(0, 16)
    with pytest.raises(RuntimeError, match="inside a @tilefuse.jit kernel"):
        tl.static_assert(True)
