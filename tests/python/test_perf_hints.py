"""TILEFUSE_PERF_HINTS: every dot loop not pipelined, access not vectorized, descriptor
not on TMA and dot not on wgmma is reported at its kernel line with the reason — and
kernels on every fast path report nothing."""

import inspect

import ml_dtypes
import numpy as np
import pytest
import tilefuse as tf
import tilefuse.language as tl
from tilefuse import gpu

from tests.python.golden import ptx_cases
from tests.shared_kernels import fp4_dot_loop, gated_dot_loop, masked_dot_loop, scaled_dot_loop, strided_dot_loop

bf = np.zeros((64, 64), ml_dtypes.bfloat16)
e4 = np.zeros((64, 64), ml_dtypes.float8_e4m3fn)
f32 = np.zeros((64, 64), np.float32)
i8 = np.zeros((64, 64), np.int8)


def hints(kernel, args, consts, arch="sm_90a", warps=4, stages=3):
    return gpu.lower(kernel.compile(*args, **consts), arch, warps, stages, keep_ir=False)["hints"]


def line_of(fn, text):
    """The file line of the first source line of `fn` containing `text`."""
    lines, first = inspect.getsourcelines(fn.fn)
    return first + next(i for i, s in enumerate(lines) if text in s)


def only(found, text):
    """The one hint whose message contains `text`."""
    match = [h for h in found if text in h[3]]
    assert len(match) == 1, (text, found)
    return match[0]


@tf.jit
def ragged_rows(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)  # load: ragged end
    tl.store(y_ptr + offs, x, mask=offs < n)


@tf.jit
def computed_desc(x_ptr, y_ptr, sizes_ptr, G, N, B: tl.constexpr):
    e = tl.program_id(0)
    rows = tl.load(sizes_ptr + e)
    d = tl.make_tensor_descriptor(x_ptr, [G * N, N], [N, 1], [B, B])  # desc: computed size
    t = d.load([0, 0])
    o = tl.make_tensor_descriptor(y_ptr, [rows, N], [N, 1], [B, B])  # desc: loaded size
    o.store([0, 0], t)


@tf.jit
def small_dot(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], tl.dot(a, b))  # dot: small


MM = dict(BM=128, BN=128, BK=64)


@pytest.mark.parametrize("x", [bf, e4])
def test_a_loop_with_two_dots_sharing_a_pipelines(x):
    # FC1's gate and up projections: one A tile feeds two dots, three tiles per stage.
    low = gpu.lower(gated_dot_loop.compile(x, x, x, f32, 4096, 4096, 4096, **MM), "sm_90a", 8, 3)
    assert low["hints"] == []
    ptx = low["ptx"]
    assert "cp.async.cg.shared.global" in ptx and ptx.count("wgmma.mma_async") >= 2


@pytest.mark.parametrize("x", [bf, e4])
def test_a_k_contiguous_b_is_copied_k_major(x):
    # B [K, N] with stride_bk == 1: loaded with runs along K, copied by cp.async into a
    # K-major tile, wgmma without transposing B (16-bit: majorness flags 0, 0).
    low = gpu.lower(strided_dot_loop.compile(x, x, f32, 4096, 4096, 4096, 1, 4096, **MM), "sm_90a", 8, 3)
    assert low["hints"] == []
    ptx = low["ptx"]
    assert "cp.async.cg.shared.global" in ptx
    if x is bf:
        assert "p, 1, 1, 0, 0;" in ptx and "p, 1, 1, 0, 1;" not in ptx


def test_an_8bit_b_loaded_n_major_is_reported():
    kernel, args, consts, warps, stages, _ = ptx_cases.CASES["matmul_e4m3_128x128x128"]
    _, _, _, msg = only(hints(kernel, args, consts, warps=warps, stages=stages), "not pipelined")
    assert "with N contiguous is transposed through registers" in msg


def test_ragged_masks_along_the_contiguous_dim_are_reported():
    found = hints(ragged_rows, (f32, f32, 1000), dict(BLOCK=1024))
    load, store = only(found, "load of"), only(found, "store of")
    assert load[1] == line_of(ragged_rows, "# load: ragged end") and store[1] == load[1] + 1
    assert "4-byte accesses where 16 would fit" in load[3] and "mask is constant in runs of 1" in load[3]
    assert hints(ragged_rows, (f32, f32, 1024), dict(BLOCK=1024)) == []  # n % 16 == 0: 16-byte accesses


def test_descriptors_sized_by_products_of_arguments_reach_tma():
    # [G * N, N]: the launch evaluates G * N; a size loaded in the kernel cannot be.
    k = computed_desc.compile(f32, f32, np.zeros(8, np.int32), 8, 64, B=32)
    low = gpu.lower(k, "sm_90a", 4, 3, keep_ir=False)
    (m,) = low["spec"].tensor_maps
    assert (m.sizes[0].param, m.sizes[0].factor, m.sizes[0].value) == (3, 4, 0)  # parameters G and N
    (h,) = [h for h in low["hints"] if "not on TMA" in h[3]]
    assert h[1] == line_of(computed_desc, "# desc: loaded size")
    assert "size of dim 0 is computed in the kernel" in h[3]


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_dots_off_the_tensor_cores_are_reported(arch):
    found = hints(small_dot, (bf, bf, f32), dict(M=32, N=64, K=64), arch=arch)
    if arch == "sm_90a":
        _, line, _, msg = only(found, "dot")
        assert line == line_of(small_dot, "# dot: small")
        assert msg.startswith("dot not on wgmma: M=32 is below wgmma's 64 rows") and "mma.sync" in msg
    else:
        assert found == []  # mma.sync is sm_80's tensor-core path
    _, _, _, msg = only(hints(small_dot, (f32, f32, f32), dict(M=64, N=64, K=64), arch=arch), "dot")
    assert "runs on FMAs" in msg


@pytest.mark.parametrize("k_contiguous", [True, False])
def test_mxfp8_loops_run_on_fp8_wgmma(k_contiguous):
    # B with K contiguous (weights stored [N, K]) is copied K-major: pipelined. With N
    # contiguous the 8-bit B is transposed through registers, and the hint says so.
    strides = (1, 4096) if k_contiguous else (4096, 1)
    args = (i8, i8, i8, i8, f32, 4096, 4096, 4096, *strides)
    low = gpu.lower(scaled_dot_loop.compile(*args, FA="e4m3", FB="e5m2", **MM), "sm_90a", 8, 3)
    assert "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e5m2" in low["ptx"]
    if k_contiguous:
        assert low["hints"] == [] and "cp.async.cg.shared.global" in low["ptx"]
    else:
        assert "with N contiguous is transposed through registers" in only(low["hints"], "not pipelined")[3]


@pytest.mark.parametrize("warps,stages", [(4, 2), (8, 3)])
def test_fp4_dot_scaled_loop_is_pipelined(warps, stages):
    # No fp4 tensor cores on sm_90: the dot is a bf16 one of operands dequantized in the
    # loop, whose packed codes and scales are copied ahead and read back.
    args = (i8, i8, i8, i8, f32, 200, 200, 512, 16)
    low = gpu.lower(fp4_dot_loop.compile(*args, BM=128, BN=128, BK=128), "sm_90a", warps, stages, keep_ir=True)
    assert not [h for h in low["hints"] if "not pipelined" in h[3] or "wgmma" in h[3]], low["hints"]
    assert low["gpu"].count("local_load") == 4 and "dot_scaled" not in low["gpu"]
    assert "cp.async" in low["ptx"] and "wgmma.mma_async" in low["ptx"] and "ld.local" not in low["ptx"]


@pytest.mark.parametrize("name", ["matmul_bf16_128x256x64_leaky", "matmul_desc_bf16_128x256x64", "vector_add"])
def test_kernels_on_the_fast_paths_report_nothing(name):
    kernel, args, consts, warps, stages, _ = ptx_cases.CASES[name]
    assert hints(kernel, args, consts, warps=warps, stages=stages) == []


def test_the_environment_variable_prints_hints_at_the_line(monkeypatch, capsys):
    monkeypatch.setenv("TILEFUSE_PERF_HINTS", "1")
    ragged_rows.warmup(f32, f32, 1000, BLOCK=1024, grid=(1,), target="sm_90a")
    err = capsys.readouterr().err
    assert f"test_perf_hints.py:{line_of(ragged_rows, '# load: ragged end')}:" in err
    assert "perf: load of 4-byte accesses" in err and "[ragged_rows, sm_90a]" in err
    assert "x = tl.load(x_ptr + offs" in err  # the source line, with a caret under it
    monkeypatch.delenv("TILEFUSE_PERF_HINTS")
    ragged_rows.warmup(f32, f32, 1000, BLOCK=1024, grid=(1,), target="sm_90a")
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("x", [e4, bf])
def test_masked_loads_with_other_zero_pipeline(x):
    low = gpu.lower(masked_dot_loop.compile(x, x, f32, 4096, 4096, 4096, 4096, **MM), "sm_90a", 8, 3)
    assert low["hints"] == []
    assert "cp.async.cg.shared.global" in low["ptx"] and "wgmma.mma_async" in low["ptx"]


@pytest.mark.parametrize("x", [e4, bf])
def test_ragged_ends_along_the_contiguous_dim_pipeline_in_whole_runs(x):
    # k_end = 1000 is no multiple of 16: 16-byte copies of each run's valid prefix.
    low = gpu.lower(masked_dot_loop.compile(x, x, f32, 4096, 4096, 4096, 1000, **MM), "sm_90a", 8, 3)
    assert low["hints"] == []
    assert "cp.async.cg.shared.global" in low["ptx"] and "cp.async.ca" not in low["ptx"]
