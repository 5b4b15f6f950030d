"""K loops the MoE library needs, pipelined on the GPU, against a float64 reference:
masked edges with other=0.0 (fp8 and bf16), ragged ends inside a run, two dots sharing
their A (FC1), a B with K contiguous, an A with M contiguous (wgmma's transposed A),
MXFP8 dot_scaled loops."""

import re

import numpy as np
import pytest
import tilefuse as tf

from tests.shared_kernels import (
    at_dot_loop,
    gated_dot_loop,
    masked_dot_loop,
    scaled_dot_loop,
    strided_dot_loop,
    two_dot_loops,
)

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]


@pytest.mark.parametrize("stages", [2, 4])
@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.bfloat16])
@pytest.mark.parametrize("mnk", [(200, 176, 208), (128, 128, 512), (200, 176, 1000)])
def test_masked_dot_loop(mnk, dtype, stages):
    # K = 1000: rows of K elements start 16-byte aligned, the last run of each ends inside.
    m, n, k = mnk
    c = torch.full((m, n), float("nan"), device="cuda")
    meta = dict(BM=128, BN=128, BK=128 if dtype.itemsize == 1 else 64)
    # Row stride 1024 (16-byte rows), k_end = k: ragged inside the last run when k % 16.
    ap = torch.randn(m, 1024, device="cuda").to(dtype)
    btp = torch.randn(n, 1024, device="cuda").to(dtype)
    a, bt = ap[:, :k], btp[:, :k]
    args = (ap, btp, c, m, n, 1024, k)
    kernel = masked_dot_loop.warmup(*args, grid=(1,), num_warps=8, num_stages=stages, **meta)
    assert "cp.async.cg" in kernel.asm["ptx"] and "cp.async.ca" not in kernel.asm["ptx"]  # pipelined, 16-byte runs
    masked_dot_loop[(tf.cdiv(m, 128), tf.cdiv(n, 128))](*args, num_warps=8, num_stages=stages, **meta)
    ref = (a.double() @ bt.double().T).cpu().numpy()
    bound = (a.double().abs() @ bt.double().abs().T).cpu().numpy()
    # fp32 accumulation of k exact products (fp8: the tensor cores add with fewer bits, at most 2^-10 of the
    # sum of |products| measured; bench/RESULTS.md).
    tol = (2**-9 if dtype.itemsize == 1 else k * 2**-23) * bound
    err = np.abs(c.double().cpu().numpy() - ref)
    assert (err <= tol).all(), f"max error {err.max()} at {np.unravel_index(err.argmax(), err.shape)}"


@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.bfloat16])
@pytest.mark.parametrize("mnk", [(200, 176, 208), (256, 128, 640)])
def test_gated_dot_loop(mnk, dtype, stages):
    m, n, k = mnk
    a, gt, ut = (torch.randn(r, k, device="cuda").to(dtype) for r in (m, n, n))
    c = torch.full((m, n), float("nan"), device="cuda")
    meta = dict(BM=128, BN=128, BK=128 if dtype.itemsize == 1 else 64)
    kernel = gated_dot_loop.warmup(a, gt, ut, c, m, n, k, grid=(1,), num_warps=8, num_stages=stages, **meta)
    assert "cp.async.cg" in kernel.asm["ptx"]  # pipelined, both dots
    gated_dot_loop[(tf.cdiv(m, 128), tf.cdiv(n, 128))](a, gt, ut, c, m, n, k, num_warps=8, num_stages=stages, **meta)
    a64, g64, u64 = (x.double() for x in (a, gt, ut))
    g, u = a64 @ g64.T, a64 @ u64.T
    bg, bu = a64.abs() @ g64.abs().T, a64.abs() @ u64.abs().T
    e = 2**-9 if dtype.itemsize == 1 else k * 2**-23  # per accumulator, relative to its bound
    tol = e * (bg * u.abs() + bu * g.abs() + e * bg * bu) + 2**-23 * (g * u).abs()
    err = (c.double() - g * u).abs()
    assert (err <= tol).all(), f"max error {err.max().item()}"


@pytest.mark.parametrize("warps,stages", [(4, 2), (8, 3), (8, 4)])
@pytest.mark.parametrize("mnkk", [(200, 176, 208, 144), (256, 256, 640, 336)])
def test_two_dot_loops(mnkk, warps, stages):
    # Two pipelined K loops in one kernel: the second loop's rings reuse the first's bytes
    # (allocate-shared); its prologue synchronizes the block first. The loops run different
    # trip counts, so the first loop's last stage is one the second rewrites; K2 % 16 == 0
    # keeps its rows provably 16-byte aligned (cp.async).
    m, n, k, k2 = mnkk
    a, bt = (torch.randn(r, k, device="cuda").to(torch.bfloat16) for r in (m, n))
    d, et = (torch.randn(r, k2, device="cuda").to(torch.bfloat16) for r in (m, n))
    c = torch.full((m, n), float("nan"), device="cuda")
    meta = dict(BM=128, BN=128, BK=64)
    args = (a, bt, d, et, c, m, n, k, k2)
    kernel = two_dot_loops.warmup(*args, grid=(1,), num_warps=warps, num_stages=stages, **meta)
    rings = re.findall(r"smem_alloc \{smem_at = (\d+)\} : smem<128x64xbf16, #shared<[^>]*stages=", kernel.asm["gpu"])
    assert len(rings) == 4 and rings[:2] == rings[2:], rings
    between = re.search(r"async_wait %groups_out \{pending = 0\}(.*?)async_copy", kernel.asm["gpu"], re.S).group(1)
    assert "\n  barrier\n" in between
    two_dot_loops[(tf.cdiv(m, 128), tf.cdiv(n, 128))](*args, num_warps=warps, num_stages=stages, **meta)
    a64, b64, d64, e64 = (x.double() for x in (a, bt, d, et))
    g, u = a64 @ b64.T, d64 @ e64.T
    bg, bu = a64.abs() @ b64.abs().T, d64.abs() @ e64.abs().T
    e = k * 2**-23
    tol = e * (bg * u.abs() + bu * g.abs() + e * bg * bu) + 2**-23 * (g * u).abs()
    err = (c.double() - g * u).abs()
    assert (err <= tol).all(), f"max error {err.max().item()}"


@pytest.mark.parametrize("warps,stages", [(4, 1), (4, 2), (8, 3)])
@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("mnk", [(200, 176, 208), (128, 256, 512)])
def test_k_contiguous_b(mnk, dtype, warps, stages):
    # B [K, N] stored N-major (a transposed weight, K contiguous): copied K-major.
    m, n, k = mnk
    a = torch.randn(m, k, device="cuda").to(dtype)
    b = torch.randn(n, k, device="cuda").to(dtype).T
    c = torch.full((m, n), float("nan"), device="cuda")
    bm = 64 if warps == 4 else 128
    meta = dict(BM=bm, BN=128, BK=128 if dtype.itemsize == 1 else 64)
    args = (a, b, c, m, n, k, b.stride(0), b.stride(1))
    kernel = strided_dot_loop.warmup(*args, grid=(1,), num_warps=warps, num_stages=stages, **meta)
    assert ("cp.async.cg" in kernel.asm["ptx"]) == (stages > 1)  # pipelined
    strided_dot_loop[(tf.cdiv(m, bm), tf.cdiv(n, 128))](*args, num_warps=warps, num_stages=stages, **meta)
    ref = (a.double() @ b.double()).cpu().numpy()
    bound = (a.double().abs() @ b.double().abs()).cpu().numpy()
    tol = (2**-9 if dtype.itemsize == 1 else k * 2**-23) * bound
    err = np.abs(c.double().cpu().numpy() - ref)
    assert (err <= tol).all(), f"max error {err.max()} at {np.unravel_index(err.argmax(), err.shape)}"


@pytest.mark.parametrize("desc", [True, False])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(
    "warps,stages,bm,bn", [(4, 2, 64, 128), (8, 3, 128, 256), (8, 4, 128, 64), (8, 3, 256, 128), (4, 3, 128, 64)]
)
@pytest.mark.parametrize("mnk", [(208, 176, 200), (384, 512, 640)])
def test_m_contiguous_a(mnk, warps, stages, bm, bn, dtype, desc):
    # A stored [K, M] (dy in dW = dyᵀ x): trans of its tile, copied as it lies (TMA or
    # cp.async) and read M-major by wgmma; partial tiles on every axis in the first shape
    # (M and N multiples of 16: rows of 16-byte multiples, as TMA and cp.async need).
    m, n, k = mnk
    at = torch.randn(k, m, device="cuda").to(dtype)
    b = torch.randn(k, n, device="cuda").to(dtype)
    c = torch.full((m, n), float("nan"), device="cuda")
    meta = dict(BM=bm, BN=bn, BK=64, DESC=desc)
    kernel = at_dot_loop.warmup(at, b, c, m, n, k, grid=(1,), num_warps=warps, num_stages=stages, **meta)
    ptx = kernel.asm["ptx"]
    assert "a_mmajor = true" in kernel.asm["gpu"] and re.search(r"p, 1, 1, 1, 1;", ptx)
    assert ("cp.async.bulk.tensor" in ptx) == desc and ("cp.async.cg" in ptx) != desc
    at_dot_loop[(tf.cdiv(m, bm), tf.cdiv(n, bn))](at, b, c, m, n, k, num_warps=warps, num_stages=stages, **meta)
    a64, b64 = at.double().T, b.double()
    ref = (a64 @ b64).cpu().numpy()
    tol = k * 2**-23 * (a64.abs() @ b64.abs()).cpu().numpy()
    err = np.abs(c.double().cpu().numpy() - ref)
    assert (err <= tol).all(), f"max error {err.max()} at {np.unravel_index(err.argmax(), err.shape)}"


@pytest.mark.parametrize("k_contiguous", [True, False])
@pytest.mark.parametrize("fa,fb", [("e4m3", "e4m3"), ("e4m3", "e5m2")])
@pytest.mark.parametrize("mnk,warps,stages", [((200, 176, 256), 8, 3), ((128, 256, 512), 4, 2), ((64, 64, 128), 4, 1)])
def test_mxfp8_dot_loop(mnk, warps, stages, fa, fb, k_contiguous):
    # dot_scaled on the fp8 tensor cores, each 32-wide K block scaled as it is promoted;
    # B with K contiguous pipelines (K-major copies), with N contiguous it is staged.
    from tests.python.test_dot_loops import mx_operands

    m, n, k = mnk
    a, sa, bt, sb, A, Bt = mx_operands(np.random.default_rng(), fa, fb, m, n, k)
    dev = [torch.from_numpy(x).cuda() for x in (a, sa, sb)]
    bd = torch.from_numpy(bt).cuda().T if k_contiguous else torch.from_numpy(np.ascontiguousarray(bt.T)).cuda()
    c = torch.full((m, n), float("nan"), device="cuda")
    bm = 64 if warps == 4 else 128
    meta = dict(FA=fa, FB=fb, BM=bm, BN=128 if n >= 128 else 64, BK=128)
    args = (dev[0], dev[1], bd, dev[2], c, m, n, k, bd.stride(0), bd.stride(1))
    ptx = scaled_dot_loop.warmup(*args, grid=(1,), num_warps=warps, num_stages=stages, **meta).asm["ptx"]
    assert f"f32.{fa}.{fb}" in ptx  # fp8 wgmma
    assert ("cp.async.cg" in ptx) == (k_contiguous and stages > 1)
    grid = (tf.cdiv(m, bm), tf.cdiv(n, meta["BN"]))
    scaled_dot_loop[grid](*args, num_warps=warps, num_stages=stages, **meta)
    ref, bound = A @ Bt.T, np.abs(A) @ np.abs(Bt).T
    err = np.abs(c.double().cpu().numpy() - ref)
    # fp8 tensor cores add the 32 products of a block with fewer bits than fp32 (bounded
    # like the other fp8 dots, 2^-9 of the sum of |products|).
    assert (err <= 2**-9 * bound).all(), f"max error {err.max()} at {np.unravel_index(err.argmax(), err.shape)}"
