"""The grouped GEMM kernels as the host API launches them with its GPU config (the
forward with each bias kind, both weight forms, MXFP8 and FP8-block operands; the dgrad,
also on MXFP8 and FP8-block; the wgrad; the schedule and transpose kernels) lower for
sm_90a to PTX that ptxas accepts, with every K loop on pipelined wgmma (cp.async into a
ring of stages) and no missed fast path (TILEFUSE_PERF_HINTS)."""

import shutil

import numpy as np
import pytest
from tilefuse import gpu, moe

from kernels_dsl.moe import grouped_gemm as kernels
from tests.ptxas import PTXAS, assert_assembles
from tests.python.moe.gemm_reference import BF16

GEMMS = ("grouped_gemm_kernel", "grouped_wgrad_kernel", "grouped_gemm_fp8_kernel")


class Recorder:
    """Stands in for a kernel in kernels_dsl.moe.grouped_gemm: records each launch, then launches."""

    def __init__(self, kernel, seen):
        self.kernel, self.seen = kernel, seen

    def __getitem__(self, grid):
        def launch(*args, **meta):
            self.seen.append((self.kernel, args, meta))
            return self.kernel[grid](*args, **meta)

        return launch


def launches(monkeypatch, call):
    seen = []
    for name in ("group_offsets", "group_tiles", "transpose_groups", *GEMMS):
        monkeypatch.setattr(kernels, name, Recorder(getattr(kernels, name), seen))
    call()
    return seen


rng = np.random.default_rng()
R, K, N, G = 256, 128, 192, 3
x, dy = (rng.standard_normal(s).astype(BF16) for s in ((R, K), (R, N)))
w = rng.standard_normal((G, N, K)).astype(BF16)
splits = np.array([100, 0, 120], np.int32)
bias, probs = rng.standard_normal((G, N)).astype(np.float32), rng.random(R).astype(np.float32)
qx, qw = moe.quantize(x, "mxfp8"), moe.quantize(w.reshape(G * N, K), "mxfp8", fmt="e5m2")
w128 = np.ascontiguousarray(w[:, :128]).reshape(G * 128, K)  # FP8-block: whole 128-blocks
bx, bw, bw_t = (
    moe.quantize(x, "fp8_block"),
    moe.quantize(w128, "fp8_block", block=(128, 128)),
    moe.quantize(w128, "fp8_block", block=(128, 128), axis=0),
)
bd, qd, qw_t = (
    moe.quantize(np.ascontiguousarray(dy[:, :128]), "fp8_block"),
    moe.quantize(dy, "mxfp8"),
    moe.quantize(w.reshape(G * N, K), "mxfp8", axis=0),
)
CALLS = {
    "forward": lambda c: moe.grouped_gemm(x, w, splits, config=c),
    "forward_list": lambda c: moe.grouped_gemm(x, list(w), splits, config=c),
    "forward_bias": lambda c: moe.grouped_gemm(x, w, splits, bias, config=c),
    "forward_scaled_bias_fp32": lambda c: moe.grouped_gemm(x, w, splits, bias, probs, out_dtype="float32", config=c),
    "dgrad": lambda c: moe.grouped_gemm_dgrad(dy, w, splits, config=c),
    "dgrad_list": lambda c: moe.grouped_gemm_dgrad(dy, list(w), splits, config=c),
    "wgrad": lambda c: moe.grouped_gemm_wgrad(dy, x, splits, config=c),
    "forward_mxfp8": lambda c: moe.grouped_gemm(qx, qw, splits, config=c),
    "forward_mxfp8_scaled_bias": lambda c: moe.grouped_gemm(qx, qw, splits, bias, probs, config=c),
    "forward_fp8_block": lambda c: moe.grouped_gemm(bx, bw, splits, config=c),
    "dgrad_mxfp8": lambda c: moe.grouped_gemm_dgrad(qd, qw_t, splits, config=c),
    "dgrad_fp8_block": lambda c: moe.grouped_gemm_dgrad(bd, bw_t, splits, config=c),
    "wgrad_fp32": lambda c: moe.grouped_gemm_wgrad(dy, x, splits, out_dtype="float32", config=c),
}


@pytest.mark.skipif(not shutil.which("ptxas") and not shutil.os.path.exists(PTXAS), reason="needs ptxas")
@pytest.mark.parametrize("call", CALLS)
def test_kernels_are_on_the_fast_path(monkeypatch, tmp_path, call):
    cfg = moe.GemmConfig()  # the GPU's default
    seen = launches(monkeypatch, lambda: CALLS[call](cfg))
    assert {k.__name__ for k, _, _ in seen} >= {"group_offsets", "group_tiles"}
    for kernel, args, meta in seen:
        warps, stages = meta.pop("num_warps", 4), meta.pop("num_stages", 3)
        low = gpu.lower(kernel.compile(*args, **meta), "sm_90a", warps, stages, keep_ir=False)
        assert low["hints"] == [], (kernel.__name__, low["hints"])
        assert_assembles(low["ptx"], "sm_90a", tmp_path)
        if kernel.__name__ in GEMMS:
            mma = {
                "forward_mxfp8": "m64n128k32.f32.e4m3.e5m2",
                "dgrad_mxfp8": "m64n128k32.f32.e4m3.e4m3",
                "fp8_block": "m64n128k32.f32.e4m3.e4m3",
            }
            mma = next((v for key, v in mma.items() if key in call), "m64n128k16.f32.bf16.bf16")
            assert f"wgmma.mma_async.sync.aligned.{mma}" in low["ptx"]
            assert "cp.async.cg.shared.global" in low["ptx"]
