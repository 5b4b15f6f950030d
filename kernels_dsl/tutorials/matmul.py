"""Tutorial 03: blocked matrix multiplication C = activation(A @ B).

Each program computes one BLOCK_SIZE_M x BLOCK_SIZE_N tile of C, walking K in
BLOCK_SIZE_K steps with an fp32 accumulator. Programs are ordered in groups of
GROUP_SIZE_M tile-rows so that programs running together share tiles of A and B
(better L2 reuse on a GPU; the result does not depend on the order).
"""

import numpy as np
import tilefuse as tf
import tilefuse.language as tl


@tf.jit
def leaky_relu(x):
    return tl.where(x >= 0, x, 0.01 * x)


@tf.jit
def matmul_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr,
    ACTIVATION: tl.constexpr,
):
    # Map the linear program id to (pid_m, pid_n): tile-rows go down a group of
    # GROUP_SIZE_M first, then the group moves one tile-column right.
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    # The last group is short when num_pid_m is not a multiple of GROUP_SIZE_M.
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    # Rows past M wrap around (% M) so loads of A stay in bounds without a mask; the
    # wrapped results are never stored. Columns past N are masked instead: a wrapped
    # column index is not provably contiguous, which would keep B's loads scalar.
    offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    offs_bn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)

    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        # The K tail is masked to zero, which adds nothing to the dot product.
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < K - k * BLOCK_SIZE_K) & (offs_bn[None, :] < N), other=0.0)
        accumulator = tl.dot(a, b, accumulator)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    # The activation is applied to the fp32 accumulator, before rounding to C's dtype.
    if ACTIVATION == "leaky_relu":
        accumulator = leaky_relu(accumulator)
    c = accumulator.to(c_ptr.dtype.element_ty)

    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, c, mask=c_mask)


def matmul(
    a: np.ndarray,
    b: np.ndarray,
    activation: str = "",
    BLOCK_M: int = 64,
    BLOCK_N: int = 64,
    BLOCK_K: int = 32,
    GROUP_M: int = 8,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """activation(a @ b) for 2-D arrays of one dtype (any strides), as a new array of a's
    dtype (or written into `out`, any strides). activation is "" or "leaky_relu"."""
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"incompatible shapes for matmul: {a.shape} and {b.shape}")
    if a.dtype != b.dtype:
        raise ValueError(f"matmul needs operands of one dtype, got {a.dtype} and {b.dtype}")
    if activation not in ("", "leaky_relu"):
        raise ValueError(f"unknown activation {activation!r}")
    M, K = a.shape
    N = b.shape[1]
    c = np.empty((M, N), dtype=a.dtype) if out is None else out
    if c.shape != (M, N) or c.dtype != a.dtype:
        raise ValueError(f"out must be a {(M, N)} {a.dtype} array, got {c.shape} {c.dtype}")

    def grid(meta):
        return (tf.cdiv(M, meta["BLOCK_SIZE_M"]) * tf.cdiv(N, meta["BLOCK_SIZE_N"]),)

    # numpy strides are in bytes; the kernel's pointer arithmetic is in elements.
    sa = [s // a.itemsize for s in a.strides]
    sb = [s // b.itemsize for s in b.strides]
    sc = [s // c.itemsize for s in c.strides]
    matmul_kernel[grid](
        a,
        b,
        c,
        M,
        N,
        K,
        *sa,
        *sb,
        *sc,
        BLOCK_SIZE_M=BLOCK_M,
        BLOCK_SIZE_N=BLOCK_N,
        BLOCK_SIZE_K=BLOCK_K,
        GROUP_SIZE_M=GROUP_M,
        ACTIVATION=activation,
    )
    return c


def autotune_configs():
    """Tile configs to autotune the kernels over (`tf.autotune(autotune_configs(), key=["M", "N",
    "K"])(matmul_kernel)`): Triton's tutorial set and two 8-warp 64-deep wgmma tiles. Written
    with `tf.Config`, so that a copy of this file importing triton as tf builds Triton's."""
    tiles = [
        (128, 256, 64, 8, 3),
        (64, 256, 32, 4, 4),
        (128, 128, 32, 4, 4),
        (128, 64, 32, 4, 4),
        (64, 128, 32, 4, 4),
        (128, 32, 32, 4, 4),
        (64, 32, 32, 2, 5),
        (32, 64, 32, 2, 5),
        (256, 128, 64, 8, 3),
        (128, 256, 64, 8, 4),
    ]
    return [
        tf.Config(dict(BLOCK_SIZE_M=m, BLOCK_SIZE_N=n, BLOCK_SIZE_K=k, GROUP_SIZE_M=8), num_warps=w, num_stages=s)
        for m, n, k, w, s in tiles
    ]
