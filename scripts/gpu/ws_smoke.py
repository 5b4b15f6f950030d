"""Quick check of warp-specialized kernels before the full GPU tests: each config runs once
and prints as it goes, so a hang (run this under `timeout`) names the config that hung."""

import sys

import torch
from tilefuse import moe

from kernels_dsl.tutorials.matmul_persistent import matmul_persistent_kernel, matmul_ws_kernel


def matmul(config, shape=(1000, 520, 712), grid=132):
    M, N, K = shape
    bm, bn, bk, warps, stages, groups = config
    a = torch.randn(M, K, device="cuda").to(torch.bfloat16)
    b = torch.randn(N, K, device="cuda").to(torch.bfloat16)
    outs = []
    for kernel, extra in ((matmul_ws_kernel, dict(GROUPS=groups)), (matmul_persistent_kernel, {})):
        c = torch.zeros((M, N), device="cuda", dtype=torch.bfloat16)
        kernel[(grid,)](a, b, c, M, N, K, BM=bm, BN=bn, BK=bk, num_warps=warps, num_stages=stages, **extra)
        torch.cuda.synchronize()
        outs.append(c)
    return torch.equal(outs[0], outs[1])


def grouped(tiles, ws):
    x = torch.randn(4096, 1024, device="cuda").to(torch.bfloat16)
    w = (torch.randn(4, 768, 1024, device="cuda") * 0.05).to(torch.bfloat16)
    s = torch.tensor([900, 0, 3000, 196], dtype=torch.int32, device="cuda")
    outs = [moe.grouped_gemm(x, w, s, config=moe.GemmConfig(*tiles, True, v)) for v in (ws, 0)]
    torch.cuda.synchronize()
    return torch.equal(outs[0], outs[1])


for cfg in [(256, 128, 64, 16, 3, 1), (128, 128, 64, 4, 4, 2), (64, 256, 64, 4, 4, 2), (128, 128, 64, 4, 3, 1)]:
    for shape, grid in [((1000, 520, 720), 132), ((300, 200, 48), 7), ((2048, 2048, 1024), 132)]:
        print("matmul", cfg, shape, grid, end=" ", flush=True)
        print("equal" if matmul(cfg, shape, grid) else "DIFFERENT", flush=True)
for cfg, ws in [((128, 128, 64, 4, 4), 2), ((128, 256, 64, 8, 3), 1)]:
    print("grouped", cfg, ws, end=" ", flush=True)
    print("equal" if grouped(cfg, ws) else "DIFFERENT", flush=True)
sys.exit(0)
