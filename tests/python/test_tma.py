"""TMA lowering without a GPU: which descriptors become tensor maps, what the maps
hold, that the PTX takes the copy engine and assembles, and the launch-time checks
of a tensor map's arguments."""

import ml_dtypes
import numpy as np
import pytest
from tilefuse import _C, gpu

from kernels_dsl.tutorials.matmul_desc import matmul_desc_kernel
from tests.ptxas import assert_assembles
from tests.shared_kernels import desc_copy1, desc_copy2, desc_copy3, k_desc_fn, matmul_desc_a

bf = np.zeros((64, 64), ml_dtypes.bfloat16)
f32 = np.zeros((64, 64), np.float32)
MM = dict(BLOCK_SIZE_M=128, BLOCK_SIZE_N=128, BLOCK_SIZE_K=64, GROUP_SIZE_M=8)


def lowered(kernel, args, kwargs, target="sm_90a", warps=4, stages=3):
    k = kernel.compile(*args, **kwargs)
    return gpu.lower(k, target, warps, stages)


def dims(ds):
    return [(d.param, d.value) for d in ds]


def test_matmul_descriptors_become_tensor_maps(tmp_path):
    low = lowered(matmul_desc_kernel, (bf, bf, bf, 4096, 4096, 4096, 4096, 4096, 4096), MM, warps=8, stages=4)
    maps = low["spec"].tensor_maps
    assert len(maps) == 3
    a, b, c = maps
    # Parameters: a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm.
    assert (a.base, b.base, c.base) == (0, 1, 2)
    assert dims(a.sizes) == [(3, 0), (5, 0)] and dims(a.strides) == [(6, 0), (-1, 1)]
    assert dims(b.sizes) == [(5, 0), (4, 0)] and dims(b.strides) == [(7, 0), (-1, 1)]
    # Boxes of 128-byte swizzled column blocks: 64 bf16 wide.
    assert a.box == [128, 64] and b.box == [64, 64] and c.box == [128, 64]
    assert {m.swizzle_bytes for m in maps} == {128} and {m.elem_bytes for m in maps} == {2}
    assert a.where.endswith("matmul_desc.py:32")
    ptx = low["ptx"]
    assert ".param .align 64 .b8 matmul_desc_kernel_param_9[128]" in ptx
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes" in ptx
    assert "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group" in ptx
    assert "wgmma.mma_async" in ptx and "mbarrier.try_wait.parity" in ptx
    assert "cp.async.cg" not in ptx and "cp.async.ca" not in ptx  # no per-thread copies left
    assert_assembles(ptx, "sm_90a", tmp_path)


def test_unaligned_strides_and_older_gpus_keep_bounds_checked_accesses(tmp_path):
    # 100 is not a multiple of 16: the copy engine cannot take the row stride.
    low = lowered(matmul_desc_kernel, (bf, bf, bf, 100, 100, 100, 100, 100, 100), MM, warps=8)
    assert low["spec"].tensor_maps == [] and "cp.async.bulk" not in low["ptx"]
    assert_assembles(low["ptx"], "sm_90a", tmp_path)
    low = lowered(matmul_desc_kernel, (bf, bf, bf, 4096, 4096, 4096, 4096, 4096, 4096), MM, target="sm_80")
    assert low["spec"].tensor_maps == [] and "cp.async.bulk" not in low["ptx"]
    assert_assembles(low["ptx"], "sm_80", tmp_path)


@pytest.mark.parametrize(
    "kernel,args,kwargs,box,swizzle",
    [
        (desc_copy1, (f32, f32, 1000), dict(B=256), [256], 0),
        (desc_copy2, (f32, f32, 100, 70, 80), dict(BM=32, BN=64), [32, 32], 128),
        (desc_copy2, (bf, bf, 100, 70, 80), dict(BM=16, BN=16), [16, 16], 32),
        (desc_copy2, (np.zeros(8, np.int8), np.zeros(8, np.int8), 9, 70, 96), dict(BM=8, BN=256), [8, 128], 128),
        (desc_copy2, (np.zeros(8, np.float64), np.zeros(8, np.float64), 9, 70, 96), dict(BM=8, BN=8), [8, 8], 64),
        (desc_copy3, (bf, bf, 3, 20, 50, 2048, 64), dict(B0=2, B1=4, B2=64), [2, 4, 64], 128),
    ],
)
def test_descriptor_copies_take_the_copy_engine(kernel, args, kwargs, box, swizzle, tmp_path):
    low = lowered(kernel, args, kwargs)
    assert [m.box for m in low["spec"].tensor_maps] == [box, box]
    assert {m.swizzle_bytes for m in low["spec"].tensor_maps} == {swizzle}
    rank = len(box)
    assert f"cp.async.bulk.tensor.{rank}d.shared::cluster.global" in low["ptx"]
    assert f"cp.async.bulk.tensor.{rank}d.global.shared::cta" in low["ptx"]
    assert_assembles(low["ptx"], "sm_90a", tmp_path)


def test_blocks_the_copy_engine_cannot_move_stay_bounds_checked(tmp_path):
    # 4 rows of bf16 cannot start whole swizzle patterns; 8 bf16 (16 bytes) rows are too
    # narrow to swizzle: both keep bounds-checked accesses.
    for bm, bn in [(4, 64), (16, 8)]:
        low = lowered(desc_copy2, (bf, bf, 100, 70, 80), dict(BM=bm, BN=bn))
        assert low["spec"].tensor_maps == [] and "cp.async.bulk" not in low["ptx"]
        assert_assembles(low["ptx"], "sm_90a", tmp_path)


def test_mixed_pipeline_copies_a_with_tma_and_b_with_cp_async(tmp_path):
    low = lowered(matmul_desc_a, (bf, bf, bf, 100, 100, 100, 64, 128, 128), dict(BM=64, BN=64, BK=64), stages=3)
    ptx = low["ptx"]
    assert len(low["spec"].tensor_maps) == 1
    assert "cp.async.bulk.tensor.2d.shared::cluster" in ptx and "cp.async.cg.shared.global" in ptx
    assert_assembles(ptx, "sm_90a", tmp_path)


def check(elem=2, base=1024, sizes=(64, 64), strides=(64, 1), box=(64, 64), swizzle=128):
    _C.runtime.check_tensor_map(elem, base, list(sizes), list(strides), list(box), swizzle, "k.py:7")


def test_tensor_map_checks_name_what_is_wrong():
    check()
    with pytest.raises(_C.runtime.TensorMapError, match=r"k.py:7: size 0 of dim 0 is out of range"):
        check(sizes=(0, 64))
    with pytest.raises(_C.runtime.TensorMapError, match=r"base address 1026 is not a multiple of 16"):
        check(base=1026)
    with pytest.raises(_C.runtime.TensorMapError, match=r"stride 60 of dim 0 \(120 bytes\)"):
        check(strides=(60, 1))
    with pytest.raises(_C.runtime.TensorMapError, match=r"stride 2 of the last dim is not 1"):
        check(strides=(64, 2))
    with pytest.raises(_C.runtime.TensorMapError, match=r"size 4294967297 of dim 1"):
        check(sizes=(64, 2**32 + 1))


def test_split_n_tilings_box_b_in_the_wgmma_swizzle(tmp_path):
    # 64x64 tiles on 8 warps: two warpgroups split N, 32 columns (64 bytes) each. B's
    # boxes take that 64-byte swizzle, the one its wgmma descriptors read, so the
    # pipeline still copies B with TMA straight into the ring.
    mm = dict(BLOCK_SIZE_M=64, BLOCK_SIZE_N=64, BLOCK_SIZE_K=64, GROUP_SIZE_M=8)
    low = lowered(matmul_desc_kernel, (bf, bf, bf, 4096, 4096, 4096, 4096, 4096, 4096), mm, warps=8, stages=3)
    a, b, c = low["spec"].tensor_maps
    assert (a.box, a.swizzle_bytes) == ([64, 64], 128)
    assert (b.box, b.swizzle_bytes) == ([64, 32], 64)
    assert (c.box, c.swizzle_bytes) == ([64, 64], 128)
    assert "cp.async.cg" not in low["ptx"] and "cp.async.ca" not in low["ptx"]
    assert_assembles(low["ptx"], "sm_90a", tmp_path)


def test_descriptors_passed_to_device_functions_stay_on_tma(tmp_path):
    x = np.zeros((64, 64), np.float32)
    low = lowered(k_desc_fn, (x, x, 64, 64), dict(BM=16, BN=16))
    assert low["hints"] == [], low["hints"]
    assert "cp.async.bulk.tensor.2d.shared::cluster.global" in low["ptx"]
    assert "cp.async.bulk.tensor.2d.global.shared::cta" in low["ptx"]
    assert_assembles(low["ptx"], "sm_90a", tmp_path)
