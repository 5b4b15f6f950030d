"""Grouped GEMMs over ragged groups of rows (SPEC-moe.md §1, §7): forward y_g = x_g w_gᵀ
(+ b_g, + b_g·s), dgrad dx_g = dy_g w_g, wgrad dw_g = dy_gᵀ x_g, bf16 operands, fp32
accumulation, one rounding at the store; the forward and the dgrad also on block-scaled
fp8 operands (MXFP8, FP8-block: grouped_gemm_fp8_kernel).

The split sizes never leave the device and the grids depend only on static sizes, so a new
routing needs neither a host sync nor a recompile:

1. `group_offsets` (one program) turns the G split sizes into, per group, the row offsets,
   the offsets of the wgrad's padded transposed copy (each group starting at a multiple of
   8 columns, 16 bytes) and the offsets of its row tiles in the tile schedule: exclusive
   prefix sums, computed in chunks of BG groups as a masked triangular sum.
2. `group_tiles` (one program per group) writes the tile schedule: tile t -> (group, first
   row), the group's tiles one after another.
3. The GEMM programs, one per (schedule slot, output column tile), read their entry: an
   O(1) lookup. The schedule has at most cdiv(R, BM) + G tiles (each group adds at most one
   partial tile); slots past the count run a K loop of zero iterations and store nothing.

Split sizes are clamped on the device: a negative size counts as 0 and sizes summing past
the R rows are cut at row R (later groups are empty); rows past the sum are not read by
the wgrad and not written by the forward and dgrad.
"""

from __future__ import annotations

import tilefuse as tf
import tilefuse.language as tl

PAD = 8  # padded offsets' default alignment: 16 bytes of bf16


@tf.jit
def _prefix(v, BG: tl.constexpr):
    """Inclusive prefix sums of the [BG] tile v (int64)."""
    i = tl.arange(0, BG)
    return tl.sum(tl.where(i[None, :] <= i[:, None], v[None, :], 0), axis=1)


@tf.jit
def group_offsets(
    splits_ptr,
    offsets_ptr,
    padded_ptr,
    tile_start_ptr,
    G,
    R,
    BM: tl.constexpr,
    BG: tl.constexpr,
    PAD_TO: tl.constexpr = PAD,
):
    # offsets [G + 1]: rows of group g are offsets[g] .. offsets[g + 1] (clamped to [0, R]);
    # padded [G + 1]: its columns of a transposed copy start at padded[g] (multiples of
    # PAD_TO: a scale block for a columnwise quantized copy);
    # tile_start [G + 1]: its BM-row tiles are schedule slots tile_start[g] .. tile_start[g + 1].
    rows_before = tl.zeros((), tl.int64)
    pad_before = tl.zeros((), tl.int64)
    tiles_before = tl.zeros((), tl.int64)
    for c in range(0, G, BG):
        g = c + tl.arange(0, BG)
        s = tl.maximum(tl.load(splits_ptr + g, mask=g < G, other=0).to(tl.int64), 0)
        end = rows_before + _prefix(s, BG)
        size = tl.minimum(end, R) - tl.minimum(end - s, R)
        pad_end = pad_before + _prefix((size + PAD_TO - 1) // PAD_TO * PAD_TO, BG)
        tile_end = tiles_before + _prefix((size + BM - 1) // BM, BG)
        tl.store(offsets_ptr + 1 + g, tl.minimum(end, R).to(tl.int32), mask=g < G)
        tl.store(padded_ptr + 1 + g, pad_end.to(tl.int32), mask=g < G)
        tl.store(tile_start_ptr + 1 + g, tile_end.to(tl.int32), mask=g < G)
        rows_before = tl.max(tl.where(g < G, end, 0), axis=0)
        pad_before = tl.max(tl.where(g < G, pad_end, 0), axis=0)
        tiles_before = tl.max(tl.where(g < G, tile_end, 0), axis=0)
    zero = tl.zeros((), tl.int32)
    tl.store(offsets_ptr, zero)
    tl.store(padded_ptr, zero)
    tl.store(tile_start_ptr, zero)


@tf.jit
def group_tiles(offsets_ptr, tile_start_ptr, tiles_ptr, BM: tl.constexpr, BT: tl.constexpr):
    # tiles [slots, 2]: (group, first row) of each scheduled tile of this program's group.
    g = tl.program_id(0)
    first, last = tl.load(tile_start_ptr + g), tl.load(tile_start_ptr + g + 1)
    row0 = tl.load(offsets_ptr + g)
    for t0 in range(first, last, BT):
        t = t0 + tl.arange(0, BT)
        tl.store(tiles_ptr + 2 * t, tl.full((BT,), 0, tl.int32) + g, mask=t < last)
        tl.store(tiles_ptr + 2 * t + 1, row0 + (t - first) * BM, mask=t < last)


@tf.jit
def _tile(offsets_ptr, tile_start_ptr, tiles_ptr, G):
    """(valid, group, first row, row end) of schedule slot program_id(0); an empty slot
    gives group 0 and no rows."""
    t = tl.program_id(0)
    valid = t < tl.load(tile_start_ptr + G)
    g = tl.load(tiles_ptr + 2 * t, mask=valid, other=0)
    m0 = tl.load(tiles_ptr + 2 * t + 1, mask=valid, other=0)
    end = tl.load(offsets_ptr + g + 1, mask=valid, other=0)
    return valid, g, m0, end


@tf.jit
def _weight(w_ptr, w_offs_ptr, g, group_elems, W_LIST: tl.constexpr, W_ALIGNED: tl.constexpr):
    """Group g's weight: w_ptr + g·group_elems ([G, ...] weights), or, for a list of
    per-expert arrays, w_ptr + w_offs[g]: element offsets from the first array's address
    (multiples of 8 elements when W_ALIGNED, the host has checked)."""
    if W_LIST:
        off = tl.load(w_offs_ptr + g)
        if W_ALIGNED:
            off = tl.multiple_of(off, 8)
    else:
        off = g.to(tl.int64) * group_elems
    return w_ptr + off


@tf.jit
def grouped_gemm_kernel(
    a_ptr,
    w_ptr,
    w_offs_ptr,
    bias_ptr,
    scale_ptr,
    out_ptr,
    offsets_ptr,
    tile_start_ptr,
    tiles_ptr,
    G,
    C,
    O,
    stride_wc,
    stride_wo,
    W_LIST: tl.constexpr,
    W_ALIGNED: tl.constexpr,
    BIAS: tl.constexpr,
    BM: tl.constexpr,
    BO: tl.constexpr,
    BC: tl.constexpr,
):
    # out[r, :] = a[r, :] @ B_g for the rows r of a scheduled tile, a [R, C], out [R, O],
    # B_g [C, O] element (c, o) at w_g + c·stride_wc + o·stride_wo: the forward takes
    # w_g [N, K] as B = w_gᵀ (stride_wc = 1), the dgrad as B = w_g (stride_wo = 1).
    # BIAS: 0 none, 1 out += b_g, 2 out += b_g·s_r (bias [G, O], s [R] fp32).
    valid, g, m0, end = _tile(offsets_ptr, tile_start_ptr, tiles_ptr, G)
    w = _weight(w_ptr, w_offs_ptr, g, C * O, W_LIST, W_ALIGNED)
    ro = tl.program_id(1) * BO + tl.arange(0, BO)
    acc, _ = k_loop(a_ptr, w, valid, m0, end, C, O, ro, ro, stride_wc, stride_wo, False, BM, BO, BC)
    _store_rows(acc, g, m0, end, bias_ptr, scale_ptr, out_ptr, O, BIAS, BM, BO)


@tf.jit
def k_loop(
    a_ptr,
    w,
    valid,
    m0,
    end,
    C,
    O,
    cols,
    cols_b,
    stride_wc,
    stride_wo,
    TWO: tl.constexpr,
    BM: tl.constexpr,
    BO: tl.constexpr,
    BC: tl.constexpr,
):
    """The bf16 K loop of a scheduled tile: a[m0 + i, :] @ B_g[:, cols] for the tile's rows
    below `end` (a [R, C], B_g as in grouped_gemm_kernel, columns of B_g past O read 0),
    fp32 [BM, BO]; with TWO also the product with B_g[:, cols_b] (FC1's gate and up columns
    in one loop: each step's A feeds both dots), else that second result is zeros."""
    rm = tl.arange(0, BM)
    rc = tl.arange(0, BC)
    rows = (m0 + rm)[:, None] < end
    a_rows = a_ptr + m0.to(tl.int64) * C + rm[:, None] * C
    acc = tl.zeros((BM, BO), dtype=tl.float32)
    acc_b = tl.zeros((BM, BO), dtype=tl.float32)
    for c in range(0, tl.where(valid, C, 0), BC):
        cc = c + rc
        a = tl.load(a_rows + cc[None, :], mask=rows & (cc[None, :] < C), other=0.0)
        b_ptrs = w + cc[:, None] * stride_wc + cols[None, :] * stride_wo
        b = tl.load(b_ptrs, mask=(cc[:, None] < C) & (cols[None, :] < O), other=0.0)
        acc = tl.dot(a, b, acc)
        if TWO:
            b_ptrs = w + cc[:, None] * stride_wc + cols_b[None, :] * stride_wo
            b = tl.load(b_ptrs, mask=(cc[:, None] < C) & (cols_b[None, :] < O), other=0.0)
            acc_b = tl.dot(a, b, acc_b)
    return acc, acc_b


@tf.jit
def k_loop_desc(
    a_desc,
    w_desc,
    m0,
    w_row,
    w_row_b,
    o0,
    C,
    TWO: tl.constexpr,
    KN: tl.constexpr,
    BM: tl.constexpr,
    BO: tl.constexpr,
    BC: tl.constexpr,
):
    """k_loop on descriptors (TMA copies on sm_90): rows m0 .. m0 + BM of a_desc ([R, C],
    blocks [BM, BC]) times B: with KN the weight's [C, N] rows w_row + c (blocks [BC, BO],
    columns from o0), else the transposes of its BO rows from w_row ([·, C], blocks
    [BO, BC]); with TWO also those from w_row_b (FC1's up columns), else zeros. Rows past
    a group or a weight read what lies there (the caller stores none of it); k_loop's K
    steps, so the same bits."""
    acc = tl.zeros((BM, BO), dtype=tl.float32)
    acc_b = tl.zeros((BM, BO), dtype=tl.float32)
    for c in range(0, C, BC):
        a = a_desc.load([m0, c])
        if KN:
            acc = tl.dot(a, w_desc.load([w_row + c, o0]), acc)
        else:
            acc = tl.dot(a, tl.trans(w_desc.load([w_row, c])), acc)
            if TWO:
                acc_b = tl.dot(a, tl.trans(w_desc.load([w_row_b, c])), acc_b)
    return acc, acc_b


@tf.jit
def bias_tile(bias_ptr, scale_ptr, g, m0, end, O, cols, BIAS: tl.constexpr, BM: tl.constexpr):
    """What the epilogue adds, fp32: b_g[cols] as [1, len(cols)] (BIAS 1) or b_g[cols]·s_r
    as [BM, len(cols)] (BIAS 2) for bias [G, O], s [R] (0 at columns past O)."""
    rm = tl.arange(0, BM)
    bias = tl.load(bias_ptr + g * O + cols, mask=cols < O, other=0.0).to(tl.float32)[None, :]
    if BIAS == 2:
        bias = bias * tl.load(scale_ptr + m0 + rm, mask=m0 + rm < end, other=0.0)[:, None]
    return bias


@tf.jit
def _store_rows(
    acc, g, m0, end, bias_ptr, scale_ptr, out_ptr, O, BIAS: tl.constexpr, BM: tl.constexpr, BO: tl.constexpr
):
    # The epilogue: + b_g (BIAS 1) or + b_g·s_r (BIAS 2) in fp32, one rounding, the
    # tile's rows below `end` stored.
    rm = tl.arange(0, BM)
    ro = tl.program_id(1) * BO + tl.arange(0, BO)
    if BIAS > 0:
        acc = acc + bias_tile(bias_ptr, scale_ptr, g, m0, end, O, ro, BIAS, BM)
    out = out_ptr + m0.to(tl.int64) * O + rm[:, None] * O + ro[None, :]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=((m0 + rm)[:, None] < end) & (ro[None, :] < O))


@tf.jit
def _scale_codes(s_ptr, rows, block0, c, stride, mask, BLOCK_ROWS: tl.constexpr, BC: tl.constexpr):
    """The e8m0 scale codes [len(rows), BC/32] of the 32-wide K blocks block0 + c/32 ..
    + BC/32 of `rows` (int64; c a multiple of BC) in a scale array of row stride `stride`:
    BLOCK_ROWS 0: MXFP8 codes [rows, cols/32]; 1 or 128: FP8-block float32 dequant scales
    [rows/BLOCK_ROWS, cols/128], powers of two 2^e with e in [-127, 127] or NaN, whose fp32
    exponent field is their e8m0 code (2^-127 is the subnormal with an exponent field of
    0, NaN has 255): each 128-block promotes as four 32-blocks of one scale."""
    if BLOCK_ROWS == 0:
        blocks = block0 + tl.max_contiguous(tl.multiple_of(c // 32 + tl.arange(0, BC // 32), BC // 32), BC // 32)
        codes = tl.load(s_ptr + rows[:, None] * stride + blocks[None, :], mask=mask[:, None], other=127)
    elif BC <= 128:
        # BC <= 128 and block0 on a 128-block: one scale per row for the whole step.
        # The exponent field (an int8 cast keeps the low 8 bits) in one chain of single-use
        # values: plan-layouts then gives the whole chain the promotion's layout.
        p = s_ptr + (rows // BLOCK_ROWS) * stride + (block0 * 32 + c) // 128
        e = (tl.load(p, mask=mask, other=1.0).to(tl.int32, bitcast=True) >> 23).to(tl.int8)
        codes = tl.broadcast_to(e[:, None], (e.shape[0], BC // 32))
    else:
        # BC a multiple of 128: one scale per row for each 128-block of the step, repeated
        # over its four 32-blocks (a broadcast the compiler sees: one promotion a 128-block,
        # the next one's wgmma group in flight meanwhile).
        blocks = (block0 * 32 + c) // 128 + tl.arange(0, BC // 128)
        p = s_ptr + ((rows // BLOCK_ROWS) * stride)[:, None] + blocks[None, :]
        e = (tl.load(p, mask=mask[:, None], other=1.0).to(tl.int32, bitcast=True) >> 23).to(tl.int8)
        codes = tl.reshape(tl.broadcast_to(e[:, :, None], (e.shape[0], BC // 128, 4)), (e.shape[0], BC // 32))
    return codes


@tf.jit
def _scale_code_one(s_ptr, row, block0, c, stride, mask, BLOCK_ROWS: tl.constexpr):
    """_scale_codes' FP8-block code of one row (int64) for the K step at c (BC <= 128)."""
    p = s_ptr + (row // BLOCK_ROWS) * stride + (block0 * 32 + c) // 128
    return (tl.load(p, mask=mask, other=1.0).to(tl.int32, bitcast=True) >> 23).to(tl.int8)


@tf.jit
def grouped_gemm_fp8_kernel(
    a_ptr,
    sa_ptr,
    w_ptr,
    sw_ptr,
    bias_ptr,
    scale_ptr,
    out_ptr,
    offsets_ptr,
    tile_start_ptr,
    tiles_ptr,
    G,
    C,
    O,
    W_ROW,
    W_BLOCK,
    W_COLS,
    SA_STRIDE,
    SW_STRIDE,
    R,
    W_ROWS,
    FA: tl.constexpr,
    FW: tl.constexpr,
    SA_ROWS: tl.constexpr,
    SW_ROWS: tl.constexpr,
    BIAS: tl.constexpr,
    BM: tl.constexpr,
    BO: tl.constexpr,
    BC: tl.constexpr,
    DESC: tl.constexpr = False,
    PERSISTENT: tl.constexpr = False,
    GROUP_M: tl.constexpr = 8,
    WS: tl.constexpr = 0,
    SW_ONE: tl.constexpr = False,
    TWO: tl.constexpr = False,
):
    # Block-scaled fp8: out = (a·scale_a) B_g (+ bias as above), a [R, C] fp8 codes with
    # their scales (_scale_codes: MXFP8 or FP8-block), B_g [C, O] read K-major (as Hopper's
    # fp8 wgmma needs) from a quantized copy Wq [*, W_COLS] of the weights: B_g(c, o) =
    # Wq[g·W_ROW + o, 32·g·W_BLOCK + c]. The forward's Wq is w [G·O, C] quantized rowwise
    # (W_ROW = O, W_BLOCK = 0); the dgrad's is w [G·N, K] quantized columnwise, stored
    # transposed [K, G·N] (W_ROW = 0, W_BLOCK = N/32). SA_STRIDE, SW_STRIDE: the scale
    # arrays' row strides (passed, as W_BLOCK, so that the launch specializes their
    # divisibility). Each 32-wide K block's products are promoted to fp32 times its two
    # scales. C % BC == 0. DESC: the codes through descriptors (k_loop_fp8's DESC; R rows
    # of a, W_ROWS of Wq). PERSISTENT (with DESC): num_programs(0) programs loop over the
    # tiles in grouped_gemm_persistent_kernel's order, each tile's K loop the same steps
    # (the same bits); WS as there: 1, a producer warpgroup copies the next tiles' K steps
    # while the consumers promote and store this one; 2, two consumer groups take the
    # tiles in turns, one group's fp32 promotion running while the other's wgmma keep the
    # tensor cores busy. SW_ONE: each tile's columns lie in one 128-block of Wq's rows
    # (FP8-block, BO <= 128, W_ROW a multiple of 128; k_loop_fp8's). TWO (PERSISTENT): a
    # tile is 2·BO columns, two adjacent halves of BO each with its accumulator (k_loop_fp8's
    # TWO): each dot's partial sums are BO wide, so a 128 x 256 tile fits a consumer's
    # registers (two accumulators and one half's partials); with SW_ONE, O % (2·BO) == 0.
    if PERSISTENT:
        TILE_O: tl.constexpr = 2 * BO if TWO else BO
        tiles_o = tl.cdiv(O, TILE_O)
        total = tl.load(tile_start_ptr + G) * tiles_o
        turns = 2 if WS == 2 else 1
        for t in tl.range(
            tl.program_id(0), total, tl.num_programs(0), warp_specialize=WS > 0, num_consumer_groups=turns
        ):
            g, m0, end, pid_o = _persistent_tile(t, offsets_ptr, tile_start_ptr, tiles_ptr, tiles_o, GROUP_M, BM)
            o0 = pid_o * TILE_O
            ro = o0 + tl.arange(0, BO)
            acc, acc_b = k_loop_fp8(
                a_ptr, sa_ptr, w_ptr, sw_ptr, True, g, m0, end, C, O, ro, ro + BO, W_ROW, W_BLOCK, W_COLS, SA_STRIDE,
                SW_STRIDE, FA, FW, SA_ROWS, SW_ROWS, TWO, BM, BO, BC, True, R, W_ROWS, o0, SW_ONE,
            )  # fmt: skip
            _store_tile(acc, g, m0, end, o0, bias_ptr, scale_ptr, out_ptr, O, BIAS, BM, BO)
            if TWO:
                _store_tile(acc_b, g, m0, end, o0 + BO, bias_ptr, scale_ptr, out_ptr, O, BIAS, BM, BO)
    else:
        valid, g, m0, end = _tile(offsets_ptr, tile_start_ptr, tiles_ptr, G)
        o0 = tl.program_id(1) * BO
        ro = o0 + tl.arange(0, BO)
        acc, _ = k_loop_fp8(
            a_ptr, sa_ptr, w_ptr, sw_ptr, valid, g, m0, end, C, O, ro, ro, W_ROW, W_BLOCK, W_COLS, SA_STRIDE,
            SW_STRIDE, FA, FW, SA_ROWS, SW_ROWS, False, BM, BO, BC, DESC, R, W_ROWS, o0, SW_ONE,
        )  # fmt: skip
        _store_rows(acc, g, m0, end, bias_ptr, scale_ptr, out_ptr, O, BIAS, BM, BO)


@tf.jit
def k_loop_fp8(
    a_ptr,
    sa_ptr,
    w_ptr,
    sw_ptr,
    valid,
    g,
    m0,
    end,
    C,
    O,
    cols,
    cols_b,
    W_ROW,
    W_BLOCK,
    W_COLS,
    SA_STRIDE,
    SW_STRIDE,
    FA: tl.constexpr,
    FW: tl.constexpr,
    SA_ROWS: tl.constexpr,
    SW_ROWS: tl.constexpr,
    TWO: tl.constexpr,
    BM: tl.constexpr,
    BO: tl.constexpr,
    BC: tl.constexpr,
    DESC: tl.constexpr = False,
    R=0,
    W_ROWS=0,
    o0=0,
    SW_ONE: tl.constexpr = False,
):
    """k_loop on block-scaled fp8 operands (grouped_gemm_fp8_kernel's): the output columns
    `cols` (and with TWO `cols_b`) of B_g, those past O read 0. The scales of step c + BC
    are loaded at the top of step c (the loop carries them), so that their latency hides
    behind step c's dots rather than stalling step c + BC's. DESC (one B): the codes
    through descriptors (TMA copies on sm_90), a [R, C] in [BM, BC] boxes, Wq [W_ROWS,
    W_COLS] in [BO, BC] boxes, B_g the transposes of its rows g·W_ROW + o0 .. (o0 = cols'
    first; with TWO, cols_b = cols + BO the next box) from column 32·g·W_BLOCK + c; rows
    past a group or an expert read what lies there (the caller stores none of it; zeros
    past the arrays), the same bits. SW_ONE (FP8-block, BC <= 128): `cols` (and cols_b)
    lie in one 128-block of Wq's rows, whose one scale (a scalar, from the row of cols'
    first) B's codes take: the promotion reads it from a register."""
    rm = tl.arange(0, BM)
    live = m0 + rm < end
    if not DESC:
        rc = tl.arange(0, BC)
        a_rows = a_ptr + m0.to(tl.int64) * C + rm[:, None] * C
    a_scale_rows = m0.to(tl.int64) + rm
    w_rows = g.to(tl.int64) * W_ROW + cols
    w_block = g * W_BLOCK
    if DESC:
        fw = tl.float8e4nv if FW == "e4m3" else tl.float8e5
        a_desc = tl.make_tensor_descriptor(a_ptr, [R, C], [C, 1], [BM, BC])
        w_desc = tl.make_tensor_descriptor(w_ptr, [W_ROWS, W_COLS], [W_COLS, 1], [BO, BC])
        row0 = g * W_ROW + o0
    else:
        w_cols = w_ptr + w_rows[None, :] * W_COLS + 32 * w_block
        w_cols_b = w_ptr + (g.to(tl.int64) * W_ROW + cols_b)[None, :] * W_COLS + 32 * w_block
    acc = tl.zeros((BM, BO), dtype=tl.float32)
    acc_b = tl.zeros((BM, BO), dtype=tl.float32)
    steps = tl.where(valid, C, 0)
    first = steps > 0
    sa = _scale_codes(sa_ptr, a_scale_rows, 0, 0, SA_STRIDE, live & first, SA_ROWS, BC)
    if SW_ONE:
        tl.static_assert(SW_ROWS == 128 and BC <= 128, "k_loop_fp8: SW_ONE is FP8-block's")
        tl.static_assert(DESC or not TWO, "k_loop_fp8: SW_ONE's two B through descriptors")
        w_row = g.to(tl.int64) * W_ROW + o0
        sb = _scale_code_one(sw_ptr, w_row, w_block, 0, SW_STRIDE, first, SW_ROWS)
    else:
        sb = _scale_codes(sw_ptr, w_rows, w_block, 0, SW_STRIDE, (cols < O) & first, SW_ROWS, BC)
        w_rows_b = g.to(tl.int64) * W_ROW + cols_b
        sb_b = _scale_codes(sw_ptr, w_rows_b, w_block, 0, SW_STRIDE, (cols_b < O) & first & TWO, SW_ROWS, BC)
    for c in range(0, steps, BC):
        more = c + BC < steps
        sa_next = _scale_codes(sa_ptr, a_scale_rows, 0, c + BC, SA_STRIDE, live & more, SA_ROWS, BC)
        if SW_ONE:
            sb_next = _scale_code_one(sw_ptr, w_row, w_block, c + BC, SW_STRIDE, more, SW_ROWS)
        else:
            sb_next = _scale_codes(sw_ptr, w_rows, w_block, c + BC, SW_STRIDE, (cols < O) & more, SW_ROWS, BC)
        if DESC:
            a = a_desc.load([m0, c])
            b = tl.trans(w_desc.load([row0, 32 * w_block + c]).to(fw, bitcast=True))  # K-major B
        else:
            a = tl.load(a_rows + (c + rc)[None, :], mask=live[:, None], other=0)
            b = tl.load(w_cols + (c + rc)[:, None], mask=(cols < O)[None, :], other=0)
        if SW_ONE:
            acc = tl.dot_scaled(a, sa, FA, b, tl.broadcast_to(sb, (BO, BC // 32)), FW, acc)
        else:
            acc = tl.dot_scaled(a, sa, FA, b, sb, FW, acc)
        if TWO:
            if DESC:
                b = tl.trans(w_desc.load([row0 + BO, 32 * w_block + c]).to(fw, bitcast=True))
            else:
                b = tl.load(w_cols_b + (c + rc)[:, None], mask=(cols_b < O)[None, :], other=0)
            if SW_ONE:
                # Loaded in the step, not carried, unmasked (SW_ONE with TWO: O a multiple of
                # 2·BO): registers fewer, which a 128 x 256 tile's warp-specialized consumer
                # (232 registers) needs not to spill.
                sb1 = _scale_code_one(sw_ptr, w_row + BO, w_block, c, SW_STRIDE, True, SW_ROWS)
                acc_b = tl.dot_scaled(a, sa, FA, b, tl.broadcast_to(sb1, (BO, BC // 32)), FW, acc_b)
            else:
                sb_b_next = _scale_codes(sw_ptr, w_rows_b, w_block, c + BC, SW_STRIDE, (cols_b < O) & more, SW_ROWS, BC)
                acc_b = tl.dot_scaled(a, sa, FA, b, sb_b, FW, acc_b)
                sb_b = sb_b_next
        sa, sb = sa_next, sb_next
    return acc, acc_b


@tf.jit
def grouped_wgrad_kernel(
    dy_ptr,
    x_ptr,
    dw_ptr,
    offsets_ptr,
    N,
    K,
    BN: tl.constexpr,
    BK: tl.constexpr,
    BR: tl.constexpr,
):
    # dw[g] [N, K] = dy_gᵀ x_g for group g = program_id(1), dy [R, N] and x [R, K]; the
    # K loop of the GEMM runs over the group's rows, ragged: the mask cuts each at the
    # group's end. A = trans of a [BR, BN] tile of dy, read M-major by wgmma (no
    # transposed copy). An empty group stores zeros.
    g = tl.program_id(1)
    tiles_k = tl.cdiv(K, BK)
    rn = (tl.program_id(0) // tiles_k) * BN + tl.arange(0, BN)
    rk = (tl.program_id(0) % tiles_k) * BK + tl.arange(0, BK)
    r0, rows = tl.load(offsets_ptr + g), tl.load(offsets_ptr + g + 1) - tl.load(offsets_ptr + g)
    rr = tl.arange(0, BR)
    a_ptrs = dy_ptr + r0.to(tl.int64) * N + rr[:, None] * N + rn[None, :]
    b_ptrs = x_ptr + r0.to(tl.int64) * K + rr[:, None] * K + rk[None, :]
    acc = tl.zeros((BN, BK), dtype=tl.float32)
    for r in range(0, rows, BR):
        live = (r + rr)[:, None] < rows
        a = tl.load(a_ptrs + r.to(tl.int64) * N, mask=live & (rn[None, :] < N), other=0.0)
        b = tl.load(b_ptrs + r.to(tl.int64) * K, mask=live & (rk[None, :] < K), other=0.0)
        acc = tl.dot(tl.trans(a), b, acc)
    out = dw_ptr + g.to(tl.int64) * N * K + rn[:, None] * K + rk[None, :]
    tl.store(out, acc.to(dw_ptr.dtype.element_ty), mask=(rn[:, None] < N) & (rk[None, :] < K))


@tf.jit
def grouped_wgrad_persistent_kernel(
    dy_ptr,
    x_ptr,
    dw_ptr,
    offsets_ptr,
    G,
    N,
    K,
    R,
    BN: tl.constexpr,
    BK: tl.constexpr,
    BR: tl.constexpr,
    GROUP_N: tl.constexpr,
    WS: tl.constexpr = 0,
):
    # grouped_wgrad_kernel's product, persistent: the num_programs(0) programs loop over the
    # G·tiles_n·tiles_k tiles of dw, group after group, and within a group GROUP_N row
    # tiles side by side over each column tile (the group's x columns stay in L2). The
    # group's whole K steps go through descriptors (TMA copies on sm_90) of dy [R, N] and
    # x [R, K] from row offsets[g]; they never read past the group. Its last rows % BR
    # rows, if any, take one masked step of pointer loads.
    dy_desc = tl.make_tensor_descriptor(dy_ptr, [R, N], [N, 1], [BR, BN])
    x_desc = tl.make_tensor_descriptor(x_ptr, [R, K], [K, 1], [BR, BK])
    tiles_n = tl.cdiv(N, BN)
    tiles_k = tl.cdiv(K, BK)
    per_g = tiles_n * tiles_k
    per_band = GROUP_N * tiles_k
    rr = tl.arange(0, BR)
    for t in tl.range(tl.program_id(0), G * per_g, tl.num_programs(0), warp_specialize=WS > 0):
        g = t // per_g
        local = t % per_g
        band_n = (local // per_band) * GROUP_N
        band = tl.minimum(tiles_n - band_n, GROUP_N)
        n0 = (band_n + (local % per_band) % band) * BN
        k0 = ((local % per_band) // band) * BK
        r0 = tl.load(offsets_ptr + g)
        rows = tl.load(offsets_ptr + g + 1) - r0
        full = (rows // BR) * BR
        acc = tl.zeros((BN, BK), dtype=tl.float32)
        for r in range(0, full, BR):
            acc = tl.dot(tl.trans(dy_desc.load([r0 + r, n0])), x_desc.load([r0 + r, k0]), acc)
        rn = n0 + tl.arange(0, BN)
        rk = k0 + tl.arange(0, BK)
        if full < rows:
            live = ((full + rr) < rows)[:, None]
            at = (r0 + full + rr)[:, None].to(tl.int64)
            a = tl.load(dy_ptr + at * N + rn[None, :], mask=live & (rn[None, :] < N), other=0.0)
            b = tl.load(x_ptr + at * K + rk[None, :], mask=live & (rk[None, :] < K), other=0.0)
            acc = tl.dot(tl.trans(a), b, acc)
        out = dw_ptr + g.to(tl.int64) * N * K + rn[:, None] * K + rk[None, :]
        tl.store(out, acc.to(dw_ptr.dtype.element_ty), mask=(rn[:, None] < N) & (rk[None, :] < K))


@tf.jit
def grouped_wgrad_fp8_kernel(
    dy_ptr,
    sdy_ptr,
    x_ptr,
    sx_ptr,
    dw_ptr,
    offsets_ptr,
    N,
    K,
    RP,
    S_STRIDE,
    FD: tl.constexpr,
    FX: tl.constexpr,
    S_ROWS: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    BR: tl.constexpr,
):
    # dw[g] [N, K] = dy_gᵀ x_g for group g = program_id(1), from block-scaled fp8
    # columnwise copies stored transposed (K-major for the fp8 wgmma: the wgrad's K is the
    # rows): codes dy [N, RP], x [K, RP] with their scales (_scale_codes: MXFP8 e8m0 [*, RP/32],
    # S_ROWS 0; FP8-block float32 [*, RP/128], S_ROWS 1; row stride S_STRIDE). Group g is
    # the rows offsets[g] .. offsets[g + 1] of the copies, whole scale blocks (the padded
    # layout: a block never holds two groups' rows; the pad rows of a group's last block
    # are zeros). BR divides the block (MXFP8: 32; FP8-block: 128), so every step lies in
    # blocks of the group. Each 32 rows' products are promoted to fp32 times their two
    # scales (an FP8-block 128-block: four 32-blocks of one scale).
    g = tl.program_id(1)
    tiles_k = tl.cdiv(K, BK)
    rn = ((tl.program_id(0) // tiles_k) * BN + tl.arange(0, BN)).to(tl.int64)
    rk = ((tl.program_id(0) % tiles_k) * BK + tl.arange(0, BK)).to(tl.int64)
    r0 = tl.multiple_of(tl.load(offsets_ptr + g), 32)
    rows = tl.load(offsets_ptr + g + 1) - r0
    rr = tl.arange(0, BR)
    a_ptrs = dy_ptr + rn[:, None] * RP + r0 + rr[None, :]
    b_ptrs = x_ptr + rk[None, :] * RP + r0 + rr[:, None]
    acc = tl.zeros((BN, BK), dtype=tl.float32)
    # the next step's scales loaded a step ahead (k_loop_fp8)
    first = rows > 0
    sa = _scale_codes(sdy_ptr, rn, r0 // 32, 0, S_STRIDE, (rn < N) & first, S_ROWS, BR)
    sb = _scale_codes(sx_ptr, rk, r0 // 32, 0, S_STRIDE, (rk < K) & first, S_ROWS, BR)
    for r in range(0, rows, BR):
        more = r + BR < rows
        sa_next = _scale_codes(sdy_ptr, rn, r0 // 32, r + BR, S_STRIDE, (rn < N) & more, S_ROWS, BR)
        sb_next = _scale_codes(sx_ptr, rk, r0 // 32, r + BR, S_STRIDE, (rk < K) & more, S_ROWS, BR)
        live = (r + rr) < rows
        a = tl.load(a_ptrs + r, mask=(rn[:, None] < N) & live[None, :], other=0)
        b = tl.load(b_ptrs + r, mask=(rk[None, :] < K) & live[:, None], other=0)
        acc = tl.dot_scaled(a, sa, FD, b, sb, FX, acc)
        sa, sb = sa_next, sb_next
    out = dw_ptr + g.to(tl.int64) * N * K + rn[:, None] * K + rk[None, :]
    tl.store(out, acc.to(dw_ptr.dtype.element_ty), mask=(rn[:, None] < N) & (rk[None, :] < K))


@tf.jit
def _persistent_tile(t, offsets_ptr, tile_start_ptr, tiles_ptr, tiles_o, GROUP_M: tl.constexpr, BM: tl.constexpr):
    """(group, first row, row end, first output column index) of tile t of the persistent
    order: the schedule's slots x tiles_o column tiles, group after group, and within a
    group GROUP_M row tiles side by side over each column tile (Triton's grouped order:
    the weight's column tile and the GROUP_M row tiles stay in L2). Group g's tiles are
    t in [tile_start[g]·tiles_o, tile_start[g + 1]·tiles_o), so slot t // tiles_o names it."""
    g = tl.load(tiles_ptr + 2 * (t // tiles_o))
    first = tl.load(tile_start_ptr + g)
    tiles_m = tl.load(tile_start_ptr + g + 1) - first
    local = t - first * tiles_o
    per_band = GROUP_M * tiles_o
    band_m = (local // per_band) * GROUP_M
    band = tl.minimum(tiles_m - band_m, GROUP_M)
    pid_m = band_m + (local % per_band) % band
    pid_o = (local % per_band) // band
    row0 = tl.load(offsets_ptr + g)
    return g, row0 + pid_m * BM, tl.load(offsets_ptr + g + 1), pid_o


@tf.jit
def grouped_gemm_persistent_kernel(
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
    WS: tl.constexpr,
    TAIL: tl.constexpr = False,
):
    # grouped_gemm_kernel's product, persistent: each of the num_programs(0) programs (the
    # GPU's SMs) loops over the tiles t = program_id, + num_programs, ... of the schedule
    # (_persistent_tile's order; the count tile_start[G]·tiles_o read on the device). The
    # operands through descriptors (TMA copies on sm_90): a [R, C], w [G, N, K] as one
    # [G·N, K] matrix; the forward (C = K, O = N) reads w_g's rows [BO, BC] K-major and
    # takes B = trans, the dgrad (C = N, O = K) reads [BC, BO] at row g·N + c. Rows of a
    # tile past its group read the next group's rows (and columns past O the next
    # expert's): those out rows and columns are not stored. The dgrad's K steps must not
    # cross experts: C % BC == 0 (the host checks). Each tile's K loop is
    # grouped_gemm_kernel's, step for step: the stored values are the same bits. WS
    # warp-specializes it (sm_90a): a producer warpgroup copies the next tiles' K steps
    # while the consumer warps store this one (1), or while two groups of consumer warps
    # take the tiles in turns (2, ping-pong). TAIL: a group's last tile whose rows end in
    # its first half runs a K loop of BM / 2 rows (half the tensor work, the same K steps).
    a_desc = tl.make_tensor_descriptor(a_ptr, [R, C], [C, 1], [BM, BC])
    a_half = a_desc
    if TAIL:
        a_half = tl.make_tensor_descriptor(a_ptr, [R, C], [C, 1], [BM // 2, BC])
    if DGRAD:
        w_desc = tl.make_tensor_descriptor(w_ptr, [G * C, O], [O, 1], [BC, BO])
    else:
        w_desc = tl.make_tensor_descriptor(w_ptr, [G * O, C], [C, 1], [BO, BC])
    tiles_o = tl.cdiv(O, BO)
    total = tl.load(tile_start_ptr + G) * tiles_o
    turns = 2 if WS == 2 else 1
    for t in tl.range(tl.program_id(0), total, tl.num_programs(0), warp_specialize=WS > 0, num_consumer_groups=turns):
        g, m0, end, pid_o = _persistent_tile(t, offsets_ptr, tile_start_ptr, tiles_ptr, tiles_o, GROUP_M, BM)
        o0 = pid_o * BO
        w_row = g * C if DGRAD else g * O + o0
        if TAIL and end - m0 <= BM // 2:
            half = k_loop_desc(a_half, w_desc, m0, w_row, w_row, o0, C, False, DGRAD, BM // 2, BO, BC)[0]
            _store_tile(half, g, m0, end, o0, bias_ptr, scale_ptr, out_ptr, O, BIAS, BM // 2, BO)
        else:
            acc = k_loop_desc(a_desc, w_desc, m0, w_row, w_row, o0, C, False, DGRAD, BM, BO, BC)[0]
            _store_tile(acc, g, m0, end, o0, bias_ptr, scale_ptr, out_ptr, O, BIAS, BM, BO)


@tf.jit
def _store_tile(
    acc, g, m0, end, o0, bias_ptr, scale_ptr, out_ptr, O, BIAS: tl.constexpr, BM: tl.constexpr, BO: tl.constexpr
):
    # _store_rows for the output columns o0 .. o0 + BO: clipped to the group's rows.
    rm = tl.arange(0, BM)
    ro = o0 + tl.arange(0, BO)
    if BIAS > 0:
        acc = acc + bias_tile(bias_ptr, scale_ptr, g, m0, end, O, ro, BIAS, BM)
    out = out_ptr + m0.to(tl.int64) * O + rm[:, None] * O + ro[None, :]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=((m0 + rm)[:, None] < end) & (ro[None, :] < O))
