"""Kernels that both the CPU tests (tests/python: PTX assembly, interpreter results) and
the GPU tests (tests/gpu: GPU against interpreter) run."""

import tilefuse as tf
import tilefuse.language as tl

from kernels_dsl.moe.grouped_gemm import _persistent_tile, _store_tile


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


# Tensor-descriptor copies (TMA on sm_90 when the strides allow): blocks start one block
# before the tensor and run past its end, so loads read zeros outside and stores clip.
@tf.jit
def desc_copy1(x_ptr, y_ptr, N, B: tl.constexpr):
    dx = tl.make_tensor_descriptor(x_ptr, [N], [1], [B])
    dy = tl.make_tensor_descriptor(y_ptr, [N], [1], [B])
    p = (tl.program_id(0) - 1) * B
    dy.store([p], dx.load([p]) * 3 - 1)


@tf.jit
def desc_copy2(x_ptr, y_ptr, M, N, stride, BM: tl.constexpr, BN: tl.constexpr):
    dx = tl.make_tensor_descriptor(x_ptr, [M, N], [stride, 1], [BM, BN])
    dy = tl.make_tensor_descriptor(y_ptr, [M, N], [stride, 1], [BM, BN])
    pm, pn = (tl.program_id(0) - 1) * BM, (tl.program_id(1) - 1) * BN
    dy.store([pm, pn], dx.load([pm, pn]) * 3 - 1)


@tf.jit
def desc_copy3(x_ptr, y_ptr, D0, D1, D2, s0, s1, B0: tl.constexpr, B1: tl.constexpr, B2: tl.constexpr):
    dx = tl.make_tensor_descriptor(x_ptr, [D0, D1, D2], [s0, s1, 1], [B0, B1, B2])
    dy = tl.make_tensor_descriptor(y_ptr, [D0, D1, D2], [s0, s1, 1], [B0, B1, B2])
    p0, p1, p2 = tl.program_id(0) * B0, (tl.program_id(1) - 1) * B1, tl.program_id(2) * B2
    dy.store([p0, p1, p2], dx.load([p0, p1, p2]) * 3 - 1)


@tf.jit
def matmul_desc_a(a_ptr, b_ptr, c_ptr, M, N, K, sa, sb, sc, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    # A through a descriptor (TMA), B and C through pointers (cp.async, masked stores).
    a_desc = tl.make_tensor_descriptor(a_ptr, [M, K], [sa, 1], [BM, BK])
    pm, pn = tl.program_id(0) * BM, tl.program_id(1) * BN
    rn, rk = pn + tl.arange(0, BN), tl.arange(0, BK)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        b = tl.load(b_ptr + (k * BK + rk)[:, None] * sb + rn[None, :], mask=(k * BK + rk)[:, None] < K, other=0.0)
        acc = tl.dot(a_desc.load([pm, k * BK]), b, acc)
    rm = pm + tl.arange(0, BM)
    tl.store(c_ptr + rm[:, None] * sc + rn[None, :], acc.to(tl.bfloat16), mask=(rm[:, None] < M) & (rn[None, :] < N))


@tf.jit
def matmul_desc_persistent(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    # Each program walks several output tiles: the pipelined K loop runs again and again,
    # so its stages and mbarriers carry over from one run to the next.
    a_desc = tl.make_tensor_descriptor(a_ptr, [M, K], [K, 1], [BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, [K, N], [N, 1], [BK, BN])
    c_desc = tl.make_tensor_descriptor(c_ptr, [M, N], [N, 1], [BM, BN])
    tiles_n = tl.cdiv(N, BN)
    for t in range(tl.program_id(0), tl.cdiv(M, BM) * tiles_n, tl.num_programs(0)):
        pm, pn = (t // tiles_n) * BM, (t % tiles_n) * BN
        acc = tl.zeros((BM, BN), tl.float32)
        for k in range(0, tl.cdiv(K, BK)):
            acc = tl.dot(a_desc.load([pm, k * BK]), b_desc.load([k * BK, pn]), acc)
        c_desc.store([pm, pn], acc.to(tl.bfloat16))


@tf.jit
def masked_dot_loop(a_ptr, bt_ptr, c_ptr, M, N, K, k_end, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    # C = A[:, :k_end] Bt[:, :k_end]^T with A [M, K] and Bt [N, K], edges masked with
    # other=0.0 (for fp8 a cast of an f32 zero); k_end may end inside a 16-byte run of
    # the contiguous dim (a group's end): the K loop still pipelines.
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, k_end, BK):
        kk = (k + rk)[None, :]
        a = tl.load(a_ptr + rm[:, None] * K + kk, mask=(rm[:, None] < M) & (kk < k_end), other=0.0)
        b = tl.load(bt_ptr + rn[:, None] * K + kk, mask=(rn[:, None] < N) & (kk < k_end), other=0.0)
        acc = tl.dot(a, tl.trans(b), acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@tf.jit
def gated_dot_loop(a_ptr, gt_ptr, ut_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    # C = (A G^T) * (A U^T): two accumulators from one A tile per K step, as FC1's gate
    # and up projections (Gt, Ut [N, K]); edges masked with other=0.0.
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc_g = tl.zeros((BM, BN), dtype=tl.float32)
    acc_u = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        kk = (k + rk)[None, :]
        a = tl.load(a_ptr + rm[:, None] * K + kk, mask=(rm[:, None] < M) & (kk < K), other=0.0)
        g = tl.load(gt_ptr + rn[:, None] * K + kk, mask=(rn[:, None] < N) & (kk < K), other=0.0)
        u = tl.load(ut_ptr + rn[:, None] * K + kk, mask=(rn[:, None] < N) & (kk < K), other=0.0)
        acc_g = tl.dot(a, tl.trans(g), acc_g)
        acc_u = tl.dot(a, tl.trans(u), acc_u)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc_g * acc_u, mask=(rm[:, None] < M) & (rn[None, :] < N))


@tf.jit
def two_dot_loops(
    a_ptr, bt_ptr, d_ptr, et_ptr, c_ptr, M, N, K1, K2, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr
):
    # C = (A B^T) * (D E^T): two pipelined K loops one after the other (as FC1 then FC2 of
    # a fused MLP), whose shared-memory rings share their bytes; edges masked with other=0.0.
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K1, BK):
        kk = (k + rk)[None, :]
        a = tl.load(a_ptr + rm[:, None] * K1 + kk, mask=(rm[:, None] < M) & (kk < K1), other=0.0)
        b = tl.load(bt_ptr + rn[:, None] * K1 + kk, mask=(rn[:, None] < N) & (kk < K1), other=0.0)
        acc = tl.dot(a, tl.trans(b), acc)
    acc2 = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K2, BK):
        kk = (k + rk)[None, :]
        d = tl.load(d_ptr + rm[:, None] * K2 + kk, mask=(rm[:, None] < M) & (kk < K2), other=0.0)
        e = tl.load(et_ptr + rn[:, None] * K2 + kk, mask=(rn[:, None] < N) & (kk < K2), other=0.0)
        acc2 = tl.dot(d, tl.trans(e), acc2)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc * acc2, mask=(rm[:, None] < M) & (rn[None, :] < N))


@tf.jit
def strided_dot_loop(
    a_ptr, b_ptr, c_ptr, M, N, K, stride_bk, stride_bn, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr
):
    # C = A B with B [K, N] at any strides: stride_bk == 1 (K contiguous, as a
    # transposed weight) loads B coalesced along K and stages it K-major.
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        kk = k + rk
        a = tl.load(a_ptr + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b_ptrs = b_ptr + kk[:, None] * stride_bk + rn[None, :] * stride_bn
        b = tl.load(b_ptrs, mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@tf.jit
def at_dot_loop(
    at_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, DESC: tl.constexpr
):
    # C = A B with A stored transposed, [K, M] (M contiguous, as dy in dW = dyᵀ x): A is
    # trans of a [BK, BM] tile, which wgmma reads M-major; through descriptors (TMA on
    # sm_90) or masked pointer loads (cp.async).
    m0, n0 = tl.program_id(0) * BM, tl.program_id(1) * BN
    rm, rn, rk = m0 + tl.arange(0, BM), n0 + tl.arange(0, BN), tl.arange(0, BK)
    ad = tl.make_tensor_descriptor(at_ptr, [K, M], [M, 1], [BK, BM])
    bd = tl.make_tensor_descriptor(b_ptr, [K, N], [N, 1], [BK, BN])
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        if DESC:
            at = ad.load([k, m0])
            b = bd.load([k, n0])
        else:
            kk = k + rk
            at = tl.load(at_ptr + kk[:, None] * M + rm[None, :], mask=(kk[:, None] < K) & (rm[None, :] < M), other=0.0)
            b = tl.load(b_ptr + kk[:, None] * N + rn[None, :], mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(tl.trans(at), b, acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@tf.jit
def scaled_dot_loop(
    a_ptr,
    as_ptr,
    b_ptr,
    bs_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_bk,
    stride_bn,
    FA: tl.constexpr,
    FB: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
):
    # An MXFP8 GEMM: C = (A 2^(sa - 127)) (B 2^(sb - 127)), scales per 32-wide K block;
    # A [M, K] and B [K, N] (any strides) hold fp8 codes, sa [M, K/32], sb [N, K/32] e8m0
    # codes; K a multiple of BK.
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk, rs = tl.arange(0, BK), tl.arange(0, BK // 32)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        kk = k + rk
        a = tl.load(a_ptr + rm[:, None] * K + kk[None, :], mask=rm[:, None] < M, other=0)
        b = tl.load(b_ptr + kk[:, None] * stride_bk + rn[None, :] * stride_bn, mask=rn[None, :] < N, other=0)
        sa = tl.load(as_ptr + rm[:, None] * (K // 32) + (k // 32 + rs)[None, :], mask=rm[:, None] < M, other=127)
        sb = tl.load(bs_ptr + rn[:, None] * (K // 32) + (k // 32 + rs)[None, :], mask=rn[:, None] < N, other=127)
        acc = tl.dot_scaled(a, sa, FA, b, sb, FB, acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@tf.jit
def desc_copy_groups(x_ptr, y_ptr, G, R, N, stride, BM: tl.constexpr, BN: tl.constexpr):
    # G groups of R rows viewed as one [G * R, N] tensor (sizes the launch evaluates).
    dx = tl.make_tensor_descriptor(x_ptr, [G * R, N], [stride, 1], [BM, BN])
    dy = tl.make_tensor_descriptor(y_ptr, [G * R, N], [stride, 1], [BM, BN])
    pm, pn = (tl.program_id(0) - 1) * BM, (tl.program_id(1) - 1) * BN
    dy.store([pm, pn], dx.load([pm, pn]) * 3 - 1)


@tf.jit
def k_tuples(ptrs, scales, out_ptr, n, BLOCK: tl.constexpr):
    # Tuple arguments: one kernel parameter per leaf (ptrs.0, ptrs.1.0, ...).
    x_ptr, (y_ptr, z_ptr) = ptrs
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x, y, z = tl.load(x_ptr + offs, mask=m), tl.load(y_ptr + offs, mask=m), tl.load(z_ptr + offs, mask=m)
    tl.store(out_ptr + offs, x * scales[0] + y * scales[1] + z, mask=m)


@tf.jit
def fp4_dot_loop(
    a_ptr, as_ptr, b_ptr, bs_ptr, c_ptr, M, N, K, KS, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr
):
    # An MXFP4 GEMM: C = (A 2^(sa - 127)) (B 2^(sb - 127)) with A [M, K] and B [K, N] as
    # e2m1 codes packed two per byte along K (A [M, K/2] and Bᵀ [N, K/2] bytes, the even
    # element in the low nibble), sa [M, K/32] and sb [N, K/32] e8m0 codes; K % BK == 0.
    # KS = K / 32, the scales' row stride: an argument, so that the launch sees (and
    # specializes on) its alignment, which K // 32 in the kernel would not show.
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk, rs = tl.arange(0, BK // 2), tl.arange(0, BK // 32)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        kk = k // 2 + rk
        a = tl.load(a_ptr + rm[:, None] * (K // 2) + kk[None, :], mask=rm[:, None] < M, other=0)
        bt = tl.load(b_ptr + rn[:, None] * (K // 2) + kk[None, :], mask=rn[:, None] < N, other=0)
        sa = tl.load(as_ptr + rm[:, None] * KS + (k // 32 + rs)[None, :], mask=rm[:, None] < M, other=0)
        sb = tl.load(bs_ptr + rn[:, None] * KS + (k // 32 + rs)[None, :], mask=rn[:, None] < N, other=0)
        acc = tl.dot_scaled(a, sa, "e2m1", tl.trans(bt), sb, "e2m1", acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@tf.jit
def computed_dot_loop(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_b,
    A_COMPUTED: tl.constexpr,
    B_COMPUTED: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
):
    # C = A B with A [M, K] and B [K, N] row-major (B's rows stride_b apart); an operand marked computed is loaded
    # in another type and converted in the loop (A f16 halved to bf16, B fp8 e4m3 to
    # bf16), the others are bf16 loads the dot reads as they are. K % BK == 0.
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :], mask=rm[:, None] < M, other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None] * stride_b + rn[None, :], mask=rn[None, :] < N, other=0.0)
        if A_COMPUTED:
            a = (a.to(tl.float32) * 0.5).to(tl.bfloat16)
        if B_COMPUTED:
            b = b.to(tl.bfloat16)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@tf.jit
def _desc_block(d, r, c):
    return d.load([r, c])


@tf.jit
def _desc_put(d, r, c, v):
    d.store([r, c], v)


@tf.jit
def k_desc_fn(x_ptr, y_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    # k_desc's copy through device functions that take the descriptors as arguments.
    dx = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    dy = tl.make_tensor_descriptor(y_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    r, c = tl.program_id(0) * BM, tl.program_id(1) * BN
    _desc_put(dy, r, c, _desc_block(dx, r, c) * 3 - 1)


@tf.jit
def grouped_gemm_flat_kernel(
    a_ptr,
    w_ptr,
    bias_ptr,
    scale_ptr,
    out_ptr,
    offsets_ptr,
    tile_start_ptr,
    tiles_ptr,
    G,
    R,
    C,
    O,
    DGRAD: tl.constexpr,
    BIAS: tl.constexpr,
    BM: tl.constexpr,
    BO: tl.constexpr,
    BC: tl.constexpr,
    GROUP_M: tl.constexpr,
    WS: tl.constexpr,  # the persistent kernel's: unused
    TAIL: tl.constexpr = False,  # the persistent kernel's: unused (every tile full height)
):
    # kernels_dsl.moe.grouped_gemm.grouped_gemm_persistent_kernel's product (its
    # signature: it stands in for it) with its loops flattened: one pipelined loop over
    # every (tile, K step) of the program, the epilogue at a tile's last step, the copies'
    # coordinates read from the tile schedule. The same K steps in the same order: the
    # same bits. Not the library's: ptxas serializes its wgmma (C7514), so it is slower
    # (bench/flat_persistent.py, bench/RESULTS.md).
    a_desc = tl.make_tensor_descriptor(a_ptr, [R, C], [C, 1], [BM, BC])
    if DGRAD:
        w_desc = tl.make_tensor_descriptor(w_ptr, [G * C, O], [O, 1], [BC, BO])
    else:
        w_desc = tl.make_tensor_descriptor(w_ptr, [G * O, C], [C, 1], [BO, BC])
    tiles_o = tl.cdiv(O, BO)
    total = tl.load(tile_start_ptr + G) * tiles_o
    k_tiles = tl.cdiv(C, BC)
    mine = tl.cdiv(total - tl.program_id(0), tl.num_programs(0))
    acc = tl.zeros((BM, BO), dtype=tl.float32)
    for it in range(0, mine * k_tiles):
        ki = it % k_tiles
        t = tl.program_id(0) + (it // k_tiles) * tl.num_programs(0)
        g, m0, end, pid_o = _persistent_tile(t, offsets_ptr, tile_start_ptr, tiles_ptr, tiles_o, GROUP_M, BM)
        o0 = pid_o * BO
        if DGRAD:
            b = w_desc.load([g * C + ki * BC, o0])
        else:
            b = tl.trans(w_desc.load([g * O + o0, ki * BC]))
        acc = tl.dot(a_desc.load([m0, ki * BC]), b, acc)
        if ki == k_tiles - 1:
            _store_tile(acc, g, m0, end, o0, bias_ptr, scale_ptr, out_ptr, O, BIAS, BM, BO)
            acc = tl.zeros((BM, BO), dtype=tl.float32)
