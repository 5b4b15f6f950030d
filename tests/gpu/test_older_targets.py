"""The sm_80 and sm_89 code paths on the Hopper GPU: a process with TILEFUSE_TARGET set
compiles every launch for that arch (FMA and mma.sync dots, no wgmma, no TMA, no
pipelining) and the driver JIT-compiles the PTX for the GPU at hand."""

import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]

SCRIPT = r"""
import sys

import numpy as np
import torch
import tilefuse as tf

from kernels_dsl.tutorials import matmul, softmax
from tests.gpu.dot8_case import run_dot8

target = sys.argv[1]
checked = 0

# The tutorial matmul: fp32 on FMAs, bf16/f16 on mma.sync m16n8k16 with the accumulator in
# registers; tiles with more and with fewer mma tiles than warps; M, N, K edges.
for dtype in (torch.float32, torch.bfloat16, torch.float16):
    for bm, bn, bk, warps in ((64, 64, 32, 4), (128, 128, 32, 8), (32, 64, 64, 4), (16, 16, 16, 4)):
        m, n, k = 100, 77, 96
        a = torch.randn(m, k, device="cuda").to(dtype)
        b = torch.randn(k, n, device="cuda").to(dtype)
        c = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
        args = (m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
        meta = dict(BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=8, ACTIVATION="")
        ptx = matmul.matmul_kernel.warmup(a, b, c, *args, grid=(1,), num_warps=warps, **meta).asm["ptx"]
        assert f".target {target}" in ptx and "wgmma" not in ptx and "cp.async.bulk" not in ptx
        assert ("mma.sync.aligned.m16n8k16" in ptx) == (dtype != torch.float32), (dtype, bm, bn)
        grid = (tf.cdiv(m, bm) * tf.cdiv(n, bn),)
        matmul.matmul_kernel[grid](a, b, c, *args, num_warps=warps, **meta)
        ref = (a.double() @ b.double()).cpu().numpy()
        tol = {torch.bfloat16: 2**-7, torch.float16: 2**-10}.get(dtype, k * 2**-23 * 4)
        np.testing.assert_allclose(c.double().cpu().numpy(), ref, rtol=tol, atol=tol * np.sqrt(k))
        checked += 1

# 8-bit dots on mma.sync m16n8k32: int8 from sm_80 (exact), fp8 from sm_89.
dtypes = [torch.int8] + ([torch.float8_e4m3fn, torch.float8_e5m2] if target >= "sm_89" else [])
for dtype in dtypes:
    for m, n, k, bk, warps in ((64, 64, 128, 64, 4), (128, 64, 64, 32, 8)):
        for bt in (False, True):
            ptx = run_dot8(dtype, m, n, k, bk, bt, warps)
            assert "mma.sync.aligned.m16n8k32" in ptx and "wgmma" not in ptx
            checked += 1

x = torch.randn(37, 100, device="cuda")
out = torch.full_like(x, float("nan"))
softmax.softmax_kernel[(37,)](out, x, x.stride(0), out.stride(0), 100, BLOCK_SIZE=128)
np.testing.assert_allclose(out.cpu().numpy(), torch.softmax(x.double(), 1).cpu().numpy(), rtol=1e-5, atol=1e-7)
checked += 1
print("OK", checked)
"""


@pytest.mark.parametrize("target", ["sm_80", "sm_89"])
def test_older_targets_run_through_the_driver_jit(target, tmp_path):
    script = tmp_path / "older_target.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, TILEFUSE_TARGET=target)
    r = subprocess.run([sys.executable, str(script), target], capture_output=True, text=True, env=env, timeout=400)
    assert r.returncode == 0, r.stdout + r.stderr
    expected = 12 + (4 if target == "sm_80" else 12) + 1
    assert f"OK {expected}" in r.stdout, r.stdout
