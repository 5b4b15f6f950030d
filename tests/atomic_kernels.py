"""Atomics kernels and exact numpy references, run by the CPU tests
(tests/python/language/test_atomics.py: the interpreter, whose programs run one after
another) and the GPU tests (tests/gpu/test_atomics_gpu.py: any order, so only
order-independent facts are checked there)."""

import numpy as np
import tilefuse as tf
import tilefuse.language as tl

BLOCK = 16
INT_OPS = ("min", "max", "and", "or", "xor", "xchg", "add")
FLOAT_OPS = ("min", "max", "xchg")
INT_TYPES = (np.int32, np.int64, np.uint32, np.uint64)
UFUNC = {
    "min": np.minimum,
    "max": np.maximum,
    "and": np.bitwise_and,
    "or": np.bitwise_or,
    "xor": np.bitwise_xor,
    "add": np.add,
}


@tf.jit
def rmw(dst_ptr, v_ptr, old_ptr, n, OP: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    m = offs < n
    v = tl.load(v_ptr + pid * BLOCK + offs)
    if OP == "min":
        old = tl.atomic_min(dst_ptr + offs, v, mask=m)
    elif OP == "max":
        old = tl.atomic_max(dst_ptr + offs, v, mask=m, sem="relaxed", scope="gpu")
    elif OP == "and":
        old = tl.atomic_and(dst_ptr + offs, v, mask=m, sem="acquire")
    elif OP == "or":
        old = tl.atomic_or(dst_ptr + offs, v, mask=m, sem="release", scope="cta")
    elif OP == "xor":
        old = tl.atomic_xor(dst_ptr + offs, v, mask=m, scope="sys")
    elif OP == "xchg":
        old = tl.atomic_xchg(dst_ptr + offs, v, mask=m, sem="acq_rel")
    else:
        old = tl.atomic_add(dst_ptr + offs, v, mask=m)
    tl.store(old_ptr + pid * BLOCK + offs, old, mask=m)


def rmw_inputs(rng, op, dtype, programs):
    """(dst, v, old): random values whose and/or stay informative over many programs."""
    if np.dtype(dtype).kind == "f":
        return (
            rng.standard_normal(BLOCK).astype(dtype),
            rng.standard_normal((programs, BLOCK)).astype(dtype),
            rng.standard_normal((programs, BLOCK)).astype(dtype),
        )
    info = np.iinfo(dtype)
    draw = lambda *s: rng.integers(info.min, info.max, s, dtype=dtype, endpoint=True)  # noqa: E731
    v = draw(programs, BLOCK)
    if op == "and":
        v |= draw(programs, BLOCK) | draw(programs, BLOCK)
    if op == "or":
        v &= draw(programs, BLOCK) & draw(programs, BLOCK)
    return draw(BLOCK), v, draw(programs, BLOCK)


def rmw_final(op, dst, v, n):
    """The final memory, which does not depend on the programs' order (except xchg)."""
    want = dst.copy()
    if op == "xchg":
        want[:n] = v[-1, :n]
    else:
        want[:n] = UFUNC[op].reduce(np.vstack([dst[None, :n], v[:, :n]]), axis=0, dtype=dst.dtype)
    return want


def rmw_sequential_olds(op, dst, v):
    """The old values each program sees when programs run in order 0, 1, ..."""
    seq = np.vstack([dst[None], v])
    if op == "xchg":
        return seq[:-1]
    return UFUNC[op].accumulate(seq, axis=0, dtype=seq.dtype)[:-1]


def check_xchg_multiset(dst0, v, old, dst, n):
    """Each lane's returned old values plus its final value are its inputs plus its start."""
    for j in range(n):
        got = np.sort(np.append(old[:, j], dst[j]))
        want = np.sort(np.append(v[:, j], dst0[j]))
        np.testing.assert_array_equal(got, want, err_msg=f"lane {j}")


@tf.jit
def scalar_atomics(lo_ptr, hi_ptr, bits_ptr, flag_ptr, v_ptr):
    # Scalar pointers and scalar values, with a scalar mask.
    pid = tl.program_id(0)
    x = tl.load(v_ptr + pid)
    tl.atomic_min(lo_ptr, x)
    tl.atomic_max(hi_ptr, x)
    tl.atomic_or(bits_ptr + pid // 32, 1 << (pid % 32), mask=tl.load(flag_ptr + pid) != 0)


def scalar_reference(lo, hi, flags, v):
    bits = np.zeros((len(flags) + 31) // 32, np.uint32)
    for p in np.flatnonzero(flags):
        bits[p // 32] |= np.uint32(1) << np.uint32(p % 32)
    return min(lo, v.min()), max(hi, v.max()), bits


@tf.jit
def cas(dst_ptr, cmp_ptr, v_ptr, old_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    c = tl.load(cmp_ptr + pid * BLOCK + offs)
    v = tl.load(v_ptr + pid * BLOCK + offs)
    tl.store(old_ptr + pid * BLOCK + offs, tl.atomic_cas(dst_ptr + offs, c, v))


def cas_sequential(dst, cmp, v):
    """(final, olds) when programs run in order."""
    cur = dst.copy()
    olds = np.empty_like(v)
    for p in range(len(v)):
        olds[p] = cur
        cur = np.where(cur == cmp[p], v[p], cur)
    return cur, olds


@tf.jit
def claim(dst_ptr, old_ptr, BLOCK: tl.constexpr):
    # Every program tries to claim each free (zero) lane; exactly one wins.
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    old = tl.atomic_cas(dst_ptr + offs, tl.zeros((BLOCK,), tl.int32), pid + 1)
    tl.store(old_ptr + pid * BLOCK + offs, old)


def check_claim(dst0, dst, old):
    for j in range(dst0.shape[0]):
        if dst0[j] != 0:  # taken from the start: nobody changes it, everyone sees it
            assert dst[j] == dst0[j] and (old[:, j] == dst0[j]).all(), f"lane {j}"
            continue
        winners = np.flatnonzero(old[:, j] == 0)
        assert len(winners) == 1 and dst[j] == winners[0] + 1, f"lane {j}: winners {winners}, final {dst[j]}"
        assert (np.delete(old[:, j], winners) == dst[j]).all(), f"lane {j}"


@tf.jit
def spin_lock(lock_ptr, count_ptr, sum_ptr, v_ptr):
    # Tutorial 05's lock: a plain read-modify-write inside it stays exact.
    pid = tl.program_id(0)
    while tl.atomic_cas(lock_ptr, 0, 1) == 1:
        pass
    tl.store(count_ptr, tl.load(count_ptr) + 1)
    tl.store(sum_ptr, tl.load(sum_ptr) + tl.load(v_ptr + pid))
    tl.atomic_xchg(lock_ptr, 0)


@tf.jit
def spin_lock_tile(lock_ptr, data_ptr, SEM: tl.constexpr, BLOCK: tl.constexpr):
    # Triton's test_atomic_cas: every thread's elements change inside the lock, so every
    # thread must see the cas's old value (not only the one that ran the atomic).
    ptrs = data_ptr + tl.arange(0, BLOCK)
    while tl.atomic_cas(lock_ptr, 0, 1, SEM) == 1:
        pass
    tl.store(ptrs, tl.load(ptrs) + 1.0)
    tl.debug_barrier()
    tl.atomic_xchg(lock_ptr, 0)


@tf.jit
def ticket_rows(counter_ptr, out_ptr, BLOCK: tl.constexpr):
    # Each program draws a ticket (the counter's old value) and writes ticket * BLOCK + i
    # across a whole tile: every thread uses the scalar atomic's result.
    ticket = tl.atomic_add(counter_ptr, 1)
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + tl.program_id(0) * BLOCK + offs, ticket * BLOCK + offs)


@tf.jit
def reverse_through_memory(x_ptr, tmp_ptr, out_ptr, BLOCK: tl.constexpr):
    # Each thread reads what other threads wrote: the barrier orders the two.
    offs = tl.arange(0, BLOCK)
    tl.store(tmp_ptr + offs, tl.load(x_ptr + offs))
    tl.debug_barrier()
    tl.store(out_ptr + offs, tl.load(tmp_ptr + BLOCK - 1 - offs))


def check_tickets(counter, out, programs, block):
    """ticket_rows' results: tickets 0 .. programs-1 each drawn once, every row ticket * block + i."""
    tickets = out[:, 0] // block
    assert int(counter[0]) == programs and sorted(tickets.tolist()) == list(range(programs))
    np.testing.assert_array_equal(out, tickets[:, None] * block + np.arange(block)[None, :])
