"""Flattened persistent loops on the GPU (tests/python/test_flattened_loops.py's kernels):
the tutorial's flat matmul bit for bit its nested form and against float64, over tile
configs, stage counts and ragged M, N, K (the restarted accumulator, the branch's wait
and its layout conversion); the grouped GEMM's flat kernel bit for bit the library's
persistent kernel over ragged groups, forward and dgrad."""

import numpy as np
import pytest
from tilefuse import moe

from kernels_dsl.moe import grouped_gemm as G
from kernels_dsl.tutorials.matmul_persistent import matmul_flat_kernel, matmul_persistent_kernel
from tests.shared_kernels import grouped_gemm_flat_kernel

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]

CONFIGS = [(128, 256, 64, 8, 3), (128, 128, 64, 8, 4), (128, 128, 64, 4, 3), (64, 128, 64, 4, 4)]


@pytest.mark.parametrize("shape", [(1000, 520, 712), (2048, 1024, 64), (384, 2048, 4096)])
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "x".join(map(str, c)))
def test_flat_matmul(shape, config):
    M, N, K = shape
    bm, bn, bk, warps, stages = config
    g = torch.Generator(device="cuda").manual_seed(M * N + K)
    a = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
    b = torch.randn(N, K, device="cuda", generator=g).to(torch.bfloat16)
    outs = []
    for kernel in (matmul_flat_kernel, matmul_persistent_kernel):
        c = torch.full((M, N), 7.0, device="cuda", dtype=torch.bfloat16)
        kernel[(132,)](a, b, c, M, N, K, BM=bm, BN=bn, BK=bk, num_warps=warps, num_stages=stages)
        outs.append(c)
    torch.cuda.synchronize()
    assert torch.equal(outs[0].view(torch.int16), outs[1].view(torch.int16))
    a64, b64 = a.double(), b.double()
    ref, mag = a64 @ b64.T, a64.abs() @ b64.abs().T
    err = (outs[0].double() - ref).abs()
    assert (err <= 2.0**-8 * ref.abs() + K * 2.0**-23 * mag).all(), err.max().item()


@pytest.mark.parametrize("dgrad", [False, True])
@pytest.mark.parametrize("splits", [[900, 0, 1500, 37, 1, 1200, 0], [4096], [1, 2, 3, 4000]])
def test_grouped_flat_kernel(monkeypatch, splits, dgrad):
    rows, k, n = 4096, 1024, 768
    g = torch.Generator(device="cuda").manual_seed(len(splits))
    x = torch.randn(rows, k, device="cuda", generator=g).to(torch.bfloat16)
    dy = torch.randn(rows, n, device="cuda", generator=g).to(torch.bfloat16)
    w = (torch.randn(len(splits), n, k, device="cuda", generator=g) * 0.05).to(torch.bfloat16)
    s = torch.tensor(splits, dtype=torch.int32, device="cuda")
    cfg = moe.GemmConfig(128, 256, 64, 8, 3, True)

    def call():
        return moe.grouped_gemm_dgrad(dy, w, s, config=cfg) if dgrad else moe.grouped_gemm(x, w, s, config=cfg)

    nested = call()
    monkeypatch.setattr(G, "grouped_gemm_persistent_kernel", grouped_gemm_flat_kernel)
    flat = call()
    torch.cuda.synchronize()
    end = min(rows, sum(max(v, 0) for v in splits))
    assert torch.equal(flat[:end].view(torch.int16), nested[:end].view(torch.int16))
    assert np.isfinite(flat[:end].float().cpu().numpy()).all()
