"""Kernels that both the CPU tests (tests/python: PTX assembly, interpreter results) and
the GPU tests (tests/gpu: GPU against interpreter) run."""

import tilefuse as tf
import tilefuse.language as tl


@tf.jit(noinline=True)
def scaled_row_sums(x, w):
    # A callee with a dot, a reduction and two results.
    y = tl.dot(x, w)
    return y, tl.sum(y, axis=1)


@tf.jit
def noinline_calls(x_ptr, w_ptr, y_ptr, s_ptr, N: tl.constexpr):
    r = tl.arange(0, N)
    x = tl.load(x_ptr + r[:, None] * N + r[None, :])
    w = tl.load(w_ptr + r[:, None] * N + r[None, :])
    total = tl.zeros((N,), tl.float32)
    y = tl.zeros((N, N), tl.float32)
    for _ in range(2):
        y, s = scaled_row_sums(x, w)
        total += s
    tl.store(y_ptr + r[:, None] * N + r[None, :], y)
    tl.store(s_ptr + r, total)


@tf.jit
def dot8(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, BK: tl.constexpr, BT: tl.constexpr):
    # fp8 and int8 dots: B as loaded ([K, N], transposed when staged) or as trans of [N, K].
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, BK)
    acc = tl.zeros((M, N), tl.int32 if a_ptr.dtype.element_ty == tl.int8 else tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        if BT:
            b = tl.trans(tl.load(b_ptr + rn[:, None] * K + (k + rk)[None, :]))
        else:
            b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


@tf.jit
def wrapped_copy(x_ptr, y_ptr, n, base, HINT: tl.constexpr, BLOCK: tl.constexpr):
    # (base + ...) % n cannot be proven contiguous: a negative base would break runs at
    # multiples of n. The callers pass base >= 0 aligned to BLOCK, so the hint is true.
    offs = (base + tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)) % n
    if HINT:
        offs = tl.max_contiguous(tl.multiple_of(offs, BLOCK), BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs) * 3)
