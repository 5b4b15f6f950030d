"""What ptxas reports of a build (gpu.build, no GPU needed): a config that spills registers
gets a perf hint at the kernel's line, one that needs more shared memory than any GPU of its
target has is a LaunchError naming num_warps, num_stages and the bytes."""

import inspect

import ml_dtypes
import numpy as np
import pytest
import tilefuse as tf
import tilefuse.language as tl
from tilefuse import gpu

from kernels_dsl.tutorials import matmul
from tests.ptxas import PTXAS

pytestmark = pytest.mark.skipif(gpu.ptxas_path() is None, reason=f"needs ptxas ({PTXAS})")


@tf.jit
def four_live_tiles(a_ptr, b_ptr, c_ptr, d_ptr, o_ptr, BLOCK: tl.constexpr):
    # a..d stay live across the reduction: 4 * BLOCK / 32 values per thread of one warp.
    offs = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + offs)
    b = tl.load(b_ptr + offs)
    c = tl.load(c_ptr + offs)
    d = tl.load(d_ptr + offs)
    s = tl.sum(a * b + c * d, axis=0)
    tl.store(o_ptr + offs, a * s + b * c + d)


X = np.zeros(4096, np.float32)


def test_register_spills_are_a_perf_hint_at_the_kernel(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("TILEFUSE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TILEFUSE_PERF_HINTS", "1")
    kernel = four_live_tiles.compile(X, X, X, X, X, BLOCK=2048)
    _, hints = gpu.build(kernel, "sm_90a", 1, 1)
    spills = [h for h in hints if h[3].startswith("register spills")]
    assert len(spills) == 1, hints
    file, line, _, message = spills[0]
    def_line = inspect.getsourcelines(four_live_tiles.fn)[1] + 1  # below the decorator
    assert (file, line) == (inspect.getsourcefile(four_live_tiles.fn), def_line)
    assert "the most 32 threads (num_warps=1) may use" in message
    stores = int(message.split(": ")[1].split(" bytes")[0])
    assert stores > 0
    assert "register spills" in capsys.readouterr().err  # printed at the kernel's line
    # The same tiles over 8 warps: 32 values per thread, no spills.
    _, hints = gpu.build(four_live_tiles.compile(X, X, X, X, X, BLOCK=1024), "sm_90a", 8, 1)
    assert not [h for h in hints if h[3].startswith("register spills")]


def test_ptxas_usage_reads_the_verbose_report():
    report = (
        "ptxas info    : Compiling entry function 'k' for 'sm_90a'\n"
        "ptxas info    : Function properties for k\n"
        "    3440 bytes stack frame, 4340 bytes spill stores, 5708 bytes spill loads\n"
        "ptxas info    : Used 64 registers, used 1 barriers, 1024 bytes smem, 400 bytes cmem[0]\n"
    )
    assert gpu.ptxas_usage(report) == {"registers": 64, "smem": 1024, "spill_stores": 4340, "spill_loads": 5708}


@pytest.mark.parametrize("stages,fits", [(2, True), (4, False)])
def test_shared_memory_beyond_the_target_is_a_launch_error(stages, fits, monkeypatch, tmp_path):
    monkeypatch.setenv("TILEFUSE_CACHE_DIR", str(tmp_path))
    bf = np.zeros((64, 64), ml_dtypes.bfloat16)
    meta = dict(BLOCK_SIZE_M=256, BLOCK_SIZE_N=128, BLOCK_SIZE_K=128, GROUP_SIZE_M=8, ACTIVATION="")
    kernel = matmul.matmul_kernel.compile(bf, bf, bf, 512, 512, 512, 512, 1, 512, 1, 512, 1, **meta)
    need = (256 + 128) * 128 * 2 * stages  # the ring of A and B tiles
    if fits:
        entry, _ = gpu.build(kernel, "sm_90a", 8, stages)
        assert need <= entry.spec.shared_bytes <= gpu.ARCH_SHARED_LIMIT["sm_90a"]
        return
    with pytest.raises(tf.LaunchError) as e:
        gpu.build(kernel, "sm_90a", 8, stages)
    msg = str(e.value)
    assert "matmul_kernel: needs " in msg and "with num_warps=8, num_stages=4; sm_90a allows 232448 per block" in msg
    assert int(msg.split("needs ")[1].split(" bytes")[0]) >= need


def test_maxnreg_caps_the_registers_ptxas_allocates():
    # Triton's launch option: `.maxnreg N` on the kernel's entry, N registers at most per
    # thread. Uncapped, this kernel takes 72 on sm_90a (ptxas of CUDA 13.0); capped at 40
    # it spills instead.
    import re

    free = gpu.lower(four_live_tiles.compile(X, X, X, X, X, BLOCK=2048), "sm_90a", 4, 1)["ptx"]
    capped = gpu.lower(four_live_tiles.compile(X, X, X, X, X, BLOCK=2048, maxnreg=40), "sm_90a", 4, 1)["ptx"]
    assert ".maxnreg" not in free
    assert re.search(r"\.visible \.entry [^{;]*\.maxnreg 40", capped)
    used_free, used_capped = gpu._ptxas(free, "sm_90a")[1], gpu._ptxas(capped, "sm_90a")[1]
    assert used_free["registers"] > 40 and used_free["spill_stores"] == 0
    assert used_capped["registers"] <= 40 and used_capped["spill_stores"] > 0
    with pytest.raises(tf.LaunchError, match=r"four_live_tiles: maxnreg must be an int in \[1, 255\].*got -1"):
        four_live_tiles.compile(X, X, X, X, X, BLOCK=2048, maxnreg=-1)
