"""Atomics on the interpreter against exact numpy references: many programs hit the same
addresses; programs run in order, so the old values each returns are exact too."""

import re

import numpy as np
import pytest
import tilefuse as tf
import tilefuse.language as tl
from tilefuse import gpu

from tests import atomic_kernels as ak
from tests.ptxas import PTXAS, assert_assembles

CASES = [(op, t) for op in ak.INT_OPS for t in ak.INT_TYPES] + [(op, np.float32) for op in ak.FLOAT_OPS]


@pytest.fixture
def rng(request):
    return np.random.default_rng(abs(hash(request.node.name)) % 2**32)


@pytest.mark.parametrize("op,dtype", CASES)
def test_rmw_final_and_old_values(op, dtype, rng):
    programs, n = 23, 13  # lanes >= n are masked off
    dst0, v, old = ak.rmw_inputs(rng, op, dtype, programs)
    dst, old0 = dst0.copy(), old.copy()
    ak.rmw[(programs,)](dst, v, old, n, OP=op, BLOCK=ak.BLOCK)
    np.testing.assert_array_equal(dst, ak.rmw_final(op, dst0, v, n))
    np.testing.assert_array_equal(old[:, :n], ak.rmw_sequential_olds(op, dst0, v)[:, :n])
    np.testing.assert_array_equal(old[:, n:], old0[:, n:])
    if op == "xchg":
        ak.check_xchg_multiset(dst0, v, old, dst, n)


def test_scalar_pointers_values_and_masks(rng):
    programs = 70
    v = rng.integers(-(2**31), 2**31, programs).astype(np.int32)
    flags = rng.integers(0, 2, programs).astype(np.int32)
    lo, hi = np.array([v[0] + 1], np.int32), np.array([v[0] - 1], np.int32)
    bits = np.zeros(3, np.uint32)
    want = ak.scalar_reference(lo[0], hi[0], flags, v)
    ak.scalar_atomics[(programs,)](lo, hi, bits, flags, v)
    assert (lo[0], hi[0]) == want[:2]
    np.testing.assert_array_equal(bits, want[2])


@pytest.mark.parametrize("dtype", ak.INT_TYPES)
def test_cas_sequential(dtype, rng):
    programs = 19
    dst0 = rng.integers(0, 4, ak.BLOCK).astype(dtype)  # few values, so cmp often matches
    cmp = rng.integers(0, 4, (programs, ak.BLOCK)).astype(dtype)
    v = rng.integers(0, 4, (programs, ak.BLOCK)).astype(dtype)
    dst, old = dst0.copy(), np.empty_like(v)
    ak.cas[(programs,)](dst, cmp, v, old, BLOCK=ak.BLOCK)
    final, olds = ak.cas_sequential(dst0, cmp, v)
    np.testing.assert_array_equal(dst, final)
    np.testing.assert_array_equal(old, olds)


def test_cas_claims_each_free_lane_once(rng):
    programs = 31
    dst0 = np.where(rng.random(ak.BLOCK) < 0.3, rng.integers(1000, 2000, ak.BLOCK), 0).astype(np.int32)
    dst, old = dst0.copy(), np.empty((programs, ak.BLOCK), np.int32)
    ak.claim[(programs,)](dst, old, BLOCK=ak.BLOCK)
    ak.check_claim(dst0, dst, old)
    assert (dst[dst0 == 0] == 1).all()  # in order, program 0 claims every free lane


def test_spin_lock(rng):
    programs = 57
    v = rng.integers(-(2**40), 2**40, programs).astype(np.int64)
    lock, count, total = np.zeros(1, np.int32), np.array([7], np.int32), np.array([-3], np.int64)
    ak.spin_lock[(programs,)](lock, count, total, v)
    assert (lock[0], count[0], total[0]) == (0, 7 + programs, -3 + int(v.sum()))


@pytest.mark.parametrize("sem", [None, "acquire", "acq_rel"])
def test_spin_lock_tile(sem):
    data, lock = np.zeros(128, np.float32), np.zeros(1, np.int32)
    ak.spin_lock_tile[(40,)](lock, data, SEM=sem, BLOCK=128)
    assert lock[0] == 0 and (data == 40).all()


def test_ticket_rows():
    programs, block = 23, 64
    counter, out = np.array([0], np.int32), np.full((programs, block), -1, np.int32)
    ak.ticket_rows[(programs,)](counter, out, BLOCK=block)
    ak.check_tickets(counter, out, programs, block)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_used_scalar_atomic_results_reach_every_thread(arch, tmp_path):
    """An atomic runs in one thread per element; a result the program uses goes to the
    other threads through shared memory (st.shared by the owner between two barriers, then
    ld.shared by all) — the spin lock's loop condition and the tickets' tile."""
    data, lock = np.zeros(128, np.float32), np.zeros(1, np.int32)
    for kernel, args, meta in (
        (ak.spin_lock_tile, (lock, data), dict(SEM="acquire", BLOCK=128)),
        (ak.ticket_rows, (lock, np.zeros((4, 64), np.int32)), dict(BLOCK=64)),
    ):
        ptx = gpu.lower(kernel.compile(*args, **meta), arch, 4, 3, keep_ir=False)["ptx"]
        # the kernels use shared memory for nothing else
        assert "atom.global" in ptx and "st.shared" in ptx and "ld.shared" in ptx, ptx
        assert_assembles(ptx, arch, tmp_path)


def test_debug_barrier(rng):
    x = rng.standard_normal(64).astype(np.float32)
    out = np.empty_like(x)
    ak.reverse_through_memory[(1,)](x, np.empty_like(x), out, BLOCK=64)
    np.testing.assert_array_equal(out, x[::-1])


@tf.jit
def k_bad_atomic(p_ptr, OP: tl.constexpr, SEM: tl.constexpr, SCOPE: tl.constexpr):
    offs = tl.arange(0, 16)
    if OP == "and":
        tl.atomic_and(p_ptr + offs, 1.0, sem=SEM, scope=SCOPE)
    else:
        tl.atomic_cas(p_ptr + offs, 1.0, 2.0, sem=SEM, scope=SCOPE)


@pytest.mark.parametrize(
    "op,dtype,sem,scope,msg",
    [
        ("and", np.float32, None, None, "'atomic_and' does not support element type f32"),
        ("cas", np.int8, None, None, "atomic_cas only supports elements with width {16, 32, 64}"),
        ("and", np.int16, None, None, "atomic_and does not support int16"),
        (
            "and",
            np.int32,
            "seq_cst",
            None,
            "atomic sem must be one of acq_rel, acquire, release, relaxed, got 'seq_cst'",
        ),
        ("cas", np.int32, None, "device", "atomic scope must be one of gpu, cta, sys, got 'device'"),
    ],
)
def test_bad_atomics_name_the_kernel_line(op, dtype, sem, scope, msg):
    with pytest.raises(tf.CompilationError, match=msg) as info:
        k_bad_atomic[(1,)](np.zeros(16, dtype), OP=op, SEM=sem, SCOPE=scope)
    assert "tl.atomic_" in str(info.value)


@pytest.mark.skipif(not PTXAS, reason="needs ptxas")
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("op,dtype", CASES)
def test_rmw_ptx_assembles(op, dtype, arch, tmp_path):
    dst0, v, old = ak.rmw_inputs(np.random.default_rng(0), op, dtype, 2)
    k = ak.rmw.warmup(dst0, v, old, 13, OP=op, BLOCK=ak.BLOCK, grid=(2,), target=arch)
    ptx = k.asm["ptx"]
    # rmw's sem and scope per op, in the instruction as Triton spells it; no fences.
    sem = {"max": "relaxed", "and": "acquire", "or": "release"}.get(op, "acq_rel")
    scope = {"or": "cta", "xor": "sys"}.get(op, "gpu")
    d = np.dtype(dtype)
    w, kind = d.itemsize * 8, {"i": "s", "u": "u", "f": "f"}[d.kind]
    if op in ("min", "max") and kind == "f":  # on the bits: signed for >= 0, unsigned for < 0
        want = {"max": [f"max.s{w}", f"min.u{w}"], "min": [f"min.s{w}", f"max.u{w}"]}[op]
    elif op in ("min", "max"):
        want = [f"{op}.{kind}{w}"]
    else:
        want = [{"add": f"add.u{w}", "xchg": f"exch.b{w}"}.get(op, f"{op}.b{w}")]
    atoms = sorted(set(re.findall(r"\batom\.[\w.]+", ptx)))
    assert atoms == sorted(f"atom.global.{scope}.{sem}.{x}" for x in want)
    assert "membar" not in ptx
    assert_assembles(ptx, arch, tmp_path)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_cas_lock_and_barrier_ptx_assembles(arch, tmp_path):
    i32, i64 = np.zeros(16, np.int32), np.zeros(16, np.int64)
    f32 = np.zeros(64, np.float32)
    for k in (
        ak.cas.warmup(i64, i64, i64, i64, BLOCK=16, grid=(1,), target=arch),
        ak.claim.warmup(i32, i32, BLOCK=16, grid=(1,), target=arch),
        ak.spin_lock.warmup(i32, i32, i64, i64, grid=(1,), target=arch),
        ak.scalar_atomics.warmup(i32, i32, np.zeros(3, np.uint32), i32, i32, grid=(1,), target=arch),
    ):
        assert "atom" in k.asm["ptx"]
        assert_assembles(k.asm["ptx"], arch, tmp_path)
    # Tutorial 05's lock, Triton's default sem (acq_rel) in its spelling of each atom.
    lock = ak.spin_lock.warmup(i32, i32, i64, i64, grid=(1,), target=arch).asm["ptx"]
    assert sorted(set(re.findall(r"\batom\.[\w.]+", lock))) == [
        "atom.global.acq_rel.gpu.cas.b32",
        "atom.global.gpu.acq_rel.exch.b32",
    ]
    k = ak.reverse_through_memory.warmup(f32, f32, f32, BLOCK=64, grid=(1,), target=arch)
    assert "bar.sync" in k.asm["ptx"]
    assert_assembles(k.asm["ptx"], arch, tmp_path)
