"""Unsigned integers and Philox random numbers on the GPU: torch uint8/16/32/64 tensors
launch, and the kernels of tests/unsigned_kernels.py give the interpreter's results bit
for bit (and the exact references'), except the normals, which use libdevice's logf,
sqrtf, cosf and sinf (within 4 ulp of float32 of the interpreter's correctly rounded
math)."""

import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
import tilefuse.language as tl

from tests.unsigned_kernels import (
    BINARY_OPS,
    COMPARISONS,
    INTS,
    STREAM_NAMES,
    TL,
    UINTS,
    N,
    add_scalar,
    atomics,
    binary,
    binary_reference,
    compare,
    convert,
    edge_values,
    f32_ulps,
    masked_copy,
    philox4x32,
    philox4x64,
    philox_kat,
    philox_seeded,
    random_streams,
    reduce_all,
    triton_streams,
    unary,
)

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]

# torch's uint16/32/64 lack most CUDA ops, so data moves as same-width signed views.
_VIEW = {1: (np.int8, torch.int8), 2: (np.int16, torch.int16), 4: (np.int32, torch.int32), 8: (np.int64, torch.int64)}
_TORCH = {
    np.dtype(np.uint8): torch.uint8,
    np.dtype(np.uint16): torch.uint16,
    np.dtype(np.uint32): torch.uint32,
    np.dtype(np.uint64): torch.uint64,
}


HALF = {np.float16: tl.float16, ml_dtypes.bfloat16: tl.bfloat16}


def _torch_dtype(d: np.dtype):
    return torch.bfloat16 if d == np.dtype(ml_dtypes.bfloat16) else _TORCH[d]


def to_gpu(a: np.ndarray):
    """A CUDA tensor of a's dtype (torch.uint32 for uint32, ...) holding a's bits."""
    if a.dtype.kind in "uV":  # unsigned and bfloat16: moved as a signed view
        npv, _ = _VIEW[a.dtype.itemsize]
        return torch.from_numpy(a.view(npv).copy()).cuda().view(_torch_dtype(a.dtype))
    return torch.from_numpy(a.copy()).cuda()


def to_host(t, like: np.ndarray) -> np.ndarray:
    if like.dtype.kind in "uV":
        _, tv = _VIEW[like.dtype.itemsize]
        return t.view(tv).cpu().numpy().view(like.dtype)
    return t.cpu().numpy()


def both(kernel, arrays, *scalars, grid=(1,), **constexprs):
    """Runs kernel on the GPU (torch tensors) and on the interpreter (numpy copies);
    returns (gpu, interpreter) results of every array argument."""
    dev = [to_gpu(a) for a in arrays]
    host = [a.copy() for a in arrays]
    kernel[grid](*dev, *scalars, **constexprs)
    torch.cuda.synchronize()
    kernel[grid](*host, *scalars, **constexprs)
    return [(to_host(t, a), h) for t, a, h in zip(dev, arrays, host)]


@pytest.fixture
def rng():
    return np.random.default_rng()


def _operands(op, d, rng):
    x, y = edge_values(d, rng), edge_values(d, rng)
    bits = 8 * np.dtype(d).itemsize
    if op in ("shl", "shr"):
        y = (np.arange(N) % bits).astype(d)
    if op in ("floordiv", "mod"):
        y[y == 0] = 3
        if np.iinfo(d).min < 0:
            y[(y == -1) & (x == np.iinfo(d).min)] = 5
        else:
            y[:4] = [np.iinfo(d).max, (1 << (bits - 1)) + 7, 1, 2]
    return x, y


@pytest.mark.parametrize("op", BINARY_OPS)
@pytest.mark.parametrize("d", INTS)
def test_binary(op, d, rng):
    x, y = _operands(op, d, rng)
    (_, _), (_, _), (gpu, interp) = both(binary, [x, y, np.zeros(N, d)], OP=op, N=N)
    np.testing.assert_array_equal(gpu, interp)
    np.testing.assert_array_equal(gpu, binary_reference(op, x, y))


@pytest.mark.parametrize("op", COMPARISONS)
@pytest.mark.parametrize("d", UINTS)
def test_compare(op, d, rng):
    x, y = edge_values(d, rng), edge_values(d, rng)
    y[:8] = x[:8]
    *_, (gpu, interp) = both(compare, [x, y, np.zeros(N, np.bool_)], OP=op, N=N)
    np.testing.assert_array_equal(gpu, interp)


@pytest.mark.parametrize("op", ["neg", "invert", "abs"])
@pytest.mark.parametrize("d", UINTS)
def test_unary(op, d, rng):
    *_, (gpu, interp) = both(unary, [edge_values(d, rng), np.zeros(N, d)], OP=op, N=N)
    np.testing.assert_array_equal(gpu, interp)


@pytest.mark.parametrize("src", INTS + (np.float32, np.float64))
@pytest.mark.parametrize("dst", INTS + (np.float16, ml_dtypes.bfloat16, np.float32, np.float64))
def test_casts(src, dst, rng):
    # Floats include out-of-range values: both backends saturate (cvt.rzi.sat).
    if np.dtype(src).kind == "f":
        x = np.concatenate([[-1.0, np.nan, np.inf, -np.inf, 2.0**64, 2.0**63], rng.uniform(-3e9, 3e19, N - 6)])
        x = x.astype(src)
    else:
        x = edge_values(src, rng)
    *_, (gpu, interp) = both(convert, [x, np.zeros(N, dst)], TO=HALF.get(dst) or TL[np.dtype(dst)], N=N)
    np.testing.assert_array_equal(gpu.astype(np.float64), interp.astype(np.float64))


@pytest.mark.parametrize("src", INTS)
@pytest.mark.parametrize("dst", [np.float32, np.float64])
def test_int_to_float_toward_zero(src, dst, rng):
    # Rounding rtz goes through f64 rounded to odd (u64: its own conversion) on both backends.
    x = edge_values(src, rng)
    *_, (gpu, interp) = both(convert, [x, np.zeros(N, dst)], TO=TL[np.dtype(dst)], N=N, ROUND="rtz")
    np.testing.assert_array_equal(gpu, interp)


@pytest.mark.parametrize("d", UINTS)
def test_reductions_masks_atomics(d, rng):
    x = edge_values(d, rng)
    *_, (gpu, interp) = both(reduce_all, [x, np.zeros(5, np.uint64)], N=N)
    np.testing.assert_array_equal(gpu, interp)
    *_, (gpu, interp) = both(masked_copy, [x, np.zeros(N, d)], 77, OTHER=int(np.iinfo(d).max), N=N)
    np.testing.assert_array_equal(gpu, interp)
    if d in (np.uint32, np.uint64):
        _, (s, si), (m, mi) = both(atomics, [x, np.zeros(1, d), np.zeros(1, d)], N=N)
        assert s[0] == si[0] and m[0] == mi[0] == x.max()


@pytest.mark.parametrize(
    "s,d",
    [
        (np.uint32(4000000000), np.uint32),
        (np.uint64(2**64 - 3), np.uint64),
        (np.float64(0.1), np.float64),
        (2**63 + 5, np.uint64),
    ],
)
def test_scalars(s, d, rng):
    # numpy scalars keep their dtype; a Python int from 2^63 on is a u64.
    x = rng.standard_normal(N).astype(d) if d == np.float64 else edge_values(d, rng)
    _, (gpu, interp) = both(add_scalar, [x, np.zeros(N, d)], s, N=N)
    np.testing.assert_array_equal(gpu, interp)


def test_philox_known_answers_and_random(rng):
    c = rng.integers(0, 2**32, (256, 4), dtype=np.uint32)
    k = rng.integers(0, 2**32, (256, 2), dtype=np.uint32)
    c[0], k[0] = [0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0xA4093822, 0x299F31D0]
    *_, (gpu, interp) = both(philox_kat, [c, k, np.zeros((256, 4), np.uint32)], N=256)
    np.testing.assert_array_equal(gpu, interp)
    np.testing.assert_array_equal(gpu[0], [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1])
    np.testing.assert_array_equal(gpu, np.stack(philox4x32(list(c.T), list(k.T)), axis=1))


def test_philox4x64_and_seeded(rng):
    # The 64-bit words (mul.hi.u64) and tl.philox's seed split, 32- and 64-bit counters.
    c = rng.integers(0, 2**64, (64, 4), dtype=np.uint64)
    k = rng.integers(0, 2**64, (64, 2), dtype=np.uint64)
    *_, (gpu, interp) = both(philox_kat, [c, k, np.zeros((64, 4), np.uint64)], N=64)
    np.testing.assert_array_equal(gpu, interp)
    want = [philox4x64([int(v) for v in ci], [int(v) for v in ki]) for ci, ki in zip(c, k)]
    np.testing.assert_array_equal(gpu, np.array(want, np.uint64))
    for d in (np.uint32, np.uint64):
        cs = rng.integers(0, np.iinfo(d).max, (64, 4), dtype=d, endpoint=True)
        _, (gpu, interp) = both(philox_seeded, [cs, np.zeros((64, 4), d)], 2**63 + 12345, N=64)
        np.testing.assert_array_equal(gpu, interp)


@pytest.mark.parametrize("seed,base,wide", [(0, 0, False), (2**31 + 5, 12345, False), (2**63 + 11, 3 * 2**40, True)])
def test_random_streams(seed, base, wide):
    out = np.zeros((len(STREAM_NAMES), 1024), np.uint32)
    ((gpu, interp),) = both(random_streams, [out], seed, base, WIDE=wide, N=1024)
    offsets = base + np.arange(1024, dtype=np.int64 if wide else np.int32)
    want = triton_streams(seed, offsets)
    for j, name in enumerate(STREAM_NAMES):
        if name.startswith("n") or name == "randn":
            assert f32_ulps(gpu[j].view(np.float32), interp[j].view(np.float32)).max() <= 4, name
        else:
            np.testing.assert_array_equal(gpu[j], interp[j], err_msg=name)
            np.testing.assert_array_equal(gpu[j], want[name].view(np.uint32), err_msg=name)


def test_uint_tensors_by_dtype():
    # A torch.uint8 tensor reads 200 as 200 (not -56 as an int8 view would).
    x = np.array([200, 1, 255, 128] * (N // 4), np.uint8)
    _, (gpu, interp) = both(convert, [x, np.zeros(N, np.int32)], TO=tl.int32, N=N)
    np.testing.assert_array_equal(gpu, x.astype(np.int32))
    np.testing.assert_array_equal(interp, gpu)


@pytest.mark.skipif(os.environ.get("TILEFUSE_TARGET") == "sm_80", reason="this is the sm_80 run")
def test_on_sm80_code_paths():
    # The casts, integer ops and random streams again, compiled for sm_80 (no cvt.rn.bf16
    # from integers there) in a process with TILEFUSE_TARGET=sm_80.
    env = dict(os.environ, TILEFUSE_TARGET="sm_80")
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", __file__, "-k", "casts or binary or random_streams"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
