"""Flattened persistent loops on the GPU (tests/python/test_flattened_loops.py's kernels):
the tutorial's flat matmul bit for bit its nested form and against float64, over tile
configs, stage counts and ragged M, N, K (the restarted accumulator, the branch's wait
and its layout conversion); the grouped GEMM's flat kernel bit for bit the library's
persistent kernel over ragged groups, forward and dgrad, and against float64."""

import pytest
from tilefuse import moe

from kernels_dsl.moe import grouped_gemm as G
from kernels_dsl.tutorials.matmul_persistent import matmul_flat_kernel, matmul_persistent_kernel
from tests.gpu.pair_checks import check_grouped_pair, check_matmul_pair, grouped_operands
from tests.shared_kernels import grouped_gemm_flat_kernel

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]

CONFIGS = [(128, 256, 64, 8, 3), (128, 128, 64, 8, 4), (128, 128, 64, 4, 3), (64, 128, 64, 4, 4)]


@pytest.mark.parametrize("shape", [(1000, 520, 712), (2048, 1024, 64), (384, 2048, 4096)])
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "x".join(map(str, c)))
def test_flat_matmul(shape, config):
    kernels = [(matmul_flat_kernel, {}), (matmul_persistent_kernel, {})]
    check_matmul_pair(kernels, shape, config, 132, shape[0] * shape[1] + shape[2])


@pytest.mark.parametrize("dgrad", [False, True])
@pytest.mark.parametrize("splits", [[900, 0, 1500, 37, 1, 1200, 0], [4096], [1, 2, 3, 4000]])
def test_grouped_flat_kernel(monkeypatch, splits, dgrad):
    x, dy, w, s = grouped_operands(splits, len(splits))
    cfg = moe.GemmConfig(128, 256, 64, 8, 3, True)

    def call():
        return moe.grouped_gemm_dgrad(dy, w, s, config=cfg) if dgrad else moe.grouped_gemm(x, w, s, config=cfg)

    nested = call()
    monkeypatch.setattr(G, "grouped_gemm_persistent_kernel", grouped_gemm_flat_kernel)
    flat = call()
    check_grouped_pair([flat, nested], splits, dy if dgrad else x, w, dgrad)
