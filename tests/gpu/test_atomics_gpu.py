"""Atomics on the GPU: many programs (and threads) race on the same addresses, so only
order-independent facts are exact: the final values of min/max/and/or/xor/add, xchg's
multiset of old values, one winner per cas claim, and a spin lock's protected counter."""

import numpy as np
import pytest

from tests import atomic_kernels as ak

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]

CASES = [(op, t) for op in ak.INT_OPS for t in ak.INT_TYPES] + [(op, np.float32) for op in ak.FLOAT_OPS]


def cuda(a):
    if a.dtype in (np.uint32, np.uint64):  # torch has no arithmetic on them: ship the bits
        signed = a.view(np.int32 if a.dtype == np.uint32 else np.int64)
        return torch.from_numpy(signed.copy()).cuda().view(getattr(torch, str(a.dtype)))
    return torch.from_numpy(a.copy()).cuda()


def host(t, dtype):
    if dtype in (np.uint32, np.uint64):
        t = t.view(torch.int32 if dtype == np.uint32 else torch.int64)
    return t.cpu().numpy().view(dtype)


@pytest.fixture
def rng(request):
    return np.random.default_rng(abs(hash(request.node.name)) % 2**32)


@pytest.mark.parametrize("programs", [7, 300])
@pytest.mark.parametrize("op,dtype", CASES)
def test_rmw(op, dtype, programs, rng):
    n = 13
    dst0, v, old0 = ak.rmw_inputs(rng, op, dtype, programs)
    dst, old = cuda(dst0), cuda(old0)
    ak.rmw[(programs,)](dst, cuda(v), old, n, OP=op, BLOCK=ak.BLOCK)
    dst, old = host(dst, dtype), host(old, dtype)
    np.testing.assert_array_equal(old[:, n:], old0[:, n:])
    if op == "xchg":
        ak.check_xchg_multiset(dst0, v, old, dst, n)
        np.testing.assert_array_equal(dst[n:], dst0[n:])
        return
    np.testing.assert_array_equal(dst, ak.rmw_final(op, dst0, v, n))
    if op in ("min", "max"):  # every old value lies between the start and the final value
        lo, hi = (dst, dst0) if op == "min" else (dst0, dst)
        assert ((old[:, :n] >= lo[:n]) & (old[:, :n] <= hi[:n])).all()


def test_scalar_pointers_values_and_masks(rng):
    programs = 500
    v = rng.integers(-(2**31), 2**31, programs).astype(np.int32)
    flags = rng.integers(0, 2, programs).astype(np.int32)
    lo, hi = cuda(np.array([v[0] + 1], np.int32)), cuda(np.array([v[0] - 1], np.int32))
    want = ak.scalar_reference(v[0] + 1, v[0] - 1, flags, v)
    bits = cuda(np.zeros((programs + 31) // 32, np.uint32))
    ak.scalar_atomics[(programs,)](lo, hi, bits, cuda(flags), cuda(v))
    assert (lo.item(), hi.item()) == want[:2]
    np.testing.assert_array_equal(host(bits, np.uint32), want[2])


@pytest.mark.parametrize("programs", [5, 1000])
def test_cas_claims_each_free_lane_once(programs, rng):
    dst0 = np.where(rng.random(ak.BLOCK) < 0.3, rng.integers(100000, 200000, ak.BLOCK), 0).astype(np.int32)
    dst, old = cuda(dst0), cuda(np.full((programs, ak.BLOCK), -1, np.int32))
    ak.claim[(programs,)](dst, old, BLOCK=ak.BLOCK)
    ak.check_claim(dst0, host(dst, np.int32), host(old, np.int32))


@pytest.mark.parametrize("dtype", ak.INT_TYPES)
def test_cas_one_program_matches_interpreter(dtype, rng):
    # One program: no race, so the interpreter's sequential reference is exact.
    dst0 = rng.integers(0, 4, ak.BLOCK).astype(dtype)
    cmp, v = (rng.integers(0, 4, (1, ak.BLOCK)).astype(dtype) for _ in range(2))
    dst, old = cuda(dst0), cuda(np.zeros((1, ak.BLOCK), dtype))
    ak.cas[(1,)](dst, cuda(cmp), cuda(v), old, BLOCK=ak.BLOCK)
    final, olds = ak.cas_sequential(dst0, cmp, v)
    np.testing.assert_array_equal(host(dst, dtype), final)
    np.testing.assert_array_equal(host(old, dtype), olds)


@pytest.mark.parametrize("programs", [3, 2000])
def test_spin_lock(programs, rng):
    v = rng.integers(-(2**40), 2**40, programs).astype(np.int64)
    lock, count, total = cuda(np.zeros(1, np.int32)), cuda(np.array([7], np.int32)), cuda(np.array([-3], np.int64))
    ak.spin_lock[(programs,)](lock, count, total, cuda(v))
    assert (lock.item(), count.item(), total.item()) == (0, 7 + programs, -3 + int(v.sum()))


@pytest.mark.parametrize("block", [64, 1024])
def test_debug_barrier(block, rng):
    x = rng.standard_normal(block).astype(np.float32)
    out = torch.empty(block, device="cuda")
    ak.reverse_through_memory[(1,)](cuda(x), torch.empty(block, device="cuda"), out, BLOCK=block)
    np.testing.assert_array_equal(out.cpu().numpy(), x[::-1])


@pytest.mark.parametrize("sem", [None, "acquire", "release", "acq_rel", "relaxed"])
def test_spin_lock_tile(sem):
    # Triton's test_atomic_cas on 2,000 programs: each thread's 1.0 added inside the lock.
    data, lock = torch.zeros(128, device="cuda"), torch.zeros(1, device="cuda", dtype=torch.int32)
    ak.spin_lock_tile[(2000,)](lock, data, SEM=sem, BLOCK=128)
    assert lock.item() == 0
    np.testing.assert_array_equal(data.cpu().numpy(), np.full(128, 2000.0, np.float32))


@pytest.mark.parametrize("programs,block", [(7, 64), (500, 256)])
def test_ticket_rows(programs, block):
    counter, out = torch.zeros(1, device="cuda", dtype=torch.int32), torch.full((programs, block), -1, device="cuda")
    out = out.to(torch.int32)
    ak.ticket_rows[(programs,)](counter, out, BLOCK=block)
    ak.check_tickets(counter.cpu().numpy(), out.cpu().numpy(), programs, block)
