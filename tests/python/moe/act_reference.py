"""float64 references of the scaled activations (SPEC-moe.md §2), written independently
of the kernels, with the inputs, layouts and error bounds that the interpreter tests
(test_activations.py) and the GPU tests (tests/gpu/test_moe_activations_gpu.py) share.
A registered activation is tested by adding its float64 forward and derivative to
REFERENCE (a missing entry fails every test of it).

Error bounds. The kernels compute in fp32 from inputs exact in fp32 and round once at
the store. An output element may differ from float64 by one ulp of its stored dtype (the
rounding, plus fp32 error that can move a value across a rounding boundary) plus
C_OPS · 2^-24 · M, where M is the element's magnitude: the reference formula with every
difference taken as a sum of absolute values (the scale of the fp32 rounding errors, which
exceeds |result| where terms cancel: 1 + erf(x) at negative x, σ + a·σ·(1-σ), ...), and
C_OPS = 32 bounds the fp32 operations along the longest path (gelu_tanh's backward, times
g and s: about 20; libdevice's exp, tanh and erf on the GPU are within 2 ulps each).
dprobs sums N terms along a tree of depth log2(32) + N/32 (the kernels' fixed order):
(log2(32) + ceil(N/32) + C_OPS) · 2^-24 · Σ_j |g_j| · M(f_j). Results below fp32's
normal range carry an absolute C_OPS · 2^-126 · (1 + |a|)² (1 + |b|) more: σ(a) is 0 in
fp32 for a < -88 (exp(-a) overflows) where it is 1e-39 in float64.
"""

import math

import ml_dtypes
import numpy as np
import tilefuse as tf
import tilefuse.language as tl
from tilefuse import moe

from kernels_dsl.moe import activations as kernels
from tests.python.moe.errors import U32, assert_within

BF16 = ml_dtypes.bfloat16
C_OPS = 32
TINY = 2.0**-126
SQRT1_2 = 1.0 / math.sqrt(2.0)
_erf = np.vectorize(math.erf, otypes=[np.float64])
_erfc = np.vectorize(math.erfc, otypes=[np.float64])


def sigmoid(z):
    e = np.exp(-np.abs(z))  # no overflow, and no cancellation in either tail
    return np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def relu(x):
    return np.maximum(x, 0.0)


# --- float64 references: (f, M(f), derivative, M(derivative)); a GLU's derivative and its
# magnitude are (d/da, d/db) pairs ---


def ref_swiglu(a, b):
    sg = sigmoid(a)
    f = a * sg * b
    da, db = b * sg * (1.0 + a * (1.0 - sg)), a * sg
    return f, np.abs(f), (da, db), (np.abs(b) * (sg + np.abs(a) * sg * (1.0 + sg)), np.abs(db))


def ref_clamped_swiglu(a, b, limit, alpha, offset):
    a_c, b_cl = np.minimum(a, limit), np.clip(b, -limit, limit)
    b_c = b_cl + offset
    sg = sigmoid(alpha * a_c)
    f = a_c * sg * b_c
    in_a, in_b = a <= limit, (b >= -limit) & (b <= limit)
    da = np.where(in_a, b_c * sg * (1.0 + alpha * a_c * (1.0 - sg)), 0.0)
    db = np.where(in_b, a_c * sg, 0.0)
    mb = np.abs(b_cl) + abs(offset)
    mda = np.where(in_a, mb * (sg + alpha * np.abs(a_c) * sg * (1.0 + sg)), 0.0)
    return f, np.abs(a_c) * sg * mb, (da, db), (mda, np.abs(db))


def ref_srelu(x):
    r = relu(x)
    return r * r, r * r, 2.0 * r, 2.0 * r


def ref_tanh_srelu(x, c_s):
    t = np.tanh(relu(x) / c_s)
    c = c_s * t
    return c * c, c * c, 2.0 * c * (1.0 - t * t), 2.0 * c * (1.0 + t) ** 2


def ref_gelu_tanh(x):
    k = math.sqrt(2.0 / math.pi)
    t = np.tanh(k * (x + 0.044715 * x**3))
    du = k * (1.0 + 3.0 * 0.044715 * x * x)
    f = 0.5 * x * (1.0 + t)
    with np.errstate(over="ignore"):  # cosh = inf: sech² = 0
        d = 0.5 * (1.0 + t) + 0.5 * x * du / np.cosh(k * (x + 0.044715 * x**3)) ** 2
    return (
        f,
        0.5 * np.abs(x) * (1.0 + np.abs(t)),
        d,
        0.5 * (1 + np.abs(t)) + 0.5 * np.abs(x) * du * (1 + np.abs(t)) ** 2,
    )


def ref_gelu_erf(x):
    cdf = 0.5 * _erfc(-x * SQRT1_2)  # x·Φ(x), Φ through erfc: accurate in the left tail
    pdf = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    m_cdf = 0.5 * (1.0 + np.abs(_erf(x * SQRT1_2)))  # the kernels form 1 + erf
    return x * cdf, np.abs(x) * m_cdf, cdf + x * pdf, m_cdf + np.abs(x) * pdf


# name -> (reference, the parameter sets tested: defaults ({}) and overrides)
REFERENCE = {
    "swiglu": (ref_swiglu, [{}]),
    "clamped_swiglu": (ref_clamped_swiglu, [{}, {"limit": 3.0, "alpha": 1.0, "offset": 0.5}]),
    "srelu": (ref_srelu, [{}]),
    "tanh_srelu": (ref_tanh_srelu, [{"c_s": 2.5}]),
    "gelu_tanh": (ref_gelu_tanh, [{}]),
    "gelu_erf": (ref_gelu_erf, [{}]),
}


def reference(name):
    assert name in REFERENCE, f"activation {name!r} is registered but has no float64 reference in REFERENCE"
    return REFERENCE[name][0]


def full_params(name, given):
    """All parameters as float64 values of the fp32 scalars the kernels receive."""
    return {p: float(np.float32(given.get(p, d))) for p, d in moe.ACTIVATIONS[name].params}


def param_slots(name, params):
    """The kernels' p0..p2 for a launch without the host API."""
    given = list(full_params(name, params).values())
    return given + [0.0] * (kernels.MAX_PARAMS - len(given))


def first_params(name):
    return REFERENCE[name][1][0] if name in REFERENCE else {}


# --- inputs: float64 values exact in the input dtype ---


def glu_merge(a, b, interleave):
    """h from its a and b halves in the storage layout, written with numpy (independent of
    the kernels' index arithmetic): halves, blocks of K, or K = 1 (even/odd)."""
    rows, n = a.shape
    k = interleave or n
    return np.stack([a.reshape(rows, n // k, k), b.reshape(rows, n // k, k)], axis=2).reshape(rows, 2 * n)


def glu_split(h, interleave):
    rows, n = h.shape[0], h.shape[1] // 2
    k = interleave or n
    blocks = h.reshape(rows, n // k, 2, k)
    return blocks[:, :, 0, :].reshape(rows, n), blocks[:, :, 1, :].reshape(rows, n)


def edge_values(name, params, large):
    """Points §2 requires: x = 0, a = limit and b = ±limit exactly (and one bf16 step to
    either side), and large |x| (σ and tanh saturated) in the first rows only, so that the
    other rows' dprobs bounds stay tight."""
    v = [0.0, -0.0, 1.0, -1.0]
    if "limit" in params:
        lim = params["limit"]
        step = 2.0 ** (math.floor(math.log2(lim)) - 7)
        v += [lim, -lim, lim + step, -lim - step, lim - step, -lim + step]
    if large:
        v += [30.0, -30.0, 100.0, -100.0, 1e4, -1e4]
    return np.array(v)


def random_operand(rng, shape, dtype, edges_small, edges_large, large_rows=6):
    x = rng.standard_normal(shape) * 3.0
    for rows, edges in ((slice(0, large_rows), edges_large), (slice(large_rows, None), edges_small)):
        part = x[rows]
        hit = rng.random(part.shape) < (0.2 if len(edges) else 0.0)
        part[hit] = rng.choice(edges, hit.sum())
    return x.astype(dtype).astype(np.float64)


def make_inputs(rng, name, params, rows, n, dtype, dy_dtype=None, edges=True):
    p = full_params(name, params)
    small, large = (edge_values(name, p, False), edge_values(name, p, True)) if edges else ([], [])
    glu = moe.ACTIVATIONS[name].glu
    a = random_operand(rng, (rows, n), dtype, small, large)
    b = random_operand(rng, (rows, n), dtype, small, large) if glu else None
    s = rng.random(rows).astype(np.float32) * 1.5 + 0.25
    g = (rng.standard_normal((rows, n)) * 2.0).astype(dy_dtype or dtype)
    return p, a, b, s, g


def as_h(a, b, interleave, dtype):
    return (a if b is None else glu_merge(a, b, interleave)).astype(dtype)


def evaluate(name, a, b, p):
    args = (a,) if b is None else (a, b)
    return reference(name)(*args, **p)


# --- checks ---


def sum_roundings(n):
    # The kernels' order: a pairwise tree over each run of DS_CHUNK columns, then the runs in order.
    return math.log2(kernels.DS_CHUNK) + math.ceil(n / kernels.DS_CHUNK) + C_OPS


def underflow(a, b):
    return C_OPS * TINY * (1.0 + np.abs(a)) ** 2 * (1.0 + (0.0 if b is None else np.abs(b)))


def check_forward(y, name, a, b, s, p):
    f, mf, _, _ = evaluate(name, a, b, p)
    s64 = s.astype(np.float64)[:, None]
    assert_within(y, s64 * f, floor=s64 * (C_OPS * U32 * mf + underflow(a, b)), what=f"{name} y")


def check_dh(dh, name, a, b, s, g, p, interleave):
    _, _, d, md = evaluate(name, a, b, p)
    gs = g.astype(np.float64) * s.astype(np.float64)[:, None]
    tiny = np.abs(gs) * underflow(a, b)
    if b is None:
        assert_within(dh, gs * d, floor=C_OPS * U32 * np.abs(gs) * md + tiny, what=f"{name} dh")
    else:
        da, db = glu_split(dh, interleave)
        assert_within(da, gs * d[0], floor=C_OPS * U32 * np.abs(gs) * md[0] + tiny, what=f"{name} da")
        assert_within(db, gs * d[1], floor=C_OPS * U32 * np.abs(gs) * md[1] + tiny, what=f"{name} db")


def check_dprobs(ds, name, a, b, g, p):
    f, mf, _, _ = evaluate(name, a, b, p)
    g64 = g.astype(np.float64)
    floor = np.sum(np.abs(g64) * (sum_roundings(g.shape[1]) * U32 * mf + underflow(a, b)), axis=1)
    assert_within(ds, np.sum(g64 * f, axis=1), ulps=0.0, floor=floor, what=f"{name} dprobs")


def check_backward(dh, ds, name, a, b, s, g, p, interleave):
    check_dh(dh, name, a, b, s, g, p, interleave)
    check_dprobs(ds, name, a, b, g, p)


LAYOUTS = [(0, 70), (32, 96), (1, 70)]  # (interleave, n): halves, blocks of 32, stride 1


def layouts(name):
    return LAYOUTS if moe.ACTIVATIONS[name].glu else [(0, 100)]


def canonical_row_sums(t):
    """The documented order in numpy float32: a pairwise tree over each run of DS_CHUNK
    columns (zero padded), then the runs added from the left, starting from 0."""
    rows, n = t.shape
    chunk = kernels.DS_CHUNK
    p = np.zeros((rows, -(-n // chunk) * chunk), np.float32)
    p[:, :n] = t
    p = p.reshape(rows, -1, chunk)
    while p.shape[2] > 1:
        p = p[:, :, 0::2] + p[:, :, 1::2]
    acc = np.zeros(rows, np.float32)
    for i in range(p.shape[1]):
        acc = acc + p[:, i, 0]
    return acc


@tf.jit
def fc1_epilogue_kernel(
    x_ptr, w_ptr, s_ptr, c_ptr, y_ptr, P0, P1, P2, ACT: tl.constexpr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr
):
    """An FC1-like GEMM whose epilogue calls the activation on its accumulators: h = x wᵀ
    (w [n1, K], the GLU's a rows then b rows), C = h stored in fp32, y = s · act(h)."""
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    x = tl.load(x_ptr + rm[:, None] * K + rk[None, :])
    s = tl.load(s_ptr + rm)[:, None]
    wa = tl.load(w_ptr + rn[None, :] * K + rk[:, None])
    acc_a = tl.dot(x, wa)
    if ACT.glu:
        acc_b = tl.dot(x, tl.load(w_ptr + (N + rn)[None, :] * K + rk[:, None]))
        tl.store(c_ptr + rm[:, None] * (2 * N) + rn[None, :], acc_a)
        tl.store(c_ptr + rm[:, None] * (2 * N) + (N + rn)[None, :], acc_b)
        y = s * ACT.fwd(acc_a, acc_b, P0, P1, P2)
    else:
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc_a)
        y = s * ACT.fwd(acc_a, P0, P1, P2)
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], y)


def fc1_epilogue(name, params, x, w, s, like):
    """(C, y) of fc1_epilogue_kernel; `like(a)` makes each array an argument (numpy or a
    CUDA tensor); the parameters in the slots the host API fills."""
    act = moe.ACTIVATIONS[name]
    rows, n = x.shape[0], w.shape[0] // (2 if act.glu else 1)
    c, y = like(np.zeros((rows, w.shape[0]), np.float32)), like(np.zeros((rows, n), np.float32))
    fc1_epilogue_kernel[(1,)](
        like(x), like(w), like(s), c, y, *param_slots(name, params), ACT=act, M=rows, N=n, K=x.shape[1]
    )
    return c, y


# dprobs the way a dgrad epilogue will form it: each program owns one (row block, column
# tile), stores its run sums, and one program per row block adds them in order.
@tf.jit
def tile_run_sums_kernel(
    h_ptr, dy_ptr, parts_ptr, R, N, P0, P1, P2, ACT: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr
):
    rows = tl.program_id(0) * BR + tl.arange(0, BR)
    cols = tl.program_id(1) * BC + tl.arange(0, BC)
    m = (rows[:, None] < R) & (cols[None, :] < N)
    g = tl.load(dy_ptr + rows[:, None] * N + cols[None, :], mask=m, other=0.0).to(tl.float32)
    if ACT.glu:  # halves
        a = tl.load(h_ptr + rows[:, None] * (2 * N) + cols[None, :], mask=m, other=0.0).to(tl.float32)
        b = tl.load(h_ptr + rows[:, None] * (2 * N) + (N + cols)[None, :], mask=m, other=0.0).to(tl.float32)
        f = ACT.fwd(a, b, P0, P1, P2)
    else:
        f = ACT.fwd(tl.load(h_ptr + rows[:, None] * N + cols[None, :], mask=m, other=0.0).to(tl.float32), P0, P1, P2)
    n_runs = tl.cdiv(N, kernels.DS_CHUNK)
    runs = tl.program_id(1) * (BC // kernels.DS_CHUNK) + tl.arange(0, BC // kernels.DS_CHUNK)
    parts = kernels.run_sums(tl.where(m, g * f, 0.0), BR, BC)
    tl.store(
        parts_ptr + rows[:, None] * n_runs + runs[None, :], parts, mask=(rows[:, None] < R) & (runs[None, :] < n_runs)
    )


@tf.jit
def add_runs_kernel(parts_ptr, ds_ptr, R, n_runs, BR: tl.constexpr, RUNS: tl.constexpr):
    rows = tl.program_id(0) * BR + tl.arange(0, BR)
    acc = tl.zeros([BR], tl.float32)
    for r0 in range(0, n_runs, RUNS):
        runs = r0 + tl.arange(0, RUNS)
        m = (rows[:, None] < R) & (runs[None, :] < n_runs)
        acc = kernels.add_in_order(
            acc, tl.load(parts_ptr + rows[:, None] * n_runs + runs[None, :], mask=m, other=0.0), BR, RUNS
        )
    tl.store(ds_ptr + rows, acc, mask=rows < R)


def tiled_dprobs(name, params, h, dy, like, br=8, bc=64, runs=4):
    """dprobs of scaled_act_backward(name, h, ., dy) (halves) through the two kernels above."""
    act = moe.ACTIVATIONS[name]
    rows, n = dy.shape
    n_runs = -(-n // kernels.DS_CHUNK)
    parts, ds = like(np.zeros((rows, n_runs), np.float32)), like(np.zeros(rows, np.float32))
    grid = (-(-rows // br), -(-n // bc))
    tile_run_sums_kernel[grid](like(h), like(dy), parts, rows, n, *param_slots(name, params), ACT=act, BR=br, BC=bc)
    add_runs_kernel[(-(-rows // br),)](parts, ds, rows, n_runs, BR=br, RUNS=runs)
    return ds
