"""Warp specialization (tl.range(..., warp_specialize=True)) without a GPU: the kernel's
body in a warp_specialize op, the rings' full and empty mbarriers and the ring position
carried through the tile loop, the PTX of the two roles (setmaxnreg, named barriers, the
launch's extra warpgroup) and ptxas's verdict; the errors of what cannot be specialized;
the interpreter (which ignores the flag) against numpy; other targets drop the flag.
tests/gpu/test_warp_specialize_gpu.py runs the kernels."""

import re
import shutil

import ml_dtypes
import numpy as np
import pytest
import tilefuse as tf
import tilefuse.language as tl
from tilefuse import gpu
from tilefuse.errors import CompilationError

from kernels_dsl.moe import grouped_gemm as G
from kernels_dsl.tutorials.matmul_persistent import matmul_persistent_kernel, matmul_ws_kernel
from tests.ptxas import PTXAS, assert_assembles

BF16 = ml_dtypes.bfloat16
needs_ptxas = pytest.mark.skipif(not shutil.which("ptxas") and not shutil.os.path.exists(PTXAS), reason="needs ptxas")


def _lower(warps=8, stages=4, bm=128, bn=128, bk=64, arch="sm_90a"):
    a = np.zeros((512, 512), BF16)
    k = matmul_ws_kernel.compile(a, a, a, 512, 512, 512, BM=bm, BN=bn, BK=bk)
    return gpu.lower(k, arch, warps, stages, keep_ir=True)


def test_body_and_rings_for_two_roles():
    ir = _lower()["gpu"]
    assert ir.count("warp_specialize {producer_warps = 4}") == 1
    # Full mbarriers: one arrival (the producer's expect); empty: one per consumer warp.
    assert len(re.findall(r"mbarrier_init %bars, %\d+ \{count = 1\}", ir)) == 4
    assert len(re.findall(r"mbarrier_init %empty_bars, %\d+ \{count = 8\}", ir)) == 4
    assert ir.count("ws_ring = true") == 2
    # The producer waits before each copy (prologue and loop); the consumers hand a stage
    # back in the loop and after it, and wait for the full mbarrier.
    assert len(re.findall(r"mbarrier_wait %empty_bars.*ws_role = \"producer\"", ir)) == 4
    assert len(re.findall(r"mbarrier_arrive %empty_bars.*ws_role = \"consumer\"", ir)) == 2
    assert len(re.findall(r"mbarrier_wait %bars.*ws_role = \"consumer\"", ir)) == 1
    assert len(re.findall(r"tma_load .*ws_role = \"producer\"", ir)) == 8
    # The ring's position rides on the tile loop.
    assert re.search(r"%ring_stage_out, %full_phases_out, %empty_phases_out = for", ir)
    # No block-wide barrier inside the body: each role synchronizes its own warps.
    body = ir[ir.index("warp_specialize {") :]
    assert "\n    barrier\n" not in body and "      barrier\n" not in body


# setmaxnreg within the block's registers: ptxas launches .maxntid's most (168 at 384
# threads, 96 at 640); the producer's release is what the consumers gain.
@pytest.mark.parametrize("warps,threads,regs", [(8, 384, (232, 40)), (16, 640, (112, 24)), (4, 256, None)])
def test_ptx_of_the_roles(warps, threads, regs):
    ptx = _lower(warps=warps)["ptx"]
    assert f".maxntid {threads}, 1, 1" in ptx
    if regs:
        assert f"setmaxnreg.inc.sync.aligned.u32 {regs[0]};" in ptx
        assert f"setmaxnreg.dec.sync.aligned.u32 {regs[1]};" in ptx
    else:
        assert "setmaxnreg" not in ptx
    # The consumers' epilogue synchronizes on named barrier 1 (their threads only).
    assert f"bar.sync 1, {32 * warps};" in ptx
    assert "mbarrier.arrive.shared::cta.b64" in ptx
    assert ptx.count("cp.async.bulk.tensor") == 8  # 4 copy sites x 2 operands, the producer's only


@needs_ptxas
@pytest.mark.parametrize("config", [(8, 4, 128, 256, 64), (8, 3, 128, 128, 64), (4, 4, 64, 128, 64)])
def test_assembles_without_spills(tmp_path, config):
    warps, stages, bm, bn, bk = config
    low = _lower(warps, stages, bm, bn, bk)
    assert low["hints"] == [], low["hints"]
    report = assert_assembles(low["ptx"], "sm_90a", tmp_path, verbose=True)
    assert "0 bytes spill stores" in report and "C7517" not in report and "C7514" not in report, report


@needs_ptxas
@pytest.mark.parametrize("dgrad", [False, True])
def test_grouped_gemm_specialized_assembles(tmp_path, dgrad):
    x, o = np.zeros((256, 512), BF16), np.zeros((256, 512), BF16)
    w, i = np.zeros((4, 512, 512), BF16), np.zeros(8, np.int32)
    args = (x, w, i, i, o, i, i, i, 4, 256, 512, 512)
    k = G.grouped_gemm_persistent_kernel.compile(*args, DGRAD=dgrad, BIAS=0, BM=128, BO=256, BC=64, GROUP_M=8, WS=True)
    low = gpu.lower(k, "sm_90a", 8, 4, keep_ir=True)
    assert "warp_specialize {producer_warps = 4}" in low["gpu"]
    report = assert_assembles(low["ptx"], "sm_90a", tmp_path, verbose=True)
    assert "0 bytes spill stores" in report, report


def test_other_targets_drop_the_flag():
    low = _lower(warps=4, arch="sm_80")
    assert "warp_specialize {" not in low["gpu"] and "setmaxnreg" not in low["ptx"]
    assert ".maxntid 128, 1, 1" in low["ptx"]
    assert any("not warp-specialized: needs sm_90a" in h[3] for h in low["hints"]), low["hints"]


def test_nothing_to_specialize_says_why():
    a, c = np.zeros((64, 512), BF16), np.zeros((64, 64), np.float32)
    low = gpu.lower(_unpipelined.compile(a, c, 512, BK=64), "sm_90a", 4, 3)
    assert any("not warp-specialized: no pipelined K loop" in h[3] for h in low["hints"]), low["hints"]


@tf.jit
def _unpipelined(a_ptr, c_ptr, K, BK: tl.constexpr):
    # A and B from one load: a computed operand, not pipelined (pipeline-schedule).
    a_desc = tl.make_tensor_descriptor(a_ptr, [64, K], [K, 1], [64, BK])
    acc = tl.zeros((64, 64), dtype=tl.float32)
    for k in tl.range(0, K, BK, warp_specialize=True):
        a = a_desc.load([0, k])
        acc = tl.dot(a, tl.trans(a), acc)
    r = tl.arange(0, 64)
    tl.store(c_ptr + r[:, None] * 64 + r[None, :], acc)


def test_interpreter_ignores_the_flag():
    rng = np.random.default_rng(7)
    M, N, K = 100, 72, 80
    a = rng.standard_normal((M, K)).astype(BF16)
    b = rng.standard_normal((N, K)).astype(BF16)
    outs = []
    for kern in (matmul_ws_kernel, matmul_persistent_kernel):
        c = np.full((M, N), 7, BF16)
        kern[(3,)](a, b, c, M, N, K, BM=32, BN=32, BK=32)
        outs.append(c)
    assert np.array_equal(outs[0].view(np.int16), outs[1].view(np.int16))
    ref = a.astype(np.float64) @ b.astype(np.float64).T
    mag = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)).T
    assert (np.abs(outs[0].astype(np.float64) - ref) <= 2.0**-8 * np.abs(ref) + K * 2.0**-23 * mag).all()


@tf.jit
def _pointer_loads(a_ptr, c_ptr, K, BK: tl.constexpr):
    acc = tl.zeros((64, 64), dtype=tl.float32)
    r = tl.arange(0, 64)
    for k in tl.range(0, K, BK, warp_specialize=True):
        a = tl.load(a_ptr + r[:, None] * K + k + tl.arange(0, BK)[None, :])
        acc = tl.dot(a, tl.trans(a), acc)
    tl.store(c_ptr + r[:, None] * 64 + r[None, :], acc)


@tf.jit
def _tile_coordinates(a_ptr, rows_ptr, c_ptr, K, BK: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, [1024, K], [K, 1], [64, BK])
    m0 = tl.max(tl.load(rows_ptr + tl.arange(0, 16)), axis=0)
    acc = tl.zeros((64, 64), dtype=tl.float32)
    for k in tl.range(0, K, BK, warp_specialize=True):
        acc = tl.dot(a_desc.load([m0, k]), tl.trans(a_desc.load([0, k])), acc)
    r = tl.arange(0, 64)
    tl.store(c_ptr + r[:, None] * 64 + r[None, :], acc)


@tf.jit
def _with_break(a_ptr, c_ptr, K, BK: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, [64, K], [K, 1], [64, BK])
    acc = tl.zeros((64, 64), dtype=tl.float32)
    for k in tl.range(0, K, BK, warp_specialize=True):
        if k > 4096:
            break
        a = a_desc.load([0, k])
        acc = tl.dot(a, tl.trans(a), acc)
    r = tl.arange(0, 64)
    tl.store(c_ptr + r[:, None] * 64 + r[None, :], acc)


def test_cp_async_loops_are_refused():
    a, c = np.zeros((64, 512), BF16), np.zeros((64, 64), np.float32)
    k = _pointer_loads.compile(a, c, 512, BK=64)
    with pytest.raises(CompilationError, match=r"cp\.async.*tensor descriptors") as e:
        gpu.lower(k, "sm_90a", 4, 3)
    assert "test_warp_specialize.py" in str(e.value)


def test_coordinates_from_tiles_are_refused():
    a, c = np.zeros((1024, 512), BF16), np.zeros((64, 64), np.float32)
    k = _tile_coordinates.compile(a, np.zeros(16, np.int32), c, 512, BK=64)
    with pytest.raises(CompilationError, match=r"producer warps need this 'reduce_max'") as e:
        gpu.lower(k, "sm_90a", 4, 3)
    assert "test_warp_specialize.py" in str(e.value)


def test_loops_that_break_are_refused():
    a, c = np.zeros((64, 512), BF16), np.zeros((64, 64), np.float32)
    with pytest.raises(CompilationError, match="warp_specialize needs a loop without break or return"):
        _with_break.compile(a, c, 512, BK=64)


def test_too_many_consumer_warps_are_refused():
    a = np.zeros((512, 512), BF16)
    k = matmul_ws_kernel.compile(a, a, a, 512, 512, 512, BM=128, BN=128, BK=64)
    with pytest.raises(CompilationError, match="num_warps 32 leaves no room"):
        gpu.lower(k, "sm_90a", 32, 3)


def _lower_pp(bm=128, bn=128, bk=64, stages=4, groups=2):
    a = np.zeros((512, 512), BF16)
    k = matmul_ws_kernel.compile(a, a, a, 512, 512, 512, BM=bm, BN=bn, BK=bk, GROUPS=groups)
    return gpu.lower(k, "sm_90a", 4, stages, keep_ir=True)


def test_ping_pong_consumers():
    low = _lower_pp()
    ir, ptx = low["gpu"], low["ptx"]
    assert "warp_specialize {consumer_groups = 2, producer_warps = 4}" in ir and "ws_turns = true" in ir
    # Each stage is read by one group: one arrival per warp of a group.
    assert len(re.findall(r"mbarrier_init %empty_bars, %\d+ \{count = 4\}", ir)) == 4
    # Two warpgroups of consumers and the producer; the groups' epilogue barriers and the
    # turn's (bar.sync before a group's K loop, bar.arrive after it) by register.
    assert ".maxntid 384, 1, 1" in ptx
    assert "setmaxnreg.inc.sync.aligned.u32 232;" in ptx and "setmaxnreg.dec.sync.aligned.u32 40;" in ptx
    assert len(re.findall(r"bar\.sync %r\d+, 128;", ptx)) >= 1
    assert len(re.findall(r"bar\.sync %r\d+, 256;", ptx)) == 1
    assert len(re.findall(r"bar\.arrive %r\d+, 256;", ptx)) == 1
    # Each group its own epilogue scratch (the 128x128 bf16 tile): 32 KiB more.
    one = _lower_pp(groups=1)
    assert low["spec"].shared_bytes - one["spec"].shared_bytes == 32768


@needs_ptxas
@pytest.mark.parametrize("config", [(128, 128, 64, 4), (64, 256, 64, 4), (128, 128, 128, 2)])
def test_ping_pong_assembles_without_spills(tmp_path, config):
    bm, bn, bk, stages = config
    low = _lower_pp(bm, bn, bk, stages)
    report = assert_assembles(low["ptx"], "sm_90a", tmp_path, verbose=True)
    assert "0 bytes spill stores" in report and "C7517" not in report, report


@needs_ptxas
def test_grouped_gemm_ping_pong_assembles(tmp_path):
    x, o = np.zeros((256, 512), BF16), np.zeros((256, 512), BF16)
    w, i = np.zeros((4, 512, 512), BF16), np.zeros(8, np.int32)
    args = (x, w, i, i, o, i, i, i, 4, 256, 512, 512)
    k = G.grouped_gemm_persistent_kernel.compile(*args, DGRAD=False, BIAS=0, BM=128, BO=128, BC=64, GROUP_M=8, WS=2)
    low = gpu.lower(k, "sm_90a", 4, 4, keep_ir=True)
    assert "consumer_groups = 2" in low["gpu"]
    report = assert_assembles(low["ptx"], "sm_90a", tmp_path, verbose=True)
    assert "0 bytes spill stores" in report, report


def test_interpreter_ignores_the_groups():
    rng = np.random.default_rng(8)
    M, N, K = 70, 40, 96
    a = rng.standard_normal((M, K)).astype(BF16)
    b = rng.standard_normal((N, K)).astype(BF16)
    c = np.full((M, N), 7, BF16)
    matmul_ws_kernel[(3,)](a, b, c, M, N, K, BM=32, BN=32, BK=32, GROUPS=2)
    ref = a.astype(np.float64) @ b.astype(np.float64).T
    mag = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)).T
    assert (np.abs(c.astype(np.float64) - ref) <= 2.0**-8 * np.abs(ref) + K * 2.0**-23 * mag).all()


@tf.jit
def _nested_turns(a_ptr, c_ptr, K, BK: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, [64, K], [K, 1], [64, BK])
    r = tl.arange(0, 64)
    for _rep in range(0, 2):
        for _t in tl.range(0, 4, warp_specialize=True, num_consumer_groups=2):
            acc = tl.zeros((64, 64), dtype=tl.float32)
            for k in range(0, K, BK):
                acc = tl.dot(a_desc.load([0, k]), tl.trans(a_desc.load([0, k])), acc)
            tl.store(c_ptr + r[:, None] * 64 + r[None, :], acc)


@tf.jit
def _carried_turns(a_ptr, c_ptr, K, BK: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, [64, K], [K, 1], [64, BK])
    r = tl.arange(0, 64)
    total = tl.zeros((64, 64), dtype=tl.float32)
    for _t in tl.range(0, 4, warp_specialize=True, num_consumer_groups=2):
        acc = tl.zeros((64, 64), dtype=tl.float32)
        for k in range(0, K, BK):
            acc = tl.dot(a_desc.load([0, k]), tl.trans(a_desc.load([0, k])), acc)
        total += acc
    tl.store(c_ptr + r[:, None] * 64 + r[None, :], total)


@tf.jit
def _three_groups(a_ptr, K):
    for t in tl.range(0, 4, warp_specialize=True, num_consumer_groups=3):
        tl.store(a_ptr + t, 1.0)


@pytest.mark.parametrize(
    "kernel,why",
    [
        (_nested_turns, "the loop must be the kernel body's"),
        (_carried_turns, "the loop carries values from one iteration to the next"),
    ],
)
def test_ping_pong_refusals(kernel, why):
    a, c = np.zeros((64, 512), BF16), np.zeros((64, 64), np.float32)
    k = kernel.compile(a, c, 512, BK=64)
    with pytest.raises(CompilationError, match=f"num_consumer_groups=2: {why}") as e:
        gpu.lower(k, "sm_90a", 4, 3)
    assert "test_warp_specialize.py" in str(e.value)
    with pytest.raises(CompilationError, match=r"num_warps 16 x 2 consumer groups leaves no room"):
        gpu.lower(k, "sm_90a", 16, 3)


def test_three_groups_are_refused():
    with pytest.raises(CompilationError, match="num_consumer_groups must be 1 or 2, got 3"):
        _three_groups.compile(np.zeros(8, np.float32), 4)


@pytest.mark.parametrize("shape", [(1000, 520, 720), (2048, 1024, 64), (384, 2048, 4096), (300, 200, 48)])
def test_the_gpu_tests_shapes_are_specialized(shape):
    # tests/gpu/test_warp_specialize_gpu.py's SHAPES: K a multiple of 16, so the operands
    # go through TMA and the kernel is specialized (not the plain kernel the flag falls
    # back to, as for K = 712).
    M, N, K = shape
    a, b, c = np.zeros((M, K), BF16), np.zeros((N, K), BF16), np.zeros((M, N), BF16)
    for groups, threads in ((1, 384), (2, 384)):
        k = matmul_ws_kernel.compile(a, b, c, M, N, K, BM=128, BN=128, BK=64, GROUPS=groups)
        low = gpu.lower(k, "sm_90a", 8 // groups, 3)
        assert f".maxntid {threads}, 1, 1" in low["ptx"]
