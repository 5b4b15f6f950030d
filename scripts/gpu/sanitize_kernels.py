"""The library kernels at small shapes, once each, for compute-sanitizer (scripts/gpu/sanitize.sh):
the MoE grouped GEMMs (forward, dgrad, wgrad; ragged groups with an empty one and pad rows),
every quantizer recipe, every activation forward and backward, the MLP forward and backward of
each recipe, and the tutorials. Prints one line per launch group; the sanitizer reports."""

import sys

import tilefuse as tf
import torch
from tilefuse import moe
from tilefuse.moe.mlp import RECIPES

from kernels_dsl.moe.activations import REQUIRED
from kernels_dsl.tutorials import layernorm, matmul, softmax, vector_add
from kernels_dsl.tutorials.matmul_desc import matmul_desc_kernel

gen = torch.Generator(device="cuda").manual_seed(0)


def randn(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape, device="cuda", generator=gen).to(dtype)


def grouped_gemms():
    rows, k, n, splits = 256, 128, 192, [100, 0, 60, 40]  # 56 pad rows past the sum
    s = torch.tensor(splits, dtype=torch.int32, device="cuda")
    x, w, dy = randn(rows, k), randn(len(splits), n, k), randn(rows, n)
    for out_dtype in ("bfloat16", "float32"):
        moe.grouped_gemm(x, w, s, out_dtype=out_dtype)
        moe.grouped_gemm_dgrad(dy, w, s, out_dtype=out_dtype)
        moe.grouped_gemm_wgrad(dy, x, s, out_dtype=out_dtype)


QUANTIZERS = [
    dict(recipe="mxfp8"),
    dict(recipe="mxfp8", axis=0, fmt="e5m2"),
    dict(recipe="fp8_block"),
    dict(recipe="fp8_block", block=(128, 128), axis=0),
    dict(recipe="nvfp4"),
    dict(recipe="nvfp4", tile2d=True, axis=0),
    dict(recipe="nvfp4", axis=0, rht=True, stochastic=True, seed=5),
]


def quantizers():
    x = randn(256, 256)
    for options in QUANTIZERS:
        moe.dequantize(moe.quantize(x, **options))


def activations():
    rows, width = 96, 160
    probs = torch.rand(rows, device="cuda", generator=gen)
    for name, act in moe.ACTIVATIONS.items():
        params = {p: 1.0 for p, default in act.params if default is REQUIRED}
        h = randn(rows, 2 * width if act.glu else width)
        moe.scaled_act(name, h, probs, **params)
        moe.scaled_act_backward(name, h, probs, randn(rows, width), **params)


def mlps():
    from tilefuse.moe import demo  # its small shape: ragged experts with an empty one, pad rows

    g = len(demo.SPLITS)
    splits = torch.tensor(demo.SPLITS, dtype=torch.int32, device="cuda")
    d = n = 128  # the widths every recipe takes (fp8_block: multiples of 128)
    for recipe in RECIPES:
        params = dict(w1=randn(g, 2 * n, d), w2=randn(g, d, n))
        params |= dict(b1=randn(g, 2 * n, dtype=torch.float32), b2=randn(g, d, dtype=torch.float32))
        cfg = moe.MLPConfig(activation="swiglu", recipe=recipe, bias=True, scaled_bias=True, recompute=True)
        probs = torch.rand(demo.T, device="cuda", generator=gen)
        _, ctx = moe.mlp_forward(randn(demo.T, d), probs, splits, params, cfg)
        moe.mlp_backward(ctx, randn(demo.T, d))


def tutorials():
    n = 5000
    x, y, out = (randn(n, dtype=torch.float32) for _ in range(3))
    vector_add.add_kernel[(tf.cdiv(n, 1024),)](x, y, out, n, BLOCK_SIZE=1024)
    a = randn(100, 300, dtype=torch.float32)
    o = torch.empty_like(a)
    softmax.softmax_kernel[(100,)](o, a, a.stride(0), o.stride(0), 300, BLOCK_SIZE=512)
    w, b = randn(300, dtype=torch.float32), randn(300, dtype=torch.float32)
    mean, rstd = (torch.empty(100, device="cuda") for _ in range(2))
    layernorm._layer_norm_fwd_fused[(100,)](a, o, w, b, mean, rstd, a.stride(0), 300, 1e-5, BLOCK_SIZE=512)
    m, n, k = 200, 136, 96
    A, B, C = randn(m, k), randn(k, n), torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    args = (m, n, k, A.stride(0), A.stride(1), B.stride(0), B.stride(1), C.stride(0), C.stride(1))
    for bm, bn, bk, warps, stages in ((64, 64, 32, 4, 3), (128, 128, 64, 8, 4)):
        meta = dict(BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=8, ACTIVATION="leaky_relu")
        grid = (tf.cdiv(m, bm) * tf.cdiv(n, bn),)
        matmul.matmul_kernel[grid](A, B, C, *args, num_warps=warps, num_stages=stages, **meta)
        meta.pop("ACTIVATION")
        d = (m, n, k, A.stride(0), B.stride(0), C.stride(0))
        matmul_desc_kernel[grid](A, B, C, *d, num_warps=warps, num_stages=stages, **meta)


GROUPS = {"grouped_gemm": grouped_gemms, "quantize": quantizers, "activations": activations, "mlp": mlps}
GROUPS["tutorials"] = tutorials

if __name__ == "__main__":
    for name in sys.argv[1:] or GROUPS:
        GROUPS[name]()
        torch.cuda.synchronize()
        print(f"sanitize: {name} ran", flush=True)
