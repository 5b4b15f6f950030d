"""The K-loop kernels of tests/shared_kernels.py (masked edges with other=0.0, two dots
sharing A) on the interpreter against float64: what the GPU pipelines must match."""

import re

import ml_dtypes
import numpy as np
import pytest
from tilefuse import gpu

from tests.ptxas import assert_assembles
from tests.shared_kernels import (
    at_dot_loop,
    computed_dot_loop,
    fp4_dot_loop,
    gated_dot_loop,
    masked_dot_loop,
    scaled_dot_loop,
    strided_dot_loop,
    two_dot_loops,
)

M, N, K = 70, 40, 80
META = dict(BM=32, BN=32, BK=32)
GRID = (3, 2)


def operands(dtype, rng, *shapes):
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


@pytest.mark.parametrize("k_end", [K, 53])
@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn])
def test_masked_dot_loop(dtype, k_end):
    a, bt = operands(dtype, np.random.default_rng(1), (M, K), (N, K))
    c = np.full((M, N), np.nan, np.float32)
    masked_dot_loop[GRID](a, bt, c, M, N, K, k_end, **META)
    a64, b64 = a[:, :k_end].astype(np.float64), bt[:, :k_end].astype(np.float64)
    # Exact products, fp32 sums of K terms.
    np.testing.assert_allclose(c, a64 @ b64.T, rtol=0, atol=K * 2**-23 * (np.abs(a64) @ np.abs(b64).T).max())


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn])
def test_gated_dot_loop(dtype):
    a, gt, ut = operands(dtype, np.random.default_rng(2), (M, K), (N, K), (N, K))
    c = np.full((M, N), np.nan, np.float32)
    gated_dot_loop[GRID](a, gt, ut, c, M, N, K, **META)
    a64, g64, u64 = (x.astype(np.float64) for x in (a, gt, ut))
    g, u = a64 @ g64.T, a64 @ u64.T
    bg, bu = np.abs(a64) @ np.abs(g64).T, np.abs(a64) @ np.abs(u64).T
    # Each accumulator within K * 2^-23 of its bound, then one fp32 product.
    tol = K * 2**-23 * (bg * np.abs(u) + bu * np.abs(g) + bg * bu) + 2**-23 * np.abs(g * u)
    assert (np.abs(c - g * u) <= tol).all()


def _two_loops_reference(a, bt, d, et):
    a64, b64, d64, e64 = (x.astype(np.float64) for x in (a, bt, d, et))
    g, u = a64 @ b64.T, d64 @ e64.T
    bg, bu = np.abs(a64) @ np.abs(b64).T, np.abs(d64) @ np.abs(e64).T
    k = max(a.shape[1], d.shape[1])
    # Each accumulator within K * 2^-23 of its bound, then one fp32 product.
    return g * u, k * 2**-23 * (bg * np.abs(u) + bu * np.abs(g) + bg * bu) + 2**-23 * np.abs(g * u)


def test_two_dot_loops():
    rng = np.random.default_rng(5)
    a, bt = operands(ml_dtypes.bfloat16, rng, (M, K), (N, K))
    d, et = operands(ml_dtypes.bfloat16, rng, (M, 48), (N, 48))
    c = np.full((M, N), np.nan, np.float32)
    two_dot_loops[GRID](a, bt, d, et, c, M, N, K, 48, **META)
    ref, tol = _two_loops_reference(a, bt, d, et)
    assert (np.abs(c - ref) <= tol).all()


def test_two_dot_loops_share_one_ring():
    # Both K loops pipeline (sm_90a), each in rings of 3 stages of its A and B tiles
    # (pipeline-expand); the second loop's rings reuse the first's bytes, dead after its
    # loop (allocate-shared), so the kernel needs one loop's rings and the scratch after
    # them, not two; the second prologue synchronizes the block before its copies.
    bf = np.zeros((128, 128), ml_dtypes.bfloat16)
    meta = dict(BM=128, BN=128, BK=64)
    kernel = two_dot_loops.warmup(
        bf, bf, bf, bf, np.zeros((128, 128), np.float32), 128, 128, 128, 128, grid=(1,), **meta
    )
    low = gpu.lower(kernel, "sm_90a", 8, 3)
    assert not low["hints"]
    ring = 3 * (128 * 64 * 2 + 128 * 64 * 2)
    rings = re.findall(r"smem_alloc \{smem_at = (\d+)\} : smem<128x64xbf16, #shared<[^>]*stages=3>>", low["gpu"])
    assert len(rings) == 4 and rings[:2] == rings[2:], rings
    # from the first loop's drain to the second's first copy
    between = re.search(r"async_wait %groups_out \{pending = 0\}(.*?)async_copy", low["gpu"], re.S).group(1)
    assert "\n  barrier\n" in between
    assert ring <= low["spec"].shared_bytes < 2 * ring
    assert low["ptx"].count("cp.async.wait_group 0;") == 2  # each loop drains its copies


@pytest.mark.parametrize("k_contiguous", [True, False])
@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn])
def test_strided_dot_loop(dtype, k_contiguous):
    a, bt = operands(dtype, np.random.default_rng(3), (M, K), (N, K))
    b = bt.T if k_contiguous else np.ascontiguousarray(bt.T)  # [K, N], K or N contiguous
    strides = [s // b.itemsize for s in b.strides]
    c = np.full((M, N), np.nan, np.float32)
    strided_dot_loop[GRID](a, b, c, M, N, K, *strides, **META)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    np.testing.assert_allclose(c, a64 @ b64, rtol=0, atol=K * 2**-23 * (np.abs(a64) @ np.abs(b64)).max())


@pytest.mark.parametrize("desc", [True, False])
@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16])
def test_at_dot_loop(dtype, desc):
    at, b = operands(dtype, np.random.default_rng(4), (K, M), (K, N))
    c = np.full((M, N), np.nan, np.float32)
    at_dot_loop[GRID](at, b, c, M, N, K, DESC=desc, **META)
    a64, b64 = at.astype(np.float64).T, b.astype(np.float64)
    np.testing.assert_allclose(c, a64 @ b64, rtol=0, atol=K * 2**-23 * (np.abs(a64) @ np.abs(b64)).max())


@pytest.mark.parametrize("desc", [True, False])
@pytest.mark.parametrize("warps,bm,bn", [(4, 64, 128), (8, 128, 256), (8, 128, 64)])
def test_at_dot_loop_reads_a_m_major(warps, bm, bn, desc, tmp_path):
    # A = trans of a [K, M] tile is copied as it lies (TMA boxes or cp.async runs along M)
    # into 128-byte column blocks of 64 rows of M, which wgmma reads transposed
    # (imm-trans-a 1, B N-major: imm-trans-b 1); no transpose through registers.
    bf = np.zeros((64, 64), ml_dtypes.bfloat16)
    kernel = at_dot_loop.compile(
        bf, bf, np.zeros((64, 64), np.float32), 4096, 4096, 4096, BM=bm, BN=bn, BK=64, DESC=desc
    )
    low = gpu.lower(kernel, "sm_90a", warps, 3, keep_ir=True)
    assert not low["hints"], low["hints"]
    assert "a_mmajor = true" in low["gpu"] and "trans" not in low["gpu"]
    assert re.search(rf"smem<64x{bm}xbf16, #shared<swizzle=128, rows=64, cols={bm}, eb=2, stages=3>>", low["gpu"])
    ptx = low["ptx"]
    assert ("cp.async.bulk.tensor" in ptx) == desc and ("cp.async.cg" in ptx) != desc
    mmas = re.findall(r"wgmma\.mma_async[^;]*;", ptx)
    assert mmas and all(m.endswith("p, 1, 1, 1, 1;") for m in mmas)
    assert_assembles(ptx, "sm_90a", tmp_path)


def mx_operands(rng, fa, fb, m, n, k):
    """fp8 codes (int8) and e8m0 scale codes of an MXFP8 product, and their float64 values."""
    types = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
    a = rng.standard_normal((m, k)).astype(types[fa])
    bt = rng.standard_normal((n, k)).astype(types[fb])
    sa = rng.integers(120, 135, (m, k // 32)).astype(np.uint8)
    sb = rng.integers(120, 135, (n, k // 32)).astype(np.uint8)
    A = a.astype(np.float64) * np.repeat(np.exp2(sa.astype(np.float64) - 127), 32, axis=1)
    Bt = bt.astype(np.float64) * np.repeat(np.exp2(sb.astype(np.float64) - 127), 32, axis=1)
    return a.view(np.int8), sa.view(np.int8), bt.view(np.int8), sb.view(np.int8), A, Bt


@pytest.mark.parametrize("k_contiguous", [True, False])
@pytest.mark.parametrize("fa,fb", [("e4m3", "e4m3"), ("e5m2", "e4m3")])
def test_scaled_dot_loop(fa, fb, k_contiguous):
    a, sa, bt, sb, A, Bt = mx_operands(np.random.default_rng(4), fa, fb, M, N, 128)
    b = bt.T if k_contiguous else np.ascontiguousarray(bt.T)
    c = np.full((M, N), np.nan, np.float32)
    strides = [s // b.itemsize for s in b.strides]
    scaled_dot_loop[GRID](a, sa, b, sb, c, M, N, 128, *strides, FA=fa, FB=fb, BM=32, BN=32, BK=64)
    # Dequantized products are exact in fp32; the K-term sums round.
    np.testing.assert_allclose(c, A @ Bt.T, rtol=0, atol=128 * 2**-23 * (np.abs(A) @ np.abs(Bt).T).max())


E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])


def fp4_operand(rng, rows, k):
    codes = rng.integers(0, 16, size=(rows, k), dtype=np.uint8)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    scales = rng.integers(120, 135, size=(rows, k // 32), dtype=np.uint8)
    values = E2M1[codes] * np.exp2(np.repeat(scales.astype(np.float64) - 127, 32, axis=1))
    return packed.view(np.int8), scales.view(np.int8), values


def test_fp4_dot_loop():
    # The MXFP4 K loop the GPU decomposes into a bf16 dot of dequantized operands and pipelines.
    rng = np.random.default_rng(5)
    ap, sa, av = fp4_operand(rng, M, 128)
    bp, sb, bv = fp4_operand(rng, N, 128)
    c = np.full((M, N), np.nan, np.float32)
    fp4_dot_loop[GRID](ap, sa, bp, sb, c, M, N, 128, 4, BM=32, BN=32, BK=64)
    np.testing.assert_allclose(c, av @ bv.T, rtol=0, atol=128 * 2**-23 * (np.abs(av) @ np.abs(bv).T).max())


@pytest.mark.parametrize("which", ["a", "b", "ab"])
def test_computed_dot_loop(which):
    rng, k = np.random.default_rng(6), 96  # K % BK == 0
    a = rng.standard_normal((M, k)).astype(np.float16 if "a" in which else ml_dtypes.bfloat16)
    b = rng.standard_normal((k, N)).astype(ml_dtypes.float8_e4m3fn if "b" in which else ml_dtypes.bfloat16)
    c = np.full((M, N), np.nan, np.float32)
    computed_dot_loop[GRID](a, b, c, M, N, k, N, A_COMPUTED="a" in which, B_COMPUTED="b" in which, **META)
    a64 = a.astype(np.float64)
    if "a" in which:  # halved and rounded to bf16 in the kernel
        a64 = (a.astype(np.float32) * 0.5).astype(ml_dtypes.bfloat16).astype(np.float64)
    b64 = b.astype(np.float64)
    np.testing.assert_allclose(c, a64 @ b64, rtol=0, atol=k * 2**-23 * (np.abs(a64) @ np.abs(b64)).max())


def test_prologue_conversions_stay_clear_of_the_rings():
    """A pipeline's prologue issues copies into its rings and then converts the next
    copies' masks through shared memory: that scratch must lie past the rings
    (smem_staged), as in the loop, or it overwrites stage 0 while its copy is in flight
    (block-pointer matmul, K-contiguous B: wrong results on the H200 before the fix)."""
    from tests.pointer_kernels import block_matmul

    a = np.zeros((256, 256), ml_dtypes.bfloat16)
    args = (a, a, a, 256, 256, 256, 256, 1, 1, 256, 256, 1)
    k = block_matmul.warmup(*args, BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, target="sm_90a")
    staged = int(re.search(r"smem_staged = (\d+)", k.asm["gpu"]).group(1))
    ptx = k.asm["ptx"]
    prologue = ptx[ptx.index("cp.async.cg") : ptx.index("cp.async.wait_group")]
    offsets = [
        int(m.group(1) or 0) for m in re.finditer(r"(?:st|ld)\.shared\.\w+\s+[^\[]*\[%\w+(?:\+(\d+))?\]", prologue)
    ]
    assert offsets, "the prologue converts no mask through shared memory: the test no longer covers the case"
    assert min(offsets) >= staged, f"prologue scratch at offsets {sorted(set(offsets))} inside the rings [0, {staged})"
