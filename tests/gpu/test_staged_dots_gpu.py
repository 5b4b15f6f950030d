"""Dots on wgmma that are not pipelined (num_stages=1): stage-dot-operands stages their
register operands through shared memory (smem_alloc, local_store, wgmma, wgmma_wait).
Swept over tilings that split M and N across warpgroups, B as [K, N] (N-major, or
stored transposed for fp8) and as trans of an [N, K] tile (K-major), A as [M, K] and
as trans of a [K, M] tile (M-major for 16-bit types), and an accumulator
loaded from memory (converted into the wgmma layout while the operands are staged),
against a float64 reference."""

import numpy as np
import pytest
import tilefuse as tf
import tilefuse.language as tl

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]


@tf.jit
def staged_dot_loop(
    a_ptr,
    b_ptr,
    bias_ptr,
    c_ptr,
    M,
    N,
    K,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    TRANS_B: tl.constexpr,
    TRANS_A: tl.constexpr = False,
):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    out = (rm[:, None] < M) & (rn[None, :] < N)
    acc = tl.load(bias_ptr + rm[:, None] * N + rn[None, :], mask=out, other=0.0)
    for k in range(0, K, BK):
        kk = k + rk
        if TRANS_A:  # A stored [K, M]: staged M-major (wgmma's transposed A)
            at = tl.load(a_ptr + kk[:, None] * M + rm[None, :], mask=(kk[:, None] < K) & (rm[None, :] < M), other=0.0)
            a = tl.trans(at)
        else:
            a = tl.load(a_ptr + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        if TRANS_B:
            bt = tl.load(b_ptr + rn[:, None] * K + kk[None, :], mask=(rn[:, None] < N) & (kk[None, :] < K), other=0.0)
            acc = tl.dot(a, tl.trans(bt), acc)
        else:
            b = tl.load(b_ptr + kk[:, None] * N + rn[None, :], mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
            acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=out)


@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float8_e4m3fn])
@pytest.mark.parametrize("bm,bn,warps", [(64, 64, 4), (64, 64, 8), (128, 64, 8), (64, 128, 8), (128, 128, 4)])
def test_staged_dot_loop(bm, bn, warps, dtype, trans_b, trans_a):
    m, n, k = 200, 176, 208  # partial tiles on every axis
    bk = 128 if dtype.itemsize == 1 else 64
    a = torch.randn(m, k, device="cuda").to(dtype)
    b = torch.randn(k, n, device="cuda").to(dtype)
    bias = torch.randn(m, n, device="cuda")
    c = torch.full((m, n), float("nan"), device="cuda")
    ap = a.T.contiguous() if trans_a else a
    bp = b.T.contiguous() if trans_b else b
    args = (ap, bp, bias, c, m, n, k)
    meta = dict(BM=bm, BN=bn, BK=bk, TRANS_B=trans_b, TRANS_A=trans_a)
    ptx = staged_dot_loop.warmup(*args, grid=(1,), num_warps=warps, num_stages=1, **meta).asm["ptx"]
    assert "wgmma.mma_async" in ptx and "cp.async" not in ptx  # on wgmma, staged (not pipelined)
    # 16-bit A = trans(x) goes M-major (imm-trans-a 1), fp8 A K-major (stored transposed).
    assert (", 1, 1, 1, " in ptx) == (trans_a and dtype.itemsize == 2)
    staged_dot_loop[(tf.cdiv(m, bm), tf.cdiv(n, bn))](*args, num_warps=warps, num_stages=1, **meta)
    a64, b64 = a.double(), b.double()
    ref = (a64 @ b64 + bias.double()).cpu().numpy()
    bound = (a64.abs() @ b64.abs() + bias.double().abs()).cpu().numpy()
    # fp32 accumulation of k exact products (fp8: the tensor cores add with fewer bits, at most 2^-10 of the
    # sum of |products| measured; bench/RESULTS.md).
    tol = (2**-9 if dtype.itemsize == 1 else k * 2**-23) * bound
    err = np.abs(c.double().cpu().numpy() - ref)
    assert (err <= tol).all(), f"max error {err.max()} at {np.unravel_index(err.argmax(), err.shape)}"
