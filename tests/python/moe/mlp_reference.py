"""float64 reference of the grouped MLP (SPEC-moe.md §1, §4) and its inputs, shared by the
interpreter tests (test_mlp.py) and the GPU tests (tests/gpu/test_moe_mlp_gpu.py).

The reference takes the float64 values of the inputs; for a quantized recipe those are
the dequantized rowwise copies (x, dy) and the dequantized weights (moe.quantize, bit-exact
against golden_quant.py in test_moe_quantize.py), so that both sides start from
representable values. It keeps every intermediate in float64: what the library rounds on
the way (C, the FC2 input, dA·s·act', the gradients; for quantized recipes the FC2 input
and the FC1 grad-output, and the wgrads' columnwise copies) is the error the per-recipe
error-RMS bounds below cover.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
from tilefuse import moe

from tests.python.moe.act_reference import full_params, glu_merge, glu_split, reference
from tests.python.moe.gemm_reference import offsets

BF16 = ml_dtypes.bfloat16
GRADS = ("dx", "dprobs", "dw1", "dw2", "db1", "db2")

# Error RMS relative to the tensor's RMS, end to end, per recipe, and the max error (a loose
# ceiling on the tail, same units). bf16: about six roundings to bf16 along the longest
# path (C, the FC2 input, dh, the output), each at most 2^-9 relative (RMS 2^-9/sqrt(3)),
# C's amplified by the activation's x·f'/f (2 for SReLU): measured at most 2^-7.9 (max
# 2^-4.3) over the registry. MXFP8 and FP8-block: E4M3 rounds to 3 mantissa bits, at
# most 2^-4 relative (RMS about 2^-4/sqrt(3) for one quantization); the reference sees
# the dequantized x, dy and weights, the library also quantizes the FC2 input, the FC1
# grad-output and the wgrads' columnwise copies: measured at most 2^-4.9 (max 2^-0.4,
# the tail of bin flips). The bounds are about twice the measured worst.
# NVFP4: E2M1 keeps one mantissa bit; a block scaled to amax 6 rounds on steps of 0.5, 1
# and 2, and one quantization of Gaussian data errs by q = 0.095 RMS relative (RNE,
# measured; test_grouped_gemm_nvfp4.py), stochastic rounding by sqrt(2)·q = 0.135. The
# longest path is dW1 = dhᵀx: the library's dy (stochastic) against the reference's
# (round-to-nearest) sqrt(3)·q, dh's stochastic copy sqrt(2)·q, x's Hadamard-transformed
# columnwise copy against the reference's rowwise one sqrt(2)·q: sqrt(7)·q = 0.25
# (measured at most 0.256 over the registry; dx 0.22, dW2 0.20, out 0.08; max 3.2).
RMS_BOUNDS = {"bf16": 2.0**-7, "mxfp8": 2.0**-4, "fp8_block": 2.0**-4, "nvfp4": 2.0**-1}
# bf16's max: a tail statistic (0.127 seen once on fresh data: SReLU's dW2, one expert owning every row).
MAX_BOUNDS = {"bf16": 2.0**-2, "mxfp8": 2.0, "fp8_block": 2.0, "nvfp4": 8.0}


# (T rows, splits): several 32-row tiles with partial ones, an empty expert in the middle
# and the last, pad rows past the sum; one expert owning every row; G = 1; no rows.
CASES = {
    "ragged": (100, [30, 0, 45, 20, 0]),
    "one_owns_all": (70, [0, 70, 0]),
    "g1": (45, [45]),
    "no_rows": (0, [0, 0]),
}
# (d, n) per recipe: the quantized recipes' block multiples (32; FP8-block 128).
DIMS = {"bf16": (64, 32), "mxfp8": (64, 32), "fp8_block": (128, 128), "nvfp4": (64, 32)}


def n1_of(name, n):
    return 2 * n if moe.ACTIVATIONS[name].glu else n


def make_inputs(rng, name, recipe, case, bias=True, cases=CASES, dims=DIMS):
    """numpy inputs: x [T, d], probs [T] in (0, 1], splits, w1, w2 scaled for unit-RMS
    activations, b1, b2 (fp32), dy [T, d]; `cases` and `dims` as CASES and DIMS."""
    rows, sizes = cases[case]
    d, n = dims[recipe]
    g, n1 = len(sizes), n1_of(name, n)
    inp = dict(
        x=rng.standard_normal((rows, d)).astype(BF16),
        probs=(1.0 - rng.random(rows)).astype(np.float32),
        splits=np.array(sizes, np.int32),
        w1=(rng.standard_normal((g, n1, d)) / np.sqrt(d)).astype(BF16),
        w2=(rng.standard_normal((g, d, n)) / np.sqrt(n)).astype(BF16),
        dy=rng.standard_normal((rows, d)).astype(BF16),
    )
    if bias:
        inp["b1"] = (0.5 * rng.standard_normal((g, n1))).astype(np.float32)
        inp["b2"] = (0.5 * rng.standard_normal((g, d))).astype(np.float32)
    return inp


def params_of(inp, as_list=False):
    p = {k: inp[k] for k in ("w1", "w2", "b1", "b2") if k in inp}
    if as_list:
        p["w1"], p["w2"] = list(p["w1"]), list(p["w2"])
    return p


def dequantized_inputs(inp, recipe, to_device=lambda a: a, to_numpy=np.asarray):
    """float64 values of the inputs as the recipe's forward GEMMs see them, quantized where
    to_device puts them (the quantizers are bit-exact on both backends)."""
    f = {k: np.asarray(v, np.float64) for k, v in inp.items()}
    if recipe == "bf16":
        return f
    weights = {"fp8_block": dict(block=(128, 128)), "nvfp4": dict(tile2d=True)}.get(recipe, {})
    for k in ("x", "dy", "w1", "w2"):
        shape = inp[k].shape
        q = moe.quantize(to_device(inp[k].reshape(-1, shape[-1])), recipe, **({} if k in ("x", "dy") else weights))
        f[k] = np.asarray(to_numpy(moe.dequantize(q)), np.float64).reshape(shape)
    return f


def forward_backward(f, cfg, needs=None):
    """{out, dx, dprobs, dw1, dw2, db1, db2} in float64 over the groups' rows (None where
    `needs` says frozen), f: float64 inputs (dequantized_inputs)."""
    name, p = cfg.activation, full_params(cfg.activation, cfg.act_params)
    glu = moe.ACTIVATIONS[name].glu
    x, s, w1, w2, dy = f["x"], f["probs"], f["w1"], f["w2"], f["dy"]
    off = offsets(f["splits"], x.shape[0])
    rows, d = off[-1], x.shape[1]
    g_count, n1 = w1.shape[0], w1.shape[1]
    r = {"out": np.zeros((rows, d)), "dx": np.zeros((rows, d)), "dprobs": np.zeros(rows)}
    r |= {"dw1": np.zeros(w1.shape), "dw2": np.zeros(w2.shape), "db1": np.zeros((g_count, n1))}
    r["db2"] = np.zeros((g_count, d))
    for g in range(g_count):
        a0, e = off[g], off[g + 1]
        xg, sg, dyg = x[a0:e], s[a0:e, None], dy[a0:e]
        h = xg @ w1[g].T + (f["b1"][g] if cfg.bias else 0.0)
        if glu:
            ha, hb = glu_split(h, cfg.interleave)
            fv, _, (da, db), _ = reference(name)(ha, hb, **p)
        else:
            fv, _, dfv, _ = reference(name)(h, **p)
        y = sg * fv
        b2 = f["b2"][g] if cfg.bias else np.zeros(d)
        r["out"][a0:e] = y @ w2[g].T + (b2 * sg if cfg.scaled_bias else b2)
        dA = dyg @ w2[g]
        dh = glu_merge(dA * sg * da, dA * sg * db, cfg.interleave) if glu else dA * sg * dfv
        r["dprobs"][a0:e] = (dA * fv).sum(axis=1) + ((dyg * b2).sum(axis=1) if cfg.scaled_bias else 0.0)
        r["dx"][a0:e] = dh @ w1[g]
        r["dw1"][g], r["dw2"][g] = dh.T @ xg, dyg.T @ y
        r["db1"][g] = dh.sum(axis=0)
        r["db2"][g] = (dyg * sg).sum(axis=0) if cfg.scaled_bias else dyg.sum(axis=0)
    if not cfg.bias:
        r["db1"] = r["db2"] = None
    needs = dict(needs or {})
    # The API's rule: a bias's gradient follows its weight's unless given.
    needs.setdefault("b1", needs.get("w1", True))
    needs.setdefault("b2", needs.get("w2", True))
    for k, need in needs.items():
        if not need and f"d{k}" in r:
            r[f"d{k}"] = None
    return r


def rows_of(got, rows):
    """The float64 values of the first `rows` rows (the groups' rows) of an output."""
    return np.asarray(got, np.float64)[:rows]
