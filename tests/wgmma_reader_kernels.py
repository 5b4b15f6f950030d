"""Kernels whose loops read a wgmma group's result with other ops (insert-waits'
resultWaits), shared by the CPU tests (interpreter, PTX) and the GPU tests, with their
float64 references."""

import numpy as np
import tilefuse as tf
import tilefuse.language as tl


@tf.jit
def rescale_matmul(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    # acc = (acc + A_k B_k) / 2 every step: the accumulator scaled in its iteration.
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :])
        b = tl.load(b_ptr + (k0 + rk)[:, None] * N + rn[None, :])
        acc = tl.dot(a, b, acc)
        acc = acc * 0.5
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


def rescale_reference(a, b, bk):
    a, b = a.astype(np.float64), b.astype(np.float64)
    acc = np.zeros((a.shape[0], b.shape[1]))
    for k0 in range(0, a.shape[1], bk):
        acc = (acc + a[:, k0 : k0 + bk] @ b[k0 : k0 + bk]) * 0.5
    return acc


@tf.jit
def fp8_scaled_steps(
    a_ptr, b_ptr, s_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, CARRY: tl.constexpr
):
    # C = sum_j (A_j B_j) s_j over K steps j of BK (<= 128): each step's fp8 partial sum into a
    # zero accumulator, scaled in fp32 — in its iteration, or (CARRY) one iteration later.
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    prev = tl.zeros((BM, BN), dtype=tl.float32)
    s_prev = 0.0
    for k0 in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :])
        b = tl.load(b_ptr + rn[None, :] * K + (k0 + rk)[:, None])
        s = tl.load(s_ptr + k0 // BK)
        p = tl.dot(a, b)
        if CARRY:
            acc += prev * s_prev
            prev = p
            s_prev = s
        else:
            acc += p * s
    if CARRY:
        acc += prev * s_prev
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


def fp8_scaled_reference(a, b, s, bk):
    a, b = a.astype(np.float64), b.astype(np.float64)
    return sum(a[:, k0 : k0 + bk] @ b[:, k0 : k0 + bk].T * s[k0 // bk] for k0 in range(0, a.shape[1], bk))
