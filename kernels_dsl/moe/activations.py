"""Scaled activations of the MoE MLP (SPEC-moe.md §2) and their registry.

An activation is two device functions written once, its forward f and its derivative,
on fp32 tiles of any shape, so that the standalone kernels below and a GEMM's epilogue
(FC1: f on the accumulator; FC2 dgrad: the derivative) call the same code:

    unary: fwd(x, p0, p1, p2) -> f(x)        bwd(x, p0, p1, p2) -> f'(x)
    GLU:   fwd(a, b, p0, p1, p2) -> f(a, b)  bwd(a, b, p0, p1, p2) -> (df/da, df/db)

p0..p2 are the activation's parameters (fp32 scalars, runtime or constant) in the
order `Activation.params` names them; an activation with fewer ignores the rest.
`register` adds one to ACTIVATIONS, and the kernels, the host API (tilefuse.moe) and
the tests take it from there. The scaled kernels compute, per row r with weight s_r,
y = s·f, dh = g·s·f' and ds_r = Σ_j g·f, all in fp32 with one rounding at the store.
"""

from __future__ import annotations

from dataclasses import dataclass

import tilefuse as tf
import tilefuse.language as tl

from .quantize import FP8_BLOCK, MX_BLOCK, quant_tile

# --- the activations: forward and derivative, fp32 in, fp32 out ---


@tf.jit
def swiglu_fwd(a, b, p0, p1, p2):
    return a * tl.sigmoid(a) * b


@tf.jit
def swiglu_bwd(a, b, p0, p1, p2):
    sg = tl.sigmoid(a)
    return b * (sg + a * sg * (1.0 - sg)), a * sg


@tf.jit
def clamped_swiglu_fwd(a, b, limit, alpha, offset):
    # GPT-OSS: the gate is clamped from above, the linear branch on both sides.
    a_c = tl.minimum(a, limit)
    b_c = tl.clamp(b, -limit, limit) + offset
    return a_c * tl.sigmoid(alpha * a_c) * b_c


@tf.jit
def clamped_swiglu_bwd(a, b, limit, alpha, offset):
    # The masks pass at equality (a = limit, b = ±limit): the derivative of the side inside.
    a_c = tl.minimum(a, limit)
    b_c = tl.clamp(b, -limit, limit) + offset
    sg = tl.sigmoid(alpha * a_c)
    da = tl.where(a <= limit, b_c * (sg + alpha * a_c * sg * (1.0 - sg)), 0.0)
    db = tl.where((b >= -limit) & (b <= limit), a_c * sg, 0.0)
    return da, db


@tf.jit
def _relu(x):
    # A select, not max(x, 0): the sign of max(-0, +0) differs between the backends.
    return tl.where(x > 0.0, x, 0.0)


@tf.jit
def srelu_fwd(x, p0, p1, p2):
    r = _relu(x)
    return r * r


@tf.jit
def srelu_bwd(x, p0, p1, p2):
    return 2.0 * _relu(x)


@tf.jit
def _tanh_clamp(x, c_s):
    # (t, c): t = tanh(relu(x)/c_s), c = c_s·t. c_s = inf is the limit c = relu(x), t = 0
    # (inf·tanh(0) would be NaN), so that tanh_srelu with c_s = inf is srelu bit for bit.
    r = _relu(x)
    unbounded = c_s == float("inf")
    t = tl.where(unbounded, 0.0, tl.tanh(r / c_s))
    return t, tl.where(unbounded, r, c_s * t)


@tf.jit
def tanh_srelu_fwd(x, c_s, p1, p2):
    t, c = _tanh_clamp(x, c_s)
    return c * c


@tf.jit
def tanh_srelu_bwd(x, c_s, p1, p2):
    t, c = _tanh_clamp(x, c_s)
    return 2.0 * c * ((1.0 - t) * (1.0 + t))


# gelu_tanh: 0.5·x·(1 + tanh(k·(x + 0.044715·x³))), k = sqrt(2/pi). The polynomial is taken
# of x clamped to ±10, where tanh is already ±1 in fp32 (its argument is past 43), so that
# the cube cannot overflow and the derivative's x·(1 - t²)·(1 + 3·0.044715·x²) is x·0, not 0·inf.
@tf.jit
def _gelu_tanh_t(x):
    xc = tl.clamp(x, -10.0, 10.0)
    return xc, tl.tanh(0.7978845608028654 * xc * (1.0 + 0.044715 * xc * xc))


@tf.jit
def gelu_tanh_fwd(x, p0, p1, p2):
    xc, t = _gelu_tanh_t(x)
    return 0.5 * x * (1.0 + t)


@tf.jit
def gelu_tanh_bwd(x, p0, p1, p2):
    xc, t = _gelu_tanh_t(x)
    du = 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * xc * xc)
    return 0.5 * (1.0 + t) + 0.5 * x * ((1.0 - t) * (1.0 + t)) * du


@tf.jit
def gelu_erf_fwd(x, p0, p1, p2):
    return 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))


@tf.jit
def gelu_erf_bwd(x, p0, p1, p2):
    # Phi(x) + x·phi(x); exp(-x²/2) underflows to 0 for large |x|, x·0 stays finite.
    return 0.5 * (1.0 + tl.erf(x * 0.7071067811865476)) + x * tl.exp(-0.5 * x * x) * 0.3989422804014327


# --- the registry ---

REQUIRED = object()  # a parameter without a default


@dataclass(frozen=True)
class Activation:
    """An activation of the registry. `params`: (name, default or REQUIRED) in the order
    of the device functions' p0..p2; `check(params)` returns what is wrong with a dict of
    parameter values, or None."""

    name: str
    glu: bool
    fwd: object
    bwd: object
    params: tuple = ()
    check: object = None

    def __repr__(self):  # the kernels' cache key
        return f"Activation({self.name}, glu={self.glu}: {self.fwd!r}, {self.bwd!r})"


MAX_PARAMS = 3
ACTIVATIONS: dict[str, Activation] = {}


def register(act: Activation) -> Activation:
    """Adds `act` to ACTIVATIONS (replacing one of the same name) and returns it."""
    for what in ("fwd", "bwd"):
        if not getattr(getattr(act, what), "__tilefuse_jit__", False):
            raise TypeError(f"activation {act.name!r}: {what} must be a @tilefuse.jit device function")
    if len(act.params) > MAX_PARAMS:
        raise ValueError(f"activation {act.name!r}: at most {MAX_PARAMS} parameters, got {len(act.params)}")
    ACTIVATIONS[act.name] = act
    return act


def _check_clamped(p):
    if not p["limit"] > 0:
        return f"limit must be > 0, got {p['limit']}"
    return None


def _check_tanh_srelu(p):
    if not p["c_s"] > 0:
        return f"c_s (the clamp scale) must be > 0, got {p['c_s']}"
    return None


register(Activation("swiglu", True, swiglu_fwd, swiglu_bwd))
register(
    Activation(
        "clamped_swiglu",
        True,
        clamped_swiglu_fwd,
        clamped_swiglu_bwd,
        (("limit", 7.0), ("alpha", 1.702), ("offset", 1.0)),
        _check_clamped,
    )
)
register(Activation("srelu", False, srelu_fwd, srelu_bwd))
register(Activation("tanh_srelu", False, tanh_srelu_fwd, tanh_srelu_bwd, (("c_s", REQUIRED),), _check_tanh_srelu))
register(Activation("gelu_tanh", False, gelu_tanh_fwd, gelu_tanh_bwd))
register(Activation("gelu_erf", False, gelu_erf_fwd, gelu_erf_bwd))


# --- the scaled kernels ---

# dprobs sums each row in a fixed order that no tiling or layout changes: a pairwise tree
# over each run of DS_CHUNK columns (elementwise adds of halves, not tl.sum, whose order
# follows the GPU layout), then the runs from left to right. Zero padding adds exactly 0.
DS_CHUNK = 32
_DS_LEVELS = DS_CHUNK.bit_length() - 1  # halvings of a run down to one column


@tf.jit
def glu_columns(cols, K, RUN: tl.constexpr):
    """Storage columns of a and b for output columns `cols` (a tile starting at a multiple
    of RUN): [a(K) | b(K) | a(K) | ...]; K = 1 is GPT-OSS's even/odd interleave, K = n the
    two halves. RUN, a power of two dividing K, is how far both run contiguously from
    aligned starts (a run never crosses a block), which the GPU backend vectorizes."""
    a_col = (cols // K) * (2 * K) + cols % K
    a_col = tl.max_contiguous(tl.multiple_of(a_col, RUN), RUN)
    b_col = tl.max_contiguous(tl.multiple_of(a_col + K, RUN), RUN)
    return a_col, b_col


@tf.jit
def run_sums(t, BR: tl.constexpr, BC: tl.constexpr):
    """[BR, BC / DS_CHUNK]: each run of DS_CHUNK columns of t [BR, BC] summed as a pairwise tree."""
    runs: tl.constexpr = BC // DS_CHUNK
    p = tl.reshape(t, [BR, runs, DS_CHUNK])
    w: tl.constexpr = DS_CHUNK
    for _ in tl.static_range(_DS_LEVELS):
        w = w // 2
        lo, hi = tl.split(tl.reshape(p, [BR, runs, w, 2]))
        p = lo + hi
    return tl.reshape(p, [BR, runs])


@tf.jit
def add_in_order(acc, parts, BR: tl.constexpr, RUNS: tl.constexpr):
    """acc [BR] + parts [BR, RUNS], the columns added one after the other from the left."""
    run = tl.arange(0, RUNS)
    for i in tl.static_range(RUNS):
        # One non-zero term per row: the sum is that term exactly, in any order.
        acc = acc + tl.sum(tl.where(run[None, :] == i, parts, 0.0), axis=1)
    return acc


@tf.jit
def fixed_order_row_sum(acc, t, BR: tl.constexpr, BC: tl.constexpr):
    """acc [BR] + the row sums of t [BR, BC] in the canonical order (BC a multiple of
    DS_CHUNK). A GEMM epilogue that owns a column tile can store its run_sums and let
    one program per row block add them with add_in_order: the same bits as here."""
    return add_in_order(acc, run_sums(t, BR, BC), BR, BC // DS_CHUNK)


@tf.jit
def load_glu(
    h_ptr, r64, row_ok, c0, N, K, BR: tl.constexpr, BC: tl.constexpr, RUN: tl.constexpr, EVEN_ODD: tl.constexpr
):
    """(a, b), fp32 [BR, BC], for output columns c0 .. c0 + BC of the rows at r64 (row_ok:
    [BR, 1], the rows in range). EVEN_ODD (K = 1): the pairs are adjacent, so one load of
    [BR, 2·BC] contiguous columns is split into its even and odd columns."""
    if EVEN_ODD:
        pc = 2 * c0 + tl.arange(0, 2 * BC)
        x = tl.load(h_ptr + r64 * (2 * N) + pc[None, :], mask=row_ok & (pc[None, :] < 2 * N), other=0.0)
        a, b = tl.split(tl.reshape(x.to(tl.float32), [BR, BC, 2]))
    else:
        cols = c0 + tl.arange(0, BC)
        a_col, b_col = glu_columns(cols, K, RUN)
        m = row_ok & (cols[None, :] < N)
        a = tl.load(h_ptr + r64 * (2 * N) + a_col[None, :], mask=m, other=0.0).to(tl.float32)
        b = tl.load(h_ptr + r64 * (2 * N) + b_col[None, :], mask=m, other=0.0).to(tl.float32)
    return a, b


@tf.jit
def store_glu(
    dh_ptr, r64, row_ok, c0, N, K, da, db, BR: tl.constexpr, BC: tl.constexpr, RUN: tl.constexpr, EVEN_ODD: tl.constexpr
):
    """Stores da, db [BR, BC] where load_glu reads a, b."""
    if EVEN_ODD:
        pc = 2 * c0 + tl.arange(0, 2 * BC)
        pairs = tl.reshape(tl.join(da, db), [BR, 2 * BC])
        tl.store(dh_ptr + r64 * (2 * N) + pc[None, :], pairs, mask=row_ok & (pc[None, :] < 2 * N))
    else:
        cols = c0 + tl.arange(0, BC)
        a_col, b_col = glu_columns(cols, K, RUN)
        m = row_ok & (cols[None, :] < N)
        tl.store(dh_ptr + r64 * (2 * N) + a_col[None, :], da, mask=m)
        tl.store(dh_ptr + r64 * (2 * N) + b_col[None, :], db, mask=m)


# The kernels' GLU layout arguments: K (runtime) and GLU_RUN (see glu_columns), EVEN_ODD
# for K = 1 (see load_glu); a unary activation ignores them.


@tf.jit
def scaled_act_fwd_kernel(
    h_ptr,
    s_ptr,
    y_ptr,
    ys_ptr,
    R,
    N,
    K,
    P0,
    P1,
    P2,
    ACT: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_C: tl.constexpr,
    GLU_RUN: tl.constexpr = 1,
    EVEN_ODD: tl.constexpr = False,
    OUT: tl.constexpr = 0,
):
    """y [R, N] = s[:, None]·f(h): h is [R, N] (unary) or [R, 2N] (GLU, K its interleave).
    OUT 1 (MXFP8) or 2 (FP8-block 1 x 128): y rounded to h's dtype, as OUT 0 stores it, is
    quantized along its rows instead (codes at y_ptr, scales at ys_ptr [R, N / block]), bit
    for bit what quantizing the stored y gives; BLOCK_C is then a multiple of the block."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    c0 = tl.program_id(1) * BLOCK_C
    cols = c0 + tl.arange(0, BLOCK_C)
    row_ok = rows[:, None] < R
    m = row_ok & (cols[None, :] < N)
    s = tl.load(s_ptr + rows, mask=rows < R, other=0.0)
    r64 = rows.to(tl.int64)[:, None]
    if ACT.glu:
        a, b = load_glu(h_ptr, r64, row_ok, c0, N, K, BLOCK_R, BLOCK_C, GLU_RUN, EVEN_ODD)
        f = ACT.fwd(a, b, P0, P1, P2)
    else:
        x = tl.load(h_ptr + r64 * N + cols[None, :], mask=m, other=0.0).to(tl.float32)
        f = ACT.fwd(x, P0, P1, P2)
    if OUT == 0:
        tl.store(y_ptr + r64 * N + cols[None, :], s[:, None] * f, mask=m)
    else:
        QB: tl.constexpr = MX_BLOCK if OUT == 1 else FP8_BLOCK
        y = tl.where(m, (s[:, None] * f).to(h_ptr.dtype.element_ty).to(tl.float32), 0.0)
        codes, scales = quant_tile(y, BLOCK_R, BLOCK_C, OUT)
        tl.store(y_ptr + r64 * N + cols[None, :], codes, mask=m)
        sc = c0 // QB + tl.arange(0, BLOCK_C // QB)
        tl.store(ys_ptr + r64 * (N // QB) + sc[None, :], scales, mask=row_ok & (sc[None, :] < N // QB))


@tf.jit
def scaled_act_bwd_kernel(
    h_ptr,
    s_ptr,
    dy_ptr,
    dh_ptr,
    ds_ptr,
    R,
    N,
    K,
    P0,
    P1,
    P2,
    ACT: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_C: tl.constexpr,
    GLU_RUN: tl.constexpr = 1,
    EVEN_ODD: tl.constexpr = False,
):
    """dh = g·s·f'(h) (h's layout), ds [R] = Σ_j g·f(h) for g = dy [R, N]. One program
    walks whole rows, so each row's ds is summed by one program in the canonical order."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_ok = rows[:, None] < R
    s = tl.load(s_ptr + rows, mask=rows < R, other=0.0)
    r64 = rows.to(tl.int64)[:, None]
    ds = tl.zeros([BLOCK_R], tl.float32)
    for c0 in range(0, N, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C)
        m = row_ok & (cols[None, :] < N)
        g = tl.load(dy_ptr + r64 * N + cols[None, :], mask=m, other=0.0).to(tl.float32)
        gs = g * s[:, None]
        if ACT.glu:
            a, b = load_glu(h_ptr, r64, row_ok, c0, N, K, BLOCK_R, BLOCK_C, GLU_RUN, EVEN_ODD)
            f = ACT.fwd(a, b, P0, P1, P2)
            da, db = ACT.bwd(a, b, P0, P1, P2)
            store_glu(dh_ptr, r64, row_ok, c0, N, K, gs * da, gs * db, BLOCK_R, BLOCK_C, GLU_RUN, EVEN_ODD)
        else:
            x = tl.load(h_ptr + r64 * N + cols[None, :], mask=m, other=0.0).to(tl.float32)
            f = ACT.fwd(x, P0, P1, P2)
            tl.store(dh_ptr + r64 * N + cols[None, :], gs * ACT.bwd(x, P0, P1, P2), mask=m)
        ds = fixed_order_row_sum(ds, tl.where(m, g * f, 0.0), BLOCK_R, BLOCK_C)
    tl.store(ds_ptr + rows, ds, mask=rows < R)
