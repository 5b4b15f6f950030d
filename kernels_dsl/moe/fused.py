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
from .grouped_gemm import _tile, _weight, bias_tile, k_loop, k_loop_fp8
from .quantize import fp8_block_encode, mxfp8_encode

MX_BLOCK = 32  # MXFP8's block
FP8_BLOCK = 128  # FP8-block's (1 x 128)


@tf.jit
def quant_tile(v, TR: tl.constexpr, TC: tl.constexpr, OUT: tl.constexpr):
    """(e4m3 codes int8 [TR, TC], scales [TR, TC / block]) of v [TR, TC] fp32 in blocks
    along its rows: OUT 1 MXFP8 (e8m0 codes int8), 2 FP8-block 1 x 128 (float32)."""
    if OUT == 1:
        nb: tl.constexpr = TC // MX_BLOCK
        codes, scales = mxfp8_encode(tl.reshape(v, [TR * nb, MX_BLOCK]), TR * nb, tl.float8e4nv, 8)
    else:
        nb: tl.constexpr = TC // FP8_BLOCK
        codes, scales = fp8_block_encode(tl.reshape(v, [TR * nb, FP8_BLOCK]), TR * nb, 1)
    return tl.reshape(codes, [TR, TC]), tl.reshape(scales, [TR, nb])


@tf.jit
def column(t, j, N: tl.constexpr):
    """Column j (a constant) of t [*, N], exactly: one term of each row's sum is not zero."""
    i = tl.arange(0, N)[None, :]
    return tl.sum(tl.where(i == j, t, tl.zeros_like(t)), axis=1).to(t.dtype)


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
    OUT: tl.constexpr,
    ROWS: tl.constexpr,
    COLS: tl.constexpr,
    RUN: tl.constexpr,
    BM: tl.constexpr,
    TC: tl.constexpr,
):
    """Stores v [BM, TC] (fp32) of the tile's rows m0 .. end at the storage columns `cols`
    of an output [R, width] (see the module docstring): OUT 0 the bf16 values (ROWS); OUT 1
    (MXFP8) or 2 (FP8-block) the rowwise copy (ROWS; cols in runs of RUN from multiples of
    RUN, a multiple of the block; NS = width / block, its scales' row stride) and the
    columnwise copy (COLS; RPS = RP / block). Zero outside the rows and col_ok: the
    blocks' padding."""
    QB: tl.constexpr = MX_BLOCK if OUT == 1 else FP8_BLOCK
    rm = tl.arange(0, BM)
    row_ok = (m0 + rm) < end
    r64 = (m0.to(tl.int64) + rm)[:, None]
    keep = row_ok[:, None] & col_ok[None, :]
    if OUT == 0:
        tl.store(q_ptr + r64 * width + cols[None, :], v, mask=keep)
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
    rm = tl.arange(0, BM)
    row_ok = (m0 + rm) < end
    r64 = (m0.to(tl.int64) + rm)[:, None]
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
        s[:, None] * f, OUT, True, True, BO, BM, BO,
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
        acc, _ = k_loop_fp8(
            dy_ptr, sdy_ptr, w_ptr, sw_ptr, valid, g, m0, end, D, N, cols, cols, 0, D // 32, G * D, SDY_STRIDE,
            SW_STRIDE, FD, FW, SD_ROWS, SW_ROWS, False, BM, BO, BC,
        )  # fmt: skip
    else:
        w = _weight(w_ptr, w_offs_ptr, g, D * N, W_LIST, W_ALIGNED)
        acc, _ = k_loop(dy_ptr, w, valid, m0, end, D, N, cols, cols, N, 1, False, BM, BO, BC)
    rm = tl.arange(0, BM)
    row_ok = (m0 + rm) < end
    r64 = (m0.to(tl.int64) + rm)[:, None]
    m = row_ok[:, None] & (cols < N)[None, :]
    gr = acc.to(tl.bfloat16).to(tl.float32)
    s = tl.load(probs_ptr + m0 + rm, mask=row_ok, other=0.0)
    gs = gr * s[:, None]
    if ACT.glu:
        a, b = load_glu(c_ptr, r64, row_ok[:, None], c0, N, K, BM, BO, GLU_RUN, EVEN_ODD)
        f = ACT.fwd(a, b, P0, P1, P2)
        da, db = ACT.bwd(a, b, P0, P1, P2)
        store_glu_grad(
            dh_ptr, dhs_ptr, dht_ptr, dhts_ptr, offsets_ptr, padded_ptr, g, m0, end, c0, N, K, NSD, RP, RPS,
            gs * da, gs * db, OUT, GLU_RUN, EVEN_ODD, PAIRS, BM, BO,
        )  # fmt: skip
    else:
        x = tl.load(c_ptr + r64 * N + cols[None, :], mask=m, other=0.0).to(tl.float32)
        f = ACT.fwd(x, P0, P1, P2)
        dh = gs * ACT.bwd(x, P0, P1, P2)
        store_out(
            dh_ptr, dhs_ptr, dht_ptr, dhts_ptr, offsets_ptr, padded_ptr, g, m0, end, cols, cols < N, N, NSD, RP,
            RPS, dh, OUT, True, True, BO, BM, BO,
        )  # fmt: skip
    runs = tl.program_id(1) * (BO // DS_CHUNK) + tl.arange(0, BO // DS_CHUNK)
    parts = run_sums(tl.where(m, gr * f, 0.0), BM, BO)
    tl.store(parts_ptr + r64 * PARTS + runs[None, :], parts, mask=row_ok[:, None])
    if RECOMPUTE:
        y_rows: tl.constexpr = OUT == 0  # bf16: the whole y; MXFP8: the wgrad's columnwise copy only
        store_out(
            y_ptr, y_ptr, yt_ptr, yts_ptr, offsets_ptr, padded_ptr, g, m0, end, cols, cols < N, N, NSD, RP, RPS,
            s[:, None] * f, OUT, y_rows, True, BO, BM, BO,
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
    OUT: tl.constexpr,
    GLU_RUN: tl.constexpr,
    EVEN_ODD: tl.constexpr,
    PAIRS: tl.constexpr,
    BM: tl.constexpr,
    BO: tl.constexpr,
):
    """dh = (da, db) [BM, BO] where C holds a and b: bf16 (store_glu), or MXFP8. The
    rowwise blocks run along C's storage columns: with PAIRS (K divides BO: the tile is
    the storage columns 2·c0 .. 2·c0 + 2·BO, whole runs [a(K) | b(K)]) da and db are
    joined into that order first; else K is a multiple of 32 and each run of 32 output
    columns is one block of a and one of b."""
    if OUT == 0:
        rm = tl.arange(0, BM)
        row_ok = ((m0 + rm) < end)[:, None]
        store_glu(dh_ptr, (m0.to(tl.int64) + rm)[:, None], row_ok, c0, N, K, da, db, BM, BO, GLU_RUN, EVEN_ODD)
    else:
        cols = c0 + tl.arange(0, BO)
        a_col, b_col = glu_columns(cols, K, GLU_RUN)
        ok = cols < N
        o = (offsets_ptr, padded_ptr)
        ab_rows: tl.constexpr = not PAIRS
        store_out(
            dh_ptr, dhs_ptr, dht_ptr, dhts_ptr, o[0], o[1], g, m0, end, a_col, ok, 2 * N, NSD, RP, RPS, da, OUT,
            ab_rows, True, GLU_RUN, BM, BO,
        )  # fmt: skip
        store_out(
            dh_ptr, dhs_ptr, dht_ptr, dhts_ptr, o[0], o[1], g, m0, end, b_col, ok, 2 * N, NSD, RP, RPS, db, OUT,
            ab_rows, True, GLU_RUN, BM, BO,
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
                dh_ptr, dhs_ptr, dht_ptr, dhts_ptr, o[0], o[1], g, m0, end, pc, pc < 2 * N, 2 * N, NSD, RP, RPS,
                pairs, OUT, True, False, 2 * BO, BM, 2 * BO,
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
