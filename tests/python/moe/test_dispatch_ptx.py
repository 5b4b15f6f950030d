"""The dispatch kernels (kernels_dsl/moe/dispatch.py), as moe.route / dispatch / combine
and their backwards launch them (E = 8 and E = 128: one-hot tiles of 256 x 8 and 64 x 128),
lower for sm_90a to PTX that ptxas accepts."""

import importlib
import shutil

import numpy as np
import pytest
from tilefuse import gpu, moe

from kernels_dsl.moe import dispatch as kernels
from tests.ptxas import PTXAS, assert_assembles
from tests.python.moe.gemm_reference import BF16
from tests.python.moe.recorder import Recorder

D = importlib.import_module("tilefuse.moe.dispatch")
NAMES = ("block_counts", "expert_offsets", "permute", "segment_ids", "gather_rows", "combine_rows", "combine_dweights")


def launches(monkeypatch, experts):
    seen = []
    for name in NAMES:
        monkeypatch.setattr(kernels, name, Recorder(getattr(kernels, name), seen))
    rng = np.random.default_rng()
    t, k, d = 300, 8, 96
    ids = np.argsort(rng.random((t, experts)), axis=1)[:, :k].astype(np.int32)
    x, dout = (rng.standard_normal((t, d)).astype(BF16) for _ in range(2))
    w = rng.random((t, k)).astype(np.float32)
    r = moe.route(ids, experts)
    rows = moe.dispatch(x, r)
    moe.combine(rows, r, w)
    moe.combine_backward(dout, rows, r, w)
    moe.dispatch_backward(rows, r)
    moe.dispatch_weights_backward(moe.dispatch_weights(w, r), r)
    D.segments(r.counts, t * k, experts // 2)
    return seen


@pytest.mark.skipif(not shutil.which("ptxas") and not shutil.os.path.exists(PTXAS), reason="needs ptxas")
@pytest.mark.parametrize("experts", [8, 128])
def test_dispatch_kernels_lower_for_sm90(monkeypatch, tmp_path, experts):
    seen = launches(monkeypatch, experts)
    assert {k.__name__ for k, _, _ in seen} == set(NAMES)
    done = set()
    for kernel, args, meta in seen:
        compiled = kernel.compile(*args, **meta)
        if compiled in done:
            continue
        done.add(compiled)
        low = gpu.lower(compiled, "sm_90a", 4, 1, keep_ir=False)
        print(kernel.__name__, low["hints"])
        assert_assembles(low["ptx"], "sm_90a", tmp_path)
