"""Kernels of the pointer tests (issue 16 part 7), shared by the interpreter tests
(tests/python/test_pointers.py, test_block_ptr.py) and the GPU tests
(tests/gpu/test_pointers_gpu.py)."""

import tilefuse as tf
import tilefuse.language as tl


@tf.jit
def grouped_matmul_kernel(
    group_a_ptrs,
    group_b_ptrs,
    group_c_ptrs,
    group_gemm_sizes,  # [M, N, K] per group
    g_lds,  # lda, ldb, ldc per group
    group_size,
    NUM_SM: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
):
    # Triton's grouped GEMM tutorial (08-grouped-gemm.py), as Triton writes it: the
    # operands' addresses are loaded as int64 and converted to pointers.
    tile_idx = tl.program_id(0)
    last_problem_end = 0
    for g in range(group_size):
        gm = tl.load(group_gemm_sizes + g * 3)
        gn = tl.load(group_gemm_sizes + g * 3 + 1)
        gk = tl.load(group_gemm_sizes + g * 3 + 2)
        num_m_tiles = tl.cdiv(gm, BLOCK_SIZE_M)
        num_n_tiles = tl.cdiv(gn, BLOCK_SIZE_N)
        num_tiles = num_m_tiles * num_n_tiles
        while tile_idx >= last_problem_end and tile_idx < last_problem_end + num_tiles:
            k = gk
            lda = tl.load(g_lds + g * 3)
            ldb = tl.load(g_lds + g * 3 + 1)
            ldc = tl.load(g_lds + g * 3 + 2)
            a_ptr = tl.load(group_a_ptrs + g).to(tl.pointer_type(tl.float16))
            b_ptr = tl.load(group_b_ptrs + g).to(tl.pointer_type(tl.float16))
            c_ptr = tl.load(group_c_ptrs + g).to(tl.pointer_type(tl.float16))
            tile_idx_in_gemm = tile_idx - last_problem_end
            tile_m_idx = tile_idx_in_gemm // num_n_tiles
            tile_n_idx = tile_idx_in_gemm % num_n_tiles
            offs_am = tile_m_idx * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
            offs_bn = tile_n_idx * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
            offs_k = tl.arange(0, BLOCK_SIZE_K)
            a_ptrs = a_ptr + offs_am[:, None] * lda + offs_k[None, :]
            b_ptrs = b_ptr + offs_k[:, None] * ldb + offs_bn[None, :]
            accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
            for kk in range(0, tl.cdiv(k, BLOCK_SIZE_K)):  # noqa: B007 - as the tutorial writes it
                tl.multiple_of(a_ptrs, [16, 16])
                tl.multiple_of(b_ptrs, [16, 16])
                a = tl.load(a_ptrs)
                b = tl.load(b_ptrs)
                accumulator += tl.dot(a, b)
                a_ptrs += BLOCK_SIZE_K
                b_ptrs += BLOCK_SIZE_K * ldb
            c = accumulator.to(tl.float16)
            offs_cm = tile_m_idx * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
            offs_cn = tile_n_idx * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
            c_ptrs = c_ptr + ldc * offs_cm[:, None] + offs_cn[None, :]
            tl.store(c_ptrs, c)
            tile_idx += NUM_SM
        last_problem_end = last_problem_end + num_tiles


@tf.jit
def pointer_round_trip(x_ptr, addr_ptr, y_ptr, N: tl.constexpr):
    """Stores the addresses of x's elements (pointer -> int64), loads them back as
    pointers (int64 -> pointer) and doubles what they point at."""
    offs = tl.arange(0, N)
    p = x_ptr + offs
    tl.store(addr_ptr + offs, p.to(tl.int64))
    q = tl.load(addr_ptr + offs).to(tl.pointer_type(tl.float32))
    tl.store(y_ptr + offs, tl.load(q) * 2)


@tf.jit
def pointer_casts(x_ptr, out_ptr, flags_ptr, small_ptr):
    """tl.cast / bitcast=True / int1 of pointers, and an int32 zero-extended into a pointer."""
    tl.store(out_ptr, tl.cast(x_ptr, tl.int64))
    tl.store(out_ptr + 1, x_ptr.to(tl.uint64, bitcast=True).to(tl.int64, bitcast=True))
    tl.store(out_ptr + 2, (x_ptr + 3).to(tl.pointer_type(tl.int8)).to(tl.int64))
    tl.store(flags_ptr, x_ptr.to(tl.int1).to(tl.int32))
    minus_one = tl.load(small_ptr)  # int32 -1: as a pointer 0xffffffff (zero-extended, as Triton)
    tl.store(out_ptr + 3, minus_one.to(tl.pointer_type(tl.float16)).to(tl.int64))


@tf.jit
def load_through_address(addr_ptr, y_ptr, D: tl.constexpr, N: tl.constexpr):
    """The pointer_type of dtype D: y = *(D*)address, for N elements."""
    offs = tl.arange(0, N)
    p = tl.load(addr_ptr).to(tl.pointer_type(D))
    tl.store(y_ptr + offs, tl.load(p + offs))


@tf.jit
def bitcast_values(x_ptr, y_ptr, TO: tl.constexpr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs).to(TO, bitcast=True))


@tf.jit
def block_load(
    x_ptr,
    y_ptr,
    M,
    N,
    sm,
    sn,
    om,
    on,
    BM: tl.constexpr,
    BN: tl.constexpr,
    CHECK: tl.constexpr,
    PAD: tl.constexpr,
    ORDER: tl.constexpr,
):
    xb = tl.make_block_ptr(x_ptr, (M, N), (sm, sn), (om, on), (BM, BN), ORDER)
    yb = tl.make_block_ptr(y_ptr, shape=(BM, BN), strides=(BN, 1), offsets=(0, 0), block_shape=(BM, BN), order=(1, 0))
    tl.store(yb, tl.load(xb, boundary_check=CHECK, padding_option=PAD))


@tf.jit
def block_store(x_ptr, y_ptr, M, N, sm, sn, om, on, BM: tl.constexpr, BN: tl.constexpr, CHECK: tl.constexpr):
    xb = tl.make_block_ptr(x_ptr, (BM, BN), (BN, 1), (0, 0), (BM, BN), (1, 0))
    yb = tl.make_block_ptr(y_ptr, (M, N), (sm, sn), (om, on), (BM, BN), (1, 0))
    tl.store(yb, tl.load(xb), boundary_check=CHECK)


@tf.jit
def block_load_3d(x_ptr, y_ptr, A, B, C, o0, o1, o2, B0: tl.constexpr, B1: tl.constexpr, B2: tl.constexpr):
    xb = tl.make_block_ptr(x_ptr, (A, B, C), (B * C, C, 1), (o0, o1, o2), (B0, B1, B2), (2, 1, 0))
    v = tl.load(xb, boundary_check=(0, 1, 2), padding_option="zero")
    i = (
        tl.arange(0, B0)[:, None, None] * (B1 * B2)
        + tl.arange(0, B1)[None, :, None] * B2
        + tl.arange(0, B2)[None, None, :]
    )
    tl.store(y_ptr + i, v)


@tf.jit
def block_matmul(
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
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """Triton's block-pointer matmul: boundary-checked loads advanced along K."""
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    a_bp = tl.make_block_ptr(
        a_ptr, (M, K), (stride_am, stride_ak), (pid_m * BLOCK_M, 0), (BLOCK_M, BLOCK_K), order=(1, 0)
    )
    b_bp = tl.make_block_ptr(
        b_ptr, (K, N), (stride_bk, stride_bn), (0, pid_n * BLOCK_N), (BLOCK_K, BLOCK_N), order=(1, 0)
    )
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_bp, boundary_check=(0, 1), padding_option="zero")
        b = tl.load(b_bp, boundary_check=(0, 1), padding_option="zero")
        acc = tl.dot(a, b, acc)
        a_bp = tl.advance(a_bp, (0, BLOCK_K))
        b_bp = b_bp.advance((BLOCK_K, 0))
    c_bp = tl.make_block_ptr(
        c_ptr, (M, N), (stride_cm, stride_cn), (pid_m * BLOCK_M, pid_n * BLOCK_N), (BLOCK_M, BLOCK_N), (1, 0)
    )
    tl.store(c_bp, acc.to(c_ptr.dtype.element_ty), boundary_check=(0, 1))


@tf.jit
def block_if_advance(x_ptr, y_ptr, flag, N, BN: tl.constexpr):
    """A block pointer advanced in one branch of a runtime if, then loaded."""
    bp = tl.make_block_ptr(x_ptr, (N,), (1,), (0,), (BN,), (0,))
    if flag > 0:
        bp = tl.advance(bp, (BN,))
    tl.store(y_ptr + tl.arange(0, BN), tl.load(bp, boundary_check=(0,), padding_option="zero"))
