"""Every test kernel lowers to PTX that ptxas accepts, for sm_90a and sm_80 — so a
lowering that emits invalid PTX fails CI on a machine without a GPU."""

import os
import shutil
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
import tilefuse as tf
import tilefuse.language as tl

from kernels_dsl import convert
from kernels_dsl.tutorials import layernorm, matmul, softmax, vector_add
from kernels_dsl.tutorials.matmul_desc import matmul_desc_kernel
from tests.ptxas import PTXAS, assert_assembles
from tests.shared_kernels import dot8, noinline_calls

f32 = np.zeros(64, np.float32)
m32 = np.zeros((64, 64), np.float32)
mbf = np.zeros((64, 64), ml_dtypes.bfloat16)
m8 = np.zeros((64, 64), ml_dtypes.float8_e4m3fn)
mi8 = np.zeros((64, 64), np.int8)
mi32 = np.zeros((64, 64), np.int32)
MM = dict(BLOCK_SIZE_M=64, BLOCK_SIZE_N=64, BLOCK_SIZE_K=32, GROUP_SIZE_M=8)


@tf.jit
def scaled_dot(a_ptr, as_ptr, b_ptr, bs_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    sa = tl.load(as_ptr + rm[:, None] * (K // 32) + tl.arange(0, K // 32)[None, :])
    sb = tl.load(bs_ptr + rn[:, None] * (K // 32) + tl.arange(0, K // 32)[None, :])
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], tl.dot_scaled(a, sa, "e4m3", b, sb, "e4m3"))


KERNELS = {
    "vector_add": (vector_add.add_kernel, (f32, f32, f32, 64), {"BLOCK_SIZE": 1024}),
    "softmax": (softmax.softmax_kernel, (m32, m32, 64, 64, 64), {"BLOCK_SIZE": 64}),
    "matmul_f32": (matmul.matmul_kernel, (m32, m32, m32, 64, 64, 64, 64, 1, 64, 1, 64, 1), dict(MM, ACTIVATION="")),
    "matmul_bf16_leaky": (
        matmul.matmul_kernel,
        (mbf, mbf, mbf, 64, 64, 64, 64, 1, 64, 1, 64, 1),
        dict(MM, ACTIVATION="leaky_relu"),
    ),
    "layernorm_fwd": (
        layernorm._layer_norm_fwd_fused,
        (m32, m32, f32, f32, f32, f32, 64, 64, 1e-5),
        {"BLOCK_SIZE": 64},
    ),
    "noinline_calls": (noinline_calls, (mbf, mbf, m32, f32), {"N": 64}),
    "dot_scaled_fp8": (scaled_dot, (mi8, mi8, mi8, mi8, m32), dict(M=64, N=64, K=64)),
    "dot_fp8": (dot8, (m8, m8, m32), dict(M=64, N=64, K=64, BK=32, BT=False)),
    "dot_fp8_bt": (dot8, (m8, m8, m32), dict(M=64, N=64, K=64, BK=32, BT=True)),
    "dot_i8_bt": (dot8, (mi8, mi8, mi32), dict(M=64, N=64, K=64, BK=32, BT=True)),
    "layernorm_bwd_dwdb": (
        layernorm._layer_norm_bwd_dwdb,
        (m32, m32, f32, f32, 64, 64),
        {"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 64},
    ),
}


@pytest.mark.skipif(not shutil.which("ptxas") and not shutil.os.path.exists(PTXAS), reason="needs ptxas")
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_ptx_assembles(name, arch, tmp_path):
    if (name.startswith("dot_fp8") or name == "dot_scaled_fp8") and arch == "sm_80":
        pytest.skip("fp8 conversions need sm_89 or newer")
    kernel, args, kwargs = KERNELS[name]
    k = kernel.warmup(*args, grid=(1,), target=arch, **kwargs)
    assert f".target {arch}" in k.asm["ptx"]
    assert "define void @" in k.asm["llir"]
    assert_assembles(k.asm["ptx"], arch, tmp_path)


@tf.jit
def debug_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=1.0)
    tl.device_print("x=", x)
    tl.device_print("n=", n)
    tl.device_assert(x > 0, "x must be positive")


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_print_and_assert_assemble(arch, tmp_path):
    k = debug_kernel.warmup(f32, 64, BLOCK=64, grid=(1,), target=arch)
    assert "vprintf" in k.asm["ptx"] and "__assertfail" in k.asm["ptx"]
    assert_assembles(k.asm["ptx"], arch, tmp_path)


@tf.jit
def to_fp8(x_ptr, y_ptr):
    offs = tl.arange(0, 16)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs).to(tl.float8e4nv).to(tl.float32))


def test_unsupported_ops_name_the_kernel_line():
    with pytest.raises(tf.CompilationError, match="does not lower fp8 casts before sm_89 yet") as e:
        to_fp8.warmup(f32, f32, grid=(1,), target="sm_80")
    assert e.value.file == __file__
    assert "float8e4nv" in e.value.source_line


WIDE = [
    (np.float64, tl.bfloat16, "rtz"),
    (np.int64, tl.float16, "ru"),
    (np.int32, tl.float8e4nv, "rtz"),
    (np.float64, tl.float8e8m0, "ru"),
    (np.int64, tl.float8e8m0, "rne"),
]


@pytest.mark.parametrize("src, to, mode", WIDE, ids=[f"{s.__name__}-{t.name}-{m}" for s, t, m in WIDE])
def test_rounded_casts_from_wide_sources_assemble(src, to, mode, tmp_path):
    @tf.jit
    def k(x_ptr, y_ptr, TO: tl.constexpr, MODE: tl.constexpr):
        offs = tl.arange(0, 64)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs).to(TO, rounding=MODE).to(tl.float32))

    kernel = k.warmup(np.zeros(64, src), f32, TO=to, MODE=mode, grid=(1,), target="sm_90a")
    assert_assembles(kernel.asm["ptx"], "sm_90a", tmp_path)


ROUNDINGS = [
    (to, mode)
    for to in (tl.bfloat16, tl.float16, tl.float8e4nv, tl.float8e5, tl.float4e2m1, tl.float8e8m0)
    for mode in ("rne", "rtz", "ru", "rs")
]


@pytest.mark.parametrize("to, mode", ROUNDINGS, ids=[f"{t.name}-{m}" for t, m in ROUNDINGS])
def test_rounded_casts_assemble(to, mode, tmp_path):
    i32 = np.zeros(64, np.int32)
    i16 = np.zeros(64, np.int16)
    k = convert.convert_kernel.warmup(f32, i32, i16, f32, 64, TO=to, MODE=mode, BLOCK=64, grid=(1,), target="sm_90a")
    assert_assembles(k.asm["ptx"], "sm_90a", tmp_path)


FAST_PATHS = {
    # kernel name: what its sm_90a PTX must contain, so that a change that silently falls
    # back to a slow path (scalar accesses, shared-memory dots, no pipelining) fails CI.
    "matmul_bf16_leaky": [
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16",
        "cp.async.cg.shared.global",
        "st.global.v4",
    ],
    "vector_add": ["ld.global.v4.f32", "st.global.v4.f32"],
    "dot_fp8_bt": ["wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3", "cp.async"],
    "dot_i8_bt": ["wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8", "cp.async"],
    "dot_scaled_fp8": ["wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3"],
}


@pytest.mark.parametrize("name", sorted(FAST_PATHS))
def test_sm90_kernels_take_the_fast_paths(name):
    kernel, args, kwargs = KERNELS[name]
    ptx = kernel.warmup(*args, grid=(1,), target="sm_90a", **kwargs).asm["ptx"]
    for needle in FAST_PATHS[name]:
        assert needle in ptx, f"{name}: no {needle!r} in the PTX"
    assert "mma.sync" not in ptx  # no fallback to the shared-memory mma path


@pytest.mark.parametrize("bm,bn,bk,warps", [(128, 128, 64, 4), (128, 256, 64, 8)])
def test_wgmma_groups_stay_asynchronous(bm, bn, bk, warps, tmp_path):
    """ptxas serializes every wgmma group (warning C7514) when an instruction reading the
    accumulator comes between the K loop and its final wait."""
    kw = dict(BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=8, ACTIVATION="")
    k = matmul.matmul_kernel.warmup(
        mbf, mbf, mbf, 4096, 4096, 4096, 4096, 1, 4096, 1, 4096, 1, grid=(1,), target="sm_90a", num_warps=warps, **kw
    )
    report = assert_assembles(k.asm["ptx"], "sm_90a", tmp_path, verbose=True)
    assert "C7514" not in report and "serialized" not in report, report


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_descriptor_pipelines_keep_wgmma_groups_asynchronous(stages, tmp_path):
    # The TMA pipeline's mbarrier waits and copies sit between a wgmma group and its wait.
    kw = dict(BLOCK_SIZE_M=128, BLOCK_SIZE_N=128, BLOCK_SIZE_K=64, GROUP_SIZE_M=8)
    k = matmul_desc_kernel.warmup(
        mbf, mbf, mbf, 4096, 4096, 4096, 4096, 4096, 4096, grid=(1,), target="sm_90a", num_stages=stages, **kw
    )
    ptx = k.asm["ptx"]
    assert "mbarrier.try_wait.parity" in ptx
    report = assert_assembles(ptx, "sm_90a", tmp_path, verbose=True)
    assert "C7514" not in report, report


@pytest.mark.parametrize("arch", ["sm_80", "sm_89", "sm_90a"])
@pytest.mark.parametrize("dtype", [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, np.int8])
def test_small_8bit_dots_take_mma_sync(arch, dtype, tmp_path):
    # M = 32 is below wgmma's 64 rows: m16n8k32 mma.sync (fp8 from sm_89, PTX 8.4).
    x = np.zeros((32, 64), dtype)
    c = np.zeros((32, 32), np.int32 if dtype == np.int8 else np.float32)
    kw = dict(M=32, N=32, K=64, BK=64, BT=False, grid=(1,), target=arch)
    if dtype != np.int8 and arch == "sm_80":
        with pytest.raises(tf.CompilationError, match="fp8 casts before sm_89"):
            dot8.warmup(x, x, c, **kw)
        return
    ptx = dot8.warmup(x, x, c, **kw).asm["ptx"]
    kind = (
        "s32.s8.s8.s32"
        if dtype == np.int8
        else "f32.e4m3.e4m3.f32"
        if "e4m3" in dtype.__name__
        else "f32.e5m2.e5m2.f32"
    )
    assert f"mma.sync.aligned.m16n8k32.row.col.{kind}" in ptx
    assert ".version 8.4" in ptx or arch == "sm_80"
    assert_assembles(ptx, arch, tmp_path)


def test_tilefuse_target_sets_the_default_target():
    # Read once at import: a fresh process with TILEFUSE_TARGET warms up for that arch.
    code = (
        "import numpy as np\n"
        "from kernels_dsl.tutorials import vector_add\n"
        "x = np.zeros(64, np.float32)\n"
        "print(vector_add.add_kernel.warmup(x, x, x, 64, BLOCK_SIZE=64, grid=(1,)).asm['ptx'])\n"
    )
    env = dict(os.environ, TILEFUSE_TARGET="sm_80")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert ".target sm_80" in r.stdout
