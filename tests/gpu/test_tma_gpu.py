"""TMA on the GPU against the interpreter: descriptor copies of every rank with blocks
hanging over each edge, the pipelined descriptor matmul, a pipeline mixing TMA and
cp.async operands, the launch fast path re-encoding tensor maps, and launch errors."""

import numpy as np
import pytest
import tilefuse as tf

from kernels_dsl.tutorials.matmul_desc import matmul_desc_kernel
from tests.gpu.test_gpu_vs_interp import to_numpy
from tests.shared_kernels import (
    desc_copy1,
    desc_copy2,
    desc_copy3,
    desc_copy_groups,
    matmul_desc_a,
    matmul_desc_persistent,
)

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]


def padded(rows, cols, dtype, pad=16):
    """A [rows, cols] view of random values with rows `pad`-element aligned, and its stride;
    the padding holds a sentinel that no store may overwrite."""
    stride = -(-cols // pad) * pad
    if dtype.is_floating_point:
        full = (torch.randn(rows, stride, device="cuda") * 4).to(dtype)
    else:
        full = torch.randint(-100, 100, (rows, stride), device="cuda", dtype=dtype)
    return full, stride


def sentinel_like(full):
    return torch.full_like(full, 7)


def run_both(kernel, grid, x, y, *scalars, tma=True, **meta):
    """GPU (twice: the second launch takes the C++ fast path) and the interpreter."""
    hx, hy = to_numpy(x).copy(), to_numpy(y).copy()
    ptx = kernel.warmup(x, y, *scalars, grid=grid, **meta).asm["ptx"]
    assert ("cp.async.bulk.tensor" in ptx) == tma
    kernel[grid](x, y, *scalars, **meta)
    y2 = sentinel_like(y)
    kernel[grid](x, y2, *scalars, **meta)
    torch.cuda.synchronize()
    kernel[grid](hx, hy, *scalars, **meta)
    return to_numpy(y), to_numpy(y2), hy


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int8, torch.float64])
@pytest.mark.parametrize("blocks", [(32, 64), (16, 16), (8, 256), (64, 32)])
def test_2d_descriptor_copies_clip_at_every_edge(dtype, blocks):
    bm, bn = blocks
    m, n = 70, 45
    x, stride = padded(m, n, dtype)
    y = sentinel_like(x)
    grid = (tf.cdiv(m, bm) + 2, tf.cdiv(n, bn) + 2)  # one block before and past each edge
    tma = bn * x.element_size() >= 32  # narrower rows keep bounds-checked accesses
    gpu, gpu2, host = run_both(desc_copy2, grid, x, y, m, n, stride, tma=tma, BM=bm, BN=bn)
    assert gpu.tobytes() == host.tobytes() and gpu2.tobytes() == host.tobytes()
    assert (gpu[:, n:].astype(np.float64) == 7).all()  # nothing written past the tensor
    if dtype == torch.float32:
        np.testing.assert_array_equal(gpu[:, :n], to_numpy(x[:, :n] * 3 - 1))


@pytest.mark.parametrize("groups,rows", [(3, 23), (8, 16)])
def test_descriptor_sized_by_a_product_of_arguments(groups, rows):
    # [G * R, N]: on TMA (the launch multiplies), clipped at every edge like the others.
    n = 45
    x, stride = padded(groups * rows, n, torch.bfloat16)
    y = sentinel_like(x)
    grid = (tf.cdiv(groups * rows, 32) + 2, tf.cdiv(n, 32) + 2)
    gpu, gpu2, host = run_both(desc_copy_groups, grid, x, y, groups, rows, n, stride, BM=32, BN=32)
    assert gpu.tobytes() == host.tobytes() and gpu2.tobytes() == host.tobytes()
    assert (gpu[:, n:].astype(np.float64) == 7).all()


def test_1d_and_3d_descriptor_copies():
    n = 1000
    x = torch.randn(n, device="cuda")
    y = torch.full_like(x, 7)
    gpu, gpu2, host = run_both(desc_copy1, (tf.cdiv(n, 256) + 2,), x, y, n, B=256)
    assert gpu.tobytes() == host.tobytes() == gpu2.tobytes()
    np.testing.assert_array_equal(gpu, to_numpy(x * 3 - 1))

    d0, d1, d2 = 3, 20, 50
    full = torch.randn(d0, d1, 64, device="cuda").to(torch.bfloat16)
    out = torch.full_like(full, 7)
    grid = (tf.cdiv(d0, 2), tf.cdiv(d1, 4) + 2, 1)
    gpu, gpu2, host = run_both(desc_copy3, grid, full, out, d0, d1, d2, d1 * 64, 64, B0=2, B1=4, B2=64)
    assert gpu.tobytes() == host.tobytes() == gpu2.tobytes()
    assert (gpu[:, :, d2:].astype(np.float64) == 7).all()


@pytest.mark.parametrize("stages", [1, 2, 3, 4])
@pytest.mark.parametrize("tiles", [(128, 128, 64, 8), (128, 256, 64, 8), (64, 64, 32, 4), (64, 128, 128, 4)])
@pytest.mark.parametrize("mnk", [(256, 192, 208), (100, 77, 50), (192, 128, 1024)])
def test_descriptor_matmul(mnk, tiles, stages):
    # K = 208 and 50: a K tail the copy engine zero-fills; 100 x 77: M and N edges the
    # stores clip; K = 50 with 4 stages: fewer iterations than stages.
    m, n, k = mnk
    bm, bn, bk, warps = tiles
    dtype = torch.bfloat16 if stages != 3 else torch.float16
    a, sa = padded(m, k, dtype)
    b, sb = padded(k, n, dtype)
    c, sc = padded(m, n, dtype)
    c.fill_(7)
    meta = dict(BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=8)
    args = (m, n, k, sa, sb, sc)
    ptx = matmul_desc_kernel.warmup(a, b, c, *args, grid=(1,), num_warps=warps, num_stages=stages, **meta).asm["ptx"]
    assert "cp.async.bulk.tensor.2d.shared::cluster" in ptx and "wgmma.mma_async" in ptx
    grid = (tf.cdiv(m, bm) * tf.cdiv(n, bn),)
    matmul_desc_kernel[grid](a, b, c, *args, num_warps=warps, num_stages=stages, **meta)
    ref = (a[:, :k].double() @ b[:, :n].double()).cpu().numpy()
    got = to_numpy(c[:, :n]).astype(np.float64)
    # fp32 accumulation in another order, then one rounding to the 16-bit output.
    tol = 2**-7 if dtype == torch.bfloat16 else 2**-10
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * np.sqrt(k))
    assert bool((c[:, n:] == 7).all())  # the padding was not written


@pytest.mark.parametrize("stages", [1, 3])
def test_pipeline_mixing_tma_and_cp_async(stages):
    m, n, k = 100, 128, 200
    a, sa = padded(m, k, torch.bfloat16)
    b = torch.randn(k, n, device="cuda").to(torch.bfloat16)
    c = torch.full((m, n), 7.0, device="cuda", dtype=torch.bfloat16)
    grid = (tf.cdiv(m, 64), tf.cdiv(n, 64))
    matmul_desc_a[grid](a, b, c, m, n, k, sa, n, n, BM=64, BN=64, BK=64, num_stages=stages)
    ref = (a[:, :k].double() @ b.double()).cpu().numpy()
    np.testing.assert_allclose(to_numpy(c).astype(np.float64), ref, rtol=2**-7, atol=2**-7 * np.sqrt(k))


@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("programs", [1, 3, 7])
def test_pipelined_loop_runs_again_in_an_outer_loop(stages, programs):
    # The stages' mbarrier phases carry over from one run of the K loop to the next
    # (K = 320: 5 iterations, not a multiple of the stages); 1 program walks all 12
    # tiles, 7 programs walk 1 or 2.
    m, n, k = 256, 384, 320
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    b = torch.randn(k, n, device="cuda").to(torch.bfloat16)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    meta = dict(BM=128, BN=64, BK=64, num_warps=8, num_stages=stages)
    ptx = matmul_desc_persistent.warmup(a, b, c, m, n, k, grid=(programs,), **meta).asm["ptx"]
    assert "cp.async.bulk.tensor.2d.shared::cluster" in ptx
    matmul_desc_persistent[(programs,)](a, b, c, m, n, k, **meta)
    ref = (a.double() @ b.double()).cpu().numpy()
    np.testing.assert_allclose(to_numpy(c).astype(np.float64), ref, rtol=2**-7, atol=2**-7 * np.sqrt(k))


def test_tensor_map_arguments_the_copy_engine_rejects_raise_launch_errors():
    x, stride = padded(64, 64, torch.float32)
    y = sentinel_like(x)
    desc_copy2[(1, 1)](x, y, 32, 64, stride, BM=32, BN=64)  # remembered by the fast path
    with pytest.raises(tf.LaunchError, match="size 0 of dim 0"):
        desc_copy2[(1, 1)](x, y, 0, 64, stride, BM=32, BN=64)  # the same key: fast path
    with pytest.raises(tf.LaunchError, match="size 0 of dim 0"):
        desc_copy2.run(x, y, 0, 64, stride, grid=(1, 1), BM=32, BN=64)  # the full path
