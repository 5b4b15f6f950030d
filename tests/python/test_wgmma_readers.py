"""Loops that read a wgmma group's result with other ops: the accumulator rescaled in
its iteration, an fp8 partial sum (zero accumulator, one step of <= 128: not promoted)
scaled in its iteration or the next. On the interpreter against float64; for sm_90a, the
PTX waits for the group before the read (ptxas neither injects a wait, C7517, nor
serializes the loop, C7514)."""

import shutil

import ml_dtypes
import numpy as np
import pytest
from tilefuse import gpu

from tests import wgmma_reader_kernels as wk
from tests.ptxas import PTXAS, assert_assembles

BF16, FP8 = ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn
rng = np.random.default_rng()


def fp8_inputs(m, n, k, bk):
    a = rng.standard_normal((m, k)).astype(FP8)
    b = rng.standard_normal((n, k)).astype(FP8)
    s = 2.0 ** rng.integers(-3, 4, k // bk).astype(np.float32)
    return a, b, s


def test_rescale_on_the_interpreter():
    m, n, k, bk = 64, 32, 96, 32
    a, b = (rng.standard_normal(sh).astype(BF16) for sh in ((m, k), (k, n)))
    c = np.full((m, n), np.nan, np.float32)
    wk.rescale_matmul[(2, 1)](a, b, c, m, n, k, BM=32, BN=32, BK=bk)
    ref = wk.rescale_reference(a, b, bk)
    # fp32 sums of bf16 products (exact in fp32): a few fp32 roundings of |a||b| sums
    bound = 2.0**-20 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))
    assert (np.abs(c - ref) <= bound).all()


@pytest.mark.parametrize("carry", [False, True])
def test_fp8_scaled_steps_on_the_interpreter(carry):
    m, n, k, bk = 64, 32, 128, 32
    a, b, s = fp8_inputs(m, n, k, bk)
    c = np.full((m, n), np.nan, np.float32)
    wk.fp8_scaled_steps[(2, 1)](a, b, s, c, m, n, k, BM=32, BN=32, BK=bk, CARRY=carry)
    ref = wk.fp8_scaled_reference(a, b, s, bk)
    scale = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)).T * s.max()
    assert (np.abs(c - ref) <= 2.0**-20 * scale).all()


def ptx_report(kernel, args, meta, tmp_path):
    low = gpu.lower(kernel.compile(*args, **meta), "sm_90a", 8, 3, keep_ir=False)
    assert low["hints"] == []
    return low["ptx"], assert_assembles(low["ptx"], "sm_90a", tmp_path, verbose=True)


@pytest.mark.skipif(not shutil.which("ptxas") and not shutil.os.path.exists(PTXAS), reason="needs ptxas")
def test_rescale_waits_before_the_read(tmp_path):
    m = n = k = 512
    args = (np.zeros((m, k), BF16), np.zeros((k, n), BF16), np.zeros((m, n), np.float32), m, n, k)
    ptx, report = ptx_report(wk.rescale_matmul, args, dict(BM=128, BN=128, BK=64), tmp_path)
    assert "cp.async.cg.shared.global" in ptx and "wgmma.wait_group.sync.aligned 0;" in ptx
    assert "C7517" not in report and "C7514" not in report, report


@pytest.mark.skipif(not shutil.which("ptxas") and not shutil.os.path.exists(PTXAS), reason="needs ptxas")
def test_fp8_step_in_its_iteration_is_not_promoted(tmp_path):
    m = n = k = 512
    a, b, s = fp8_inputs(m, n, k, 128)
    args = (a, b, s, np.zeros((m, n), np.float32), m, n, k)
    ptx, report = ptx_report(wk.fp8_scaled_steps, args, dict(BM=128, BN=128, BK=128, CARRY=False), tmp_path)
    # one group of four k32 instructions, the first with scale-d off (p = 0 + ...), waited
    # before its scaled add: 64 FMUL + 64 FADD per thread, no promotion's extra adds
    assert ptx.count("wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3") == 4
    assert ptx.count("setp.ne.b32 p, 0, 0;") == 1
    assert ptx.count("add.rn.f32") == 64 and ptx.count("mul.rn.f32") == 64
    assert "C7517" not in report and "C7514" not in report and "0 bytes spill stores" in report, report
