"""tl.math on the GPU (libdevice) against the interpreter, for every function of
tests/math_cases.py in f32, f64, f16 and bf16, on the GPU's arch and (in a process with
TILEFUSE_TARGET=sm_80, through the driver's JIT) on sm_80's code: correctly rounded
functions bit for bit; the others within libdevice's stated bound (the CUDA guide's
table, in tests/math_cases.py) plus one ulp for the interpreter's own rounding in f32
and f64, and within one ulp in f16/bf16 (computed in f32 and rounded on both sides)."""

import os
import subprocess
import sys

import numpy as np
import pytest
import tilefuse.language as tl

from tests.math_cases import BINARY, UNARY, binary_kernel, inputs, unary_kernel
from tests.python.language.ops_common import NP, assert_ulp, to_dtype

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]

DTYPES = [tl.float32, tl.float64, tl.float16, tl.bfloat16]
TORCH = {tl.float32: torch.float32, tl.float64: torch.float64, tl.float16: torch.float16, tl.bfloat16: torch.bfloat16}
N = 20011


def _bound(case, d) -> int:
    if case.cuda == (0, 0):
        return 0
    if d == tl.float32:
        return case.cuda[0] + 1
    if d == tl.float64:
        return case.cuda[1] + case.libm + 1
    return 1


def _to_torch(x, d):
    if d == tl.bfloat16:
        return torch.from_numpy(x.view(np.int16).copy()).cuda().view(torch.bfloat16)
    return torch.from_numpy(x.copy()).cuda()


def _to_numpy(t, d):
    if d == tl.bfloat16:
        return t.cpu().view(torch.int16).numpy().view(NP[d])
    return t.cpu().numpy()


@pytest.mark.parametrize("d", DTYPES, ids=str)
@pytest.mark.parametrize("case", UNARY + BINARY, ids=lambda c: c.name)
def test_math_gpu_vs_interpreter(case, d):
    target = os.environ.get("TILEFUSE_TARGET", "the GPU's arch")
    rng = np.random.default_rng()
    npd = NP[d]
    xs = [to_dtype(x, npd) for x in inputs(case, rng, N)]
    kernel = unary_kernel if len(xs) == 1 else binary_kernel
    grid = ((N + 255) // 256,)
    host = np.full(N, np.nan, npd)
    kernel[grid](*xs, host, N, NAME=case.name, BLOCK=256)
    dev = torch.full((N,), float("nan"), dtype=TORCH[d], device="cuda")
    kernel[grid](*[_to_torch(x, d) for x in xs], dev, N, NAME=case.name, BLOCK=256)
    torch.cuda.synchronize()
    assert_ulp(_to_numpy(dev, d), host, _bound(case, d), f"{case.name} {d} on {target}", inputs=xs[0])


def test_math_on_sm_80_code():
    if os.environ.get("TILEFUSE_TARGET"):
        pytest.skip("this process is the sm_80 run")
    env = dict(os.environ, TILEFUSE_TARGET="sm_80")
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", __file__, "-k", "gpu_vs_interpreter"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]
