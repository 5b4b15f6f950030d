"""The MoE quantizers on the GPU: effective bandwidth (bytes of x read plus data and
scales written, per second) of moe.quantize for each recipe on a bf16 [8192, 8192]
tensor, beside torch's copy of the same tensor (x.clone(): the memory roofline). NVFP4
reads x twice (its tensor amax first); the figure counts it once.

    python3 bench/moe_quantize.py
"""

import torch
from tilefuse import moe

SHAPE = (8192, 8192)
RECIPES = [
    ("mxfp8 rowwise", dict(recipe="mxfp8")),
    ("mxfp8 columnwise", dict(recipe="mxfp8", axis=0)),
    ("fp8_block 1x128", dict(recipe="fp8_block")),
    ("fp8_block 128x128", dict(recipe="fp8_block", block=(128, 128))),
    ("nvfp4 1x16", dict(recipe="nvfp4")),
    ("nvfp4 columnwise RHT + SR", dict(recipe="nvfp4", axis=0, rht=True, stochastic=True)),
]


def ms(fn, reps=20):
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def nbytes(t):
    return t.numel() * t.element_size()


def main():
    x = torch.randn(SHAPE, device="cuda", dtype=torch.bfloat16)
    t = ms(x.clone)
    print(f"{'x.clone()':28s} {t:7.3f} ms  {2 * nbytes(x) / t / 1e6:7.1f} GB/s")
    for name, options in RECIPES:
        q = moe.quantize(x, **options)
        moved = nbytes(x) + nbytes(q.data) + nbytes(q.scale)
        t = ms(lambda o=options: moe.quantize(x, **o))
        print(f"{name:28s} {t:7.3f} ms  {moved / t / 1e6:7.1f} GB/s")


if __name__ == "__main__":
    main()
