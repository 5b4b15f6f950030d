"""The MLP's own kernels (kernels_dsl/moe/mlp.py: the padding cast, grouped bias gradients,
the scaled bias's dprobs, the splits check), as mlp_forward / mlp_backward launch them,
lower for sm_90a to PTX that ptxas accepts, with no missed fast path (TILEFUSE_PERF_HINTS)."""

import shutil

import numpy as np
import pytest
from tilefuse import gpu

from kernels_dsl.moe import mlp as kernels
from tests.ptxas import PTXAS, assert_assembles
from tests.python.moe import mlp_cases as cases
from tests.python.moe import mlp_reference as ref
from tests.python.moe.recorder import Recorder

NAMES = ("cast_rows", "grouped_bias_grad", "scaled_bias_dprobs", "check_splits")
# bf16's FC1 epilogue is moe.fused's kernel, which stores C in bf16 itself: no cast_rows.
LAUNCHED = {"bf16": set(NAMES) - {"cast_rows"}, "mxfp8": set(NAMES)}


def launches(monkeypatch, recipe):
    seen = []
    for name in NAMES:
        monkeypatch.setattr(kernels, name, Recorder(getattr(kernels, name), seen))
    inp = ref.make_inputs(np.random.default_rng(), "swiglu", recipe, "ragged")
    inp |= {"b1": inp["b1"].astype(ref.BF16)}  # a bf16 bias too
    cases.run(inp, cases.config("swiglu", recipe, recompute_mode="accumulator"), as_list=True)
    return seen


@pytest.mark.skipif(not shutil.which("ptxas") and not shutil.os.path.exists(PTXAS), reason="needs ptxas")
@pytest.mark.parametrize("recipe", ["bf16", "mxfp8"])
def test_mlp_kernels_lower_for_sm90(monkeypatch, tmp_path, recipe):
    seen = launches(monkeypatch, recipe)
    assert {k.__name__ for k, _, _ in seen} == LAUNCHED[recipe]
    done = set()
    for kernel, args, meta in seen:
        warps = meta.pop("num_warps", 4)
        compiled = kernel.compile(*args, **meta)
        if compiled in done:
            continue
        done.add(compiled)
        low = gpu.lower(compiled, "sm_90a", warps, 1, keep_ir=False)
        assert low["hints"] == [], (kernel.__name__, low["hints"])
        assert_assembles(low["ptx"], "sm_90a", tmp_path)
