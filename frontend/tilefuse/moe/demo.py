"""The MoE MLP part of `make run`: moe.mlp_forward and mlp_backward on the interpreter at
a small shape (SwiGLU, ragged experts with an empty one and pad rows, bias and scaled
bias, activation recompute), bf16, MXFP8 and NVFP4, each checked against a float64 numpy
reference of the same MLP (written here, independently of the kernels): the error RMS
of every result relative to its RMS."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from tilefuse import moe

BF16 = ml_dtypes.bfloat16
T, D, N = 200, 64, 64
SPLITS = [60, 0, 90, 40]  # 10 pad rows past the sum
# Error RMS bounds relative to the tensors' RMS: a few bf16 roundings (2^-9 each) for bf16;
# E4M3's 2^-4 relative steps on the quantized operands for MXFP8; NVFP4's E2M1 keeps one
# mantissa bit (about 0.1 RMS per quantization, stochastic on the gradients: dW1's path
# measured at most 0.26 in tests/python/moe/mlp_reference.py).
BOUNDS = {"bf16": 2.0**-6, "mxfp8": 2.0**-2.5, "nvfp4": 2.0**-1}


def _silu_parts(a):
    sg = 1.0 / (1.0 + np.exp(-a))
    return a * sg, sg * (1.0 + a * (1.0 - sg))


def reference(x, probs, w1, w2, b1, b2, dy):
    """float64 out and gradients over the experts' rows."""
    ends = np.cumsum(SPLITS)
    r = dict(out=np.zeros((ends[-1], D)), dx=np.zeros((ends[-1], D)), dprobs=np.zeros(ends[-1]))
    r |= dict(dw1=np.zeros(w1.shape), dw2=np.zeros(w2.shape))
    for g, (a0, e) in enumerate(zip(ends - SPLITS, ends)):
        xg, s, dyg = x[a0:e], probs[a0:e, None], dy[a0:e]
        h = xg @ w1[g].T + b1[g]
        a, b = h[:, :N], h[:, N:]
        silu, dsilu = _silu_parts(a)
        y = s * silu * b
        r["out"][a0:e] = y @ w2[g].T + s * b2[g]
        da = dyg @ w2[g]
        dh = np.concatenate([da * s * b * dsilu, da * s * silu], axis=1)
        r["dprobs"][a0:e] = (da * silu * b).sum(axis=1) + (dyg * b2[g]).sum(axis=1)
        r["dx"][a0:e], r["dw1"][g], r["dw2"][g] = dh @ w1[g], dh.T @ xg, dyg.T @ y
    return r


def _dequantized(a, recipe, weight=False):
    """The values the library's GEMMs read (NVFP4 weights: 16 x 16 tiles, as it quantizes them)."""
    if recipe == "bf16":
        return np.asarray(a, np.float64)
    shape = a.shape
    q = moe.quantize(a.reshape(-1, shape[-1]), recipe, tile2d=weight and recipe == "nvfp4")
    return np.asarray(moe.dequantize(q), np.float64).reshape(shape)


def run(recipe, rng) -> float:
    g = len(SPLITS)
    x = rng.standard_normal((T, D)).astype(BF16)
    probs = (1.0 - rng.random(T)).astype(np.float32)
    w1 = (rng.standard_normal((g, 2 * N, D)) / np.sqrt(D)).astype(BF16)
    w2 = (rng.standard_normal((g, D, N)) / np.sqrt(N)).astype(BF16)
    b1, b2 = ((0.5 * rng.standard_normal(s)).astype(np.float32) for s in ((g, 2 * N), (g, D)))
    dy = rng.standard_normal((T, D)).astype(BF16)
    cfg = moe.MLPConfig(activation="swiglu", recipe=recipe, bias=True, scaled_bias=True, recompute=True)
    params = dict(w1=w1, w2=w2, b1=b1, b2=b2)
    out, ctx = moe.mlp_forward(x, probs, np.array(SPLITS, np.int32), params, cfg)
    saved = ctx.saved_bytes
    grads = moe.mlp_backward(ctx, dy)
    f64 = [_dequantized(v, recipe, weight) for v, weight in ((x, 0), (w1, 1), (w2, 1), (dy, 0))]
    want = reference(f64[0], probs.astype(np.float64), f64[1], f64[2], b1, b2, f64[3])
    worst = 0.0
    parts = []
    for k, ref in want.items():
        got = np.asarray(out if k == "out" else grads[k], np.float64)[: len(ref)]
        rms = float(np.sqrt(np.mean((got - ref) ** 2)) / np.sqrt(np.mean(ref**2)))
        worst = max(worst, rms)
        parts.append(f"{k} {rms:.1e}")
    print(
        f"moe MLP {recipe:5} T={T} d={D} n={N} experts {SPLITS} (SwiGLU, scaled bias, recompute; {saved} bytes saved)"
    )
    print(f"    error RMS / RMS vs float64: {', '.join(parts)}; steps: {len(ctx.record)}")
    if not worst <= BOUNDS[recipe]:
        raise SystemExit(f"moe MLP {recipe} result is wrong: error RMS {worst:.2e} > {BOUNDS[recipe]:.2e}")
    return worst


def main():
    rng = np.random.default_rng()
    for recipe in ("bf16", "mxfp8", "nvfp4"):
        run(recipe, rng)


if __name__ == "__main__":
    main()
