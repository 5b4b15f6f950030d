"""tl.cat, argmax/argmin tie_break_left, float64 atomics, atomic_cas on floats, tuples and
block pointers through helpers on the GPU (issue 16 part 9), against the exact references
of the interpreter tests — on sm_90a, and on the sm_80 code paths in a process with
TILEFUSE_TARGET=sm_80."""

import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from tests import atomic_kernels as ak
from tests.cat_ties_kernels import arg_kernel, arg_reference, cat_kernel, tie_heavy
from tests.python.language import test_float8e4b15 as e4b15
from tests.python.language.test_atomics_float import bits_cas_sequential, float_cas_inputs
from tests.python.language.test_standard import misc_kernel, softmax_kernel, swizzle_kernel, swizzle_reference
from tests.python.language.test_tuples import block_helper_kernel, tuple_kernel, tuple_reference

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]

_BITS = {1: (np.int8, torch.int8), 2: (np.int16, torch.int16), 4: (np.int32, torch.int32), 8: (np.int64, torch.int64)}
_TORCH = {"uint8": torch.uint8, "bfloat16": torch.bfloat16}


def cuda(a):
    a = np.ascontiguousarray(a)
    if a.dtype.name not in _TORCH:
        return torch.from_numpy(a).cuda()
    return torch.from_numpy(a.view(_BITS[a.dtype.itemsize][0])).cuda().view(_TORCH[a.dtype.name])


def host(t, dtype):
    return t.view(_BITS[t.element_size()][1]).cpu().numpy().view(dtype)


DTYPES = [np.int32, np.uint8, np.int64, np.float32, np.float16, ml_dtypes.bfloat16, np.float64]


@pytest.mark.parametrize("dtype", DTYPES, ids=[np.dtype(d).name for d in DTYPES])
@pytest.mark.parametrize("n", [1, 16, 1024])
def test_cat(dtype, n):
    rng = np.random.default_rng(n)
    x, y = (rng.integers(0, 100, n).astype(dtype) for _ in range(2))
    o = cuda(np.zeros(2 * n, dtype))
    cat_kernel[(1,)](cuda(x), cuda(y), o, N=n)
    np.testing.assert_array_equal(host(o, dtype), np.concatenate([x, y]))


@pytest.mark.parametrize("dtype", DTYPES, ids=[np.dtype(d).name for d in DTYPES])
@pytest.mark.parametrize("axis", [0, 1, None])
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("is_min", [False, True])
@pytest.mark.parametrize("rc", [(8, 16), (64, 128)])
def test_arg_tie_break(dtype, axis, left, is_min, rc):
    rng = np.random.default_rng(rc[0] + (axis or 2) * 3 + left * 5 + is_min * 7)
    r, c = rc
    x = tie_heavy(rng, dtype, (r, c))
    o = torch.full((2 * r * c,), -1, dtype=torch.int32, device="cuda")
    arg_kernel[(1,)](cuda(x), o, R=r, C=c, AXIS=axis, LEFT=left, MIN=is_min)
    want = np.atleast_1d(arg_reference(x.astype(np.float64), axis, left, is_min))
    got = o.cpu().numpy()
    np.testing.assert_array_equal(got[: want.size], want)
    np.testing.assert_array_equal(got[r * c : r * c + want.size], want)


@pytest.mark.parametrize("op", ["add", "max", "min", "xchg"])
@pytest.mark.parametrize("programs", [7, 300])
def test_float64_rmw(op, programs):
    rng = np.random.default_rng(programs + len(op))
    n = 13
    dst0, v, old0 = ak.rmw_inputs(rng, op, np.float64, programs)
    dst, old = cuda(dst0), cuda(old0)
    ak.rmw[(programs,)](dst, cuda(v), old, n, OP=op, BLOCK=ak.BLOCK)
    dst, old = dst.cpu().numpy(), old.cpu().numpy()
    np.testing.assert_array_equal(old[:, n:], old0[:, n:])
    if op == "xchg":
        ak.check_xchg_multiset(dst0, v, old, dst, n)
    elif op == "add":  # in some order: within the float64 bound of programs additions
        ref = dst0[:n] + v[:, :n].astype(np.float64).sum(0)
        bound = programs * 2.0**-53 * (np.abs(dst0[:n]) + np.abs(v[:, :n]).sum(0))
        assert (np.abs(dst[:n] - ref) <= bound).all()
    else:
        np.testing.assert_array_equal(dst, ak.rmw_final(op, dst0, v, n))


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64])
def test_float_cas_one_program(dtype):
    # One program: no race, so the sequential reference is exact.
    rng = np.random.default_rng(np.dtype(dtype).itemsize)
    dst0, cmp, v = float_cas_inputs(rng, dtype, 1)
    dst, old = cuda(dst0), cuda(np.zeros_like(v))
    ak.cas[(1,)](dst, cuda(cmp), cuda(v), old, BLOCK=ak.BLOCK)
    final, olds = bits_cas_sequential(dst0, cmp, v)
    np.testing.assert_array_equal(host(dst, np.uint8), final.view(np.uint8))
    np.testing.assert_array_equal(host(old, np.uint8), olds.view(np.uint8))


@pytest.mark.parametrize("n_iter", [0, 1, 5])
@pytest.mark.parametrize("k", [1, 2])
def test_tuples(n_iter, k):
    x = np.random.default_rng(n_iter + k).integers(-1000, 1000, 16).astype(np.int32)
    y = torch.zeros(32, dtype=torch.int32, device="cuda")
    tuple_kernel[(1,)](cuda(x), y, n_iter, K=k)
    np.testing.assert_array_equal(y.cpu().numpy(), tuple_reference(x, n_iter, k))


def test_block_pointers_through_helpers():
    x = np.random.default_rng(5).integers(-99, 99, 40).astype(np.int32)
    for n in (40, 20):
        y = torch.zeros(16, dtype=torch.int32, device="cuda")
        block_helper_kernel[(1,)](cuda(x), y, n, BN=16)
        np.testing.assert_array_equal(y.cpu().numpy(), np.where(np.arange(16, 32) < n, x[16:32], 0) + 16)


def test_float8e4b15_bits():
    # Every byte decodes, every f16 and a sweep of f32 (both modes) encode, loads and stores
    # of the format: the same bits as the reference (and the interpreter).
    b = e4b15.ALL_BYTES
    h, f = torch.zeros(256, dtype=torch.float16, device="cuda"), torch.zeros(256, device="cuda")
    e4b15.decode_kernel[(1,)](cuda(b), h, f, N=256)
    want = e4b15.decode_reference(b)
    np.testing.assert_array_equal(host(h, np.uint16), want.view(np.uint16))
    np.testing.assert_array_equal(f.cpu().numpy(), want.astype(np.float32))
    h16 = np.arange(2**16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    out = torch.zeros(2**16, dtype=torch.uint8, device="cuda")
    e4b15.encode_kernel[(1,)](cuda(h16), out, N=2**16, MODE="rtne")
    np.testing.assert_array_equal(host(out, np.uint8), e4b15.encode_f16_reference(h16))
    # A NaN's sign: the GPU's f32 -> f16 cvt makes every NaN the canonical +NaN (so -NaN
    # encodes as +1.75, as Triton's does); the interpreter keeps the sign (-1.75). e4b15 has
    # no NaN, so only the sign of the clamped value differs: compared apart.
    x = e4b15.f32_cases(np.random.default_rng(7))
    x = np.where(np.isnan(x), np.float32(np.nan), x)  # +NaN only
    neg_nan = torch.zeros(1, dtype=torch.uint8, device="cuda")
    e4b15.encode_kernel[(1,)](cuda(np.full(1, -np.nan, np.float32)), neg_nan, N=1, MODE="rtne")
    assert host(neg_nan, np.uint8)[0] == 0x7E
    for mode in ("rtne", "rtz"):
        out = torch.zeros(x.size, dtype=torch.uint8, device="cuda")
        e4b15.encode_kernel[(1,)](cuda(x), out, N=x.size, MODE=mode)
        with np.errstate(over="ignore"):
            ref = x.astype(np.float16) if mode == "rtne" else e4b15.f32_to_f16_rtz(x)
        np.testing.assert_array_equal(host(out, np.uint8), e4b15.encode_f16_reference(ref))
    xb = np.random.default_rng(2).integers(0, 256, 128).astype(np.uint8)
    yb = torch.zeros(128, dtype=torch.uint8, device="cuda")
    e4b15.copy_through_e4b15_pointers[(1,)](cuda(xb), yb, N=128)
    half = (e4b15.decode_reference(xb).astype(np.float32) * np.float32(0.5)).astype(np.float16)
    np.testing.assert_array_equal(host(yb, np.uint8), e4b15.encode_f16_reference(half))


def test_swizzle_softmax_descriptor_functions():
    si, sj, g = 7, 5, 3
    out = torch.zeros(si * sj * 2, dtype=torch.int32, device="cuda")
    swizzle_kernel[(si, sj)](out, si, sj, size_g=g)
    want = [v for i in range(si) for j in range(sj) for v in swizzle_reference(i, j, si, sj, g)]
    np.testing.assert_array_equal(out.cpu().numpy(), want)
    x = (np.random.default_rng(3).standard_normal((8, 32)) * 4).astype(np.float32)
    for dim in (0, 1):
        y = torch.zeros((8, 32), device="cuda")
        softmax_kernel[(1,)](cuda(x), y, R=8, C=32, DIM=dim)
        z = np.exp(x.astype(np.float64) - x.max(axis=dim, keepdims=True))
        ref = z / z.sum(axis=dim, keepdims=True)
        # libdevice's expf (within 2 ulp), a sum of up to 32 terms, one rounded division.
        assert np.abs(y.cpu().numpy() - ref).max() <= (4 + 32) * 2.0**-24 * ref.max()
    xi = np.random.default_rng(0).integers(-1000, 1000, 64).astype(np.int32)
    yi = torch.zeros(64, dtype=torch.int32, device="cuda")
    misc_kernel[(1,)](cuda(xi), yi, N=64)
    np.testing.assert_array_equal(yi.cpu().numpy(), np.concatenate([xi[:32] + xi[32:], xi[:32] + 1]))


@pytest.mark.skipif(os.environ.get("TILEFUSE_TARGET") == "sm_80", reason="this is the sm_80 run")
def test_on_sm80_code_paths():
    env = dict(os.environ, TILEFUSE_TARGET="sm_80")
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", __file__, "-k", "not sm80"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
