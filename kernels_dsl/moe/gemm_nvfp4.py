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
def nvfp4_tile(
    q_ptr,
    s_ptr,
    rows,
    row_ok,
    col0,
    cols_lo,
    cols_end,
    stride_q,
    stride_s,
    BR: tl.constexpr,
    BC: tl.constexpr,
    RAGGED: tl.constexpr,
):
    """bf16 [BR, BC]: q·sb of the columns col0 .. col0 + BC of `rows` (int64 [BR]) of an
    NVFP4 copy packed along its columns (codes q [*, stride_q] bytes, scales s [*,
    stride_s]); rows where row_ok is false and columns outside cols_lo .. cols_end read 0.

    col0 is a multiple of 16 and each row whole blocks (2·stride_q a multiple of 16, at
    least cdiv(cols_end, 16)·16): the codes load as one [BR, BC/2] byte tile and the
    scales as one [BR, BC/16] tile, masked by whole blocks. Without RAGGED, cols_lo = col0
    and cols_end is a multiple of 16; with it either may cut a block (the wgrad's groups):
    the elements outside are zeroed after decoding (the bytes they share are loaded)."""
    # The hints rely on moe.quantize (the blocked axis a multiple of 16, the copies contiguous:
    # stride_q = cols / 2) and on the callers (col0 a multiple of their tile BC, a GemmConfig
    # power of two >= 16): rows and tiles start 8-byte aligned in the codes. The scales' rows
    # (stride_s = cols / 16, an argument) are aligned where the launch sees it.
    col0 = tl.multiple_of(col0, BC)
    stride_q = tl.multiple_of(stride_q, 8)
    blocks_end = (cols_end + 15) // 16  # blocks holding a column < cols_end
    b = col0 // 2 + tl.arange(0, BC // 2)
    ok = row_ok[:, None] & (b < blocks_end * 8)[None, :]
    packed = tl.load(q_ptr + rows[:, None] * stride_q + b[None, :], mask=ok, other=0)
    # Byte i holds elements 2i (low nibble) and 2i + 1 (high): interleave them.
    codes = tl.reshape(tl.join(packed & 0xF, (packed >> 4) & 0xF), (BR, BC))
    k = col0 // 16 + tl.arange(0, BC // 16)
    ok = row_ok[:, None] & (k < blocks_end)[None, :]
    sb = tl.load(s_ptr + rows[:, None] * stride_s + k[None, :], mask=ok, other=0.0).to(tl.float32)
    sb = tl.reshape(tl.broadcast_to(sb[:, :, None], (BR, BC // 16, 16)), (BR, BC))
    v = e2m1_values(codes) * sb
    if RAGGED:
        c = col0 + tl.arange(0, BC)
        v = tl.where(((c >= cols_lo) & (c < cols_end))[None, :], v, 0.0)
    return v.to(tl.bfloat16)


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
    SQ_A,
    SS_A,
    SQ_W,
    SS_W,
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
    # (W_ROWS = C, Wq [G·C, O]: its codes run along B_g's columns). C % BC == 0. SQ_* and
    # SS_* are the row lengths of a's and Wq's codes and scales (arguments, so that the
    # launch sees their alignment).
    valid, g, m0, end = _tile(offsets_ptr, tile_start_ptr, tiles_ptr, G)
    rm = tl.arange(0, BM)
    rc = tl.arange(0, BC)
    rows = m0.to(tl.int64) + rm
    ro = tl.program_id(1) * BO + tl.arange(0, BO)
    w0 = g.to(tl.int64) * W_ROWS
    acc = tl.zeros((BM, BO), dtype=tl.float32)
    for c in range(0, tl.where(valid, C, 0), BC):
        a = nvfp4_tile(a_ptr, sa_ptr, rows, m0 + rm < end, c, c, C, SQ_A, SS_A, BM, BC, False)
        if DGRAD:
            o0 = tl.program_id(1) * BO
            b = nvfp4_tile(w_ptr, sw_ptr, w0 + c + rc, rc < BC, o0, o0, O, SQ_W, SS_W, BC, BO, False)
        else:
            b = tl.trans(nvfp4_tile(w_ptr, sw_ptr, w0 + ro, ro < O, c, c, C, SQ_W, SS_W, BO, BC, False))
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
    SQ,
    SS,
    BN: tl.constexpr,
    BK: tl.constexpr,
    BR: tl.constexpr,
):
    # dw[g] [N, K] = dy_gᵀ x_g / (S_dy·S_x) for group g = program_id(1), from columnwise
    # NVFP4 copies of dy [RP, N] and x [RP, K], stored transposed ([N, RP/2], [K, RP/2]
    # codes packed along the rows RP, scales [*, RP/16]): the K loop runs over the group's
    # rows offsets[g] .. offsets[g + 1] of the copies in tiles at multiples of BR, the first
    # holding offsets[g] (a group may start on any row; the tiles start on whole blocks,
    # aligned), masked at both ends (nvfp4_tile's RAGGED).
    # With the random Hadamard transform on both copies (each group's rows in whole
    # chunks of 16) it cancels: per chunk (M dy_c)ᵀ (M x_c) = dy_cᵀ x_c, M = diag(signs)·H16/4
    # being orthogonal.
    g = tl.program_id(1)
    tiles_k = tl.cdiv(K, BK)
    rn = ((tl.program_id(0) // tiles_k) * BN + tl.arange(0, BN)).to(tl.int64)
    rk = ((tl.program_id(0) % tiles_k) * BK + tl.arange(0, BK)).to(tl.int64)
    r0, r1 = tl.load(offsets_ptr + g), tl.load(offsets_ptr + g + 1)
    acc = tl.zeros((BN, BK), dtype=tl.float32)
    for r in range(r0 // BR * BR, tl.where(r0 < r1, r1, 0), BR):  # an empty group: no step
        a = nvfp4_tile(dy_ptr, sdy_ptr, rn, rn < N, r, r0, r1, SQ, SS, BN, BR, True)
        b = tl.trans(nvfp4_tile(x_ptr, sx_ptr, rk, rk < K, r, r0, r1, SQ, SS, BK, BR, True))
        acc = tl.dot(a, b, acc)
    acc = acc / tl.load(tdy_ptr) / tl.load(tx_ptr)
    out = dw_ptr + g.to(tl.int64) * N * K + rn[:, None] * K + rk[None, :]
    tl.store(out, acc.to(dw_ptr.dtype.element_ty), mask=(rn[:, None] < N) & (rk[None, :] < K))
