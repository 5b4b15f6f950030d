"""float64 atomics (add, max, min, xchg) and atomic_cas on floats (bits compared) on the
interpreter against exact references: programs run in order, so every old value is exact."""

import ml_dtypes
import numpy as np
import pytest

from tests import atomic_kernels as ak


@pytest.mark.parametrize("op", ["add", "max", "min", "xchg"])
def test_float64_rmw(op):
    rng = np.random.default_rng(len(op))
    programs, n = 19, 11
    dst0, v, old = ak.rmw_inputs(rng, op, np.float64, programs)
    dst, old0 = dst0.copy(), old.copy()
    ak.rmw[(programs,)](dst, v, old, n, OP=op, BLOCK=ak.BLOCK)
    np.testing.assert_array_equal(dst, ak.rmw_final(op, dst0, v, n))
    np.testing.assert_array_equal(old[:, :n], ak.rmw_sequential_olds(op, dst0, v)[:, :n])
    np.testing.assert_array_equal(old[:, n:], old0[:, n:])


def float_cas_inputs(rng, dtype, programs):
    """dst and per-program (cmp, v); cmp is often the value a lane holds by then."""
    dst = rng.standard_normal(ak.BLOCK).astype(dtype)
    v = rng.standard_normal((programs, ak.BLOCK)).astype(dtype)
    prev = np.vstack([dst[None], v[:-1]])
    cmp = np.where(rng.random((programs, ak.BLOCK)) < 0.6, prev, rng.standard_normal((programs, ak.BLOCK))).astype(
        dtype
    )
    return dst, cmp, v


def bits_cas_sequential(dst, cmp, v):
    """ak.cas_sequential comparing bit patterns (as cmpxchg does)."""
    u = {2: np.uint16, 4: np.uint32, 8: np.uint64}[dst.dtype.itemsize]
    cur, olds = ak.cas_sequential(dst.view(u), cmp.view(u), v.view(u))
    return cur.view(dst.dtype), olds.view(dst.dtype)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64])
def test_float_cas(dtype):
    rng = np.random.default_rng(np.dtype(dtype).itemsize)
    programs = 13
    dst0, cmp, v = float_cas_inputs(rng, dtype, programs)
    dst, old = dst0.copy(), np.zeros_like(v)
    ak.cas[(programs,)](dst, cmp, v, old, BLOCK=ak.BLOCK)
    final, olds = bits_cas_sequential(dst0, cmp, v)
    assert (olds == dst0[None]).any() and (final != dst0).any()  # the inputs hit and miss
    np.testing.assert_array_equal(dst.view(np.uint8), final.view(np.uint8))
    np.testing.assert_array_equal(old.view(np.uint8), olds.view(np.uint8))


def test_float_cas_compares_bits():
    # -0.0 == 0.0 but their bits differ: no swap; a NaN has the bits of itself: swap.
    dst = np.array([0.0, np.nan] * (ak.BLOCK // 2), np.float32)
    cmp = np.array([[-0.0, np.nan] * (ak.BLOCK // 2)], np.float32)
    v = np.full((1, ak.BLOCK), 7.0, np.float32)
    old = np.zeros_like(v)
    ak.cas[(1,)](dst, cmp, v, old, BLOCK=ak.BLOCK)
    np.testing.assert_array_equal(dst, np.array([0.0, 7.0] * (ak.BLOCK // 2), np.float32))
    assert np.signbit(dst[0]) == 0


ASSEMBLE = [(op, np.float64) for op in ("add", "max", "min", "xchg", "cas")] + [
    ("cas", d) for d in (np.float16, ml_dtypes.bfloat16, np.float32)
]


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("op, dtype", ASSEMBLE, ids=[f"{o}-{np.dtype(d).name}" for o, d in ASSEMBLE])
def test_float_atomics_assemble(op, dtype, arch, tmp_path):
    from tests.ptxas import assert_assembles

    x = np.zeros((2, ak.BLOCK), dtype)
    if op == "cas":
        k = ak.cas.warmup(x[0], x, x, x, BLOCK=ak.BLOCK, grid=(2,), target=arch)
    else:
        k = ak.rmw.warmup(x[0], x, x, 13, OP=op, BLOCK=ak.BLOCK, grid=(2,), target=arch)
    assert "atom" in k.asm["ptx"]
    assert_assembles(k.asm["ptx"], arch, tmp_path)
