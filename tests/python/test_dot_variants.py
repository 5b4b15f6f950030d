"""tl.dot's variants on the interpreter (issue 16 part 8), against float64 references with
bounds from the dtypes' unit roundoffs, and against exact emulations where the rule is exact:
f16 accumulators (rounded to f16 every 32 bytes of K), tf32 rounding (ties away from zero),
3-D dots (one 2-D dot per batch index), M, N or K below 16. Also: PTX for sm_80 and
sm_90a assembles and takes the instruction of its variant (f16 accumulators: wgmma's f16
form on sm_90a, in a pipelined K loop too, mma.sync's on sm_80; tf32: mma.sync m16n8k8;
ieee f32 and small dots: FMAs)."""

import os
import zlib

import ml_dtypes
import numpy as np
import pytest
import tilefuse as tf
import tilefuse.language as tl

from tests.dot_variants_kernels import (
    DTYPES,
    dot2d,
    dot2d_imprecise,
    dot2d_tf32_alias,
    dot3d,
    f16_acc_reference,
    f16_bound,
    f32_bound,
    f64,
    magnitude,
    matmul_f16_acc,
    random_operand,
    to_tf32,
)
from tests.ptxas import PTXAS, assert_assembles


@pytest.fixture
def rng(request):
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


def run2d(a, b, acc=None, out16=False, prec="ieee"):
    m, k = a.shape
    n = b.shape[1]
    f16 = out16 and a.dtype in (np.float16, ml_dtypes.float8_e4m3fn)
    out = np.zeros((m, n), np.float16 if f16 else np.int32 if a.dtype == np.int8 else np.float32)
    c = acc if acc is not None else out
    dot2d[(1,)](a, b, c, out, m, n, k, out16, prec, acc is not None)
    return out


def check_close(got, ref, bound):
    err = np.abs(f64(got) - ref)
    assert (err <= bound).all(), f"max error {err.max():.3g}, bound there {bound.flat[err.argmax()]:.3g}"


@pytest.mark.parametrize("mnk", [(16, 16, 16), (32, 16, 64), (16, 32, 128), (4, 8, 32), (16, 16, 8), (2, 1, 4)])
@pytest.mark.parametrize("has_acc", [False, True])
@pytest.mark.parametrize("dtype", ["float16", "float8e4nv"])
def test_f16_accumulator(rng, mnk, has_acc, dtype):
    m, n, k = mnk
    dt = DTYPES[dtype]
    if dt != np.float16 and k < 32:
        k = 32  # fp8 steps are 32 K elements
    a, b = random_operand(rng, (m, k), dt), random_operand(rng, (k, n), dt)
    acc = random_operand(rng, (m, n), np.float16) if has_acc else None
    got = run2d(a, b, acc, out16=True)
    assert got.dtype == np.float16
    step = 16 if dt == np.float16 else 32
    zero = np.zeros((m, n), np.float16)
    exact = f16_acc_reference(a, b, acc if has_acc else zero, step)
    np.testing.assert_array_equal(got.view(np.uint16), exact.view(np.uint16))
    check_close(got, np.matmul(f64(a), f64(b)) + (f64(acc) if has_acc else 0), f16_bound(a, b, acc))


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_out_dtype_f16_keeps_f32_for_bf16_and_f32(rng, dtype):
    # As Triton: out_dtype=float16 only changes the accumulator of f16 and fp8 products.
    a, b = random_operand(rng, (16, 32), DTYPES[dtype]), random_operand(rng, (32, 16), DTYPES[dtype])
    got = run2d(a, b, out16=True)
    check_close(got, np.matmul(f64(a), f64(b)), f32_bound(a, b, exact_products=dtype != "float32"))


def test_out_dtype_bf16_is_refused():
    a = np.zeros((16, 16), ml_dtypes.bfloat16)

    @tf.jit
    def k(a_ptr, o_ptr):
        r = tl.arange(0, 16)
        x = tl.load(a_ptr + r[:, None] * 16 + r[None, :])
        tl.store(o_ptr + r[:, None] * 16 + r[None, :], tl.dot(x, x, out_dtype=tl.bfloat16))

    with pytest.raises(tf.CompilationError, match=r"out_dtype=bfloat16 is unsupported") as e:
        k[(1,)](a, np.zeros((16, 16), np.float32))
    assert e.value.file == __file__ and "tl.dot(x, x, out_dtype=tl.bfloat16)" in str(e.value)


@pytest.mark.parametrize("batch", [1, 2, 4, 8])
@pytest.mark.parametrize("mnk", [(16, 16, 16), (32, 16, 32), (4, 2, 8), (16, 64, 16)])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "int8"])
@pytest.mark.parametrize("has_acc", [False, True])
def test_batched(rng, batch, mnk, dtype, has_acc):
    m, n, k = mnk
    dt = DTYPES[dtype]
    a, b = random_operand(rng, (batch, m, k), dt), random_operand(rng, (batch, k, n), dt)
    out_dt = np.int32 if dt == np.int8 else np.float32
    acc = rng.integers(-1000, 1000, (batch, m, n)) if dt == np.int8 else rng.standard_normal((batch, m, n))
    acc = acc.astype(out_dt) if has_acc else None
    got = np.zeros((batch, m, n), out_dt)
    dot3d[(1,)](a, b, acc if has_acc else got, got, batch, m, n, k, False, has_acc)
    ref = np.matmul(f64(a), f64(b)) + (f64(acc) if has_acc else 0)
    if dt == np.int8:
        np.testing.assert_array_equal(got, ref.astype(np.int64))
    else:
        check_close(got, ref, f32_bound(a, b, acc, exact_products=dtype != "float32"))
    # The lowering is one 2-D dot per batch index: the same bits as those dots.
    for i in range(batch):
        np.testing.assert_array_equal(got[i], run2d(a[i], b[i], acc[i] if has_acc else None))


@pytest.mark.parametrize("batch", [2, 4])
def test_batched_f16_accumulator(rng, batch):
    a = random_operand(rng, (batch, 16, 64), np.float16)
    b = random_operand(rng, (batch, 64, 32), np.float16)
    acc = random_operand(rng, (batch, 16, 32), np.float16)
    got = np.zeros((batch, 16, 32), np.float16)
    dot3d[(1,)](a, b, acc, got, batch, 16, 32, 64, True, True)
    np.testing.assert_array_equal(got.view(np.uint16), f16_acc_reference(a, b, acc, 16).view(np.uint16))


def test_batched_errors():
    @tf.jit
    def k(a_ptr, B2: tl.constexpr):
        r = tl.arange(0, 16)
        x = tl.load(a_ptr + r[:, None] * 16 + r[None, :])
        a = tl.reshape(x, (2, 8, 16))
        b = tl.reshape(x, (B2, 16, 16 // B2))
        tl.store(a_ptr + tl.arange(0, 2), tl.sum(tl.sum(tl.dot(a, b), 2), 1))

    x = np.zeros((16, 16), np.float16)
    with pytest.raises(tf.CompilationError, match="dot batch dimensions differ"):
        k[(1,)](x, 1)


def tf32_cases(rng):
    """Random values, ties (low 13 bits 0x1000), just below and above, carries into the
    exponent, subnormals, the largest finite values (which round to infinity), inf, nan."""
    bits = rng.integers(0, 2**32, 200, dtype=np.uint64).astype(np.uint32)
    low = np.array([0x1000, 0x0FFF, 0x1001, 0x1FFF, 0x0000, 0x3000], np.uint32)
    mant = (rng.integers(0, 2**10, low.size * 8, dtype=np.uint32) << np.uint32(13)) | np.tile(low, 8)
    exps = rng.integers(1, 254, mant.size, dtype=np.uint32) << np.uint32(23)
    edge = np.array([0x7F7FFFFF, 0x7F7FF000, 0x007FFFFF, 0x00001000, 0x3FFFF000, 0x7F800000, 0x7FC00000], np.uint32)
    v = np.concatenate([bits, mant | exps, edge, edge | np.uint32(0x80000000)])
    v = v[:256] if v.size >= 256 else np.concatenate([v, bits[: 256 - v.size]])
    return v.view(np.float32)


def test_tf32_rounding_is_exact(rng):
    # A K = 1, N = 1 dot by 1.0 returns each operand as the tf32 dot rounded it.
    a = tf32_cases(rng).reshape(256, 1)
    one = np.ones((1, 1), np.float32)
    got = run2d(a, one, prec="tf32")
    want = to_tf32(a)
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan], want[~nan])  # by value: a -0 operand times 1 plus 0 is +0


@pytest.mark.parametrize("mnk", [(16, 16, 16), (32, 64, 64), (8, 4, 128)])
def test_input_precision(rng, mnk):
    m, n, k = mnk
    a, b = random_operand(rng, (m, k), np.float32), random_operand(rng, (k, n), np.float32)
    exact = np.matmul(f64(a), f64(b))
    bound = f32_bound(a, b, exact_products=False)
    ieee = run2d(a, b, prec="ieee")
    check_close(ieee, exact, bound)
    tf32 = run2d(a, b, prec="tf32")
    # tf32: products of the rounded operands, exact in float32, summed in float32.
    check_close(tf32, np.matmul(f64(to_tf32(a)), f64(to_tf32(b))), f32_bound(a, b))
    ieee_err = np.abs(f64(ieee) - exact).max()
    assert np.abs(f64(tf32) - exact).max() > 10 * ieee_err  # the rounding happened
    x3 = run2d(a, b, prec="tf32x3")
    # tf32x3 drops small*small and the tf32 rounding of the small parts: 2^-21 |a||b|.
    check_close(x3, exact, (3 * k + 6) * 2.0**-24 * magnitude(a, b) + 2.0**-20 * magnitude(a, b))
    assert np.abs(f64(x3) - exact).max() < np.abs(f64(tf32) - exact).max() / 100


def test_allow_tf32_alias(rng):
    a, b = random_operand(rng, (16, 32), np.float32), random_operand(rng, (32, 16), np.float32)
    for allow, prec in ((True, "tf32"), (False, "ieee")):
        got = np.zeros((16, 16), np.float32)
        dot2d_tf32_alias[(1,)](a, b, got, 16, 16, 32, allow)
        np.testing.assert_array_equal(got.view(np.uint32), run2d(a, b, prec=prec).view(np.uint32))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ("input_precision='tf32', allow_tf32=True", "Only one of input_precision and allow_tf32 can be specified"),
        ("input_precision='bf16x3'", "input_precision must be one of"),
        ("max_num_imprecise_acc=-1", "max_num_imprecise_acc must be a non-negative int or None"),
    ],
)
def test_argument_errors(tmp_path, kwargs, message):
    src = tmp_path / "bad_dot.py"
    src.write_text(
        "import tilefuse as tf\nimport tilefuse.language as tl\n\n\n@tf.jit\ndef k(a_ptr):\n"
        "    r = tl.arange(0, 16)\n    x = tl.load(a_ptr + r[:, None] * 16 + r[None, :])\n"
        f"    tl.store(a_ptr + r[:, None] * 16 + r[None, :], tl.dot(x, x, {kwargs}))\n"
    )
    ns = {}
    exec(compile(src.read_text(), str(src), "exec"), ns)
    with pytest.raises(tf.CompilationError, match=message) as e:
        ns["k"][(1,)](np.zeros((16, 16), np.float32))
    assert e.value.line == 9


@pytest.mark.parametrize("imprecise", [None, 0, 32, 64])
def test_max_num_imprecise_acc(rng, imprecise):
    # Accepted; fp8 products accumulate in float32 whatever the interval.
    a = random_operand(rng, (16, 64), ml_dtypes.float8_e4m3fn)
    b = random_operand(rng, (64, 32), ml_dtypes.float8_e5m2)
    got = np.zeros((16, 32), np.float32)
    dot2d_imprecise[(1,)](a, b, got, 16, 32, 64, imprecise)
    check_close(got, np.matmul(f64(a), f64(b)), f32_bound(a, b))
    ref = np.zeros_like(got)
    dot2d_imprecise[(1,)](a, b, ref, 16, 32, 64, None)
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("mnk", [(1, 1, 1), (2, 16, 16), (16, 4, 16), (16, 16, 4), (1, 8, 2), (8, 1, 32), (4, 4, 4)])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "int8", "float8e4nv"])
def test_small_dims(rng, mnk, dtype):
    m, n, k = mnk
    dt = DTYPES[dtype]
    a, b = random_operand(rng, (m, k), dt), random_operand(rng, (k, n), dt)
    got = run2d(a, b)
    ref = np.matmul(f64(a), f64(b))
    if dt == np.int8:
        np.testing.assert_array_equal(got, ref.astype(np.int64))
    else:
        check_close(got, ref, f32_bound(a, b, exact_products=dtype != "float32"))


# --- the GPU lowering, compiled here: PTX ptxas accepts, the instruction each variant takes ---

Z = np.zeros


def warm(arch, kernel, *args, **kw):
    k = kernel.warmup(*args, grid=(1,), target=arch, **kw)
    return k.asm["ptx"]


PTX_CASES = {
    "f16_acc_64": lambda arch: warm(
        arch, dot2d, Z((64, 64), np.float16), Z((64, 64), np.float16), Z((64, 64), np.float16),
        Z((64, 64), np.float16), 64, 64, 64, True, "ieee", True,
    ),
    "f16_acc_loop": lambda arch: warm(
        arch, matmul_f16_acc, Z((256, 256), np.float16), Z((256, 256), np.float16), Z((256, 256), np.float16),
        256, 256, 256, BM=128, BN=128, BK=64, num_warps=8,
    ),
    "f16_acc_small": lambda arch: warm(
        arch, dot2d, Z((4, 16), np.float16), Z((16, 8), np.float16), Z((4, 8), np.float16),
        Z((4, 8), np.float16), 4, 8, 16, True, "ieee", True,
    ),
    "fp8_f16_acc": lambda arch: warm(
        arch, dot2d, Z((16, 32), ml_dtypes.float8_e4m3fn), Z((32, 16), ml_dtypes.float8_e4m3fn),
        Z((16, 16), np.float16), Z((16, 16), np.float16), 16, 16, 32, True, "ieee", False,
    ),
    "tf32_64": lambda arch: warm(
        arch, dot2d, Z((64, 64), np.float32), Z((64, 64), np.float32), Z((64, 64), np.float32),
        Z((64, 64), np.float32), 64, 64, 64, False, "tf32", False,
    ),
    "ieee_64": lambda arch: warm(
        arch, dot2d, Z((64, 64), np.float32), Z((64, 64), np.float32), Z((64, 64), np.float32),
        Z((64, 64), np.float32), 64, 64, 64, False, "ieee", False,
    ),
    "tf32x3": lambda arch: warm(
        arch, dot2d, Z((16, 16), np.float32), Z((16, 16), np.float32), Z((16, 16), np.float32),
        Z((16, 16), np.float32), 16, 16, 16, False, "tf32x3", False,
    ),
    "batched": lambda arch: warm(
        arch, dot3d, Z((4, 64, 32), np.float16), Z((4, 32, 64), np.float16), Z((4, 64, 64), np.float32),
        Z((4, 64, 64), np.float32), 4, 64, 64, 32, False, True,
    ),
    "small_int8": lambda arch: warm(
        arch, dot2d, Z((2, 8), np.int8), Z((8, 4), np.int8), Z((2, 4), np.int32), Z((2, 4), np.int32),
        2, 4, 8, False, "ieee", False,
    ),
}  # fmt: skip


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("case", sorted(PTX_CASES))
def test_ptx(tmp_path, arch, case):
    if case == "fp8_f16_acc" and arch == "sm_80":
        with pytest.raises(tf.CompilationError, match="does not lower fp8 casts before sm_89"):
            PTX_CASES[case](arch)
        return
    ptx = PTX_CASES[case](arch)
    if case == "f16_acc_64":  # wgmma's f16-accumulator form on sm_90a, mma.sync's on sm_80
        want = "wgmma.mma_async.sync.aligned.m64n64k16.f16.f16.f16" if arch == "sm_90a" else "m16n8k16.row.col.f16"
        assert want in ptx and (arch == "sm_80" or "mma.sync" not in ptx)
    if case == "f16_acc_loop":
        want = "wgmma.mma_async.sync.aligned.m64n128k16.f16.f16.f16" if arch == "sm_90a" else "m16n8k16.row.col.f16"
        assert want in ptx and (arch == "sm_80" or ("mma.sync" not in ptx and "cp.async" in ptx))  # pipelined
    if case == "batched":
        want = "wgmma.mma_async" if arch == "sm_90a" else "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
        assert ptx.count(want) >= 4
    if case in ("tf32_64", "tf32x3"):  # operands rounded to tf32: mma.sync's tf32 form (x3: three dots)
        assert ptx.count("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32") >= (3 if case == "tf32x3" else 1)
    if case in ("f16_acc_small", "small_int8", "ieee_64"):
        assert "mma" not in ptx  # FMAs (an ieee f32 dot keeps f32 products)
    if os.path.exists(PTXAS):
        assert_assembles(ptx, arch, tmp_path)


def test_perf_hints_name_the_fallbacks():
    from tilefuse import gpu

    def hints(kernel, *args, **consts):
        return [h[3] for h in gpu.lower(kernel.compile(*args, **consts), "sm_90a", 4, 3, keep_ir=False)["hints"]]

    small = hints(dot2d, Z((4, 16), np.float16), Z((16, 8), np.float16), Z((4, 8), np.float16),
                  Z((4, 8), np.float16), 4, 8, 16, False, "ieee", False)  # fmt: skip
    assert any("N=8 is below 16" in h and "runs on FMAs" in h for h in small), small
    f16 = hints(dot2d, Z((64, 64), np.float16), Z((64, 64), np.float16), Z((64, 64), np.float16),
                Z((64, 64), np.float16), 64, 64, 64, True, "ieee", False)  # fmt: skip
    assert not any("dot not on wgmma" in h for h in f16), f16  # f16 accumulators are on wgmma
