"""moe.grouped_gemm_wgrad on block-scaled fp8 columnwise copies (MXFP8 e4m3 / e5m2,
FP8-block 1 x 128) on the interpreter: the copies in the MLP's padded layout (each group
whole blocks of rows, so the fp32 promotion per block never mixes two groups) against
float64 of the dequantized copies with the fp32-accumulation bound, several tiles and
partial tiles, empty experts (the last too), one expert owning every row, G = 1, and
bad input."""

import numpy as np
import pytest
from tilefuse import moe
from tilefuse.moe import _mlp_ops as ops

from tests.python.moe import gemm_reference as ref
from tests.python.moe.test_grouped_gemm import bf16

CASES = {"several": (150, [40, 0, 61, 33, 0]), "one_owns_all": (100, [0, 100, 0]), "g1": (90, [77])}
# (recipe, dy's fmt): gradients may be E5M2 under MXFP8.
RECIPES = [("mxfp8", "e4m3"), ("mxfp8", "e5m2"), ("fp8_block", "e4m3")]
CONFIGS = {"mxfp8": moe.GemmConfig(32, 32, 32, 4, 2), "fp8_block": moe.GemmConfig(32, 64, 64, 4, 2)}


def _scattered(a, splits, rp, blk):
    """a's groups from multiples of blk rows of an [rp, ·] zero array (the padded layout)."""
    out = np.zeros((rp, a.shape[1]), a.dtype)
    off, col = ref.offsets(splits, a.shape[0]), 0
    for g in range(len(splits)):
        size = off[g + 1] - off[g]
        out[col : col + size] = a[off[g] : off[g + 1]]
        col += -(-size // blk) * blk
    return out


@pytest.mark.parametrize("recipe,fmt", RECIPES)
@pytest.mark.parametrize("name", CASES)
def test_wgrad(rng, name, recipe, fmt):
    rows, sizes = CASES[name]
    n, k = (64, 96) if recipe == "mxfp8" else (128, 256)
    splits = np.array(sizes, np.int32)
    dy, x = bf16(rng, rows, n), bf16(rng, rows, k)
    dy[: rows // 3] *= 2.0**-14  # blocks of very different scales
    blk = ops.COL_BLOCK[recipe]
    rp = ops.padded_rows(rows, len(sizes), recipe)
    qd = moe.quantize(_scattered(dy, splits, rp, blk), recipe, axis=0, **({"fmt": fmt} if recipe == "mxfp8" else {}))
    qx = ops.quantize_cols(x, recipe, splits)
    psplits = ops.padded_splits(dy, splits, rows, recipe)
    assert (psplits % blk == 0).all()
    for out_dtype in ("bfloat16", "float32"):
        dw = moe.grouped_gemm_wgrad(qd, qx, psplits, out_dtype=out_dtype, config=CONFIGS[recipe])
        want, mag = ref.wgrad(moe.dequantize(qd), moe.dequantize(qx), psplits)
        ref.check(dw, want, mag, int(psplits.max()), out_dtype, "dw", recipe="mxfp8")
        assert not np.asarray(dw, np.float64)[psplits == 0].any(), "an empty expert's dw is not 0"


def test_bad_input(rng):
    a = bf16(rng, 128, 128)
    splits = np.array([64, 64], np.int32)
    mx, blk = moe.quantize(a, "mxfp8", axis=0), moe.quantize(a, "fp8_block", axis=0)
    bad = [
        (lambda: moe.grouped_gemm_wgrad(moe.quantize(a, "mxfp8"), mx, splits), "dy must be a columnwise"),
        (lambda: moe.grouped_gemm_wgrad(mx, blk, splits), "share a recipe"),
        (
            lambda: moe.grouped_gemm_wgrad(mx, moe.quantize(bf16(rng, 32, 128), "mxfp8", axis=0), splits),
            "x has 32 rows",
        ),
    ]
    for call, text in bad:
        with pytest.raises(ValueError, match=text):
            call()
    q = moe.quantize(a, "fp8_block", axis=0, block=(128, 128))
    with pytest.raises(ValueError, match="1 x 128 blocks"):
        moe.grouped_gemm_wgrad(q, q, splits)
