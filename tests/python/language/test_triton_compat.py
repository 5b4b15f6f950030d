"""Triton's names and words that its language tests rely on (found by
scripts/conformance/run_test_core.py): tl.dtype("fp16") and its name lists, tl.str_to_ty,
kernel[grid](..., num_ctas=1), launch_cooperative_grid, Triton's error wording for '/', '//', '%' of mixed
signedness and bitwise ops on floats, and '>>' of a signed left operand promoted to
unsigned (arithmetic, as Triton)."""

import zlib

import numpy as np
import pytest
import tilefuse as tf
import tilefuse.language as tl


@pytest.fixture
def rng(request):
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


def test_dtype_short_names():
    names = tl.dtype.SINT_TYPES + tl.dtype.UINT_TYPES + tl.dtype.STANDARD_FP_TYPES
    got = [tl.dtype(n) for n in names]
    want = [tl.int8, tl.int16, tl.int32, tl.int64, tl.int1, tl.uint8, tl.uint16, tl.uint32, tl.uint64]
    assert got == want + [tl.float16, tl.bfloat16, tl.float32, tl.float64]
    assert tl.dtype("fp8e4nv") == tl.float8e4nv and tl.dtype("fp8e5") == tl.float8e5
    with pytest.raises(ValueError, match="tl.dtype\\('fp8e4b15'\\): tilefuse has no such type"):
        tl.dtype("fp8e4b15")


def test_str_to_ty():
    assert tl.str_to_ty("u1") == tl.int1 and tl.str_to_ty("i64") == tl.int64 and tl.str_to_ty("u32") == tl.uint32
    assert tl.str_to_ty("bf16") == tl.bfloat16 and tl.str_to_ty("fp8e5") == tl.float8e5
    assert tl.str_to_ty("*fp16") == tl.pointer_type(tl.float16)
    with pytest.raises(ValueError, match="no such type"):
        tl.str_to_ty("fp8e4b15")


@tf.jit
def copy_kernel(x_ptr, o_ptr):
    tl.store(o_ptr + tl.arange(0, 8), tl.load(x_ptr + tl.arange(0, 8)))


def test_num_ctas(rng):
    x = rng.standard_normal(8).astype(np.float32)
    out = np.zeros_like(x)
    copy_kernel[(1,)](x, out, num_ctas=1)
    np.testing.assert_array_equal(out, x)
    with pytest.raises(tf.LaunchError, match="num_ctas=2: thread-block clusters are not supported"):
        copy_kernel[(1,)](x, out, num_ctas=2)


def test_launch_cooperative_grid_on_the_interpreter(rng):
    # One program is trivially resident; more would run one after another, so a cooperative
    # launch of them is refused (a grid-wide barrier would never complete), not run.
    x = rng.standard_normal(8).astype(np.float32)
    out = np.zeros_like(x)
    copy_kernel[(1,)](x, out, launch_cooperative_grid=True)
    np.testing.assert_array_equal(out, x)
    copy_kernel[(2,)](x, out, launch_cooperative_grid=False)
    with pytest.raises(tf.LaunchError, match="launch_cooperative_grid=True with 2 programs: the interpreter runs"):
        copy_kernel[(2,)](x, out, launch_cooperative_grid=True)


@tf.jit
def binop_kernel(x_ptr, y_ptr, o_ptr, OP: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, 16))
    y = tl.load(y_ptr + tl.arange(0, 16))
    if OP == "/":
        z = x / y
    elif OP == "//":
        z = x // y
    elif OP == "%":
        z = x % y
    elif OP == "&":
        z = x & y
    else:
        z = x >> y
    tl.store(o_ptr + tl.arange(0, 16), z)


@pytest.mark.parametrize("op", ["/", "//", "%"])
@pytest.mark.parametrize("types", [(np.int16, np.uint16), (np.uint8, np.int32), (np.int64, np.uint64)])
def test_mixed_signedness_division_is_refused(op, types):
    x, y = np.ones(16, types[0]), np.ones(16, types[1])
    words = "Cannot use /, //, or % with .* because they have different signedness"
    with pytest.raises(tf.CompilationError, match=words):
        binop_kernel[(1,)](x, y, np.zeros(16, np.float64), op)


def test_true_division_by_a_python_int_is_not_mixed_signedness():
    @tf.jit
    def k(x_ptr, o_ptr):
        tl.store(o_ptr + tl.arange(0, 16), tl.load(x_ptr + tl.arange(0, 16)) / 4)

    x, out = np.arange(16, dtype=np.uint16), np.zeros(16, np.float32)
    k[(1,)](x, out)
    np.testing.assert_array_equal(out, x / np.float32(4))


@pytest.mark.parametrize("types", [(np.float32, np.float32), (np.int32, np.float16), (np.float64, np.uint8)])
def test_bitwise_on_floats_wording(types):
    x, y = np.ones(16, types[0]), np.ones(16, types[1])
    with pytest.raises(tf.CompilationError, match="invalid operands of type"):
        binop_kernel[(1,)](x, y, np.zeros(16, np.float64), "&")


@pytest.mark.parametrize(
    "types", [(np.int8, np.uint8), (np.int16, np.uint32), (np.int32, np.uint64), (np.int64, np.uint64)]
)
def test_signed_shift_right_stays_arithmetic(rng, types):
    sx, uy = types
    bits = 8 * max(np.dtype(sx).itemsize, np.dtype(uy).itemsize)
    info = np.iinfo(sx)
    x = rng.integers(info.min, info.max, 16, dtype=np.int64).astype(sx)
    y = rng.integers(0, 8 * np.dtype(sx).itemsize, 16).astype(uy)
    out = np.zeros(16, f"uint{bits}")
    binop_kernel[(1,)](x, y, out, ">>")
    want = x.astype(f"int{bits}") >> y.astype(f"int{bits}")
    np.testing.assert_array_equal(out.view(f"int{bits}"), want)
