"""Block quantizers and dequantizers of the MoE library (SPEC-moe.md §3), bit-exact.

Every kernel reads a logical matrix V [R, C] through strides (V[r, c] at
x_ptr + r * s_r + c * s_c): V is x for the rowwise copy and xᵀ for the columnwise one,
so a columnwise copy is the rowwise quantization of xᵀ, stored [C_x, R_x] (transposed,
K-major for Hopper's fp8 wgmma). Blocks run along V's rows: 1 x BC elements, or BR x BC
tiles (NVFP4 16 x 16, FP8 128 x 128). A program quantizes TR rows of one block column;
R must be a multiple of BR and C of BC (the host API refuses other shapes).

Codes are stored as int8 (the host passes int8 views of its fp8 / e8m0 arrays), so NaN
codes are chosen here rather than by a cast's NaN propagation:
- MXFP8: scale b = the smallest power of two >= amax / fmt_max as e8m0 (amax = 0: 2^-127;
  a block with an inf and no NaN: 2^127, 0xFE; a NaN block: 0xFF, every code 0x7F).
- NVFP4: tensor scale S_enc = 2688 / amax, at most FLT_MAX, 1 where amax is 0 or inf
  (TE's rule); a NaN block: e4m3 scale 0x7F, every code 0. amax ignores NaNs.
- FP8 block: dequant scale 2^e, the quant scale 2^-e the largest power of two with
  amax * 2^-e <= 448 (rounded down from 448 / amax, at most 2^127); 1 where amax is 0 or
  inf (TE's rule); a NaN block: scale NaN, every code 0x7F.
"""

import tilefuse as tf
import tilefuse.language as tl

from .philox import M32, philox4x32_10

FLT_MAX = 3.4028234663852886e38
MX_BLOCK = 32  # MXFP8's block
FP8_BLOCK = 128  # FP8-block's (1 x 128)
NV_BLOCK = 16  # NVFP4's (1 x 16; the columnwise copy's Hadamard chunks of 16 rows)
# Random Hadamard signs of the NVFP4 columnwise copy (SPEC §3), bit i set where sign i is -1:
# [1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1].
RHT_NEGATIVE = 0xD7E8


@tf.jit
def exp2i(e):
    """2^e as float32 for int32 e in [-149, 127], built from its bits (subnormals below -126)."""
    bits = tl.where(e >= -126, (e + 127) << 23, 1 << tl.minimum(tl.maximum(e + 149, 0), 22))
    return bits.to(tl.float32, bitcast=True)


@tf.jit
def pow2_ceil_exp(amax, MAX_EXP: tl.constexpr):
    """e with 2^e the smallest power of two >= amax / (1.75 * 2^MAX_EXP), exactly, for a
    normal float32 amax >= 0 (448 = 1.75 * 2^8, 57344 = 1.75 * 2^15): amax = 1.m * 2^E
    gives E - MAX_EXP, one more when 1.m > 1.75. Zero and subnormals give <= -127 - MAX_EXP."""
    bits = amax.to(tl.int32, bitcast=True)
    return ((bits >> 23) & 0xFF) - 127 - MAX_EXP + ((bits & 0x7FFFFF) > 0x600000).to(tl.int32)


@tf.jit
def block_max(v, TR: tl.constexpr, TC: tl.constexpr, BR: tl.constexpr):
    """The max of v [TR, TC] over each group of BR rows (all TC columns), as [TR, 1]."""
    g = tl.max(tl.reshape(v, (TR // BR, BR * TC)), axis=1, keep_dims=True)
    return tl.reshape(tl.broadcast_to(g, (TR // BR, BR)), (TR, 1))


@tf.jit
def block_stats(x, TR: tl.constexpr, TC: tl.constexpr, BR: tl.constexpr):
    """(amax ignoring NaNs, whether the block holds a NaN) per block, each [TR, 1]."""
    isnan = x != x
    amax = block_max(tl.where(isnan, 0.0, tl.abs(x)), TR, TC, BR)
    return amax, block_max(isnan.to(tl.int32), TR, TC, BR) > 0


@tf.jit
def rows_of(TR: tl.constexpr):
    """This program's TR rows of V, as int64: offsets past 2^31 elements stay exact."""
    return tl.program_id(0).to(tl.int64) * TR + tl.arange(0, TR)


@tf.jit
def load_view(x_ptr, r, c, R, s_r, s_c):
    """V[r, c] as float32 for rows r [TR] and columns c [TC]; rows past R read 0."""
    p = x_ptr + r[:, None] * s_r + c.to(tl.int64)[None, :] * s_c
    return tl.load(p, mask=(r < R)[:, None], other=0.0).to(tl.float32)


@tf.jit
def store_view(out_ptr, r, c, v, R, C, TRANS: tl.constexpr):
    """out = v [TR, TC] at rows r < R, columns c of V [R, C], or with TRANS at out = Vᵀ
    [C, R]: the columnwise copies dequantize into x's orientation, storing vᵀ so that
    the accesses run along out's rows."""
    if TRANS:
        tl.store(out_ptr + c.to(tl.int64)[:, None] * R + r[None, :], tl.trans(v), mask=(r < R)[None, :])
    else:
        tl.store(out_ptr + r[:, None] * C + c[None, :], v, mask=(r < R)[:, None])


# --- MXFP8 ---


@tf.jit
def mxfp8_quantize(
    x_ptr,
    q_ptr,
    s_ptr,
    R,
    C,
    s_r,
    s_c,
    FMT: tl.constexpr,
    MAX_EXP: tl.constexpr,
    TR: tl.constexpr,
    TC: tl.constexpr = 32,
):
    # q [R, C] codes of FMT (e4m3: MAX_EXP 8, e5m2: 15), s [R, C / 32] e8m0 codes. A program
    # quantizes TR rows by TC columns (a multiple of 32): columns past C are whole blocks.
    r = rows_of(TR)
    c = tl.program_id(1) * TC + tl.arange(0, TC)
    NB: tl.constexpr = TC // MX_BLOCK
    m = (r < R)[:, None] & (c < C)[None, :]
    x = tl.load(x_ptr + r[:, None] * s_r + c.to(tl.int64)[None, :] * s_c, mask=m, other=0.0).to(tl.float32)
    code, b = mxfp8_encode(tl.reshape(x, [TR * NB, MX_BLOCK]), TR * NB, FMT, MAX_EXP)
    tl.store(q_ptr + r[:, None] * C + c[None, :], tl.reshape(code, [TR, TC]), mask=m)
    sc = tl.program_id(1) * NB + tl.arange(0, NB)
    tl.store(
        s_ptr + r[:, None] * (C // MX_BLOCK) + sc[None, :],
        tl.reshape(b, [TR, NB]),
        mask=(r < R)[:, None] & (sc < C // MX_BLOCK)[None, :],
    )


@tf.jit
def mxfp8_encode(x, TR: tl.constexpr, FMT: tl.constexpr, MAX_EXP: tl.constexpr):
    """(codes int8 [TR, 32], e8m0 scale codes int8 [TR, 1]) of the blocks x [TR, 32] (fp32):
    what mxfp8_quantize stores, for the kernels that quantize a tile they computed."""
    amax, nan = block_stats(x, TR, 32, 1)
    b = tl.minimum(tl.maximum(pow2_ceil_exp(amax, MAX_EXP) + 127, 0), 254)
    b = tl.where(amax.to(tl.int32, bitcast=True) == 0x7F800000, 254, b)
    code = (x * exp2i(127 - b)).to(FMT).to(tl.int8, bitcast=True)
    return tl.where(nan, 0x7F, code), tl.where(nan, 255, b).to(tl.int8)


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
def mxfp8_dequantize(q_ptr, s_ptr, out_ptr, R, C, TRANS: tl.constexpr, TR: tl.constexpr):
    # out = q * 2^(b - 127), NaN where b = 0xFF (V's orientation, or x's with TRANS).
    r = rows_of(TR)
    c = tl.program_id(1) * 32 + tl.arange(0, 32)
    m = (r < R)[:, None]
    q = tl.load(q_ptr + r[:, None] * C + c[None, :], mask=m, other=0.0).to(tl.float32)
    b = tl.load(s_ptr + r[:, None] * (C // 32) + tl.program_id(1), mask=m, other=0).to(tl.int32) & 0xFF
    scale = tl.where(b == 255, float("nan"), exp2i(b - 127))
    store_view(out_ptr, r, c, q * scale, R, C, TRANS)


# --- FP8 block (DeepSeek) ---


@tf.jit
def fp8_block_quantize(x_ptr, q_ptr, s_ptr, R, C, s_r, s_c, BR: tl.constexpr, TR: tl.constexpr):
    # q [R, C] e4m3 codes; s [R / BR, C / 128] float32 dequant scales (BR = 1 or 128).
    r = rows_of(TR)
    c = tl.program_id(1) * 128 + tl.arange(0, 128)
    x = load_view(x_ptr, r, c, R, s_r, s_c)
    code, scale = fp8_block_encode(x, TR, BR)
    m = (r < R)[:, None]
    tl.store(q_ptr + r[:, None] * C + c[None, :], code, mask=m)
    first = m & (r % BR == 0)[:, None]  # one row per block stores its scale
    sp = s_ptr + (r // BR)[:, None] * (C // 128) + tl.program_id(1)
    tl.store(sp, scale, mask=first)


@tf.jit
def fp8_block_encode(x, TR: tl.constexpr, BR: tl.constexpr):
    """(e4m3 codes int8 [TR, 128], float32 dequant scales [TR, 1]) of x [TR, 128] (fp32) in
    blocks of BR rows: what fp8_block_quantize stores, for kernels quantizing their tiles."""
    amax, nan = block_stats(x, TR, 128, BR)
    e = tl.maximum(pow2_ceil_exp(amax, 8), -127)
    e = tl.where((amax == 0.0) | (amax.to(tl.int32, bitcast=True) == 0x7F800000), 0, e)
    code = (x * exp2i(-e)).to(tl.float8e4nv).to(tl.int8, bitcast=True)
    return tl.where(nan, 0x7F, code), tl.where(nan, float("nan"), exp2i(e))


@tf.jit
def fp8_block_dequantize(q_ptr, s_ptr, out_ptr, R, C, BR: tl.constexpr, TRANS: tl.constexpr, TR: tl.constexpr):
    r = rows_of(TR)
    c = tl.program_id(1) * 128 + tl.arange(0, 128)
    m = (r < R)[:, None]
    q = tl.load(q_ptr + r[:, None] * C + c[None, :], mask=m, other=0.0).to(tl.float32)
    scale = tl.load(s_ptr + (r // BR)[:, None] * (C // 128) + tl.program_id(1), mask=m, other=0.0)
    store_view(out_ptr, r, c, q * scale, R, C, TRANS)


# --- NVFP4 ---


@tf.jit
def hadamard_sign(i: tl.constexpr, j):
    """The entry (i, j) of diag(signs) * H16 as float32, for column indices j (a tile)."""
    p = j & i
    parity = (p ^ (p >> 1) ^ (p >> 2) ^ (p >> 3)) & 1
    return ((1 - 2 * parity) * (1 - 2 * ((RHT_NEGATIVE >> i) & 1))).to(tl.float32)


@tf.jit
def rht_step(ev, od, v, i: tl.constexpr):
    """One term of the random Hadamard transform: ev, od [TR, 8] plus v [TR] (element i of
    each row's 16) times row i of diag(signs) H16 (its even and odd columns)."""
    p = tl.arange(0, 8)
    return ev + v[:, None] * hadamard_sign(i, 2 * p)[None, :], od + v[:, None] * hadamard_sign(i, 2 * p + 1)[None, :]


@tf.jit
def nvfp4_view_block(x_ptr, r, cb, R, s_r, s_c, RHT: tl.constexpr):
    """The block column cb of V for rows r, as its even and odd columns ([TR, 8] each).
    With RHT each row's 16 values v become v @ (diag(signs) H16 / 4): the sum over i
    runs in order i = 0..15 in float32 (each term is an exact ±v_i), then times 1/4."""
    c0 = cb * 16
    if RHT:
        ev = tl.zeros((r.shape[0], 8), tl.float32)
        od = tl.zeros((r.shape[0], 8), tl.float32)
        for i in tl.static_range(16):
            v = tl.load(x_ptr + r * s_r + (c0 + i).to(tl.int64) * s_c, mask=r < R, other=0.0).to(tl.float32)
            ev, od = rht_step(ev, od, v, i)
        ev, od = ev * 0.25, od * 0.25
    else:
        x = load_view(x_ptr, r, c0 + tl.arange(0, 16), R, s_r, s_c)
        ev, od = tl.split(tl.reshape(x, (r.shape[0], 8, 2)))
    return ev, od


@tf.jit
def nvfp4_view_blocks(x_ptr, r, cb, R, s_r, s_c, RHT: tl.constexpr, NB: tl.constexpr):
    """nvfp4_view_block of the NB block columns cb..cb + NB - 1: ev, od [TR * NB, 8], row
    i * NB + b the block (r[i], cb + b)."""
    TR: tl.constexpr = r.shape[0]
    if NB == 1:
        return nvfp4_view_block(x_ptr, r, cb, R, s_r, s_c, RHT)
    b = cb + tl.arange(0, NB)
    m = (r < R)[:, None]
    if RHT:
        ev = tl.zeros((TR * NB, 8), tl.float32)
        od = tl.zeros((TR * NB, 8), tl.float32)
        for i in tl.static_range(16):
            p = x_ptr + r[:, None] * s_r + (b * 16 + i).to(tl.int64)[None, :] * s_c
            v = tl.load(p, mask=m, other=0.0).to(tl.float32)
            ev, od = rht_step(ev, od, tl.reshape(v, (TR * NB,)), i)
        ev, od = ev * 0.25, od * 0.25
    else:
        c = cb * 16 + tl.arange(0, 16 * NB)
        x = tl.load(x_ptr + r[:, None] * s_r + c.to(tl.int64)[None, :] * s_c, mask=m, other=0.0).to(tl.float32)
        ev, od = tl.split(tl.reshape(x, (TR * NB, 8, 2)))
    return ev, od


@tf.jit
def nvfp4_amax(
    x_ptr, part_ptr, R, C, s_r, s_c, n_ptr,
    RHT: tl.constexpr, TR: tl.constexpr, BOUNDED: tl.constexpr, NB: tl.constexpr = 1,
):  # fmt: skip
    # One partial amax (NaNs ignored) per program into part[pid0 * nc + pid1] (nc programs
    # along the columns, NB block columns each: NB divides C / 16); BOUNDED: over V's first
    # n_ptr[0] rows only (the MoE MLP's rows past the splits' sum).
    r = rows_of(TR)
    if BOUNDED:
        R = tl.minimum(R, tl.load(n_ptr))
    ev, od = nvfp4_view_blocks(x_ptr, r, tl.program_id(1) * NB, R, s_r, s_c, RHT, NB)
    a = tl.maximum(tl.where(ev != ev, 0.0, tl.abs(ev)), tl.where(od != od, 0.0, tl.abs(od)))
    nc = C // 16 // NB
    tl.store(part_ptr + tl.program_id(0) * nc + tl.program_id(1), tl.max(tl.max(a, axis=1), axis=0))


@tf.jit
def nvfp4_tensor_scale(part_ptr, n, ts_ptr, BLOCK: tl.constexpr):
    # One program: S_enc = 448 * 6 / amax over the partials, at most FLT_MAX, 1 for amax 0 / inf.
    amax = 0.0
    for i in range(0, n, BLOCK):
        offs = i + tl.arange(0, BLOCK)
        amax = tl.maximum(amax, tl.max(tl.load(part_ptr + offs, mask=offs < n, other=0.0), axis=0))
    tl.store(ts_ptr, tensor_scale_of(amax))


@tf.jit
def tensor_scale_of(amax):
    """S_enc = 448 * 6 / amax, at most FLT_MAX, 1 for amax 0 / inf (TE's rule)."""
    s = tl.minimum(2688.0 / amax, FLT_MAX)
    return tl.where((amax == 0.0) | (s == 0.0), 1.0, s)


@tf.jit
def stochastic_bits(r, cb, C, seed_lo, seed_hi):
    """8 random bits per element of V's block column cb (rows r), in the top byte of an
    int32, for the even and odd columns ([TR, 8] each). Element j of block (r, cb) takes
    byte j % 4 of word j // 4 of Philox4x32-10 at counter (n, n >> 32, 0, 0) with
    n = r * (C / 16) + cb (the element's linear index >> 4) and key (seed_lo, seed_hi)."""
    n = r.to(tl.int64) * (C // 16) + cb
    zero = tl.zeros_like(n)
    k0 = tl.full(n.shape, seed_lo, tl.int64) & M32
    k1 = tl.full(n.shape, seed_hi, tl.int64) & M32
    w0, w1, w2, w3 = philox4x32_10(n & M32, (n >> 32) & M32, zero, zero, k0, k1)
    word = tl.arange(0, 8)[None, :] // 2  # pair p holds elements 2p, 2p + 1 of word p // 2
    w = tl.where(word < 2, tl.where(word == 0, w0[:, None], w1[:, None]), tl.where(word == 2, w2[:, None], w3[:, None]))
    shift = (tl.arange(0, 8)[None, :] % 2) * 16
    ev = ((w >> shift) & 0xFF) << 24
    od = ((w >> (shift + 8)) & 0xFF) << 24
    return ev.to(tl.int32), od.to(tl.int32)


@tf.jit
def e2m1_codes(v, rbits, STOCHASTIC: tl.constexpr):
    if STOCHASTIC:
        q = v.to(tl.float4e2m1, rounding="rs", rand_bits=rbits)
    else:
        q = v.to(tl.float4e2m1)
    return q.to(tl.int8, bitcast=True) & 0xF


# The seed halves change every call: one compiled kernel for all of them.
@tf.jit(do_not_specialize=("seed_lo", "seed_hi"))
def nvfp4_quantize(
    x_ptr,
    ts_ptr,
    q_ptr,
    s_ptr,
    R,
    C,
    s_r,
    s_c,
    seed_lo,
    seed_hi,
    BR: tl.constexpr,
    RHT: tl.constexpr,
    STOCHASTIC: tl.constexpr,
    TR: tl.constexpr,
    NB: tl.constexpr = 1,
):
    # q [R, C / 2] E2M1 pairs (even element in the low nibble), s [R, C / 16] e4m3 codes,
    # replicated over the BR rows of a 16 x 16 tile (BR = 16) or per row (BR = 1). A program
    # encodes TR rows by NB block columns (NB divides C / 16; 1 for 16 x 16 tiles).
    r = rows_of(TR)
    cb = tl.program_id(1) * NB
    ev, od = nvfp4_view_blocks(x_ptr, r, cb, R, s_r, s_c, RHT, NB)
    if NB == 1:
        rb, bb = r, cb
    else:
        rb = tl.reshape(tl.broadcast_to(r[:, None], (TR, NB)), (TR * NB,))
        bb = tl.reshape(tl.broadcast_to((cb + tl.arange(0, NB))[None, :], (TR, NB)), (TR * NB,))
    if STOCHASTIC:
        rev, rod = stochastic_bits(rb, bb, C, seed_lo, seed_hi)
    else:
        rev, rod = 0, 0
    packed, sb = nvfp4_encode(ev, od, tl.load(ts_ptr), rev, rod, TR * NB, BR, STOCHASTIC)
    if NB == 1:
        m = (r < R)[:, None]
        tl.store(q_ptr + r[:, None] * (C // 2) + cb * 8 + tl.arange(0, 8)[None, :], packed, mask=m)
        tl.store(s_ptr + r[:, None] * (C // 16) + cb, sb, mask=m)
    else:
        nbc = tl.multiple_of(C // 16, NB)  # blocks per row of V
        m = (r < R)[:, None]
        q = cb * 8 + tl.arange(0, NB * 8)
        tl.store(q_ptr + r[:, None] * (nbc * 8) + q[None, :], tl.reshape(packed, (TR, NB * 8)), mask=m)
        b = cb + tl.arange(0, NB)
        tl.store(s_ptr + r[:, None] * nbc + b[None, :], tl.reshape(sb, (TR, NB)), mask=m)


@tf.jit
def nvfp4_encode(ev, od, s_enc, rev, rod, TR: tl.constexpr, BR: tl.constexpr, STOCHASTIC: tl.constexpr):
    """(packed E2M1 pairs int8 [TR, 8], e4m3 scale codes int8 [TR, 1]) of the blocks whose
    even and odd elements are ev, od [TR, 8] (fp32), in blocks of BR rows, for the tensor
    scale s_enc; rev, rod: stochastic_bits (STOCHASTIC). A NaN block: scale 0x7F, codes 0."""
    ea, en = block_stats(ev, TR, 8, BR)
    oa, on = block_stats(od, TR, 8, BR)
    nan = en | on
    sb = ((tl.maximum(ea, oa) * s_enc) / 6.0).to(tl.float8e4nv)
    factor = tl.minimum(1.0 / (sb.to(tl.float32) / s_enc), FLT_MAX)
    lo = e2m1_codes(ev * factor, rev, STOCHASTIC)
    hi = e2m1_codes(od * factor, rod, STOCHASTIC)
    return tl.where(nan, 0, lo | (hi << 4)), tl.where(nan, 0x7F, sb.to(tl.int8, bitcast=True))


@tf.jit
def e2m1_values(codes):
    return codes.to(tl.float4e2m1, bitcast=True).to(tl.float32)


@tf.jit
def nvfp4_dequantize(q_ptr, s_ptr, ts_ptr, out_ptr, R, C, TRANS: tl.constexpr, TR: tl.constexpr):
    # out = q * sb / S_enc, the even element of each byte from its low nibble.
    r = rows_of(TR)
    cb = tl.program_id(1)
    p = tl.arange(0, 8)
    m = (r < R)[:, None]
    packed = tl.load(q_ptr + r[:, None] * (C // 2) + cb * 8 + p[None, :], mask=m, other=0)
    sb = tl.load(s_ptr + r[:, None] * (C // 16) + cb, mask=m, other=0.0).to(tl.float32)
    s_enc = tl.load(ts_ptr)
    ev = (e2m1_values(packed & 0xF) * sb) / s_enc
    od = (e2m1_values((packed >> 4) & 0xF) * sb) / s_enc
    store_view(out_ptr, r, cb * 16 + tl.arange(0, 16), tl.reshape(tl.join(ev, od), (TR, 16)), R, C, TRANS)
