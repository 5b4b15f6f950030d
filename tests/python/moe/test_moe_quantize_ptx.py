"""The quantizer kernels as the host API launches them (every recipe, option and axis)
lower for sm_90a and sm_89 (fp8 casts need sm_89) to PTX that ptxas accepts, and none
reports a missed fast path (TILEFUSE_PERF_HINTS) on sm_90a."""

import shutil

import ml_dtypes
import numpy as np
import pytest
from tilefuse import gpu, moe
from tilefuse.moe import quant

from tests.ptxas import PTXAS, assert_assembles

OPTIONS = [
    dict(recipe="mxfp8"),
    dict(recipe="mxfp8", axis=0, fmt="e5m2"),
    dict(recipe="fp8_block"),
    dict(recipe="fp8_block", axis=0, block=(128, 128)),
    dict(recipe="nvfp4"),
    dict(recipe="nvfp4", tile2d=True, axis=0),
    dict(recipe="nvfp4", axis=0, rht=True, stochastic=True, seed=3),
]


def launches(monkeypatch, options):
    """(kernel, args, constexprs, num_warps) of every launch of quantize + dequantize."""
    seen = []
    real = quant._launch

    def record(kernel, grid, *args, **meta):
        seen.append((kernel, args, {k: v for k, v in meta.items() if k != "num_warps"}, meta.get("num_warps", 4)))
        real(kernel, grid, *args, **meta)

    monkeypatch.setattr(quant, "_launch", record)
    x = np.zeros((256, 256), ml_dtypes.bfloat16)
    moe.dequantize(moe.quantize(x, **options))
    return seen


@pytest.mark.skipif(not shutil.which("ptxas") and not shutil.os.path.exists(PTXAS), reason="needs ptxas")
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
def test_quantizers_assemble_without_hints(monkeypatch, tmp_path, options):
    for kernel, args, consts, warps in launches(monkeypatch, options):
        compiled = kernel.compile(*args, **consts)
        for arch in ("sm_90a", "sm_89"):
            low = gpu.lower(compiled, arch, warps, 3, keep_ir=False)
            assert_assembles(low["ptx"], arch, tmp_path)
            if arch == "sm_90a":
                assert low["hints"] == [], (kernel.__name__, low["hints"])
