"""tl.dot's variants on the GPU (issue 16 part 8), sm_90a here and sm_80 in a subprocess
(TILEFUSE_TARGET=sm_80, the driver JIT-compiles it for the GPU at hand): f16 accumulators
(wgmma's f16 form on sm_90a, in K loops too; mma.sync's on sm_80; FMAs for small tiles,
bit-identical to the interpreter's rule there),
3-D dots, input_precision ieee / tf32 / tf32x3 (operand rounding identical to the
interpreter's; tf32 products on mma.sync m16n8k8 where the tile allows),
max_num_imprecise_acc, M, N or K below 16 (FMAs). Each result is checked against a
float64 reference with the dtype's bound (tests/dot_variants_kernels.py)."""

import importlib.util
import os
import subprocess
import sys
import zlib

import ml_dtypes
import numpy as np
import pytest

from tests.dot_variants_kernels import (
    DTYPES,
    dot2d,
    dot2d_imprecise,
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

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]

_TORCH = {
    np.dtype(np.float16): torch.float16,
    np.dtype(ml_dtypes.bfloat16): torch.bfloat16,
    np.dtype(np.float32): torch.float32,
    np.dtype(np.int8): torch.int8,
    np.dtype(np.int32): torch.int32,
    np.dtype(ml_dtypes.float8_e4m3fn): torch.float8_e4m3fn,
    np.dtype(ml_dtypes.float8_e5m2): torch.float8_e5m2,
}


def cuda(x: np.ndarray):
    """The same bytes on the GPU in torch's dtype (through a same-width integer view)."""
    view = {1: np.int8, 2: np.int16, 4: np.int32}[x.dtype.itemsize]
    t = torch.from_numpy(np.ascontiguousarray(x).view(view)).cuda()
    return t.view(_TORCH[x.dtype])


def host(t, dtype):
    view = {1: torch.int8, 2: torch.int16, 4: torch.int32}[np.dtype(dtype).itemsize]
    return t.view(view).cpu().numpy().view(dtype)


def seed(*key):
    return zlib.crc32(repr(key).encode())


# Tensor cores may truncate partial sums instead of rounding them (up to one ulp per step, not
# half): their results get twice the rounding bounds. Hopper's fp8 wgmma adds in a narrower
# accumulator (about 14 bits, what max_num_imprecise_acc exists to bound): 2^-13 |a||b| more.
TC = 2.0


def check_close(got, ref, bound):
    err = np.abs(f64(got) - ref)
    assert (err <= bound).all(), f"max error {err.max():.3g}, bound there {bound.flat[err.argmax()]:.3g}"


def run2d(a, b, acc=None, out16=False, prec="ieee", warps=4):
    m, k = a.shape
    n = b.shape[1]
    f16 = out16 and a.dtype in (np.float16, ml_dtypes.float8_e4m3fn)
    out_dt = np.float16 if f16 else np.int32 if a.dtype == np.int8 else np.float32
    out = cuda(np.full((m, n), 7, out_dt))
    c = cuda(acc) if acc is not None else out
    dot2d[(1,)](cuda(a), cuda(b), c, out, m, n, k, out16, prec, acc is not None, num_warps=warps)
    return host(out, out_dt)


ON_FMAS = lambda m, n, k: m < 16 or n < 16 or k < 16  # noqa: E731


@pytest.mark.parametrize(
    "mnk", [(16, 16, 16), (64, 64, 64), (128, 64, 128), (32, 128, 256), (4, 8, 32), (16, 8, 16), (2, 2, 64)]
)
@pytest.mark.parametrize("has_acc", [False, True])
@pytest.mark.parametrize("warps", [4, 8])
def test_f16_accumulator(mnk, has_acc, warps):
    rng = np.random.default_rng(seed((mnk, has_acc, warps)))
    m, n, k = mnk
    a, b = random_operand(rng, (m, k), np.float16), random_operand(rng, (k, n), np.float16)
    acc = random_operand(rng, (m, n), np.float16) if has_acc else None
    got = run2d(a, b, acc, out16=True, warps=warps)
    check_close(got, np.matmul(f64(a), f64(b)) + (f64(acc) if has_acc else 0), TC * f16_bound(a, b, acc))
    if ON_FMAS(m, n, k):  # the FMA path computes the interpreter's rule, bit for bit
        exact = f16_acc_reference(a, b, acc if has_acc else np.zeros((m, n), np.float16), 16)
        np.testing.assert_array_equal(got.view(np.uint16), exact.view(np.uint16))


@pytest.mark.parametrize("warps", [4, 8])
@pytest.mark.parametrize("mnk", [(128, 128, 256), (256, 128, 512)])
def test_f16_accumulator_k_loop(mnk, warps):
    """A K loop of out_dtype=float16 dots: on sm_90a pipelined wgmma with the f16
    accumulator in registers (wgmma's f16 form), on sm_80 mma.sync's f16 form."""
    rng = np.random.default_rng(seed(("loop", mnk, warps)))
    m, n, k = mnk
    a, b = random_operand(rng, (m, k), np.float16), random_operand(rng, (k, n), np.float16)
    out = cuda(np.zeros((m, n), np.float16))
    kernel = matmul_f16_acc[(m // 128, n // 128)](
        cuda(a), cuda(b), out, m, n, k, BM=128, BN=128, BK=64, num_warps=warps
    )
    check_close(host(out, np.float16), np.matmul(f64(a), f64(b)), TC * f16_bound(a, b))
    ptx = kernel.asm["ptx"]
    if os.environ.get("TILEFUSE_TARGET") == "sm_80":
        assert "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16" in ptx
    else:
        assert "wgmma.mma_async.sync.aligned.m64n" in ptx and ".f16.f16.f16" in ptx and "mma.sync" not in ptx


def test_fp8_f16_accumulator():
    rng = np.random.default_rng(3)
    a = random_operand(rng, (16, 64), ml_dtypes.float8_e4m3fn)
    b = random_operand(rng, (64, 32), ml_dtypes.float8_e4m3fn)
    got = run2d(a, b, out16=True)
    check_close(got, np.matmul(f64(a), f64(b)), f16_bound(a, b))
    exact = f16_acc_reference(a, b, np.zeros((16, 32), np.float16), 32)  # FMAs: the interpreter's bits
    np.testing.assert_array_equal(got.view(np.uint16), exact.view(np.uint16))


@pytest.mark.parametrize("batch", [1, 2, 4, 8])
@pytest.mark.parametrize("mnk", [(64, 64, 32), (16, 16, 16), (32, 16, 64), (4, 2, 8)])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "int8"])
@pytest.mark.parametrize("has_acc", [False, True])
def test_batched(batch, mnk, dtype, has_acc):
    rng = np.random.default_rng(seed((batch, mnk, dtype, has_acc)))
    m, n, k = mnk
    dt = DTYPES[dtype]
    a, b = random_operand(rng, (batch, m, k), dt), random_operand(rng, (batch, k, n), dt)
    out_dt = np.int32 if dt == np.int8 else np.float32
    acc = rng.integers(-1000, 1000, (batch, m, n)) if dt == np.int8 else rng.standard_normal((batch, m, n))
    acc = acc.astype(out_dt)
    out = cuda(np.full((batch, m, n), 7, out_dt))
    dot3d[(1,)](cuda(a), cuda(b), cuda(acc) if has_acc else out, out, batch, m, n, k, False, has_acc)
    got = host(out, out_dt)
    ref = np.matmul(f64(a), f64(b)) + (f64(acc) if has_acc else 0)
    if dt == np.int8:
        np.testing.assert_array_equal(got, ref.astype(np.int64))
    else:
        check_close(got, ref, TC * f32_bound(a, b, acc if has_acc else None, exact_products=dtype != "float32"))


def test_batched_f16_accumulator():
    rng = np.random.default_rng(5)
    a, b = random_operand(rng, (4, 64, 64), np.float16), random_operand(rng, (4, 64, 64), np.float16)
    acc = random_operand(rng, (4, 64, 64), np.float16)
    out = cuda(np.zeros((4, 64, 64), np.float16))
    dot3d[(1,)](cuda(a), cuda(b), cuda(acc), out, 4, 64, 64, 64, True, True)
    check_close(host(out, np.float16), np.matmul(f64(a), f64(b)) + f64(acc), TC * f16_bound(a, b, acc))


@pytest.mark.parametrize("mnk", [(16, 16, 16), (64, 64, 64), (128, 64, 128), (8, 4, 128)])
def test_input_precision(mnk):
    rng = np.random.default_rng(seed(mnk))
    m, n, k = mnk
    a, b = random_operand(rng, (m, k), np.float32), random_operand(rng, (k, n), np.float32)
    exact = np.matmul(f64(a), f64(b))
    ieee = run2d(a, b, prec="ieee")
    check_close(ieee, exact, f32_bound(a, b, exact_products=False))
    tf32 = run2d(a, b, prec="tf32")  # on tensor cores (mma.sync m16n8k8) where M, N, K allow
    check_close(tf32, np.matmul(f64(to_tf32(a)), f64(to_tf32(b))), TC * f32_bound(a, b))
    assert np.abs(f64(tf32) - exact).max() > 10 * np.abs(f64(ieee) - exact).max()
    x3 = run2d(a, b, prec="tf32x3")
    check_close(x3, exact, TC * (3 * k + 6) * 2.0**-24 * magnitude(a, b) + 2.0**-20 * magnitude(a, b))


def test_tf32_rounding_matches_the_interpreter():
    rng = np.random.default_rng(11)
    bits = rng.integers(0, 2**32, 256, dtype=np.uint64).astype(np.uint32)
    bits[:8] = [0x3F801000, 0x3F800FFF, 0x3F801001, 0xBF803000, 0x7F7FFFFF, 0x00001000, 0x7F800000, 0x7FC00000]
    a = bits.view(np.float32).reshape(256, 1)
    got = run2d(a, np.ones((1, 1), np.float32), prec="tf32")
    want = to_tf32(a)
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan], want[~nan])  # by value: a -0 operand times 1 plus 0 is +0


@pytest.mark.parametrize("imprecise", [None, 0, 32, 128])
def test_max_num_imprecise_acc(imprecise):
    rng = np.random.default_rng(17)
    a = random_operand(rng, (64, 128), ml_dtypes.float8_e4m3fn)
    b = random_operand(rng, (128, 64), ml_dtypes.float8_e5m2)
    out = cuda(np.zeros((64, 64), np.float32))
    dot2d_imprecise[(1,)](cuda(a), cuda(b), out, 64, 64, 128, imprecise)
    check_close(host(out, np.float32), np.matmul(f64(a), f64(b)), TC * f32_bound(a, b) + 2.0**-13 * magnitude(a, b))


@pytest.mark.parametrize("mnk", [(1, 1, 1), (2, 16, 16), (16, 4, 16), (16, 16, 4), (1, 8, 2), (8, 1, 32), (4, 4, 4)])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "int8", "float8e4nv"])
def test_small_dims(mnk, dtype):
    rng = np.random.default_rng(seed((mnk, dtype)))
    m, n, k = mnk
    dt = DTYPES[dtype]
    a, b = random_operand(rng, (m, k), dt), random_operand(rng, (k, n), dt)
    got = run2d(a, b)
    ref = np.matmul(f64(a), f64(b))
    if dt == np.int8:
        np.testing.assert_array_equal(got, ref.astype(np.int64))
    else:
        check_close(got, ref, f32_bound(a, b, exact_products=dtype != "float32"))


@pytest.mark.timeout(900)
@pytest.mark.skipif(os.environ.get("TILEFUSE_TARGET") == "sm_80", reason="this is the sm_80 run")
def test_sm80():
    # fp8 needs sm_89: the sm_80 run leaves those cases out (fp8 operands, max_num_imprecise_acc).
    env = dict(os.environ, TILEFUSE_TARGET="sm_80")
    k = "not fp8 and not float8 and not imprecise"
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", __file__, "-k", k]
    if importlib.util.find_spec("xdist"):  # its cold compiles, in parallel as the whole run's are
        cmd += ["-n", "4"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " passed" in r.stdout
