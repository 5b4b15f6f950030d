"""The MoE grouped GEMMs on the GPU: TFLOP/s (2·R·N·K / median time) of moe.grouped_gemm,
grouped_gemm_dgrad and grouped_gemm_wgrad (bf16 in, bf16 out, fp32 accumulation; the
forward also on MXFP8 and FP8-block operands, quantized beforehand) at the
shapes of ../shared/PEERS.md, beside torch's per-expert loop of matmuls (cuBLAS) and
torch._grouped_mm where this torch has it. Rows are sorted by expert; per-expert rows are
drawn 0.7-1.3x the mean, plus PEERS.md's skewed (exponential) routing. The figures
include the schedule kernels (and the wgrad's transposed copy of dy).

    python3 bench/moe_grouped_gemm.py [--configs]   # --configs: every GemmConfig below
"""

import sys

import torch
from moe_bench_cases import GEMM_SHAPES
from tilefuse import moe

SHAPES = {**GEMM_SHAPES, "gpt_oss_fc1": (128, 131072, 2880, 5760)}  # name: (experts, rows, K, N)

CONFIGS = [
    moe.GemmConfig(),
    moe.GemmConfig(128, 256, 64, 8, 3),
    moe.GemmConfig(128, 128, 64, 8, 4),
    moe.GemmConfig(64, 256, 64, 4, 4),
]


def ms(fn, reps=20):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def splits_for(rows, experts, skewed, gen):
    if skewed:  # PEERS.md: exponential weights
        wts = torch.empty(experts).exponential_(generator=gen) + 0.25
    else:
        wts = 0.7 + 0.6 * torch.rand(experts, generator=gen)
    s = torch.floor(wts / wts.sum() * rows).long()
    s[0] += rows - int(s.sum())
    return [int(v) for v in s]


def peers(x, w, s, offs):
    xs = list(torch.split(x, s))
    out = {"cublas loop": lambda: [xi @ w[i].t() for i, xi in enumerate(xs)]}
    if hasattr(torch, "_grouped_mm"):
        wt = w.transpose(-2, -1)
        out["torch._grouped_mm"] = lambda: torch._grouped_mm(x, wt, offs=offs)
    return out


def ours(x, w, dy, splits, configs):
    # The fp8 forwards on copies quantized beforehand (the quantizers: bench/moe_quantize.py).
    w2 = w.reshape(-1, w.shape[2])
    mx = moe.quantize(x, "mxfp8"), moe.quantize(w2, "mxfp8")
    runs = {"tilefuse fwd mxfp8": lambda: moe.grouped_gemm(*mx, splits)}
    if w2.shape[0] % 128 == 0 and x.shape[1] % 128 == 0:
        fb = moe.quantize(x, "fp8_block"), moe.quantize(w2, "fp8_block", block=(128, 128))
        runs["tilefuse fwd fp8_block"] = lambda: moe.grouped_gemm(*fb, splits)
    for c in configs:
        tag = f"{c.block_m}x{c.block_n}x{c.block_k} w{c.num_warps} s{c.num_stages}"
        runs[f"tilefuse fwd {tag}"] = lambda c=c: moe.grouped_gemm(x, w, splits, config=c)
        runs[f"tilefuse dgrad {tag}"] = lambda c=c: moe.grouped_gemm_dgrad(dy, w, splits, config=c)
        runs[f"tilefuse wgrad {tag}"] = lambda c=c: moe.grouped_gemm_wgrad(dy, x, splits, config=c)
    return runs


def bench_shape(name, e, rows, k, n, configs, gen):
    x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(e, n, k, device="cuda", dtype=torch.bfloat16) * 0.02
    dy = torch.randn(rows, n, device="cuda", dtype=torch.bfloat16)
    flops = 2.0 * rows * n * k
    for skewed in (False, True):
        s = splits_for(rows, e, skewed, gen)
        splits = torch.tensor(s, dtype=torch.int32, device="cuda")
        offs = torch.cumsum(splits, 0, dtype=torch.int32)
        routing = "skewed" if skewed else "0.7-1.3"
        for what, fn in {**peers(x, w, s, offs), **ours(x, w, dy, splits, configs)}.items():
            try:
                t = ms(fn)
                print(f"{name:16s} {routing:8s} {what:34s} {t:8.3f} {flops / t / 1e9:8.1f}")
            except Exception as err:  # a peer missing on this torch: say so, go on
                print(f"{name:16s} {routing:8s} {what:34s} ERR {str(err)[:80]}")
            sys.stdout.flush()


def main():
    configs = CONFIGS if "--configs" in sys.argv else CONFIGS[:1]
    gen = torch.Generator().manual_seed(0)
    print(f"{'shape':16s} {'routing':8s} {'what':34s} {'ms':>8s} {'TFLOP/s':>8s}")
    for name, (e, rows, k, n) in SHAPES.items():
        bench_shape(name, e, rows, k, n, configs, gen)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
