"""Block pointers (issue 16 part 7) on the interpreter, against exact numpy references:
tl.make_block_ptr / tl.advance / tl.load(boundary_check, padding_option) / tl.store with
Triton's semantics (strides in elements, any order, out-of-bounds per checked dim)."""

import re

import numpy as np
import pytest
import tilefuse as tf
import tilefuse.language as tl

from tests.pointer_kernels import block_if_advance, block_load, block_load_3d, block_matmul, block_store

CHECKS = [(), (0,), (1,), (0, 1)]


def block_reference(x, off, block, checked, pad):
    """The block of x at off: out-of-range elements of checked dims are `pad`."""
    out = np.full(block, pad, x.dtype)
    for i in range(block[0]):
        for j in range(block[1]):
            r, c = off[0] + i, off[1] + j
            if 0 <= r < x.shape[0] and 0 <= c < x.shape[1]:
                out[i, j] = x[r, c]
    return out


def offsets_for(rng, shape, block, checked):
    """Offsets that go out of range only along the checked dims (unchecked is undefined)."""
    off = []
    for d in range(2):
        if d in checked:
            off.append(int(rng.integers(-block[d] + 1, shape[d])))
        else:
            off.append(int(rng.integers(0, shape[d] - block[d] + 1)))
    return off


@pytest.mark.parametrize("check", CHECKS, ids=[str(c) for c in CHECKS])
@pytest.mark.parametrize("pad", ["zero", "nan"])
@pytest.mark.parametrize("layout", ["row", "col", "strided"])
def test_load(check, pad, layout):
    rng = np.random.default_rng(hash((check, pad, layout)) % 2**32)
    block = (8, 16)
    for _ in range(3):
        shape = (int(rng.integers(8, 20)), int(rng.integers(16, 40)))
        base = rng.standard_normal((shape[0] * 2, shape[1] * 2)).astype(np.float32)
        x = {
            "row": base[: shape[0], : shape[1]],
            "col": np.asfortranarray(base[: shape[0], : shape[1]]),
            "strided": base[::2, ::2][: shape[0], : shape[1]],
        }[layout]
        x = np.ascontiguousarray(x) if layout == "row" else x
        sm, sn = (s // 4 for s in x.strides)
        order = (0, 1) if layout == "col" else (1, 0)
        mem = x if layout == "row" else (x.T if layout == "col" else base)
        off = offsets_for(rng, shape, block, check)
        y = np.zeros(block, np.float32)
        with tf.jit_module.interp_buffers(mem):
            block_load[(1,)](x, y, *shape, sm, sn, *off, BM=block[0], BN=block[1], CHECK=check, PAD=pad, ORDER=order)
        ref = block_reference(x, off, block, check, np.nan if pad == "nan" else 0)
        np.testing.assert_array_equal(y, ref)


@pytest.mark.parametrize("check", CHECKS, ids=[str(c) for c in CHECKS])
def test_store_writes_only_inside_checked_dims(check):
    rng = np.random.default_rng(len(check) + 7)
    block = (8, 16)
    for _ in range(3):
        shape = (int(rng.integers(8, 20)), int(rng.integers(16, 40)))
        off = offsets_for(rng, shape, block, check)
        x = rng.integers(-(2**31), 2**31, block).astype(np.int32)
        # The output lives inside a larger array, so the unchecked writes stay in memory.
        big = rng.integers(-(2**31), 2**31, (shape[0] + 2 * block[0], shape[1] + 2 * block[1])).astype(np.int32)
        y = big[block[0] : block[0] + shape[0], block[1] : block[1] + shape[1]]
        ref = big.copy()
        for i in range(block[0]):
            for j in range(block[1]):
                r, c = off[0] + i, off[1] + j
                if (0 in check and not 0 <= r < shape[0]) or (1 in check and not 0 <= c < shape[1]):
                    continue
                ref[block[0] + r, block[1] + c] = x[i, j]
        with tf.jit_module.interp_buffers(big):
            block_store[(1,)](x, y, *shape, y.strides[0] // 4, 1, *off, BM=block[0], BN=block[1], CHECK=check)
        np.testing.assert_array_equal(big, ref)


def test_load_3d():
    rng = np.random.default_rng(3)
    x = rng.integers(-100, 100, (5, 6, 7)).astype(np.int16)
    for off in [(0, 0, 0), (-1, 3, 4), (3, -2, -3), (4, 5, 6)]:
        y = np.zeros((4, 4, 8), np.int16)
        block_load_3d[(1,)](x, y, *x.shape, *off, B0=4, B1=4, B2=8)
        ref = np.zeros_like(y)
        for i, j, k in np.ndindex(*y.shape):
            a, b, c = off[0] + i, off[1] + j, off[2] + k
            if 0 <= a < 5 and 0 <= b < 6 and 0 <= c < 7:
                ref[i, j, k] = x[a, b, c]
        np.testing.assert_array_equal(y, ref)


@pytest.mark.parametrize("mnk", [(64, 64, 64), (50, 37, 45), (17, 80, 100)])
def test_block_pointer_matmul(mnk):
    m, n, k = mnk
    rng = np.random.default_rng(m * n * k)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = np.asfortranarray(rng.standard_normal((k, n)).astype(np.float32))  # column-major b
    c = np.zeros((m, n), np.float32)
    bm, bn, bk = 32, 32, 16
    grid = (tf.cdiv(m, bm), tf.cdiv(n, bn))
    block_matmul[grid](a, b, c, m, n, k, k, 1, 1, k, n, 1, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    # fp32 products and sums: at most k roundings of |a||b| partial sums.
    bound = k * 2.0**-24 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))) + 1e-30
    assert (np.abs(c - ref) <= bound).all()


def test_advance_in_a_branch():
    x = np.arange(40, dtype=np.float32) + 1
    for flag, ref in [(0, x[:16]), (1, x[16:32])]:
        y = np.zeros(16, np.float32)
        block_if_advance[(1,)](x, y, flag, 40, BN=16)
        np.testing.assert_array_equal(y, ref)
    y = np.zeros(16, np.float32)
    block_if_advance[(1,)](x, y, 1, 20, BN=16)  # beyond N = 20: zero padding
    np.testing.assert_array_equal(y, np.concatenate([x[16:20], np.zeros(12, np.float32)]))


@tf.jit
def bad_block(x_ptr, WHAT: tl.constexpr):
    bp = tl.make_block_ptr(x_ptr, (16, 16), (16, 1), (0, 0), (8, 8), (1, 0))
    if WHAT == "mask":
        tl.load(bp, mask=tl.full((8, 8), 1, tl.int1))
    elif WHAT == "nan_int":
        tl.load(bp, boundary_check=(0,), padding_option="nan")
    elif WHAT == "dim":
        tl.load(bp, boundary_check=(2,))
    elif WHAT == "order":
        tl.make_block_ptr(x_ptr, (16, 16), (16, 1), (0, 0), (8, 8), (1, 1))
    elif WHAT == "advance":
        tl.advance(bp, (1,))
    elif WHAT == "shape":
        tl.store(bp, tl.zeros((8, 4), tl.int32))
    elif WHAT == "dtype":
        tl.store(bp, tl.zeros((8, 8), tl.int64))
    else:
        for i in range(2):
            bp = tl.make_block_ptr(x_ptr + i, (16, 16), (16, 1), (0, 0), (8, 8), (1, 0))


ERRORS = {
    "mask": "`mask` and `other` arguments cannot be specified for loading block pointers",
    "nan_int": "Padding option `nan` is not supported for integer block pointers",
    "dim": "boundary_check dim 2 is out of range for a block of rank 2",
    "order": "Expected a permutation of (0, 1, ..., len(order)-1) in order",
    "advance": "Expected offsets to have the same length as block_shape (2), got 1",
    "shape": "Block shape([8, 8]) and value shape([8, 4]) mismatch",
    "dtype": "Block element type(tl.int32) and value element type(tl.int64) mismatch",
    "loop": "only a block pointer's offsets may change (tl.advance)",
}


@pytest.mark.parametrize("what", sorted(ERRORS))
def test_errors_name_the_kernel_line(what):
    with pytest.raises(tf.CompilationError, match=re.escape(ERRORS[what])) as e:
        bad_block[(1,)](np.zeros(256, np.int32), WHAT=what)
    assert e.value.file == __file__


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_block_pointer_matmul_assembles_on_the_fast_path(arch, tmp_path):
    import ml_dtypes

    from tests.ptxas import assert_assembles

    x = np.zeros((256, 256), ml_dtypes.bfloat16)
    k = block_matmul.warmup(
        x, x, x, 256, 256, 256, 256, 1, 256, 1, 256, 1, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, grid=(1,), target=arch
    )
    ptx = k.asm["ptx"]
    assert ("wgmma.mma_async" if arch == "sm_90a" else "mma.sync") in ptx
    # The pointer tiles vectorize (16-byte accesses) and, on sm_90a, pipeline through cp.async.
    assert ("cp.async" if arch == "sm_90a" else "ld.global.v4") in ptx and "st.global.v4" in ptx
    assert_assembles(ptx, arch, tmp_path)


GPU_CONFIGS = [(dt, blocks) for dt in (np.float32, np.float16) for blocks in ((64, 64, 32), (128, 128, 64))]


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("dtype, blocks", GPU_CONFIGS, ids=[f"{np.dtype(d).name}-{b[0]}" for d, b in GPU_CONFIGS])
def test_gpu_test_configs_assemble(arch, dtype, blocks, tmp_path):
    # What tests/gpu/test_pointers_gpu.py launches compiles and assembles here, without a GPU.
    from tests.ptxas import assert_assembles

    x = np.zeros((256, 256), dtype)
    bm, bn, bk = blocks
    k = block_matmul.warmup(
        x, x, x, 200, 130, 190, 190, 1, 1, 190, 130, 1, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, grid=(1,), target=arch
    )
    assert_assembles(k.asm["ptx"], arch, tmp_path)
    f = np.zeros((90, 150), np.float32)
    for order in ((1, 0), (0, 1)):
        k = block_load.warmup(
            f, f, 90, 150, 150, 1, -3, 5, BM=32, BN=64, CHECK=(0, 1), PAD="nan", ORDER=order, grid=(1,), target=arch
        )
        assert_assembles(k.asm["ptx"], arch, tmp_path)
