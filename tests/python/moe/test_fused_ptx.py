"""The fused FC1 and FC2-dgrad kernels as moe.fc1_forward / moe.fc2_dgrad launch them with
their GPU configs (bf16, MXFP8 and FP8-block operands and outputs; unary and GLU
activations in every layout; bias, accumulator mode, recompute) lower for sm_90a to PTX
that ptxas accepts, with the K loop on pipelined wgmma (cp.async into a ring of stages;
both dots of a GLU in one loop) and no missed fast path (TILEFUSE_PERF_HINTS); NVFP4's
GEMM and its two-pass epilogue kernels (amax, S_enc, encode) likewise."""

import shutil

import numpy as np
import pytest
from tilefuse import gpu, moe

from kernels_dsl.moe import fused, gemm_nvfp4, grouped_gemm
from tests.ptxas import PTXAS, assert_assembles
from tests.python.moe.gemm_reference import BF16

GEMMS = ("fc1_kernel", "fc2_dgrad_kernel")


class Recorder:
    """Stands in for a kernel: records each launch instead of running it (the host API
    never reads what its kernels write)."""

    def __init__(self, kernel, seen):
        self.kernel, self.seen = kernel, seen

    def __getitem__(self, grid):
        return lambda *args, **meta: self.seen.append((self.kernel, args, meta))


KERNELS = [
    (mod, name, getattr(mod, name))
    for mod, names in (
        (grouped_gemm, ("group_offsets", "group_tiles")),
        (fused, (*GEMMS, "dprobs_kernel", "fc1_nvfp4_kernel", "fc2_nvfp4_kernel", "nvfp4_scale")),
        (gemm_nvfp4, ("grouped_gemm_nvfp4_kernel",)),
    )
    for name in names
]


def launches(monkeypatch, call):
    seen = []
    for mod, name, kernel in KERNELS:
        monkeypatch.setattr(mod, name, Recorder(kernel, seen))
    call()
    return seen


rng = np.random.default_rng()
R, D, N, G = 256, 512, 512, 4  # N / 32 = 16: scale rows the launch specializes as multiples of 16
splits = np.array([100, 0, 120, 0], np.int32)
probs = rng.random(R).astype(np.float32)
x, dy = (rng.standard_normal((R, D)).astype(BF16) for _ in range(2))
WB = {"mxfp8": {}, "fp8_block": dict(block=(128, 128)), "nvfp4": dict(tile2d=True)}  # the weights' blocks
# The operands' copies: the dgrad's weights columnwise (NVFP4: the rowwise 16 x 16 tiles,
# read transposed), NVFP4's dy by stochastic rounding.
W2_AXIS = {"mxfp8": 0, "fp8_block": 0, "nvfp4": -1}
DY = {"nvfp4": dict(stochastic=True, seed=7)}


def operands(name, recipe):
    """(x, w1, dy, w2) as the recipe takes them, C, a bias."""
    n1 = 2 * N if moe.ACTIVATIONS[name].glu else N
    w1, w2 = rng.standard_normal((G, n1, D)).astype(BF16), rng.standard_normal((G, D, N)).astype(BF16)
    c, bias = rng.standard_normal((R, n1)).astype(BF16), rng.standard_normal((G, n1)).astype(np.float32)
    if recipe == "bf16":
        return (x, w1, dy, w2), c, bias
    q = (
        moe.quantize(x, recipe),
        moe.quantize(w1.reshape(-1, D), recipe, **WB[recipe]),
        moe.quantize(dy, recipe, **DY.get(recipe, {})),
        moe.quantize(w2.reshape(-1, N), recipe, axis=W2_AXIS[recipe], **WB[recipe]),
    )
    return q, c, bias


def calls(name, interleave, recipe, cfg):
    (a1, b1, a2, b2), c, bias = operands(name, recipe)
    kw = dict(interleave=interleave, act_params={"c_s": 2.0} if name == "tanh_srelu" else None, config=cfg)
    seeds = (3, 5) if recipe == "nvfp4" else None
    return [
        lambda: moe.fc1_forward(a1, b1, splits, probs, name, recipe, bias=bias, bias_scale=probs, **kw),
        lambda: moe.fc1_forward(a1, b1, splits, probs, name, recipe, mode="accumulator", **kw),
        lambda: moe.fc2_dgrad(a2, b2, splits, c, probs, name, recipe, recompute=True, seeds=seeds, **kw),
    ]


CONFIGS = {"default": moe.GemmConfig(), "n64": moe.GemmConfig(128, 64, 64, 4, 3)}
# Every activation on each recipe's default; the GLU layouts, the second config and
# FP8-block on representatives (each case compiles and assembles up to six kernels).
CASES = [
    *((name, 0, recipe, "default") for name in moe.ACTIVATIONS for recipe in ("bf16", "mxfp8")),
    *(("swiglu", k, recipe, "default") for k in (32, 16, 1) for recipe in ("bf16", "mxfp8")),
    ("clamped_swiglu", 1, "mxfp8", "n64"),
    ("swiglu", 0, "bf16", "n64"),
    ("srelu", 0, "mxfp8", "n64"),
    *((name, k, "fp8_block", "default") for name, k in (("swiglu", 0), ("swiglu", 1), ("gelu_erf", 0))),
    ("clamped_swiglu", 32, "nvfp4", "default"),  # one: its PTX (the Hadamard terms unrolled) is large
]
CHECKED = set()


@pytest.mark.skipif(not shutil.which("ptxas") and not shutil.os.path.exists(PTXAS), reason="needs ptxas")
@pytest.mark.parametrize("name,interleave,recipe,config", CASES)
def test_fused_kernels_are_on_the_fast_path(monkeypatch, tmp_path, name, interleave, recipe, config):
    cfg = CONFIGS[config]
    for call in calls(name, interleave, recipe, cfg):
        for kernel, args, meta in launches(monkeypatch, call):
            if kernel.__name__ == "grouped_gemm_nvfp4_kernel":
                continue  # recorded, not run; its own PTX checks: test_grouped_gemm_nvfp4.py
            warps, stages = meta.pop("num_warps", 4), meta.pop("num_stages", 3)
            compiled = kernel.compile(*args, **meta)
            if (compiled, warps, stages) in CHECKED:
                continue
            low = gpu.lower(compiled, "sm_90a", warps, stages, keep_ir=False)
            assert low["hints"] == [], (kernel.__name__, low["hints"])
            assert_assembles(low["ptx"], "sm_90a", tmp_path)
            CHECKED.add((compiled, warps, stages))
            if kernel.__name__ in GEMMS:
                mma = "k16.f32.bf16.bf16" if recipe == "bf16" else "k32.f32.e4m3.e4m3"
                assert f"wgmma.mma_async.sync.aligned.m64n{cfg.block_n}{mma}" in low["ptx"]
                assert "cp.async.cg.shared.global" in low["ptx"]
