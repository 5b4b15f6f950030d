"""Tile-config sweep of the tutorial matmul at 4096^3 bf16 on the GPU (TFLOP/s per
config, median of triton.testing.do_bench), for choosing defaults and autotune spaces:
the pointer version (cp.async pipeline) and the tensor-descriptor version (TMA).

    python3 bench/matmul_sweep.py
"""

import tilefuse as tf
import torch
import triton

from kernels_dsl.tutorials import matmul
from kernels_dsl.tutorials.matmul_desc import matmul_desc_kernel

CONFIGS = [  # BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages
    (128, 256, 64, 8, 3),
    (128, 256, 64, 8, 4),
    (256, 128, 64, 8, 3),
    (256, 128, 64, 8, 4),
    (128, 128, 64, 4, 4),
    (128, 128, 64, 8, 4),
    (128, 256, 32, 8, 4),
    (128, 256, 64, 8, 5),
    (256, 128, 32, 8, 5),
]


def main():
    n = 4096
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    args = (a, b, c, n, n, n, n, 1, n, 1, n, 1)
    ref = a.float() @ b.float()
    for bm, bn, bk, w, st in CONFIGS:
        grid = ((n // bm) * (n // bn),)
        variants = {
            "pointers": (
                matmul.matmul_kernel,
                args,
                dict(BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=8, ACTIVATION=""),
            ),
            "descriptors": (
                matmul_desc_kernel,
                (a, b, c, n, n, n, n, n, n),
                dict(BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=8),
            ),
        }
        for name, (kernel, kargs, kw) in variants.items():
            c.zero_()
            try:
                ms = triton.testing.do_bench(
                    lambda kernel=kernel, kargs=kargs, grid=grid, w=w, st=st, kw=kw: kernel[grid](
                        *kargs, num_warps=w, num_stages=st, **kw
                    ),
                    return_mode="median",
                )
            except tf.LaunchError as e:
                print(f"{name} {bm}x{bn}x{bk} warps={w} stages={st}: {e}")
                continue
            err = (c.float() - ref).abs().max().item()
            tflops = 2 * n**3 / ms / 1e9
            print(f"{name} {bm}x{bn}x{bk} warps={w} stages={st}: {tflops:.1f} TFLOP/s (max |err| {err:.3g})")


if __name__ == "__main__":
    main()
