"""Golden block quantizers (SPEC-moe.md §3), written from the spec alone: numpy and plain
Python, sharing no code with kernels_dsl/moe or the interpreter's formats.

Element formats are decoded from their bit fields into a table of every code's value;
rounding finds the table neighbours of an exact float64 value (an fp32 input times a power
of two is exact in float64) and picks one by comparing with their midpoint. The float32
steps the spec writes as float32 arithmetic (NVFP4's scales, the Hadamard sums) are numpy
float32 operations, which IEEE rounds once each. Every function takes V [R, C], the matrix
whose rows hold the blocks (x rowwise, x.T columnwise), as float32.
"""

from __future__ import annotations

import numpy as np

FLT_MAX = np.float32(3.4028234663852886e38)
# name: (exponent bits, mantissa bits, bias, has inf (IEEE-style top exponent))
FORMATS = {"e4m3": (4, 3, 7, False), "e5m2": (5, 2, 15, True), "e2m1": (2, 1, 1, False)}
RHT_SIGNS = [1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1]


def decode(fmt: str, code: int) -> float:
    """The value of one code of fmt, from sign | exponent | mantissa."""
    eb, mb, bias, ieee = FORMATS[fmt]
    sign = -1.0 if code >> (eb + mb) & 1 else 1.0
    e, m = code >> mb & ((1 << eb) - 1), code & ((1 << mb) - 1)
    if fmt == "e4m3" and e == 15 and m == 7:
        return float("nan")
    if ieee and e == (1 << eb) - 1:
        return sign * float("inf") if m == 0 else float("nan")
    if e == 0:
        return sign * m * 2.0 ** (1 - bias - mb)
    return sign * (1 + m / 2**mb) * 2.0 ** (e - bias)


def decode_e8m0(b: int) -> float:
    return float("nan") if b == 0xFF else 2.0 ** (b - 127)


def _magnitudes(fmt):
    """The finite non-negative values, in code order (which is value order)."""
    eb, mb, _, _ = FORMATS[fmt]
    vals = [decode(fmt, c) for c in range(1 << (eb + mb))]
    return np.array([v for v in vals if np.isfinite(v)], np.float64)


def round_codes(v: np.ndarray, fmt: str, rbits: np.ndarray | None = None) -> np.ndarray:
    """Codes of float64 values v (no NaNs) in fmt: round to nearest, ties to the even code,
    or stochastically (up iff frac * 2^32 > rbits, frac the position between the two
    neighbours); saturating at the largest finite value (inf included). Keeps the sign."""
    eb, mb, _, _ = FORMATS[fmt]
    assert not np.isnan(v).any()
    mags = _magnitudes(fmt)
    a = np.abs(v)
    lo = np.clip(np.searchsorted(mags, a, side="right") - 1, 0, len(mags) - 1)
    hi = np.minimum(lo + 1, len(mags) - 1)
    if rbits is None:
        mid = (mags[lo] + mags[hi]) / 2  # exact: both have a few significant bits
        up = (a > mid) | ((a == mid) & (hi % 2 == 0))
    else:
        with np.errstate(invalid="ignore"):  # inf - lo past the top: saturated below
            up = (a - mags[lo]) * 2.0**32 > rbits.astype(np.float64) * (mags[hi] - mags[lo])
    idx = np.where((a >= mags[-1]) | (hi == lo), len(mags) - 1, np.where(up, hi, lo))
    return (np.signbit(v).astype(np.int64) << (eb + mb)) | idx


def decode_codes(codes: np.ndarray, fmt: str) -> np.ndarray:
    eb, mb, _, _ = FORMATS[fmt]
    table = np.array([decode(fmt, c) for c in range(1 << (1 + eb + mb))])
    return table[codes.astype(np.int64) & ((1 << (1 + eb + mb)) - 1)]


def _blocks(v, br, bc):
    """v [R, C] as [R/br, C/bc, br*bc] blocks."""
    r, c = v.shape
    return v.reshape(r // br, br, c // bc, bc).transpose(0, 2, 1, 3).reshape(r // br, c // bc, br * bc)


def _per_element(s, br, bc):
    """Per-block values [R/br, C/bc] spread over the elements [R, C]."""
    return np.repeat(np.repeat(s, br, axis=0), bc, axis=1)


def _amax_nan(v, br, bc):
    b = _blocks(v.astype(np.float64), br, bc)
    nan = np.isnan(b).any(-1)
    return np.where(np.isnan(b), 0.0, np.abs(b)).max(-1), nan


def mxfp8(v: np.ndarray, fmt: str):
    """(codes [R, C], e8m0 codes [R, C/32])."""
    fmax = 448.0 if fmt == "e4m3" else 57344.0
    amax, nan = _amax_nan(v, 1, 32)
    # b: the first of 2^(b-127) * fmax, b = 0..254, that is >= amax (exact comparisons).
    b = np.minimum(np.searchsorted(fmax * 2.0 ** (np.arange(255) - 127), amax, side="left"), 254)
    codes = round_codes(np.where(np.isnan(v), 0.0, v) * _per_element(2.0 ** (127 - b), 1, 32), fmt)
    codes = np.where(_per_element(nan, 1, 32), 0x7F, codes)
    return codes, np.where(nan, 0xFF, b)


def mxfp8_dequant(codes, scale_codes, fmt):
    s = np.array([decode_e8m0(int(b)) for b in scale_codes.ravel()]).reshape(scale_codes.shape)
    with np.errstate(over="ignore"):  # a saturated code times 2^127 is inf in float32
        return (decode_codes(codes, fmt) * _per_element(s, 1, 32)).astype(np.float32)


def fp8_block(v: np.ndarray, br: int):
    """(e4m3 codes [R, C], float32 dequant scales [R/br, C/128])."""
    amax, nan = _amax_nan(v, br, 128)
    k = np.zeros(amax.shape, np.int64)  # the largest k <= 127 with amax * 2^k <= 448
    ok = (amax > 0) & np.isfinite(amax)
    for cand in range(-127, 128):
        k = np.where(ok & (np.ldexp(amax, cand) <= 448.0), cand, k)
    codes = round_codes(np.where(np.isnan(v), 0.0, v) * _per_element(2.0**k, br, 128), "e4m3")
    codes = np.where(_per_element(nan, br, 128), 0x7F, codes)
    return codes, np.where(nan, np.nan, 2.0 ** (-k)).astype(np.float32)


def fp8_block_dequant(codes, scale, br):
    return (decode_codes(codes, "e4m3") * _per_element(scale.astype(np.float64), br, 128)).astype(np.float32)


def rht(v: np.ndarray) -> np.ndarray:
    """Each row's chunks of 16, u, as u @ (diag(signs) H16 / 4) in float32: the sum over
    i = 0..15 in order (exact ±u_i terms), then times 1/4."""
    r, c = v.shape
    u = v.astype(np.float32).reshape(r, c // 16, 16)
    h = np.array([[(-1) ** bin(i & j).count("1") for j in range(16)] for i in range(16)], np.float32)
    acc = np.zeros_like(u)
    with np.errstate(invalid="ignore"):  # inf - inf in a chunk holding both: NaN, as in float32
        for i in range(16):
            acc = acc + u[:, :, i : i + 1] * (RHT_SIGNS[i] * h[i])
    return (acc * np.float32(0.25)).reshape(r, c)


def philox4x32_10(c, key):
    """Philox4x32-10 on uint64 arrays holding uint32 words: 4 counter words, 2 key words."""
    m32 = np.uint64(0xFFFFFFFF)
    c0, c1, c2, c3 = (np.asarray(w, np.uint64) for w in c)
    k0, k1 = (np.asarray(w, np.uint64) for w in key)
    for _ in range(10):
        p0, p1 = c0 * np.uint64(0xD2511F53), c2 * np.uint64(0xCD9E8D57)  # < 2^64: exact
        c0, c1, c2, c3 = (p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & m32, (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & m32
        k0, k1 = (k0 + np.uint64(0x9E3779B9)) & m32, (k1 + np.uint64(0xBB67AE85)) & m32
    return c0, c1, c2, c3


def stochastic_bits(rows: int, cols: int, seed: int) -> np.ndarray:
    """8 random bits per element of V [rows, cols], as the rs cast's 32-bit operand
    (the byte times 2^24): element (r, c) takes byte c % 4 of word (c % 16) // 4 of Philox
    at counter (n, n >> 32, 0, 0), n = (r * cols + c) >> 4, key (seed low, seed high)."""
    n = np.arange(rows, dtype=np.uint64)[:, None] * np.uint64(cols // 16) + np.arange(cols // 16, dtype=np.uint64)
    zero = np.zeros_like(n)
    key = (np.full_like(n, seed & 0xFFFFFFFF), np.full_like(n, seed >> 32))
    words = np.stack(philox4x32_10((n & np.uint64(0xFFFFFFFF), n >> np.uint64(32), zero, zero), key), -1)
    j = np.arange(cols) % 16
    w = words[:, np.arange(cols) // 16, j // 4]  # [rows, cols]
    return ((w >> (8 * (j % 4)).astype(np.uint64)) & np.uint64(0xFF)) << np.uint64(24)


def nvfp4(v: np.ndarray, br: int, rht_on: bool = False, seed: int | None = None):
    """(packed E2M1 bytes [R, C/2] as uint8, e4m3 scale codes [R, C/16], S_enc float32)."""
    v = rht(v) if rht_on else v.astype(np.float32)
    amax = np.float32(np.max(np.where(np.isnan(v), 0, np.abs(v)), initial=0))
    with np.errstate(divide="ignore", over="ignore"):
        s_enc = np.minimum(np.float32(2688) / amax, FLT_MAX)
    s_enc = np.float32(1) if amax == 0 or s_enc == 0 else s_enc
    bamax, nan = _amax_nan(v, br, 16)
    bamax = np.repeat(bamax.astype(np.float32), br, axis=0)  # per row, [R, C/16]
    nan = np.repeat(nan, br, axis=0)
    sb_codes = round_codes(((bamax * s_enc) / np.float32(6)).astype(np.float64), "e4m3")
    sb = decode_codes(sb_codes, "e4m3").astype(np.float32)
    with np.errstate(divide="ignore"):
        factor = np.minimum(np.float32(1) / (sb / s_enc), FLT_MAX)
    with np.errstate(over="ignore"):
        scaled = np.where(np.isnan(v), 0, v) * np.repeat(factor, 16, axis=1)
    rbits = None if seed is None else stochastic_bits(*v.shape, seed)
    codes = round_codes(scaled.astype(np.float64), "e2m1", rbits)
    codes = np.where(np.repeat(nan, 16, axis=1), 0, codes)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    return packed, np.where(nan, 0x7F, sb_codes), s_enc


def nvfp4_dequant(packed, sb_codes, s_enc):
    p = packed.astype(np.int64) & 0xFF
    q = np.empty((p.shape[0], p.shape[1] * 2))
    q[:, 0::2], q[:, 1::2] = decode_codes(p & 0xF, "e2m1"), decode_codes(p >> 4, "e2m1")
    sb = np.repeat(decode_codes(sb_codes, "e4m3").astype(np.float32), 16, axis=1)
    return (q.astype(np.float32) * sb) / np.float32(s_enc)
