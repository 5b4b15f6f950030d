"""GB/s of the fused scaled SwiGLU + MXFP8 quantize and of the quantizers over tile configs
(T = 32768, F = 2048; bytes read + written over do_bench's time), each result first checked
bit for bit against the default path. Usage on the GPU: python3 bench/act_quant_sweep.py"""

import functools

import torch
import triton
from tilefuse import moe
from tilefuse.moe import quant

T, F = 32768, 2048


def gbps(nbytes, fn, *args, **kw):
    ms = triton.testing.do_bench(functools.partial(fn, *args, **kw), warmup=25, rep=200)
    return f"{nbytes / ms / 1e6:.0f} GB/s"


def same(a, b):
    return torch.equal(a.data.view(torch.uint8), b.data.view(torch.uint8)) and torch.equal(
        a.scale.view(torch.uint8), b.scale.view(torch.uint8)
    )


def main():
    h = torch.randn(T, 2 * F, device="cuda", dtype=torch.bfloat16)
    p = torch.rand(T, device="cuda")
    y = moe.scaled_act("swiglu", h, p)
    print("copy", gbps(4 * h.numel(), torch.clone, h))
    fused_bytes = 2 * T * 2 * F + 4 * T + T * F + T * F // 32
    act_bytes = 2 * T * 2 * F + 4 * T + 2 * T * F
    ref = moe.quantize(y, "mxfp8")
    for r, c, w in [(16, 128, 4), (32, 128, 4), (16, 256, 4), (8, 256, 4), (32, 256, 8), (64, 128, 8)]:
        cfg = moe.ActConfig(r, c, w)
        ok = same(moe.scaled_act("swiglu", h, p, quantize="mxfp8", config=cfg), ref)
        fused = gbps(fused_bytes, moe.scaled_act, "swiglu", h, p, quantize="mxfp8", config=cfg)
        alone = gbps(act_bytes, moe.scaled_act, "swiglu", h, p, config=cfg)
        print(f"{r}x{c} w{w}: fused {fused} (equal {ok}); act alone {alone}")
    qb = 2 * T * F + T * F + T * F // 32
    print("quantize mxfp8 default", gbps(qb, moe.quantize, y, "mxfp8"))
    default = quant.MXFP8_TILE_ALONG
    for tile in [(64, 32), (16, 128), (32, 128), (8, 256), (16, 256), (64, 64)]:
        quant.MXFP8_TILE_ALONG = tile
        ok = same(moe.quantize(y, "mxfp8"), ref)
        print(f"quantize rowwise {tile}: {gbps(qb, moe.quantize, y, 'mxfp8')} (equal {ok})")
    quant.MXFP8_TILE_ALONG = default
    yt = y[:8192].contiguous()
    refc = moe.quantize(yt, "mxfp8", axis=0)
    qbc = 2 * yt.numel() + yt.numel() + yt.numel() // 32
    default = quant.MXFP8_TILE_ACROSS
    for tile in [(64, 32), (128, 32), (64, 64), (128, 64), (64, 128), (32, 128), (32, 64)]:
        quant.MXFP8_TILE_ACROSS = tile
        ok = same(moe.quantize(yt, "mxfp8", axis=0), refc)
        print(f"quantize columnwise {tile}: {gbps(qbc, moe.quantize, yt, 'mxfp8', axis=0)} (equal {ok})")
    quant.MXFP8_TILE_ACROSS = default
    for axis, src in ((-1, y), (0, yt)):
        for blk in ((1, 128), (128, 128)):
            nb = 2 * src.numel() + src.numel() + 4 * src.numel() // (blk[0] * blk[1])
            print(
                f"quantize fp8_block axis={axis} block={blk}:",
                gbps(nb, moe.quantize, src, "fp8_block", axis=axis, block=blk),
            )
        nb = 2 * src.numel() + src.numel() // 2 + src.numel() // 16
        print(f"quantize nvfp4 axis={axis}:", gbps(nb, moe.quantize, src, "nvfp4", axis=axis))
    # NVFP4 (two passes over x: the amax, then the codes) over program tiles, rowwise and
    # the columnwise RHT copy, each checked against the default tile's bits.
    default = quant.NVFP4_TILE
    for axis, src, extra in ((-1, y, {}), (0, yt, {"rht": True})):
        nb = 2 * 2 * src.numel() + src.numel() // 2 + src.numel() // 16
        want = moe.quantize(src, "nvfp4", axis=axis, **extra)
        for tile in [(64, 1), (64, 8), (32, 8), (16, 16), (32, 4), (128, 4)]:
            quant.NVFP4_TILE = tile
            ok = same(moe.quantize(src, "nvfp4", axis=axis, **extra), want)
            rate = gbps(nb, moe.quantize, src, "nvfp4", axis=axis, **extra)
            print(f"quantize nvfp4 axis={axis} {extra} {tile}: {rate} (equal {ok})")
        quant.NVFP4_TILE = default


if __name__ == "__main__":
    main()
