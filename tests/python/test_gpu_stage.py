"""The GPU stage from Python: TILEFUSE_DUMP=gpu prints it when a kernel compiles for the
GPU, a dot that is not pipelined is staged by its ops, the plan_layouts binding takes its
options as keywords, and the interpreter refuses GPU-stage IR."""

import numpy as np
import pytest
import tilefuse as tf
import tilefuse.language as tl

_C = tf._C


@tf.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)


@tf.jit
def dot_kernel(a_ptr, b_ptr, c_ptr, N: tl.constexpr):
    r = tl.arange(0, N)
    tile = r[:, None] * N + r[None, :]
    tl.store(c_ptr + tile, tl.dot(tl.load(a_ptr + tile), tl.load(b_ptr + tile)))


def _args():
    return np.zeros(1000, np.float32), np.zeros(1000, np.float32), 1000


def test_dump_gpu_prints_the_gpu_stage(monkeypatch, capfd):
    capfd.readouterr()
    monkeypatch.setenv("TILEFUSE_DUMP", "gpu")
    a = np.zeros((64, 64), np.float16)
    k = dot_kernel.warmup(a, a, np.zeros((64, 64), np.float32), grid=(1,), target="sm_90a", num_warps=4, N=64)
    err = capfd.readouterr().err
    assert err.count("// -----// IR after gpu/plan_layouts //----- //") == 1  # the stage the lowering reads
    assert 'arch = "sm_90a", gpu = true, kernel = true, num_warps = 4' in err
    assert "dot" in err and "#wgmma<" in err and "#blocked<" in err
    assert "#" not in k.asm["tile"]  # the kernel's own IR stays tile-level


def test_warmup_exposes_the_gpu_stage():
    a = np.zeros((64, 64), np.float16)
    k = dot_kernel.warmup(a, a, np.zeros((64, 64), np.float32), grid=(1,), target="sm_90a", num_warps=8, N=64)
    text = k.asm["gpu"]
    assert 'arch = "sm_90a", gpu = true, kernel = true, num_warps = 8' in text
    assert "#wgmma<" in text and "#blocked<" in text and "#" not in k.asm["tile"]


def test_dot_not_pipelined_is_staged_by_gpu_stage_ops():
    # stage-dot-operands: buffers placed by allocate-shared, stores, the wgmma group and its wait.
    a = np.zeros((64, 64), np.float16)
    k = dot_kernel.warmup(a, a, np.zeros((64, 64), np.float32), grid=(1,), target="sm_90a", num_warps=4, N=64)
    gpu = k.asm["gpu"]
    assert " = dot " not in gpu and "smem_staged = 16384" in gpu
    buffer = "smem<64x64xf16, #shared<swizzle=128, rows=64, cols=64, eb=2, stages=1>>"
    assert f"smem_alloc {{smem_at = 0}} : {buffer}" in gpu and f"smem_alloc {{smem_at = 8192}} : {buffer}" in gpu
    order = ["barrier", "local_store", "local_store", "fence_async_shared", "barrier", "= wgmma ", "= wgmma_wait "]
    at = 0
    for op in order:
        at = gpu.index(op, at) + len(op)
    ptx = k.asm["ptx"]
    issued = ptx.index("wgmma.commit_group.sync.aligned;")
    assert ptx.index("wgmma.wait_group.sync.aligned 0;", issued) > issued
    assert "wgmma.wait_group.sync.aligned 1;" not in ptx  # one stage: nothing is left in flight
    assert ptx.count("wgmma.mma_async") == 4  # K = 64 in steps of 16


def test_no_gpu_dump_without_tilefuse_dump(monkeypatch, capfd):
    capfd.readouterr()
    monkeypatch.delenv("TILEFUSE_DUMP", raising=False)
    scale_kernel.warmup(*_args(), grid=(4,), target="sm_90a", BLOCK=256)
    assert "plan_layouts" not in capfd.readouterr().err


def test_plan_layouts_takes_options_as_keywords():
    m = scale_kernel.compile(*_args(), BLOCK=256).module
    gpu = _C.ir.Module.parse(m.to_text())
    _C.passes.plan_layouts(gpu, arch="sm_80", num_warps=2)
    gpu.verify()
    text = gpu.to_text()
    assert 'arch = "sm_80", gpu = true' in text and "num_warps = 2" in text
    assert "tile<256xf32, #blocked<reg=[1, 2], lane=[4, 8, 16, 32, 64], warp=[128]>>" in text
    with pytest.raises(_C.UserError, match="has no option 'warps'"):
        _C.passes.plan_layouts(_C.ir.Module.parse(m.to_text()), warps=2)
    with pytest.raises(_C.UserError, match="pass 'cse' has no option 'arch'"):
        _C.passes.cse(m, arch="sm_90a")


def test_interpreter_refuses_the_gpu_stage():
    x, out, n = _args()
    kernel = scale_kernel.compile(x, out, n, BLOCK=256)
    gpu = _C.passes.gpu_stage(kernel.module, "sm_90a", 4)
    I = _C.interp  # noqa: E741
    args = [I.Arg.ptr(x.ctypes.data), I.Arg.ptr(out.ctypes.data), I.Arg.int(n)]
    bufs = [I.Buffer(x.ctypes.data, x.nbytes, "x"), I.Buffer(out.ctypes.data, out.nbytes, "out")]
    with pytest.raises(
        _C.UserError, match="the interpreter runs tile-level IR; kernel '@scale_kernel' is in the GPU stage"
    ):
        I.launch(gpu, kernel.name, (4, 1, 1), args, bufs)
    I.launch(kernel.module, kernel.name, (4, 1, 1), args, bufs)  # the module itself is unchanged
    np.testing.assert_array_equal(out, x * 2)


@pytest.mark.parametrize("swizzle", [32, 64, 128])
def test_local_load_reads_a_staged_tile(tmp_path, swizzle):
    # local_load: vector ld.shared of 16-byte runs at the buffer's swizzled places.
    from tests.ptxas import assert_assembles
    from tests.staged_copy_case import module

    low = _C.lower.compile(module(swizzle, read=None), "copy_kernel", "sm_90a", 4, 1)
    ld = [line for line in low.ptx.splitlines() if "ld.shared" in line]
    assert len(ld) == 4 and all(".v4.b32" in line for line in ld), ld  # 32 f16 per thread in runs of 8
    assert low.spec.shared_bytes >= 64 * 64 * 2
    assert_assembles(low.ptx, "sm_90a", tmp_path)
    # Read back in another layout (the pointers convert through scratch above the buffer).
    other = _C.lower.compile(module(swizzle), "copy_kernel", "sm_90a", 4, 1).ptx
    assert sum(".v4.b32" in line and "ld.shared" in line for line in other.splitlines()) >= 4
    assert_assembles(other, "sm_90a", tmp_path)
