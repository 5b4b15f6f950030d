"""The fused epilogues of the MoE MLP (SPEC-moe.md §4): FC1 and FC2-dgrad grouped GEMMs
whose epilogues apply the scaled activation, its derivative and the quantization of
their outputs, so that neither the activation nor its gradient round-trips through
memory in bf16. The K loops, the tile schedule and the bias are grouped_gemm.py's; the
activations are activations.py's device functions; the block encodings quantize.py's.

FC1 (fc1_kernel), per scheduled tile of rows of group g and BO output columns:
    h = x_g w1_gᵀ (+ b_g, + b_g·s) in fp32; C = bf16(h) stored in C's (GLU) layout;
    f = act(C) (EXACT, SPEC's exact mode) or act(h) (accumulator mode); y = probs·f.
A GLU's gate and up columns are two accumulators of one K loop (glu_columns: halves,
blocks of K, stride 1).
FC2 dgrad (fc2_dgrad_kernel): acc = dy_g w2_g, g = bf16(acc) (the unfused dgrad's stored
output, so that the fused results equal the unfused composition bit for bit), then from
the saved C: dh = g·probs·act'(C) in C's layout, the dprobs run sums of g·act(C)
(activations.run_sums; dprobs_kernel adds them in order: scaled_act_backward's bits),
and with RECOMPUTE the FC2 input probs·act(C) again, as FC1 stored it in exact mode.

Outputs (OUT 0: bf16 [R, width]; OUT 1: MXFP8 e4m3, blocks of 32; OUT 2: FP8-block e4m3,
blocks of 1 x 128: the bits moe.quantize gives for the bf16-rounded tile): a rowwise copy
(codes [R, width], scales [R, width/block]) and a columnwise copy stored transposed for
the wgrad, codes [width, RP], scales [width, RP/block], in which group g's rows are the
columns padded[g] .. padded[g + 1] (group_offsets with PAD_TO = the block): each group
zero-padded to whole blocks of rows, so that no scale block straddles two groups; a
group's blocks are moe.quantize(y_g padded with zero rows, axis=0). Columns from
padded[G] on are not written.
"""

from __future__ import annotations

import tilefuse as tf
import tilefuse.language as tl

from .activations import DS_CHUNK, add_in_order, glu_columns, load_glu, run_sums, store_glu
from .grouped_gemm import _persistent_tile, _tile, _weight, bias_tile, k_loop, k_loop_desc, k_loop_fp8
from .quantize import (
    FP8_BLOCK,
    MX_BLOCK,
    NV_BLOCK,
    nvfp4_encode,
    quant_tile,
    rht_step,
    stochastic_bits,
    tensor_scale_of,
)


@tf.jit
def column(t, j, N: tl.constexpr):
    """Column j (a constant) of t [*, N], exactly: one term of each row's sum is not zero."""
    i = tl.arange(0, N)[None, :]
    return tl.sum(tl.where(i == j, t, tl.zeros_like(t)), axis=1).to(t.dtype)


@tf.jit
def tile_rows(m0, end, BM: tl.constexpr):
    """(rm, row_ok [BM], r64 [BM, 1] int64) of a tile's rows m0 .. end: offsets past 2^31 stay exact."""
    rm = tl.arange(0, BM)
    return rm, (m0 + rm) < end, (m0.to(tl.int64) + rm)[:, None]


@tf.jit
def store_out(
    q_ptr,
    qs_ptr,
    qt_ptr,
    qts_ptr,
    offsets_ptr,
    padded_ptr,
    g,
    m0,
    end,
    cols,
    col_ok,
    width,
    NS,
    RP,
    RPS,
    v,
    ts_ptr,
    tsc_ptr,
    amax_ptr,
    k0,
    k1,
    k2,
    k3,
    OUT: tl.constexpr,
    ROWS: tl.constexpr,
    COLS: tl.constexpr,
    RUN: tl.constexpr,
    BM: tl.constexpr,
    TC: tl.constexpr,
    PASS: tl.constexpr,
    STOCH: tl.constexpr,
):
    """Stores v [BM, TC] (fp32) of the tile's rows m0 .. end at the storage columns `cols`
    of an output [R, width] (see the module docstring): OUT 0 the bf16 values (ROWS); OUT 1
    (MXFP8) or 2 (FP8-block) the rowwise copy (ROWS; cols in runs of RUN from multiples of
    RUN, a multiple of the block; NS = width / block, its scales' row stride) and the
    columnwise copy (COLS; RPS = RP / block). Zero outside the rows and col_ok: the
    blocks' padding. OUT 3 (NVFP4): nvfp4_rows, nvfp4_cols (S_enc at ts_ptr, tsc_ptr)."""
    QB: tl.constexpr = MX_BLOCK if OUT == 1 else FP8_BLOCK
    rm, row_ok, r64 = tile_rows(m0, end, BM)
    keep = row_ok[:, None] & col_ok[None, :]
    if OUT == 0:
        tl.store(q_ptr + r64 * width + cols[None, :], v, mask=keep)
    elif OUT == 3:
        v = tl.where(keep, v, 0.0).to(tl.bfloat16).to(tl.float32)
        t0 = tl.load(padded_ptr + g) + (m0 - tl.load(offsets_ptr + g))
        if ROWS:
            nvfp4_rows(q_ptr, qs_ptr, ts_ptr, amax_ptr, r64, row_ok, cols, width, NS, v, k0, k1, BM, TC, PASS, STOCH)
        if COLS:
            nvfp4_cols(
                qt_ptr, qts_ptr, tsc_ptr, amax_ptr + 1, t0, end - m0, cols, col_ok, RP, v, k2, k3, BM, TC,
                PASS, STOCH,
            )  # fmt: skip
    else:
        v = tl.where(keep, v, 0.0).to(tl.bfloat16).to(tl.float32)
        if ROWS:
            codes, scales = quant_tile(v, BM, TC, OUT)
            tl.store(q_ptr + r64 * width + cols[None, :], codes, mask=keep)
            blocks = tl.min(tl.reshape(cols, [TC // QB, QB]), axis=1) // QB
            blocks = tl.max_contiguous(tl.multiple_of(blocks, RUN // QB), RUN // QB)
            tl.store(qs_ptr + r64 * NS + blocks[None, :], scales, mask=row_ok[:, None] & (blocks < NS)[None, :])
        if COLS:
            # The tile's first column in the transposed copy (a multiple of the block), and
            # its rows up to the group's padded end.
            t0 = tl.multiple_of(tl.load(padded_ptr + g) + (m0 - tl.load(offsets_ptr + g)), QB)
            kept = (end - m0 + QB - 1) // QB * QB
            codes, scales = quant_tile(tl.trans(v), TC, BM, OUT)
            c64 = cols.to(tl.int64)
            tl.store(qt_ptr + c64[:, None] * RP + t0 + rm[None, :], codes, mask=col_ok[:, None] & (rm < kept)[None, :])
            # One block row at a time: a group's blocks start at any scale column, so
            # consecutive ones would be unaligned runs.
            for j in tl.static_range(BM // QB):
                sj = column(scales, j, BM // QB)
                tl.store(qts_ptr + c64 * RPS + t0 // QB + j, sj, mask=col_ok & (j * QB < kept))


@tf.jit
def nvfp4_amax(ev, od, amax_ptr):
    """amax_ptr (int32 bits of a float32 >= 0) = max(itself, |ev|, |od| ignoring NaNs): an
    atomic max of non-negative floats, exact and independent of the programs' order."""
    a = tl.maximum(tl.where(ev != ev, 0.0, tl.abs(ev)), tl.where(od != od, 0.0, tl.abs(od)))
    tl.atomic_max(amax_ptr, tl.max(tl.max(a, axis=1), axis=0).to(tl.int32, bitcast=True))


@tf.jit
def nvfp4_scale(amax_ptr, ts_ptr):
    # ts = S_enc of amax (the float32 bits that nvfp4_amax raised).
    tl.store(ts_ptr, tensor_scale_of(tl.load(amax_ptr).to(tl.float32, bitcast=True)))


@tf.jit
def nvfp4_store(q_ptr, s_ptr, ev, od, ts_ptr, r, cb, ok, C, k0, k1, TR: tl.constexpr, STOCH: tl.constexpr):
    """The NVFP4 blocks (r, cb) [TR] of V [*, C] whose elements are ev, od [TR, 8], encoded as
    quantize.nvfp4_quantize does (the same random bits for the same (r, cb) and key)."""
    if STOCH:
        rev, rod = stochastic_bits(r, cb, C, k0, k1)
    else:
        rev, rod = 0, 0
    packed, sb = nvfp4_encode(ev, od, tl.load(ts_ptr), rev, rod, TR, 1, STOCH)
    p = tl.arange(0, 8)[None, :]
    tl.store(q_ptr + r[:, None] * (C // 2) + cb[:, None] * 8 + p, packed, mask=ok[:, None])
    tl.store(s_ptr + r[:, None] * (C // 16) + cb[:, None], sb, mask=ok[:, None])


@tf.jit
def nvfp4_rows(
    q_ptr, qs_ptr, ts_ptr, amax_ptr, r64, row_ok, cols, width, NS, v, k0, k1,
    BM: tl.constexpr, TC: tl.constexpr, PASS: tl.constexpr, STOCH: tl.constexpr,
):  # fmt: skip
    """The rowwise NVFP4 copy of v [BM, TC]: 1 x 16 blocks along `cols` (runs of 16 from
    multiples of 16). PASS 0 raises the amax (amax_ptr), PASS 1 encodes with S_enc at ts_ptr."""
    NB: tl.constexpr = TC // NV_BLOCK
    ev, od = tl.split(tl.reshape(v, [BM * NB, 8, 2]))
    if PASS == 0:
        nvfp4_amax(ev, od, amax_ptr)
    else:
        blocks = tl.min(tl.reshape(cols, [NB, NV_BLOCK]), axis=1) // NV_BLOCK
        r = tl.reshape(tl.broadcast_to(r64, [BM, NB]), [BM * NB])
        cb = tl.reshape(tl.broadcast_to(blocks[None, :], [BM, NB]), [BM * NB])
        ok = tl.reshape(row_ok[:, None] & (blocks < NS)[None, :], [BM * NB])
        nvfp4_store(q_ptr, qs_ptr, ev, od, ts_ptr, r, cb, ok, width, k0, k1, BM * NB, STOCH)


@tf.jit
def nvfp4_cols(
    qt_ptr, qts_ptr, ts_ptr, amax_ptr, t0, rows, cols, col_ok, RP, v, k0, k1,
    BM: tl.constexpr, TC: tl.constexpr, PASS: tl.constexpr, STOCH: tl.constexpr,
):  # fmt: skip
    """The columnwise NVFP4 copy of v [BM, TC] (`rows` of them in the group) from column t0
    (a multiple of 16) of Vᵀ [width, RP]: each chunk of 16 rows through the random
    Hadamard transform as quantize.nvfp4_view_block applies it (its terms in order, then
    times 1/4), chunks past the rows not stored (zeros: the group's padding)."""
    NC: tl.constexpr = BM // NV_BLOCK
    x = tl.reshape(tl.trans(v), [TC * NC, NV_BLOCK])
    ev = tl.zeros([TC * NC, 8], tl.float32)
    od = tl.zeros([TC * NC, 8], tl.float32)
    for i in tl.static_range(NV_BLOCK):
        ev, od = rht_step(ev, od, column(x, i, NV_BLOCK), i)
    ev, od = ev * 0.25, od * 0.25
    if PASS == 0:
        nvfp4_amax(ev, od, amax_ptr)
    else:
        chunk = tl.arange(0, NC)
        r = tl.reshape(tl.broadcast_to(cols.to(tl.int64)[:, None], [TC, NC]), [TC * NC])
        cb = tl.reshape(tl.broadcast_to((t0 // NV_BLOCK + chunk)[None, :], [TC, NC]), [TC * NC])
        ok = tl.reshape(col_ok[:, None] & (chunk * NV_BLOCK < rows)[None, :], [TC * NC])
        nvfp4_store(qt_ptr, qts_ptr, ev, od, ts_ptr, r, cb, ok, RP, k0, k1, TC * NC, STOCH)


@tf.jit
def fc1_kernel(
    x_ptr,
    sx_ptr,
    w_ptr,
    w_offs_ptr,
    sw_ptr,
    bias_ptr,
    bias_scale_ptr,
    probs_ptr,
    c_ptr,
    y_ptr,
    ys_ptr,
    yt_ptr,
    yts_ptr,
    offsets_ptr,
    padded_ptr,
    tile_start_ptr,
    tiles_ptr,
    G,
    D,
    N,
    K,
    RP,
    NSY,
    RPS,
    SX_STRIDE,
    SW_STRIDE,
    P0,
    P1,
    P2,
    ACT: tl.constexpr,
    FP8: tl.constexpr,
    FX: tl.constexpr,
    FW: tl.constexpr,
    SX_ROWS: tl.constexpr,
    SW_ROWS: tl.constexpr,
    W_LIST: tl.constexpr,
    W_ALIGNED: tl.constexpr,
    BIAS: tl.constexpr,
    EXACT: tl.constexpr,
    OUT: tl.constexpr,
    GLU_RUN: tl.constexpr,
    EVEN_ODD: tl.constexpr,
    BM: tl.constexpr,
    BO: tl.constexpr,
    BC: tl.constexpr,
):
    # x [R, D]; w1 [G, N1, D] (bf16, or with FP8 its rowwise copy [G·N1, D] as in
    # grouped_gemm_fp8_kernel, FX/FW its formats, SX_ROWS/SW_ROWS its scales); N1 = 2N for
    # a GLU (K its interleave) else N; C [R, N1] bf16; y: see store_out (width N; NSY = N / block,
    # RPS = RP / block: passed so that the launch specializes their divisibility).
    valid, g, m0, end = _tile(offsets_ptr, tile_start_ptr, tiles_ptr, G)
    c0 = tl.program_id(1) * BO
    cols = c0 + tl.arange(0, BO)
    if ACT.glu:
        n1 = 2 * N
        a_col, b_col = glu_columns(cols, K, GLU_RUN)
    else:
        n1 = N
        a_col, b_col = cols, cols
    if FP8:
        acc_a, acc_b = k_loop_fp8(
            x_ptr, sx_ptr, w_ptr, sw_ptr, valid, g, m0, end, D, n1, a_col, b_col, n1, 0, D, SX_STRIDE, SW_STRIDE,
            FX, FW, SX_ROWS, SW_ROWS, ACT.glu, BM, BO, BC,
        )  # fmt: skip
    else:
        w = _weight(w_ptr, w_offs_ptr, g, n1 * D, W_LIST, W_ALIGNED)
        acc_a, acc_b = k_loop(x_ptr, w, valid, m0, end, D, n1, a_col, b_col, 1, D, ACT.glu, BM, BO, BC)
    fc1_epilogue(
        acc_a, acc_b, g, m0, end, c0, a_col, b_col, bias_ptr, bias_scale_ptr, probs_ptr, c_ptr, y_ptr, ys_ptr, yt_ptr,
        yts_ptr, offsets_ptr, padded_ptr, N, K, RP, NSY, RPS, P0, P1, P2, ACT, BIAS, EXACT, OUT, GLU_RUN, EVEN_ODD,
        BM, BO,
    )  # fmt: skip


@tf.jit
def fc1_persistent_kernel(
    x_ptr,
    w_ptr,
    bias_ptr,
    bias_scale_ptr,
    probs_ptr,
    c_ptr,
    y_ptr,
    ys_ptr,
    yt_ptr,
    yts_ptr,
    offsets_ptr,
    padded_ptr,
    tile_start_ptr,
    tiles_ptr,
    G,
    R,
    D,
    N,
    K,
    RP,
    NSY,
    RPS,
    P0,
    P1,
    P2,
    ACT: tl.constexpr,
    BIAS: tl.constexpr,
    EXACT: tl.constexpr,
    OUT: tl.constexpr,
    GLU_RUN: tl.constexpr,
    EVEN_ODD: tl.constexpr,
    BM: tl.constexpr,
    BO: tl.constexpr,
    BC: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    # fc1_kernel's bf16 product and epilogue, persistent: the programs loop over the
    # tiles in grouped_gemm_persistent_kernel's order, their K loops on descriptors
    # (k_loop_desc: x [R, D], w1 [G, N1, D] as [G·N1, D]). A tile's gate and up columns
    # are each one run of BO weight rows: a GLU interleave K that BO divides, or the
    # halves (K = N; columns past N read rows that are not stored) — the host checks;
    # or, for the stride-1 interleave (EVEN_ODD), one run of 2·BO rows whose product's
    # even and odd columns are the gate and the up columns.
    n1 = N
    if ACT.glu:
        n1 = 2 * N
    x_desc = tl.make_tensor_descriptor(x_ptr, [R, D], [D, 1], [BM, BC])
    if EVEN_ODD:
        w_desc = tl.make_tensor_descriptor(w_ptr, [G * n1, D], [D, 1], [2 * BO, BC])
    else:
        w_desc = tl.make_tensor_descriptor(w_ptr, [G * n1, D], [D, 1], [BO, BC])
    tiles_o = tl.cdiv(N, BO)
    total = tl.load(tile_start_ptr + G) * tiles_o
    for t in range(tl.program_id(0), total, tl.num_programs(0)):
        g, m0, end, pid_o = _persistent_tile(t, offsets_ptr, tile_start_ptr, tiles_ptr, tiles_o, GROUP_M, BM)
        c0 = pid_o * BO
        cols = c0 + tl.arange(0, BO)
        if ACT.glu:
            a_col, b_col = glu_columns(cols, K, GLU_RUN)
            a0 = (c0 // K) * (2 * K) + c0 % K
            b0 = a0 + K
        else:
            a_col, b_col = cols, cols
            a0, b0 = c0, c0
        if EVEN_ODD:
            both, _ = k_loop_desc(x_desc, w_desc, m0, g * n1 + a0, 0, c0, D, False, False, BM, 2 * BO, BC)
            acc_a, acc_b = tl.split(tl.reshape(both, [BM, BO, 2]))
        else:
            acc_a, acc_b = k_loop_desc(x_desc, w_desc, m0, g * n1 + a0, g * n1 + b0, c0, D, ACT.glu, False, BM, BO, BC)
        fc1_epilogue(
            acc_a, acc_b, g, m0, end, c0, a_col, b_col, bias_ptr, bias_scale_ptr, probs_ptr, c_ptr, y_ptr, ys_ptr,
            yt_ptr, yts_ptr, offsets_ptr, padded_ptr, N, K, RP, NSY, RPS, P0, P1, P2, ACT, BIAS, EXACT, OUT, GLU_RUN,
            EVEN_ODD, BM, BO,
        )  # fmt: skip


@tf.jit
def fc1_epilogue(
    acc_a, acc_b, g, m0, end, c0, a_col, b_col, bias_ptr, bias_scale_ptr, probs_ptr, c_ptr, y_ptr, ys_ptr, yt_ptr,
    yts_ptr, offsets_ptr, padded_ptr, N, K, RP, NSY, RPS, P0, P1, P2, ACT: tl.constexpr, BIAS: tl.constexpr,
    EXACT: tl.constexpr, OUT: tl.constexpr, GLU_RUN: tl.constexpr, EVEN_ODD: tl.constexpr, BM: tl.constexpr,
    BO: tl.constexpr,
):  # fmt: skip
    # FC1's epilogue of one tile (module docstring): the accumulators of the output columns
    # c0 .. c0 + BO (a_col / b_col: their storage columns) of the rows m0 .. end.
    cols = c0 + tl.arange(0, BO)
    n1 = N
    if ACT.glu:
        n1 = 2 * N
    rm, row_ok, r64 = tile_rows(m0, end, BM)
    if BIAS > 0:
        acc_a = acc_a + bias_tile(bias_ptr, bias_scale_ptr, g, m0, end, n1, a_col, BIAS, BM)
    ha = acc_a.to(tl.bfloat16)
    xa = acc_a
    if EXACT:
        xa = ha.to(tl.float32)
    if ACT.glu:
        if BIAS > 0:
            acc_b = acc_b + bias_tile(bias_ptr, bias_scale_ptr, g, m0, end, n1, b_col, BIAS, BM)
        hb = acc_b.to(tl.bfloat16)
        store_glu(c_ptr, r64, row_ok[:, None], c0, N, K, ha, hb, BM, BO, GLU_RUN, EVEN_ODD)
        xb = acc_b
        if EXACT:
            xb = hb.to(tl.float32)
        f = ACT.fwd(xa, xb, P0, P1, P2)
    else:
        tl.store(c_ptr + r64 * N + cols[None, :], ha, mask=row_ok[:, None] & (cols < N)[None, :])
        f = ACT.fwd(xa, P0, P1, P2)
    s = tl.load(probs_ptr + m0 + rm, mask=row_ok, other=0.0)
    store_out(
        y_ptr, ys_ptr, yt_ptr, yts_ptr, offsets_ptr, padded_ptr, g, m0, end, cols, cols < N, N, NSY, RP, RPS,
        s[:, None] * f, probs_ptr, probs_ptr, probs_ptr, 0, 0, 0, 0, OUT, True, True, BO, BM, BO, 1, False,
    )  # fmt: skip


@tf.jit
def act_inputs(h_ptr, r64, row_ok, c0, N, K, GLU: tl.constexpr, GLU_RUN: tl.constexpr, EVEN_ODD: tl.constexpr,
               BM: tl.constexpr, BO: tl.constexpr):  # fmt: skip
    """(a, b) fp32 [BM, BO] of h [R, N1] (C's layout) for output columns c0 .. c0 + BO: a
    GLU's gate and up (load_glu), or a unary activation's input twice."""
    if GLU:
        a, b = load_glu(h_ptr, r64, row_ok[:, None], c0, N, K, BM, BO, GLU_RUN, EVEN_ODD)
    else:
        cols = c0 + tl.arange(0, BO)
        a = tl.load(h_ptr + r64 * N + cols[None, :], mask=row_ok[:, None] & (cols < N)[None, :], other=0.0)
        a = a.to(tl.float32)
        b = a
    return a, b


@tf.jit
def fc1_nvfp4_kernel(
    h_ptr,
    probs_ptr,
    y_ptr,
    ys_ptr,
    yt_ptr,
    yts_ptr,
    ts_ptr,
    tsc_ptr,
    amax_ptr,
    offsets_ptr,
    padded_ptr,
    tile_start_ptr,
    tiles_ptr,
    G,
    N,
    K,
    RP,
    NSY,
    P0,
    P1,
    P2,
    ACT: tl.constexpr,
    PASS: tl.constexpr,
    GLU_RUN: tl.constexpr,
    EVEN_ODD: tl.constexpr,
    BM: tl.constexpr,
    BO: tl.constexpr,
):
    # FC1's epilogue for NVFP4 over the GEMM's output h [R, N1] (C in bf16, exact mode, or
    # the fp32 accumulator): y = probs·act(h) regenerated in registers, never stored in
    # bf16. The two-level scale needs the whole tensor's amax first: PASS 0 raises
    # amax [2] (rowwise, columnwise), PASS 1 encodes with their S_enc (ts, tsc [1]: the copies' own).
    valid, g, m0, end = _tile(offsets_ptr, tile_start_ptr, tiles_ptr, G)
    c0 = tl.program_id(1) * BO
    cols = c0 + tl.arange(0, BO)
    rm, row_ok, r64 = tile_rows(m0, end, BM)
    a, b = act_inputs(h_ptr, r64, row_ok, c0, N, K, ACT.glu, GLU_RUN, EVEN_ODD, BM, BO)
    if ACT.glu:
        f = ACT.fwd(a, b, P0, P1, P2)
    else:
        f = ACT.fwd(a, P0, P1, P2)
    s = tl.load(probs_ptr + m0 + rm, mask=row_ok, other=0.0)
    store_out(
        y_ptr, ys_ptr, yt_ptr, yts_ptr, offsets_ptr, padded_ptr, g, m0, end, cols, cols < N, N, NSY, RP, RP // 16,
        s[:, None] * f, ts_ptr, tsc_ptr, amax_ptr, 0, 0, 0, 0, 3, True, True, BO, BM, BO, PASS, False,
    )  # fmt: skip


@tf.jit
def fc2_dgrad_kernel(
    dy_ptr,
    sdy_ptr,
    w_ptr,
    w_offs_ptr,
    sw_ptr,
    c_ptr,
    probs_ptr,
    dh_ptr,
    dhs_ptr,
    dht_ptr,
    dhts_ptr,
    parts_ptr,
    y_ptr,
    yt_ptr,
    yts_ptr,
    offsets_ptr,
    padded_ptr,
    tile_start_ptr,
    tiles_ptr,
    G,
    D,
    N,
    K,
    RP,
    NSD,
    RPS,
    PARTS,
    SDY_STRIDE,
    SW_STRIDE,
    P0,
    P1,
    P2,
    ACT: tl.constexpr,
    FP8: tl.constexpr,
    FD: tl.constexpr,
    FW: tl.constexpr,
    SD_ROWS: tl.constexpr,
    SW_ROWS: tl.constexpr,
    W_LIST: tl.constexpr,
    W_ALIGNED: tl.constexpr,
    OUT: tl.constexpr,
    RECOMPUTE: tl.constexpr,
    GLU_RUN: tl.constexpr,
    EVEN_ODD: tl.constexpr,
    PAIRS: tl.constexpr,
    BM: tl.constexpr,
    BO: tl.constexpr,
    BC: tl.constexpr,
    HALVES: tl.constexpr = False,
):
    # dy [R, D]; w2 [G, D, N] (bf16, or with FP8 its columnwise copy of [G·D, N], stored
    # [N, G·D], as in grouped_gemm_fp8_kernel's dgrad); C [R, N1] bf16; dh: store_out of
    # width N1 in C's layout (NSD = N1 / block); parts [R, PARTS] fp32 run sums (PARTS >= every tile's runs, the
    # runs past N zeros: no mask along a row); RECOMPUTE: y (bf16 [R, N],
    # OUT 0) or its columnwise MXFP8 copy (yt, yts; OUT 1).
    valid, g, m0, end = _tile(offsets_ptr, tile_start_ptr, tiles_ptr, G)
    c0 = tl.program_id(1) * BO
    cols = c0 + tl.arange(0, BO)
    if FP8:
        # Wq's rows are N (W_ROW 0): a tile's columns lie in one 128-block (k_loop_fp8's SW_ONE).
        acc, _ = k_loop_fp8(
            dy_ptr, sdy_ptr, w_ptr, sw_ptr, valid, g, m0, end, D, N, cols, cols, 0, D // 32, G * D, SDY_STRIDE,
            SW_STRIDE, FD, FW, SD_ROWS, SW_ROWS, False, BM, BO, BC, False, 0, 0, c0,
            SW_ROWS == 128 and BC <= 128 and BO <= 128,
        )  # fmt: skip
    else:
        w = _weight(w_ptr, w_offs_ptr, g, D * N, W_LIST, W_ALIGNED)
        acc, _ = k_loop(dy_ptr, w, valid, m0, end, D, N, cols, cols, N, 1, False, BM, BO, BC)
    dgrad_epilogue(
        acc.to(tl.bfloat16).to(tl.float32), c_ptr, probs_ptr, dh_ptr, dhs_ptr, dht_ptr, dhts_ptr, parts_ptr, y_ptr,
        yt_ptr, yts_ptr, offsets_ptr, padded_ptr, g, m0, end, c0, N, K, RP, NSD, RPS, PARTS, P0, P1, P2, probs_ptr,
        probs_ptr, probs_ptr, probs_ptr, 0, 0, 0, 0, ACT, OUT, RECOMPUTE, GLU_RUN, EVEN_ODD, PAIRS, BM, BO, 1, False,
        HALVES,
    )  # fmt: skip


@tf.jit
def fc2_dgrad_persistent_kernel(
    dy_ptr,
    w_ptr,
    c_ptr,
    probs_ptr,
    dh_ptr,
    dhs_ptr,
    dht_ptr,
    dhts_ptr,
    parts_ptr,
    y_ptr,
    yt_ptr,
    yts_ptr,
    offsets_ptr,
    padded_ptr,
    tile_start_ptr,
    tiles_ptr,
    G,
    R,
    D,
    N,
    K,
    RP,
    NSD,
    RPS,
    PARTS,
    P0,
    P1,
    P2,
    ACT: tl.constexpr,
    OUT: tl.constexpr,
    RECOMPUTE: tl.constexpr,
    GLU_RUN: tl.constexpr,
    EVEN_ODD: tl.constexpr,
    PAIRS: tl.constexpr,
    BM: tl.constexpr,
    BO: tl.constexpr,
    BC: tl.constexpr,
    GROUP_M: tl.constexpr,
    HALVES: tl.constexpr = False,
):
    # fc2_dgrad_kernel's bf16 product and epilogue, persistent (fc1_persistent_kernel's
    # loop): dy [R, D], w2 [G, D, N] as [G·D, N] read [BC, BO] at row g·D + c; the K
    # steps stay within an expert: D % BC == 0 (the host checks).
    dy_desc = tl.make_tensor_descriptor(dy_ptr, [R, D], [D, 1], [BM, BC])
    w_desc = tl.make_tensor_descriptor(w_ptr, [G * D, N], [N, 1], [BC, BO])
    tiles_o = tl.cdiv(N, BO)
    total = tl.load(tile_start_ptr + G) * tiles_o
    for t in range(tl.program_id(0), total, tl.num_programs(0)):
        g, m0, end, pid_o = _persistent_tile(t, offsets_ptr, tile_start_ptr, tiles_ptr, tiles_o, GROUP_M, BM)
        c0 = pid_o * BO
        acc, _ = k_loop_desc(dy_desc, w_desc, m0, g * D, g * D, c0, D, False, True, BM, BO, BC)
        dgrad_epilogue(
            acc.to(tl.bfloat16).to(tl.float32), c_ptr, probs_ptr, dh_ptr, dhs_ptr, dht_ptr, dhts_ptr, parts_ptr,
            y_ptr, yt_ptr, yts_ptr, offsets_ptr, padded_ptr, g, m0, end, c0, N, K, RP, NSD, RPS, PARTS, P0, P1, P2,
            probs_ptr, probs_ptr, probs_ptr, probs_ptr, 0, 0, 0, 0, ACT, OUT, RECOMPUTE, GLU_RUN, EVEN_ODD, PAIRS, BM,
            BO, 1, False, HALVES,
        )  # fmt: skip


# The key words change every call: one compiled kernel for all of them.
@tf.jit(do_not_specialize=("k0", "k1", "k2", "k3"))
def fc2_nvfp4_kernel(
    g_ptr,
    c_ptr,
    probs_ptr,
    dh_ptr,
    dhs_ptr,
    dht_ptr,
    dhts_ptr,
    parts_ptr,
    yt_ptr,
    yts_ptr,
    ts_ptr,
    tsc_ptr,
    tsy_ptr,
    amax_ptr,
    offsets_ptr,
    padded_ptr,
    tile_start_ptr,
    tiles_ptr,
    G,
    N,
    K,
    RP,
    NSD,
    PARTS,
    P0,
    P1,
    P2,
    k0,
    k1,
    k2,
    k3,
    ACT: tl.constexpr,
    RECOMPUTE: tl.constexpr,
    STOCH: tl.constexpr,
    GLU_RUN: tl.constexpr,
    EVEN_ODD: tl.constexpr,
    PAIRS: tl.constexpr,
    PASS: tl.constexpr,
    BM: tl.constexpr,
    BO: tl.constexpr,
):
    # The FC2-dgrad epilogue for NVFP4 over the dgrad's bf16 output g [R, N]: dh's copies
    # (stochastic rounding keyed by (k0, k1) rowwise, (k2, k3) columnwise, with STOCH) and
    # the recomputed y's columnwise copy, in two passes as fc1_nvfp4_kernel (amax [3]: dh
    # rowwise, dh columnwise, y columnwise; S_enc at ts, tsc, tsy); the dprobs run sums in PASS 1.
    valid, g, m0, end = _tile(offsets_ptr, tile_start_ptr, tiles_ptr, G)
    c0 = tl.program_id(1) * BO
    cols = c0 + tl.arange(0, BO)
    _, row_ok, r64 = tile_rows(m0, end, BM)
    m = row_ok[:, None] & (cols < N)[None, :]
    gr = tl.load(g_ptr + r64 * N + cols[None, :], mask=m, other=0.0).to(tl.float32)
    dgrad_epilogue(
        gr, c_ptr, probs_ptr, dh_ptr, dhs_ptr, dht_ptr, dhts_ptr, parts_ptr, yt_ptr, yt_ptr, yts_ptr, offsets_ptr,
        padded_ptr, g, m0, end, c0, N, K, RP, NSD, RP // 16, PARTS, P0, P1, P2, ts_ptr, tsc_ptr, tsy_ptr, amax_ptr, k0,
        k1, k2, k3, ACT, 3, RECOMPUTE, GLU_RUN, EVEN_ODD, PAIRS, BM, BO, PASS, STOCH,
    )  # fmt: skip


@tf.jit
def dgrad_epilogue(
    gr,
    c_ptr,
    probs_ptr,
    dh_ptr,
    dhs_ptr,
    dht_ptr,
    dhts_ptr,
    parts_ptr,
    y_ptr,
    yt_ptr,
    yts_ptr,
    offsets_ptr,
    padded_ptr,
    g,
    m0,
    end,
    c0,
    N,
    K,
    RP,
    NSD,
    RPS,
    PARTS,
    P0,
    P1,
    P2,
    ts_ptr,
    tsc_ptr,
    tsy_ptr,
    amax_ptr,
    k0,
    k1,
    k2,
    k3,
    ACT: tl.constexpr,
    OUT: tl.constexpr,
    RECOMPUTE: tl.constexpr,
    GLU_RUN: tl.constexpr,
    EVEN_ODD: tl.constexpr,
    PAIRS: tl.constexpr,
    BM: tl.constexpr,
    BO: tl.constexpr,
    PASS: tl.constexpr,
    STOCH: tl.constexpr,
    HALVES: tl.constexpr = False,
):
    """dgrad_part of gr [BM, BO], or with HALVES of its column halves one after the other:
    half the epilogue's tiles live at once (the fused FC2 dgrad at 128 columns spilled)."""
    SPLITS: tl.constexpr = 2 if HALVES else 1
    W: tl.constexpr = BO // SPLITS
    if HALVES:
        g0, g1 = tl.split(tl.permute(tl.reshape(gr, [BM, 2, W]), (0, 2, 1)))
    for h in tl.static_range(SPLITS):
        part = gr
        if HALVES:
            part = g0
            if h == 1:
                part = g1
        dgrad_part(
            part, c_ptr, probs_ptr, dh_ptr, dhs_ptr, dht_ptr, dhts_ptr, parts_ptr, y_ptr, yt_ptr, yts_ptr,
            offsets_ptr, padded_ptr, g, m0, end, c0 + h * W, N, K, RP, NSD, RPS, PARTS, P0, P1, P2, ts_ptr, tsc_ptr,
            tsy_ptr, amax_ptr, k0, k1, k2, k3, ACT, OUT, RECOMPUTE, GLU_RUN, EVEN_ODD, PAIRS, BM, W, PASS, STOCH,
        )  # fmt: skip


@tf.jit
def dgrad_part(
    gr,
    c_ptr,
    probs_ptr,
    dh_ptr,
    dhs_ptr,
    dht_ptr,
    dhts_ptr,
    parts_ptr,
    y_ptr,
    yt_ptr,
    yts_ptr,
    offsets_ptr,
    padded_ptr,
    g,
    m0,
    end,
    c0,
    N,
    K,
    RP,
    NSD,
    RPS,
    PARTS,
    P0,
    P1,
    P2,
    ts_ptr,
    tsc_ptr,
    tsy_ptr,
    amax_ptr,
    k0,
    k1,
    k2,
    k3,
    ACT: tl.constexpr,
    OUT: tl.constexpr,
    RECOMPUTE: tl.constexpr,
    GLU_RUN: tl.constexpr,
    EVEN_ODD: tl.constexpr,
    PAIRS: tl.constexpr,
    BM: tl.constexpr,
    BO: tl.constexpr,
    PASS: tl.constexpr,
    STOCH: tl.constexpr,
):
    """From g = gr [BM, BO] (the dgrad's bf16-rounded output) and the saved C: dh, the
    dprobs run sums (PASS 1) and with RECOMPUTE y (see fc2_dgrad_kernel); OUT 3's
    buffers (ts_ptr .. amax_ptr) and keys: fc2_nvfp4_kernel's. dgrad_epilogue's part."""
    cols = c0 + tl.arange(0, BO)
    rm, row_ok, r64 = tile_rows(m0, end, BM)
    m = row_ok[:, None] & (cols < N)[None, :]
    s = tl.load(probs_ptr + m0 + rm, mask=row_ok, other=0.0)
    gs = gr * s[:, None]
    a, b = act_inputs(c_ptr, r64, row_ok, c0, N, K, ACT.glu, GLU_RUN, EVEN_ODD, BM, BO)
    if ACT.glu:
        f = ACT.fwd(a, b, P0, P1, P2)
        da, db = ACT.bwd(a, b, P0, P1, P2)
        store_glu_grad(
            dh_ptr, dhs_ptr, dht_ptr, dhts_ptr, offsets_ptr, padded_ptr, g, m0, end, c0, N, K, NSD, RP, RPS,
            gs * da, gs * db, ts_ptr, tsc_ptr, amax_ptr, k0, k1, k2, k3, OUT, GLU_RUN, EVEN_ODD, PAIRS, BM, BO, PASS,
            STOCH,
        )  # fmt: skip
    else:
        f = ACT.fwd(a, P0, P1, P2)
        store_out(
            dh_ptr, dhs_ptr, dht_ptr, dhts_ptr, offsets_ptr, padded_ptr, g, m0, end, cols, cols < N, N, NSD, RP,
            RPS, gs * ACT.bwd(a, P0, P1, P2), ts_ptr, tsc_ptr, amax_ptr, k0, k1, k2, k3, OUT, True, True, BO, BM, BO,
            PASS, STOCH,
        )  # fmt: skip
    if PASS == 1:
        runs = c0 // DS_CHUNK + tl.arange(0, BO // DS_CHUNK)  # c0: a multiple of BO
        parts = run_sums(tl.where(m, gr * f, 0.0), BM, BO)
        tl.store(parts_ptr + r64 * PARTS + runs[None, :], parts, mask=row_ok[:, None])
    if RECOMPUTE:
        y_rows: tl.constexpr = OUT == 0  # bf16: the whole y; quantized: the wgrad's columnwise copy only
        store_out(
            y_ptr, y_ptr, yt_ptr, yts_ptr, offsets_ptr, padded_ptr, g, m0, end, cols, cols < N, N, NSD, RP, RPS,
            s[:, None] * f, tsy_ptr, tsy_ptr, amax_ptr + 1, 0, 0, 0, 0, OUT, y_rows, True, BO, BM, BO, PASS, False,
        )  # fmt: skip


@tf.jit
def store_glu_grad(
    dh_ptr,
    dhs_ptr,
    dht_ptr,
    dhts_ptr,
    offsets_ptr,
    padded_ptr,
    g,
    m0,
    end,
    c0,
    N,
    K,
    NSD,
    RP,
    RPS,
    da,
    db,
    ts_ptr,
    tsc_ptr,
    amax_ptr,
    k0,
    k1,
    k2,
    k3,
    OUT: tl.constexpr,
    GLU_RUN: tl.constexpr,
    EVEN_ODD: tl.constexpr,
    PAIRS: tl.constexpr,
    BM: tl.constexpr,
    BO: tl.constexpr,
    PASS: tl.constexpr,
    STOCH: tl.constexpr,
):
    """dh = (da, db) [BM, BO] where C holds a and b: bf16 (store_glu), or MXFP8. The
    rowwise blocks run along C's storage columns: with PAIRS (K divides BO: the tile is
    the storage columns 2·c0 .. 2·c0 + 2·BO, whole runs [a(K) | b(K)]) da and db are
    joined into that order first; else K is a multiple of 32 and each run of 32 output
    columns is one block of a and one of b."""
    if OUT == 0:
        _, row_ok, r64 = tile_rows(m0, end, BM)
        store_glu(dh_ptr, r64, row_ok[:, None], c0, N, K, da, db, BM, BO, GLU_RUN, EVEN_ODD)
    else:
        cols = c0 + tl.arange(0, BO)
        a_col, b_col = glu_columns(cols, K, GLU_RUN)
        ok = cols < N
        ab_rows: tl.constexpr = not PAIRS
        store_out(
            dh_ptr, dhs_ptr, dht_ptr, dhts_ptr, offsets_ptr, padded_ptr, g, m0, end, a_col, ok, 2 * N, NSD, RP, RPS,
            da, ts_ptr, tsc_ptr, amax_ptr, k0, k1, k2, k3, OUT, ab_rows, True, GLU_RUN, BM, BO, PASS, STOCH,
        )  # fmt: skip
        store_out(
            dh_ptr, dhs_ptr, dht_ptr, dhts_ptr, offsets_ptr, padded_ptr, g, m0, end, b_col, ok, 2 * N, NSD, RP, RPS,
            db, ts_ptr, tsc_ptr, amax_ptr, k0, k1, k2, k3, OUT, ab_rows, True, GLU_RUN, BM, BO, PASS, STOCH,
        )  # fmt: skip
        if PAIRS:
            pc = 2 * c0 + tl.arange(0, 2 * BO)
            if GLU_RUN == 1:
                pairs = tl.reshape(tl.join(da, db), [BM, 2 * BO])
            else:
                runs: tl.constexpr = BO // GLU_RUN
                ab = tl.join(tl.reshape(da, [BM, runs, GLU_RUN]), tl.reshape(db, [BM, runs, GLU_RUN]))
                pairs = tl.reshape(tl.permute(ab, (0, 1, 3, 2)), [BM, 2 * BO])
            store_out(
                dh_ptr, dhs_ptr, dht_ptr, dhts_ptr, offsets_ptr, padded_ptr, g, m0, end, pc, pc < 2 * N, 2 * N, NSD,
                RP, RPS, pairs, ts_ptr, tsc_ptr, amax_ptr, k0, k1, k2, k3, OUT, True, False, 2 * BO, BM, 2 * BO, PASS,
                STOCH,
            )  # fmt: skip


@tf.jit
def dprobs_kernel(parts_ptr, ds_ptr, offsets_ptr, G, R, NRUNS, PARTS, BR: tl.constexpr, RUNS: tl.constexpr):
    # ds [R]: each row's NRUNS run sums (parts [R, PARTS]) added from the left (activations.add_in_order), the
    # order scaled_act_backward sums in; rows past the groups get 0 (they have no gradient).
    rows = tl.program_id(0) * BR + tl.arange(0, BR)
    used = rows < tl.load(offsets_ptr + G)
    r64 = rows.to(tl.int64)[:, None]
    acc = tl.zeros([BR], tl.float32)
    for r0 in range(0, NRUNS, RUNS):
        runs = r0 + tl.arange(0, RUNS)
        # Whole rows of runs (PARTS is a multiple of RUNS); those past NRUNS count as 0.
        v = tl.load(parts_ptr + r64 * PARTS + runs[None, :], mask=used[:, None], other=0.0)
        acc = add_in_order(acc, tl.where((runs < NRUNS)[None, :], v, 0.0), BR, RUNS)
    tl.store(ds_ptr + rows, acc, mask=rows < R)
