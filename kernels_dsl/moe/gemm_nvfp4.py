"""Grouped GEMMs on NVFP4 operands (SPEC-moe.md §3): forward y_g = x_g w_gᵀ (+ bias),
dgrad dx_g = dy_g w_g and wgrad dw_g = dy_gᵀ x_g (ragged K), the tile schedule and the
epilogue of grouped_gemm.py.

An NVFP4 copy stands for q·sb/S_enc (quantize.py): E2M1 codes q packed two per byte
along the blocked axis (the even element in the low nibble), E4M3 block scales sb per 16
elements, one fp32 tensor scale S_enc. The operand tiles are dequantized in registers to
q·sb, which is exact in bf16: q has at most 2 significant bits ({0.5, 1, 1.5, 2, 3, 4, 6}),
a normal E4M3 sb 4 (a subnormal fewer), so q·sb has at most 6 of bf16's 8, and lies in
[2^-10, 6·448] (a NaN scale, a NaN block, stays NaN). The bf16 tensor-core dot sums the
exact products in fp32; S_enc is one per tensor, so it leaves the sum: the epilogue
divides by the two operands' S_enc (two fp32 roundings), then adds the bias.
"""

from __future__ import annotations

import tilefuse as tf
import tilefuse.language as tl

from .grouped_gemm import _store_rows, _tile
from .quantize import e2m1_values


@tf.jit
def nvfp4_tile(q_ptr, s_ptr, rows, row_ok, col0, cols_end, stride_q, stride_s, BR: tl.constexpr, BC: tl.constexpr):
    """bf16 [BR, BC]: q·sb of the columns col0 .. col0 + BC of `rows` (int64 [BR]) of an
    NVFP4 copy packed along its columns (codes q [*, stride_q] bytes, scales s [*,
    stride_s]); rows where row_ok is false and columns from cols_end on read 0. Any col0:
    each element finds its byte, nibble and block."""
    c = col0 + tl.arange(0, BC)
    ok = row_ok[:, None] & (c < cols_end)[None, :]
    packed = tl.load(q_ptr + rows[:, None] * stride_q + (c // 2)[None, :], mask=ok, other=0).to(tl.int32)
    codes = (packed >> (4 * (c % 2))[None, :]) & 0xF
    sb = tl.load(s_ptr + rows[:, None] * stride_s + (c // 16)[None, :], mask=ok, other=0.0).to(tl.float32)
    return (e2m1_values(codes.to(tl.int8)) * sb).to(tl.bfloat16)


@tf.jit
def grouped_gemm_nvfp4_kernel(
    a_ptr,
    sa_ptr,
    ta_ptr,
    w_ptr,
    sw_ptr,
    tw_ptr,
    bias_ptr,
    scale_ptr,
    out_ptr,
    offsets_ptr,
    tile_start_ptr,
    tiles_ptr,
    G,
    C,
    O,
    W_ROWS,
    DGRAD: tl.constexpr,
    BIAS: tl.constexpr,
    BM: tl.constexpr,
    BO: tl.constexpr,
    BC: tl.constexpr,
):
    # out [R, O] = (a_g B_g) / (S_a·S_w) (+ bias as grouped_gemm_kernel's) for a [R, C]
    # NVFP4 rowwise (codes [R, C/2], scales [R, C/16], S_a at ta) and the weights' rowwise
    # copy Wq [G·W_ROWS, *] (w.reshape(G·N, K) quantized: 16 x 16 tiles or 1 x 16). The
    # forward takes B_g = Wq_gᵀ (W_ROWS = O, Wq [G·O, C]); the dgrad (DGRAD) B_g = Wq_g
    # (W_ROWS = C, Wq [G·C, O]: its codes run along B_g's columns). C % BC == 0.
    valid, g, m0, end = _tile(offsets_ptr, tile_start_ptr, tiles_ptr, G)
    rm = tl.arange(0, BM)
    rc = tl.arange(0, BC)
    rows = m0.to(tl.int64) + rm
    ro = tl.program_id(1) * BO + tl.arange(0, BO)
    w0 = g.to(tl.int64) * W_ROWS
    acc = tl.zeros((BM, BO), dtype=tl.float32)
    for c in range(0, tl.where(valid, C, 0), BC):
        a = nvfp4_tile(a_ptr, sa_ptr, rows, m0 + rm < end, c, C, C // 2, C // 16, BM, BC)
        if DGRAD:
            b = nvfp4_tile(w_ptr, sw_ptr, w0 + c + rc, rc < BC, tl.program_id(1) * BO, O, O // 2, O // 16, BC, BO)
        else:
            b = tl.trans(nvfp4_tile(w_ptr, sw_ptr, w0 + ro, ro < O, c, C, C // 2, C // 16, BO, BC))
        acc = tl.dot(a, b, acc)
    acc = acc / tl.load(ta_ptr) / tl.load(tw_ptr)
    _store_rows(acc, g, m0, end, bias_ptr, scale_ptr, out_ptr, O, BIAS, BM, BO)


@tf.jit
def grouped_wgrad_nvfp4_kernel(
    dy_ptr,
    sdy_ptr,
    tdy_ptr,
    x_ptr,
    sx_ptr,
    tx_ptr,
    dw_ptr,
    offsets_ptr,
    N,
    K,
    RP,
    BN: tl.constexpr,
    BK: tl.constexpr,
    BR: tl.constexpr,
):
    # dw[g] [N, K] = dy_gᵀ x_g / (S_dy·S_x) for group g = program_id(1), from columnwise
    # NVFP4 copies of dy [RP, N] and x [RP, K], stored transposed ([N, RP/2], [K, RP/2]
    # codes packed along the rows RP, scales [*, RP/16]): the K loop runs over the group's
    # rows offsets[g] .. offsets[g + 1] of the copies, ragged (the tiles cut at its end).
    # With the random Hadamard transform on both copies (each group's rows in whole
    # chunks of 16) it cancels: per chunk (M dy_c)ᵀ (M x_c) = dy_cᵀ x_c, M = diag(signs)·H16/4
    # being orthogonal.
    g = tl.program_id(1)
    tiles_k = tl.cdiv(K, BK)
    rn = ((tl.program_id(0) // tiles_k) * BN + tl.arange(0, BN)).to(tl.int64)
    rk = ((tl.program_id(0) % tiles_k) * BK + tl.arange(0, BK)).to(tl.int64)
    r0, r1 = tl.load(offsets_ptr + g), tl.load(offsets_ptr + g + 1)
    acc = tl.zeros((BN, BK), dtype=tl.float32)
    for r in range(r0, r1, BR):
        a = nvfp4_tile(dy_ptr, sdy_ptr, rn, rn < N, r, r1, RP // 2, RP // 16, BN, BR)
        b = tl.trans(nvfp4_tile(x_ptr, sx_ptr, rk, rk < K, r, r1, RP // 2, RP // 16, BK, BR))
        acc = tl.dot(a, b, acc)
    acc = acc / tl.load(tdy_ptr) / tl.load(tx_ptr)
    out = dw_ptr + g.to(tl.int64) * N * K + rn[:, None] * K + rk[None, :]
    tl.store(out, acc.to(dw_ptr.dtype.element_ty), mask=(rn[:, None] < N) & (rk[None, :] < K))
