"""Pointers on the GPU (issue 16 part 7), against exact references: Triton's grouped GEMM
tutorial (int64 addresses converted to pointers), pointer round trips and casts, the
pointer_type of every dtype, and block pointers (loads with boundary_check and padding,
stores, advance, a block-pointer matmul) — on sm_90a, and again on the sm_80 code paths in
a process with TILEFUSE_TARGET=sm_80."""

import os
import subprocess
import sys

import numpy as np
import pytest

from tests.pointer_kernels import (
    block_if_advance,
    block_load,
    block_load_3d,
    block_matmul,
    block_store,
    grouped_matmul_kernel,
    load_through_address,
    pointer_casts,
    pointer_round_trip,
)
from tests.python.test_block_ptr import CHECKS, block_reference, offsets_for
from tests.python.test_pointers import DTYPES, fp16_matmul_bound, random_bits

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]


_SIGNED = {1: (np.int8, torch.int8), 2: (np.int16, torch.int16), 4: (np.int32, torch.int32), 8: (np.int64, torch.int64)}
_TORCH = {
    "uint8": torch.uint8,
    "uint16": torch.uint16,
    "uint32": torch.uint32,
    "uint64": torch.uint64,
    "bfloat16": torch.bfloat16,
    "float8_e4m3fn": torch.float8_e4m3fn,
    "float8_e5m2": torch.float8_e5m2,
    "bool": torch.bool,
}


def cuda(a):
    """a on the GPU with its own dtype (moved as same-width signed ints: torch lacks numpy's
    views for bf16, fp8 and wide unsigned ints)."""
    a = np.ascontiguousarray(a)
    if a.dtype.name not in _TORCH:
        return torch.from_numpy(a).cuda()
    np_int, t_int = _SIGNED[a.dtype.itemsize]
    return torch.from_numpy(a.view(np_int)).cuda().view(_TORCH[a.dtype.name])


def host_bytes(t):
    """The bytes of GPU tensor t."""
    return t.view(_SIGNED[t.element_size()][1]).cpu().numpy().view(np.uint8)


@pytest.mark.parametrize("shapes", [[(128, 128, 64), (256, 128, 128), (128, 256, 64)], [(64, 64, 32)] * 5])
@pytest.mark.parametrize("block", [(64, 64, 32), (128, 128, 32)])
def test_grouped_gemm_tutorial(shapes, block):
    rng = np.random.default_rng(len(shapes) + block[0])
    shapes = [(max(m, block[0]), max(n, block[1]), max(k, block[2])) for m, n, k in shapes]
    a = [rng.standard_normal((m, k)).astype(np.float16) for m, n, k in shapes]
    b = [rng.standard_normal((k, n)).astype(np.float16) for m, n, k in shapes]
    da, db = [cuda(x) for x in a], [cuda(x) for x in b]
    dc = [torch.zeros((x.shape[0], y.shape[1]), dtype=torch.float16, device="cuda") for x, y in zip(a, b)]
    ptrs = lambda ts: torch.tensor([t.data_ptr() for t in ts], dtype=torch.int64, device="cuda")  # noqa: E731
    sizes = torch.tensor([[m, n, k] for m, n, k in shapes], dtype=torch.int32, device="cuda").ravel()
    lds = torch.tensor([[k, n, n] for m, n, k in shapes], dtype=torch.int32, device="cuda").ravel()
    grouped_matmul_kernel[(132,)](
        ptrs(da), ptrs(db), ptrs(dc), sizes, lds, len(shapes), NUM_SM=132,
        BLOCK_SIZE_M=block[0], BLOCK_SIZE_N=block[1], BLOCK_SIZE_K=block[2],
    )  # fmt: skip
    torch.cuda.synchronize()
    for x, y, c in zip(a, b, dc):
        ref = x.astype(np.float64) @ y.astype(np.float64)
        err = np.abs(c.cpu().numpy().astype(np.float64) - ref)
        assert (err <= fp16_matmul_bound(x, y, ref)).all(), err.max()


def test_pointer_round_trip_and_casts():
    x = torch.randn(64, device="cuda")
    addr, y = torch.zeros(64, dtype=torch.int64, device="cuda"), torch.zeros(64, device="cuda")
    pointer_round_trip[(1,)](x, addr, y, N=64)
    np.testing.assert_array_equal(addr.cpu().numpy(), x.data_ptr() + 4 * np.arange(64))
    np.testing.assert_array_equal(y.cpu().numpy(), (x * 2).cpu().numpy())
    out, flags = torch.zeros(4, dtype=torch.int64, device="cuda"), torch.zeros(1, dtype=torch.int32, device="cuda")
    pointer_casts[(1,)](x, out, flags, torch.tensor([-1], dtype=torch.int32, device="cuda"))
    base = x.data_ptr()
    assert out.cpu().tolist() == [base, base, base + 12, 2**32 - 1] and flags.item() == 1


@pytest.mark.parametrize("np_dtype, dtype", DTYPES, ids=[d.name for _, d in DTYPES])
def test_pointer_type_of_every_dtype(np_dtype, dtype):
    if os.environ.get("TILEFUSE_TARGET") == "sm_80" and "float8" in dtype.name:
        pytest.skip("fp8 needs sm_89")
    x = random_bits(np.random.default_rng(1), np_dtype, 32)
    dx = cuda(x)
    y = torch.zeros_like(dx)
    load_through_address[(1,)](torch.tensor([dx.data_ptr()], dtype=torch.int64, device="cuda"), y, D=dtype, N=32)
    np.testing.assert_array_equal(host_bytes(y), x.view(np.uint8))


@pytest.mark.parametrize("check", CHECKS, ids=[str(c) for c in CHECKS])
@pytest.mark.parametrize("pad", ["zero", "nan"])
@pytest.mark.parametrize("order", [(1, 0), (0, 1)])
def test_block_load(check, pad, order):
    rng = np.random.default_rng(len(check) * 7 + len(pad) + order[0])
    block = (32, 64)
    for _ in range(4):
        shape = (int(rng.integers(32, 90)), int(rng.integers(64, 150)))
        x = rng.standard_normal(shape).astype(np.float32)
        dx = torch.from_numpy(x).cuda()
        if order == (0, 1):
            dx = dx.t().contiguous().t()  # column-major: strides (1, M)
        off = offsets_for(rng, shape, block, check)
        y = torch.zeros(block, device="cuda")
        block_load[(1,)](
            dx, y, *shape, dx.stride(0), dx.stride(1), *off, BM=block[0], BN=block[1], CHECK=check, PAD=pad, ORDER=order
        )
        ref = block_reference(x, off, block, check, np.nan if pad == "nan" else 0)
        np.testing.assert_array_equal(y.cpu().numpy(), ref)


@pytest.mark.parametrize("check", CHECKS, ids=[str(c) for c in CHECKS])
def test_block_store(check):
    rng = np.random.default_rng(len(check) + 3)
    block = (32, 64)
    for _ in range(4):
        shape = (int(rng.integers(32, 90)), int(rng.integers(64, 150)))
        off = offsets_for(rng, shape, block, check)
        x = rng.integers(-(2**31), 2**31, block).astype(np.int32)
        big = rng.integers(-(2**31), 2**31, (shape[0] + 2 * block[0], shape[1] + 2 * block[1])).astype(np.int32)
        ref = big.copy()
        for i, j in np.ndindex(*block):
            r, c = off[0] + i, off[1] + j
            if (0 in check and not 0 <= r < shape[0]) or (1 in check and not 0 <= c < shape[1]):
                continue
            ref[block[0] + r, block[1] + c] = x[i, j]
        dbig = torch.from_numpy(big).cuda()
        y = dbig[block[0] : block[0] + shape[0], block[1] : block[1] + shape[1]]
        block_store[(1,)](cuda(x), y, *shape, y.stride(0), 1, *off, BM=block[0], BN=block[1], CHECK=check)
        np.testing.assert_array_equal(dbig.cpu().numpy(), ref)


def test_block_load_3d_and_branch():
    rng = np.random.default_rng(9)
    x = rng.integers(-100, 100, (5, 6, 7)).astype(np.int16)
    for off in [(0, 0, 0), (-1, 3, 4), (3, -2, -3), (4, 5, 6)]:
        y = torch.zeros((4, 4, 8), dtype=torch.int16, device="cuda")
        block_load_3d[(1,)](cuda(x), y, *x.shape, *off, B0=4, B1=4, B2=8)
        ref = np.zeros((4, 4, 8), np.int16)
        for i, j, k in np.ndindex(*ref.shape):
            a, b, c = off[0] + i, off[1] + j, off[2] + k
            if 0 <= a < 5 and 0 <= b < 6 and 0 <= c < 7:
                ref[i, j, k] = x[a, b, c]
        np.testing.assert_array_equal(y.cpu().numpy(), ref)
    xs = torch.arange(1, 41, dtype=torch.float32, device="cuda")
    for flag, n, ref in [(0, 40, np.arange(1, 17)), (1, 40, np.arange(17, 33)), (1, 20, [17, 18, 19, 20] + [0] * 12)]:
        y = torch.zeros(16, device="cuda")
        block_if_advance[(1,)](xs, y, flag, n, BN=16)
        np.testing.assert_array_equal(y.cpu().numpy(), np.asarray(ref, np.float32))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("mnk", [(256, 256, 256), (200, 130, 190), (64, 320, 1000)])
@pytest.mark.parametrize("blocks", [(64, 64, 32), (128, 128, 64)])
def test_block_pointer_matmul(dtype, mnk, blocks):
    m, n, k = mnk
    a = torch.randn(m, k, device="cuda").to(dtype)
    b = torch.randn(n, k, device="cuda").to(dtype).t()  # column-major b: strides (1, K)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
    bm, bn, bk = blocks
    grid = ((m + bm - 1) // bm, (n + bn - 1) // bn)
    block_matmul[grid](a, b, c, m, n, k, *a.stride(), *b.stride(), *c.stride(), BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk)
    a64, b64 = a.double().cpu().numpy(), b.double().cpu().numpy()
    ref = a64 @ b64
    # fp32 accumulation (tf32-free: an fp32 dot is on FMAs), then one rounding to the output type.
    acc = k * 2.0**-24 * (np.abs(a64) @ np.abs(b64))
    out = {torch.float32: 0.0, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}[dtype]
    err = np.abs(c.double().cpu().numpy() - ref)
    assert (err <= acc * (1 + out) + out * np.abs(ref)).all(), err.max()


@pytest.mark.skipif(os.environ.get("TILEFUSE_TARGET") == "sm_80", reason="this is the sm_80 run")
def test_on_sm80_code_paths():
    env = dict(os.environ, TILEFUSE_TARGET="sm_80")
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", __file__, "-k", "not sm80"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
