"""moe.fc1_forward / moe.fc2_dgrad (kernels_dsl/moe/fused.py) on the interpreter, over
the activation registry and the recipes bf16 and MXFP8, on small shapes with several
tiles and partial tiles, empty experts (the last too), one expert owning every row and
G = 1: the fused kernels against the unfused composition (grouped_gemm → scaled_act →
quantize; grouped_gemm_dgrad → scaled_act_backward) bit for bit, against float64
references (tight elementwise bounds of act_reference.py where the inputs are the
kernels' own, the error RMS of errors.py end to end), recompute's y_col against the
forward's y bit for bit, and the accumulator mode's FC2-wgrad deviation by error RMS
(per recipe, and relative to SReLU's). The helpers take a backend (numpy here, CUDA
torch tensors in tests/gpu/test_moe_fused_gpu.py)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from tilefuse import moe
from tilefuse.moe import fused as host_fused

from tests.python.moe import act_reference as act_ref
from tests.python.moe import gemm_reference as ref
from tests.python.moe.errors import assert_error_rms, error_stats

BF16 = ref.BF16
SMALL = moe.GemmConfig(32, 32, 32, 4, 2)
RECIPES = ["bf16", "mxfp8", "fp8_block"]
# The interpreter's tiles per recipe: FP8-block's outputs come in blocks of 128 rows and columns.
CONFIG = {"bf16": SMALL, "mxfp8": SMALL, "fp8_block": moe.GemmConfig(128, 128, 32, 4, 2)}
BLOCK = {"bf16": 32, "mxfp8": 32, "fp8_block": 128}  # a quantized output's block
# (rows R, splits): partial row tiles, pad rows past the sum, an empty last expert.
CASES = {
    "several": (150, [40, 0, 61, 33, 0]),
    "one_owns_all": (100, [0, 100, 0]),
    "g1": (90, [77]),
}
NAMES = list(moe.ACTIVATIONS)
# Error RMS of an MXFP8 copy against float64: e4m3 rounds to 3 bits (relative error up
# to 2^-4, RMS about 2^-4/sqrt(3)), after the bf16 rounding.
RMS = {"bf16": 2.0**-8, "mxfp8": 2.0**-4, "fp8_block": 2.0**-4}
# The max error, relative to the tensor's largest element: a loose ceiling (4 bf16
# roundings; 2 e4m3 roundings).
MAX_REL = {"bf16": 2.0**-7, "mxfp8": 2.0**-3, "fp8_block": 2.0**-3}
# Accumulator mode's FC2-wgrad deviation from exact mode, relative to the tensor's RMS
# (bf16: C's rounding moves act(C) by ~2^-9 relative; MXFP8: e4m3 bin flips), and at
# most ACC_BASELINE times SReLU's under the same recipe and inputs.
ACC_RMS = {"bf16": 2.0**-6, "mxfp8": 2.0**-4, "fp8_block": 2.0**-4}
ACC_BASELINE = 4.0
# Its max, relative to the tensor's RMS: heavy-tailed (bin flips on the largest y of one
# column); over 415 draws of clamped SwiGLU (mxfp8, fp8_block) at most 1.35, and above 1.0
# in 3 (2026-12-01), so a ceiling of 3: still a single element off by 3x the tensor's RMS,
# which the RMS bound would not see.
ACC_MAX = 3.0


def assert_rms(got, expected, recipe, what):
    """errors.assert_error_rms with the recipe's RMS bound; the max error's ceiling is
    MAX_REL of the largest |expected| (in the helper's units: of the RMS)."""
    expected = np.asarray(expected, np.float64)
    peak = np.abs(expected).max() / np.sqrt(np.mean(expected * expected))
    return assert_error_rms(got, expected, rms_bound=RMS[recipe], max_bound=MAX_REL[recipe] * peak, what=what)


class Numpy:
    """The interpreter's arrays: numpy both ways. fp8_block_error: what an fp8 dot may add
    per 32-block, relative to Σ|products| (gemm_reference.check); 0: fp32 throughout."""

    fp8_block_error = 0.0

    @staticmethod
    def dev(a):
        return a

    @staticmethod
    def host(a):
        return a


def layouts(name, recipe):
    """(interleave, n): act_reference's layouts; quantized outputs need whole blocks."""
    if recipe == "bf16":
        return act_ref.layouts(name)
    if recipe == "fp8_block":
        return [(0, 128), (32, 128), (1, 128)] if moe.ACTIVATIONS[name].glu else [(0, 128)]
    return [(0, 96), (32, 64), (1, 64), (16, 64)] if moe.ACTIVATIONS[name].glu else [(0, 96)]


@dataclass
class Problem:
    name: str
    params: dict
    recipe: str
    interleave: int
    splits: np.ndarray
    x: np.ndarray  # [R, d] bf16
    w1: np.ndarray  # [G, n1, d]
    w2: np.ndarray  # [G, d, n]
    dy: np.ndarray  # [R, d], FC2's output gradient
    probs: np.ndarray
    bias: np.ndarray | None = None
    bias_scale: np.ndarray | None = None

    @property
    def rows(self):
        return self.x.shape[0]

    @property
    def n(self):
        return self.w2.shape[2]

    @property
    def end(self):
        return int(ref.offsets(self.splits, self.rows)[-1])


def make_problem(rng, name, recipe, rows, splits, interleave, n, d=None, bias=0):
    """Fresh random inputs; C has a standard deviation of about 2 (the activations'
    curved parts, clamps at ±limit hit); bias 0 none, 1 b_g, 2 b_g·s."""
    glu = moe.ACTIVATIONS[name].glu
    d = d or {"bf16": 80, "mxfp8": 64, "fp8_block": 128}[recipe]
    g, n1 = len(splits), 2 * n if glu else n
    p = Problem(
        name,
        act_ref.first_params(name),
        recipe,
        interleave,
        np.array(splits, np.int32),
        rng.standard_normal((rows, d)).astype(BF16),
        (rng.standard_normal((g, n1, d)) * (2.0 / np.sqrt(d))).astype(BF16),
        (rng.standard_normal((g, d, n)) / np.sqrt(n)).astype(BF16),
        rng.standard_normal((rows, d)).astype(BF16),
        (rng.random(rows) * 1.5 + 0.25).astype(np.float32),
    )
    if bias:
        p.bias = (rng.standard_normal((g, n1)) * 0.5).astype(np.float32)
    if bias == 2:
        p.bias_scale = (rng.random(rows) + 0.5).astype(np.float32)
    return p


def operands(be, p):
    """The GEMM operands on the backend: bf16 arrays, or their quantized copies (the
    recipe's inputs; FP8-block weights in 128 x 128 blocks), and the float64 values the
    kernels multiply (dequantized)."""
    x, w1, w2, dy = (be.dev(a) for a in (p.x, p.w1, p.w2, p.dy))
    if p.recipe == "bf16":
        return (x, w1, dy, w2), tuple(a.astype(np.float64) for a in (p.x, p.w1, p.dy, p.w2))
    g, n1, d = p.w1.shape
    wb = dict(block=(128, 128)) if p.recipe == "fp8_block" else {}
    q = (
        moe.quantize(x, p.recipe),
        moe.quantize(be.dev(np.ascontiguousarray(p.w1.reshape(g * n1, d))), p.recipe, **wb),
        moe.quantize(dy, p.recipe),
        moe.quantize(be.dev(np.ascontiguousarray(p.w2.reshape(g * d, p.n))), p.recipe, axis=0, **wb),
    )
    shapes = (p.x.shape, p.w1.shape, p.dy.shape, p.w2.shape)
    return q, tuple(be.host(moe.dequantize(a)).astype(np.float64).reshape(s) for a, s in zip(q, shapes))


def fc1(be, p, ops, mode="exact", config=None, **kw):
    return moe.fc1_forward(
        ops[0],
        ops[1],
        be.dev(p.splits),
        be.dev(p.probs),
        p.name,
        p.recipe,
        bias=None if p.bias is None else be.dev(p.bias),
        bias_scale=None if p.bias_scale is None else be.dev(p.bias_scale),
        interleave=p.interleave,
        act_params=p.params,
        mode=mode,
        config=config or CONFIG[p.recipe],
        **kw,
    )


def fc2(be, p, ops, c, recompute=True, config=None):
    return moe.fc2_dgrad(
        ops[2],
        ops[3],
        be.dev(p.splits),
        c,
        be.dev(p.probs),
        p.name,
        p.recipe,
        interleave=p.interleave,
        act_params=p.params,
        recompute=recompute,
        config=config or CONFIG[p.recipe],
    )


def bits(a):
    return np.ascontiguousarray(a).view(np.uint8)


def assert_same(got, expected, what):
    assert got.shape == expected.shape, f"{what}: shape {got.shape} != {expected.shape}"
    diff = (bits(got) != bits(expected)).reshape(got.shape[0], -1).any(axis=1)
    assert not diff.any(), f"{what}: {diff.sum()} of {diff.size} rows differ, first row {np.argmax(diff)}"


def group_blocks(splits, rows, block):
    """(first row, rows, first column in the columnwise copy, padded rows) per non-empty group."""
    off = ref.offsets(splits, rows)
    sizes = np.diff(off)
    pad = np.concatenate([[0], np.cumsum(-(-sizes // block) * block)])
    return [(int(off[g]), int(sizes[g]), int(pad[g]), int(pad[g + 1] - pad[g])) for g in range(len(sizes)) if sizes[g]]


def host_q(be, q):
    """(codes, scales) on the host, compared by assert_same bit for bit."""
    return be.host(q.data), be.host(q.scale)


def assert_quantized_as(be, pair, values, splits, what):
    """pair = (rowwise, columnwise) quantized copies hold exactly moe.quantize of the bf16
    `values` [end, width]: rowwise the rows, columnwise each group zero-padded to whole
    blocks of rows."""
    row, col = pair
    end, width = values.shape
    data, scale = host_q(be, row)
    if end:
        qd, qs = host_q(be, moe.quantize(be.dev(values), row.recipe))
        assert_same(data[:end], qd, f"{what} rowwise codes")
        assert_same(scale[:end], qs, f"{what} rowwise scales")
    assert_columns_as(be, col, values, splits, what)


def assert_columns_as(be, col, values, splits, what):
    cdata, cscale = host_q(be, col)
    qb = BLOCK[col.recipe]
    for r0, size, c0, padded in group_blocks(splits, values.shape[0], qb):
        block = np.zeros((padded, values.shape[1]), BF16)
        block[:size] = values[r0 : r0 + size]
        qd, qs = host_q(be, moe.quantize(be.dev(block), col.recipe, axis=0))
        assert_same(cdata[:, c0 : c0 + padded], qd, f"{what} columnwise codes, group at row {r0}")
        assert_same(cscale[:, c0 // qb : (c0 + padded) // qb], qs, f"{what} columnwise scales, group at row {r0}")


def check_against_unfused(be, p, config=None):
    """The fused outputs bit for bit against the unfused composition, exact mode; returns
    the fused (C, y, dh, dprobs, y_col)."""
    ops, _ = operands(be, p)
    end, splits, config = p.end, be.dev(p.splits), config or CONFIG[p.recipe]
    c, y = fc1(be, p, ops, config=config)
    bias = None if p.bias is None else be.dev(p.bias)
    scale = None if p.bias_scale is None else be.dev(p.bias_scale)
    c_ref = moe.grouped_gemm(ops[0], ops[1], splits, bias, scale, config=config)
    assert_same(be.host(c)[:end], be.host(c_ref)[:end], "C")
    probs = be.dev(p.probs)
    y_ref = be.host(moe.scaled_act(p.name, c_ref, probs, p.interleave, **p.params))[:end]
    if p.recipe == "bf16":
        assert_same(be.host(y)[:end], y_ref, "y")
    else:
        assert_quantized_as(be, y, y_ref, p.splits, "y")
    dh, dprobs, y_col = fc2(be, p, ops, c, config=config)
    g = moe.grouped_gemm_dgrad(ops[2], ops[3], splits, config=config)
    dh_ref, ds_ref = (be.host(a) for a in moe.scaled_act_backward(p.name, c, probs, g, p.interleave, **p.params))
    assert_same(be.host(dprobs)[:end], ds_ref[:end], "dprobs")
    assert not be.host(dprobs)[end:].any(), "dprobs of rows past the groups must be 0"
    if p.recipe == "bf16":
        assert_same(be.host(dh)[:end], dh_ref[:end], "dh")
        assert_same(be.host(y_col)[:end], be.host(y)[:end], "recomputed y_col vs the forward's y")
    else:
        assert_quantized_as(be, dh, dh_ref[:end], p.splits, "dh")
        qb = BLOCK[p.recipe]
        cols = group_blocks(p.splits, p.rows, qb)
        last = cols[-1][2] + cols[-1][3] if cols else 0
        got, fwd = host_q(be, y_col), host_q(be, y[1])
        assert_same(got[0][:, :last], fwd[0][:, :last], "recomputed y_col codes vs the forward's")
        assert_same(got[1][:, : last // qb], fwd[1][:, : last // qb], "recomputed y_col scales vs the forward's")
    return c, y, dh, dprobs, y_col


def split_c(p, c64):
    return act_ref.glu_split(c64, p.interleave) if moe.ACTIVATIONS[p.name].glu else (c64, None)


def merge(p, da, db):
    return da if db is None else act_ref.glu_merge(da, db, p.interleave)


def dequantized_rows(be, y, end):
    return be.host(moe.dequantize(y[0]))[:end] if isinstance(y, tuple) else be.host(y)[:end].astype(np.float64)


def check_against_float64(be, p, outputs, ops64, config=None):
    """C, y, dh and dprobs against float64: tight bounds where the inputs are the kernels'
    own (y from C, dh from the dgrad's bf16 output), the error RMS end to end."""
    c, y, dh, dprobs, _ = outputs
    end, rec = p.end, p.recipe
    if not end:
        return
    x64, w1_64, dy64, w2_64 = ops64
    c_ref, mag = ref.forward(x64, w1_64, p.splits, p.bias, p.bias_scale)
    fp8 = rec != "bf16"
    block_error = be.fp8_block_error if fp8 else 0.0
    ref.check(be.host(c)[:end], c_ref, mag, x64.shape[1] + 1, "bfloat16", "C", "mxfp8" if fp8 else "bf16", block_error)
    c64 = be.host(c)[:end].astype(np.float64)
    a, b = split_c(p, c64)
    s = p.probs[:end]
    full = act_ref.full_params(p.name, p.params)
    f, _, d, _ = act_ref.evaluate(p.name, a, b, full)
    y_got = dequantized_rows(be, y, end)
    if rec == "bf16":
        act_ref.check_forward(be.host(y)[:end], p.name, a, b, s, full)
    assert_rms(y_got, s[:, None] * f, rec, "y")
    g64, _ = ref.dgrad(dy64, w2_64, p.splits)
    gs = g64 * s.astype(np.float64)[:, None]
    dh_ref = merge(p, gs * d[0], gs * d[1]) if b is not None else gs * d
    assert_rms(dequantized_rows(be, dh, end), dh_ref, rec, "dh")
    assert_rms(be.host(dprobs)[:end], np.sum(g64 * f, axis=1), "bf16", "dprobs")  # g's bf16 rounding
    if rec == "bf16":  # tight: from the dgrad's own bf16 output g
        cfg = config or CONFIG[rec]
        g = be.host(moe.grouped_gemm_dgrad(be.dev(p.dy), be.dev(p.w2), be.dev(p.splits), config=cfg))[:end]
        g = g.astype(np.float64)
        act_ref.check_backward(be.host(dh)[:end], be.host(dprobs)[:end], p.name, a, b, s, g, full, p.interleave)


def fc2_wgrad64(be, p, y, dy2):
    """float64 dw2_g = dy2_gᵀ y_g [G, d, n] from the FC2 input as the wgrad reads it: bf16
    rows, or the columnwise quantized copy (group g from its padded column)."""
    g = len(p.splits)
    dw = np.zeros((g, dy2.shape[1], p.n))
    if isinstance(y, tuple):
        cols = be.host(moe.dequantize(y[1]))
        off = ref.offsets(p.splits, p.rows)
        blocks = {r0: (c0, size) for r0, size, c0, _ in group_blocks(p.splits, p.rows, BLOCK[p.recipe])}
        for i in range(g):
            if off[i] in blocks and off[i + 1] > off[i]:
                c0, size = blocks[off[i]]
                dw[i] = dy2[off[i] : off[i] + size].T @ cols[c0 : c0 + size]
        return dw
    return ref.wgrad(dy2, be.host(y)[: p.end].astype(np.float64), p.splits)[0]


def accumulator_deviation(be, p, rng, config=None):
    """(stats of the FC2 wgrad from accumulator mode's y against exact mode's, y_acc and
    its float64 reference); C is the same in both modes."""
    ops, ops64 = operands(be, p)
    c_e, y_e = fc1(be, p, ops, config=config)
    c_a, y_a = fc1(be, p, ops, mode="accumulator", config=config)
    end = p.end
    assert_same(be.host(c_a)[:end], be.host(c_e)[:end], "C (accumulator vs exact mode)")
    dy2 = rng.standard_normal((end, p.dy.shape[1])).astype(BF16).astype(np.float64)
    dw_e, dw_a = fc2_wgrad64(be, p, y_e, dy2), fc2_wgrad64(be, p, y_a, dy2)
    h64, _ = ref.forward(*ops64[:2], p.splits, p.bias, p.bias_scale)
    a, b = split_c(p, h64)
    f = act_ref.evaluate(p.name, a, b, act_ref.full_params(p.name, p.params))[0]
    return error_stats(dw_a, dw_e), dequantized_rows(be, y_a, end), p.probs[:end, None] * f


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("name", NAMES)
def test_fused_equals_unfused_and_float64(rng, name, recipe, case):
    rows, splits = CASES[case]
    for interleave, n in layouts(name, recipe):
        p = make_problem(rng, name, recipe, rows, splits, interleave, n)
        outputs = check_against_unfused(Numpy, p)
        check_against_float64(Numpy, p, outputs, operands(Numpy, p)[1])


@pytest.mark.parametrize("bias", [1, 2], ids=["bias", "scaled_bias"])
@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("name", ["swiglu", "srelu"])
def test_bias(rng, name, recipe, bias):
    for interleave, n in layouts(name, recipe)[:2]:
        p = make_problem(rng, name, recipe, *CASES["several"], interleave, n, bias=bias)
        outputs = check_against_unfused(Numpy, p)
        check_against_float64(Numpy, p, outputs, operands(Numpy, p)[1])


@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("name", NAMES)
def test_accumulator_mode(rng, name, recipe):
    rows, splits = CASES["several"]
    (interleave, n), unary_n = layouts(name, recipe)[0], layouts("srelu", recipe)[0][1]
    p = make_problem(rng, name, recipe, rows, splits, interleave, n, bias=1)
    base = make_problem(rng, "srelu", recipe, rows, splits, 0, unary_n, bias=1)
    baseline = accumulator_deviation(Numpy, base, rng)[0]
    stats, y_acc, y_ref = accumulator_deviation(Numpy, p, rng)
    print(f"{name} {recipe}: FC2 wgrad deviation {stats}, SReLU's {baseline}")
    assert stats.rms > 0, "accumulator mode gave exact mode's y: the mode had no effect"
    assert stats.rms <= ACC_RMS[recipe] and stats.rms <= ACC_BASELINE * baseline.rms, (stats, baseline)
    assert stats.max <= ACC_MAX, stats
    assert_rms(y_acc, y_ref, recipe, "accumulator-mode y")


@pytest.mark.parametrize("recipe", RECIPES)
def test_dprobs_is_reproducible_and_independent_of_tiles(rng, recipe):
    p = make_problem(rng, "swiglu", recipe, *CASES["several"], 0, 128 if recipe == "fp8_block" else 96)
    ops, _ = operands(Numpy, p)
    c, _ = fc1(Numpy, p, ops)
    first = fc2(Numpy, p, ops, c)[1]
    # Other row and column tiles, the same K step (the dgrad's fp32 sums, whose bf16
    # rounding g enters dprobs, follow the K loop's order).
    configs = [SMALL, moe.GemmConfig(64, 64, 32, 4, 2), moe.GemmConfig(32, 128, 32, 4, 2)]
    if recipe == "fp8_block":
        configs = [CONFIG[recipe], moe.GemmConfig(128, 256, 32, 4, 2)]
    for config in configs:
        assert_same(fc2(Numpy, p, ops, c, config=config)[1], first, f"dprobs with {config}")


@pytest.mark.parametrize("bias", [0, 1, 2], ids=["no_bias", "bias", "scaled_bias"])
@pytest.mark.parametrize("name", NAMES)
def test_persistent_kernels_are_bitwise_the_per_tile_kernels(rng, name, bias):
    """fc1_persistent_kernel and fc2_dgrad_persistent_kernel (descriptors, a loop over the
    tiles) against fc1_kernel and fc2_dgrad_kernel, FC1 in both modes, every layout: the
    same bits (the stride-1 interleave from one product of both columns' weights). An
    interleave that splits a column tile's runs (16 of a 32-column tile), or a d that the
    K step does not divide (the dgrad), refuses persistent=True."""
    on, off = SMALL._replace(persistent=True), SMALL._replace(persistent=False)
    glu = moe.ACTIVATIONS[name].glu
    for interleave, n in layouts(name, "bf16"):
        p = make_problem(rng, name, "bf16", *CASES["several"], interleave, n, d=96, bias=bias)
        ops, _ = operands(Numpy, p)
        for mode in ("exact", "accumulator"):
            got, want = fc1(Numpy, p, ops, mode, on), fc1(Numpy, p, ops, mode, off)
            for a, b, what in zip(got, want, ("C", "y")):
                assert_same(a[: p.end], b[: p.end], f"{what} ({interleave}, {mode})")
        c = got[0]
        outs = fc2(Numpy, p, ops, c, config=on), fc2(Numpy, p, ops, c, config=off)
        for a, b, what in zip(*outs, ("dh", "dprobs", "y")):
            assert_same(a[: p.end], b[: p.end], f"{what} ({interleave})")
    p = make_problem(rng, name, "bf16", *CASES["several"], 0, 64, d=80)
    ops, _ = operands(Numpy, p)
    with pytest.raises(ValueError, match="multiple of config.block_k"):
        fc2(Numpy, p, ops, fc1(Numpy, p, ops)[0], config=on)
    if glu:
        p = make_problem(rng, name, "bf16", *CASES["several"], 16, 64, d=96)
        with pytest.raises(ValueError, match="GLU interleave"):
            fc1(Numpy, p, operands(Numpy, p)[0], config=on)


def test_weight_list_is_bitwise_the_grouped_weight(rng):
    p = make_problem(rng, "swiglu", "bf16", *CASES["several"], 32, 96)
    ops, _ = operands(Numpy, p)
    c, y = fc1(Numpy, p, ops)
    dh, ds, yc = fc2(Numpy, p, ops, c)
    lists = (ops[0], [np.ascontiguousarray(w) for w in p.w1], ops[2], [np.ascontiguousarray(w) for w in p.w2])
    c2, y2 = fc1(Numpy, p, lists)
    dh2, ds2, yc2 = fc2(Numpy, p, lists, c2)
    for a, b, what in ((c, c2, "C"), (y, y2, "y"), (dh, dh2, "dh"), (ds, ds2, "dprobs"), (yc, yc2, "y_col")):
        assert_same(a[: p.end], b[: p.end], what)


def test_recompute_off_and_bf16_output(rng):
    p = make_problem(rng, "gelu_tanh", "mxfp8", *CASES["several"], 0, 64)
    ops, _ = operands(Numpy, p)
    c, y = fc1(Numpy, p, ops)
    c2, y_bf16 = fc1(Numpy, p, ops, quantize_out=False)
    assert y_bf16.dtype == BF16 and y_bf16.shape == (p.rows, p.n)
    assert_quantized_as(Numpy, y, y_bf16[: p.end], p.splits, "y vs quantize_out=False's")
    dh, ds, y_col = fc2(Numpy, p, ops, c, recompute=False)
    assert y_col is None
    assert_same(ds, fc2(Numpy, p, ops, c)[1], "dprobs with and without recompute")


def test_bad_input(rng):
    p = make_problem(rng, "swiglu", "bf16", *CASES["several"], 0, 64)
    ops, _ = operands(Numpy, p)
    c, _ = fc1(Numpy, p, ops)
    x, w1, dy, w2 = ops
    s, pr = p.splits, p.probs
    f1, f2 = moe.fc1_forward, moe.fc2_dgrad
    qx = moe.quantize(np.ascontiguousarray(p.x[:, :64]), "mxfp8")
    bad = [
        (lambda: f1(x, w1, s, pr, "relu"), ValueError, "unknown activation 'relu'"),
        (lambda: f1(x, w1, s, pr, "swiglu", "mxfp4"), ValueError, "recipe must be one of"),
        (lambda: f1(x, w1, s, pr, "swiglu", mode="fast"), ValueError, "mode must be one of"),
        (lambda: f1(x, w1, s, pr, "swiglu", interleave=3), ValueError, "multiple of 2 \\* interleave"),
        (lambda: f1(x, w1, s, pr, "srelu", interleave=32), ValueError, "interleave applies to GLU"),
        (lambda: f1(x, w1, s, pr[:10], "swiglu"), ValueError, "probs must have shape"),
        (lambda: f1(x, w1, s, pr.astype(np.float64), "swiglu"), TypeError, "probs must be float32"),
        (lambda: f1(x, w1, s[:2], pr, "swiglu"), ValueError, "one size per group"),
        (lambda: f1(x.astype(np.float32), w1, s, pr, "swiglu"), TypeError, "x must be bfloat16"),
        (lambda: f1(qx, w1, s, pr, "swiglu", "mxfp8"), TypeError, "w1 must be a moe.Quantized"),
        (lambda: f1(x, w1, s, pr, "swiglu", "mxfp8"), TypeError, "x must be a moe.Quantized"),
        (lambda: f1(qx, w1, s, pr, "swiglu"), TypeError, "recipe 'bf16' takes bf16 x"),
        (lambda: f1(x, w1, s, pr, "tanh_srelu"), ValueError, "needs the parameter 'c_s'"),
        (lambda: f1(x, w1, s, pr, "swiglu", act_params={"limit": 1.0}), ValueError, "no parameter 'limit'"),
        (lambda: f1(x, w1, s, pr, "swiglu", bias=np.zeros((5, 7), np.float32)), ValueError, "bias must have shape"),
        (lambda: f1(x, w1, s, pr, "swiglu", config=moe.GemmConfig(32, 16, 32)), ValueError, "block_n must be >= 32"),
        (lambda: f2(dy, w2, s, c, pr, "srelu"), ValueError, "c must be FC1's output"),
        (lambda: f2(dy, w2, s, np.ascontiguousarray(c[:, :64]), pr, "swiglu"), ValueError, "c must be FC1's output"),
        (lambda: f2(dy, w1, s, c, pr, "swiglu"), ValueError, "dy has 80 columns"),
        (lambda: f2(dy, w2, s, c.astype(np.float32), pr, "swiglu"), TypeError, "c must be bfloat16"),
        (lambda: f2(dy, w2, s, c, pr, "swiglu", "fp8_block"), TypeError, "dy must be a moe.Quantized"),
        (lambda: f2(dy, w2, s, c, pr, "swiglu", "nvfp4"), ValueError, "dy must be a rowwise NVFP4 copy"),
    ]
    for call, err, text in bad:
        with pytest.raises(err, match=text):
            call()


def test_bad_mxfp8_input(rng):
    p = make_problem(rng, "swiglu", "mxfp8", *CASES["several"], 0, 64)
    (qx, qw1, qdy, qw2), _ = operands(Numpy, p)
    c, _ = fc1(Numpy, p, (qx, qw1, qdy, qw2))
    s, pr = p.splits, p.probs
    f1, f2 = moe.fc1_forward, moe.fc2_dgrad
    g, n1, d = p.w1.shape
    narrow = moe.quantize(np.ascontiguousarray(p.w1[:, :80].reshape(-1, d)), "mxfp8")  # n = 40
    # n = 96 in blocks of 48: neither dividing the 32 columns of a tile nor whole MXFP8 blocks.
    qw96, c96 = moe.quantize(np.zeros((g * d, 96), BF16), "mxfp8", axis=0), np.zeros((p.rows, 192), BF16)
    bad = [
        (lambda: f1(qx, narrow, s, pr, "swiglu", "mxfp8"), ValueError, "multiple of 32, got 40"),
        (
            lambda: f2(qdy, qw96, s, c96, pr, "swiglu", "mxfp8", interleave=48),
            ValueError,
            "interleave \\(48\\) to divide",
        ),
        (lambda: f2(qdy, qw1, s, c, pr, "swiglu", "mxfp8"), ValueError, "columnwise"),
        (lambda: f1(qx, qw1, s[:3], pr, "swiglu", "mxfp8"), ValueError, "w1 quantizes"),
        (lambda: f1(qx, qw1, s, pr, "swiglu", "mxfp8", config=SMALL._replace(block_m=16)), ValueError, "block_m"),
    ]
    for call, err, text in bad:
        with pytest.raises(err, match=text):
            call()


@pytest.mark.parametrize("recipe", ["bf16", "mxfp8"])
@pytest.mark.parametrize("name", NAMES)
def test_dgrad_epilogue_in_column_halves(rng, name, recipe, monkeypatch):
    """fused.DGRAD_HALVES (the FC2 dgrad's epilogue on its 128-column tile's halves, one
    after the other): the same bits as the unfused composition, per tile and (bf16)
    persistent, 192 columns (a partial second tile)."""
    monkeypatch.setattr(host_fused, "DGRAD_HALVES", True)
    wide = moe.GemmConfig(64, 128, 32, 4, 2)
    act = moe.ACTIVATIONS[name]
    for interleave, _ in layouts(name, recipe):
        _, k = host_fused._layout("test", act, 2 * 192 if act.glu else 192, interleave)
        assert host_fused._dgrad_halves(act, k, wide, recipe, 1 if recipe == "bf16" else BLOCK[recipe])
        p = make_problem(rng, name, recipe, *CASES["several"], interleave, 192, d=96)
        persistent = recipe == "bf16" and interleave in (0, 1)
        for config in [wide] + ([wide._replace(persistent=True)] if persistent else []):
            check_against_unfused(Numpy, p, config)
