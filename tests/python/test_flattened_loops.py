"""Flattened persistent loops (one pipelined loop over every (tile, K step) of a program,
the epilogue under an `if` at a tile's last step): kernels_dsl/tutorials/matmul_persistent.py
and the grouped GEMM's flattened form (tests/shared_kernels.py) on the interpreter against float64 and
bit for bit against their nested forms, and what the GPU stage makes of them for sm_90a:
pipelined with no perf hint, the accumulator restarted by the wgmma's scale-d flag (no
zeroed registers), the wait for the tensor cores only in the storing branch."""

import re
import shutil

import ml_dtypes
import numpy as np
import pytest
from tilefuse import gpu, moe

from kernels_dsl.moe import grouped_gemm as G
from kernels_dsl.tutorials.matmul_persistent import matmul_flat_kernel, matmul_persistent_kernel
from tests.ptxas import PTXAS, assert_assembles
from tests.shared_kernels import grouped_gemm_flat_kernel

BF16 = ml_dtypes.bfloat16


@pytest.mark.parametrize("shape", [(96, 80, 100), (64, 64, 32), (40, 128, 96)])
@pytest.mark.parametrize("programs", [1, 3, 7])
def test_flat_matmul_equals_nested_and_float64(rng, shape, programs):
    M, N, K = shape
    a, b = rng.standard_normal((M, K)).astype(BF16), rng.standard_normal((N, K)).astype(BF16)
    flat, nested = np.zeros((M, N), BF16), np.zeros((M, N), BF16)
    for kernel, c in ((matmul_flat_kernel, flat), (matmul_persistent_kernel, nested)):
        kernel[(programs,)](a, b, c, M, N, K, BM=32, BN=32, BK=32)
    assert np.array_equal(flat.view(np.int16), nested.view(np.int16))
    ref = a.astype(np.float64) @ b.astype(np.float64).T
    # one bf16 rounding of an fp32 sum of K products
    bound = 2.0**-8 * np.abs(ref) + K * 2.0**-23 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)).T)
    assert (np.abs(flat.astype(np.float64) - ref) <= bound).all()


@pytest.mark.parametrize("dgrad", [False, True])
def test_grouped_flat_kernel_is_bitwise_the_nested_one(rng, monkeypatch, dgrad):
    R, K, N = 300, 96, 64
    x, dy = rng.standard_normal((R, K)).astype(BF16), rng.standard_normal((R, N)).astype(BF16)
    w = rng.standard_normal((5, N, K)).astype(BF16)
    splits = np.array([40, 0, 161, 33, 50], np.int32)
    cfg = moe.GemmConfig(32, 32, 32, 4, 2, True)

    def call():
        if dgrad:
            return moe.grouped_gemm_dgrad(dy, w, splits, config=cfg)
        return moe.grouped_gemm(x, w, splits, config=cfg)

    nested = call()
    monkeypatch.setattr(G, "grouped_gemm_persistent_kernel", grouped_gemm_flat_kernel)
    flat = call()
    end = int(splits.sum())
    assert np.array_equal(flat[:end].view(np.int16), nested[:end].view(np.int16))


@pytest.mark.skipif(not shutil.which("ptxas") and not shutil.os.path.exists(PTXAS), reason="needs ptxas")
def test_flat_loop_lowers_without_serializing(tmp_path):
    a, c = np.zeros((512, 512), BF16), np.zeros((512, 512), BF16)
    low = gpu.lower(matmul_flat_kernel.compile(a, a, c, 512, 512, 512, BM=128, BN=256, BK=64), "sm_90a", 8, 3)
    ptx = low["ptx"]
    assert low["hints"] == [], low["hints"]
    assert "cp.async.bulk.tensor" in ptx
    # The K step's first wgmma takes the carried flag as scale-d; the others accumulate.
    assert len(re.findall(r"setp\.ne\.b32 p, %r\d+, 0;\s*wgmma\.mma_async", ptx)) == 1
    # One wait for every group in the loop (in the storing branch), one after it.
    assert ptx.count("wgmma.wait_group.sync.aligned 0;") == 2
    report = assert_assembles(ptx, "sm_90a", tmp_path, verbose=True)
    assert "C7517" not in report and "0 bytes spill stores" in report, report


@pytest.mark.skipif(not shutil.which("ptxas") and not shutil.os.path.exists(PTXAS), reason="needs ptxas")
def test_grouped_flat_kernel_pipelines_its_schedule_reads(tmp_path):
    x, o = np.zeros((256, 512), BF16), np.zeros((256, 512), BF16)
    w, i = np.zeros((4, 512, 512), BF16), np.zeros(8, np.int32)
    args = (x, w, i, i, o, i, i, i, 4, 256, 512, 512)
    k = grouped_gemm_flat_kernel.compile(*args, DGRAD=False, BIAS=0, BM=128, BO=256, BC=64, GROUP_M=8, WS=False)
    low = gpu.lower(k, "sm_90a", 8, 3)
    assert low["hints"] == [], low["hints"]
    assert_assembles(low["ptx"], "sm_90a", tmp_path)
