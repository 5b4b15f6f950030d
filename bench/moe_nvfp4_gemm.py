"""NVFP4 grouped GEMMs (forward, dgrad, wgrad) beside the bf16 grouped GEMM of the same
shape, on the GPU: median of 20 timed calls each (moe_grouped_gemm.ms), TFLOP/s. The NVFP4 operands are
dequantized to bf16 in the K loop (no fp4 tensor cores on sm_90), so bf16 is the bound.

    python3 bench/moe_nvfp4_gemm.py [--rows 16384 --k 2048 --n 2048 --groups 8]
"""

import argparse
import json
import time

import torch
from moe_grouped_gemm import ms
from tilefuse import moe


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=16384)
    ap.add_argument("--k", type=int, default=2048)
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--groups", type=int, default=8)
    args = ap.parse_args()
    r, k, n, g = args.rows, args.k, args.n, args.groups
    gen = torch.Generator(device="cuda").manual_seed(1)

    def bf16(*s):
        return torch.randn(s, generator=gen, device="cuda").to(torch.bfloat16)

    splits = torch.full((g,), r // g, dtype=torch.int32, device="cuda")
    x, w, dy = bf16(r, k), bf16(g, n, k), bf16(r, n)
    qx, qw = moe.quantize(x, "nvfp4"), moe.quantize(w.reshape(g * n, k), "nvfp4", tile2d=True)
    qd = moe.quantize(dy, "nvfp4")
    cd, cx = moe.quantize(dy, "nvfp4", axis=0, rht=True), moe.quantize(x, "nvfp4", axis=0, rht=True)
    flop = 2 * r * k * n
    res = {"date": time.strftime("%Y-%m-%d"), "gpu": torch.cuda.get_device_name(), "shape": [r, k, n, g]}
    for name, call in [
        ("nvfp4_forward", lambda: moe.grouped_gemm(qx, qw, splits)),
        ("nvfp4_dgrad", lambda: moe.grouped_gemm_dgrad(qd, qw, splits)),
        ("nvfp4_wgrad", lambda: moe.grouped_gemm_wgrad(cd, cx, splits)),
        ("bf16_forward", lambda: moe.grouped_gemm(x, w, splits)),
    ]:
        t = ms(call)
        res[name] = {"ms": t, "tflops": flop / t / 1e9}
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
