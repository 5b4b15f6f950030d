"""Scaled activations (kernels_dsl/moe/activations.py through tilefuse.moe) on the
interpreter, against the float64 references of act_reference.py (SPEC-moe.md §2; the
error bounds are derived there). Every test is parametrized over moe.ACTIVATIONS.
Inputs are fresh random data every run (the seed is printed and shown on failure).
"""

import os
import shutil

import numpy as np
import pytest
import tilefuse as tf
import tilefuse.language as tl
from tilefuse import gpu, moe

from kernels_dsl.moe import activations as kernels
from tests.ptxas import PTXAS, assert_assembles
from tests.python.moe.act_reference import (
    BF16,
    C_OPS,
    REFERENCE,
    as_h,
    canonical_row_sums,
    check_backward,
    check_dh,
    check_dprobs,
    check_forward,
    evaluate,
    fc1_epilogue,
    fc1_epilogue_kernel,
    first_params,
    full_params,
    glu_split,
    layouts,
    make_inputs,
    relu,
    tiled_dprobs,
    underflow,
)
from tests.python.moe.errors import U32, assert_within

CASES = [
    pytest.param(name, params, id=f"{name}{''.join(f'-{k}={v}' for k, v in params.items())}")
    for name in moe.ACTIVATIONS
    for params in (REFERENCE[name][1] if name in REFERENCE else [{}])
]
NAMES = list(moe.ACTIVATIONS)
ROWS = 37  # 3 row tiles of 16, the last partial


@pytest.mark.parametrize("dtype", [BF16, np.float32], ids=["bf16", "f32"])
@pytest.mark.parametrize("name,params", CASES)
def test_forward(rng, name, params, dtype):
    for interleave, n in layouts(name):
        p, a, b, s, _ = make_inputs(rng, name, params, ROWS, n, dtype)
        y = moe.scaled_act(name, as_h(a, b, interleave, dtype), s, interleave=interleave, **params)
        assert y.dtype == dtype and y.shape == (ROWS, n)
        check_forward(y, name, a, b, s, p)


# (interleave, n) of the fused quantization: whole blocks, a partial last column tile
# (n = 160 at the default 128 columns), GLU halves, blocks and stride 1.
QUANT_LAYOUTS = {"mxfp8": [(0, 160), (32, 96), (1, 64)], "fp8_block": [(0, 384), (128, 256), (1, 128)]}


def quant_bits(q):
    return q.data.view(np.uint8), q.scale.view(np.uint8 if q.scale.dtype.itemsize == 1 else np.uint32)


@pytest.mark.parametrize("quantize", ["mxfp8", "fp8_block"])
@pytest.mark.parametrize("dtype", [BF16, np.float32], ids=["bf16", "f32"])
@pytest.mark.parametrize("name,params", CASES)
def test_forward_quantized(rng, name, params, dtype, quantize):
    """scaled_act(quantize=...) in one kernel is bit for bit moe.quantize of scaled_act's y
    (y itself is checked against float64 above), NaN and inf inputs included."""
    layouts_q = QUANT_LAYOUTS[quantize] if moe.ACTIVATIONS[name].glu else QUANT_LAYOUTS[quantize][:1]
    for interleave, n in layouts_q:
        p, a, b, s, _ = make_inputs(rng, name, params, ROWS, n, dtype)
        h = as_h(a, b, interleave, dtype)
        q = moe.scaled_act(name, h, s, interleave=interleave, quantize=quantize, **params)
        ref = moe.quantize(moe.scaled_act(name, h, s, interleave=interleave, **params), quantize)
        assert (q.recipe, q.axis, q.shape, q.fmt, q.block) == (ref.recipe, ref.axis, ref.shape, ref.fmt, ref.block)
        assert q.data.shape == ref.data.shape and q.scale.shape == ref.scale.shape
        for got, want in zip(quant_bits(q), quant_bits(ref)):
            np.testing.assert_array_equal(got, want, err_msg=f"{quantize} interleave={interleave} n={n}")


def test_forward_quantized_config(rng):
    """A narrower explicit tile (MXFP8 at 32 columns) gives the same bits; bad requests are
    refused by name."""
    p, a, b, s, _ = make_inputs(rng, "swiglu", {}, ROWS, 96, BF16)
    h = as_h(a, b, 0, BF16)
    want = quant_bits(moe.quantize(moe.scaled_act("swiglu", h, s), "mxfp8"))
    got = quant_bits(moe.scaled_act("swiglu", h, s, quantize="mxfp8", config=moe.ActConfig(8, 32)))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    _, a2, b2, _, _ = make_inputs(rng, "swiglu", {}, ROWS, 256, BF16)
    with pytest.raises(ValueError, match="block_cols a multiple of 128"):
        moe.scaled_act("swiglu", as_h(a2, b2, 0, BF16), s, quantize="fp8_block", config=moe.ActConfig(16, 64))
    with pytest.raises(ValueError, match="multiple of 128, got 96"):
        moe.scaled_act("swiglu", h, s, quantize="fp8_block")
    with pytest.raises(ValueError, match="quantize must be None or one of"):
        moe.scaled_act("swiglu", h, s, quantize="nvfp4")


@pytest.mark.parametrize(
    "dtypes", [(BF16, BF16), (np.float32, np.float32), (BF16, np.float32)], ids=["bf16", "f32", "bf16-dy_f32"]
)
@pytest.mark.parametrize("name,params", CASES)
def test_backward(rng, name, params, dtypes):
    dtype, dy_dtype = dtypes
    for interleave, n in layouts(name):
        p, a, b, s, g = make_inputs(rng, name, params, ROWS, n, dtype, dy_dtype)
        h = as_h(a, b, interleave, dtype)
        dh, ds = moe.scaled_act_backward(name, h, s, g, interleave=interleave, **params)
        assert dh.dtype == dtype and dh.shape == h.shape and ds.dtype == np.float32 and ds.shape == (ROWS,)
        check_backward(dh, ds, name, a, b, s, g, p, interleave)


def central(f, x, step):
    return (f(x + step) - f(x - step)) / (2.0 * step)


@pytest.mark.parametrize("name,params", CASES)
def test_derivative_matches_finite_differences(rng, name, params):
    """The kernels' dh against a float64 finite difference of the float64 forward (not of
    the hand-written derivatives, which are checked against it too). Richardson's
    extrapolation of two central differences; where they disagree a kink lies within the
    step (relu near 0, the clamps) and the point is left out. Random points only: at a kink
    itself the derivative is a convention (the masks pass at equality), checked above."""
    rows, n = 24, 64
    p, a, b, s, g = make_inputs(rng, name, params, rows, n, np.float32, edges=False)
    glu = b is not None
    dh, _ = moe.scaled_act_backward(name, as_h(a, b, 0, np.float32), s, g, **params)
    got = glu_split(dh, 0) if glu else (dh,)
    _, _, d, md = evaluate(name, a, b, p)
    d, md = (d, md) if glu else ((d,), (md,))
    gs = g.astype(np.float64) * s.astype(np.float64)[:, None]
    for i, x in enumerate((a, b) if glu else (a,)):

        def fwd(v, i=i):
            args = [a, b]
            args[i] = v
            return evaluate(name, *args, p)[0]

        step = 2.0**-10 * np.maximum(1.0, np.abs(x))
        d1, d2 = central(fwd, x, step), central(fwd, x, step / 2)
        fd, spread = (4.0 * d2 - d1) / 3.0, np.abs(d2 - d1)
        smooth = spread <= 1e-5 * (1.0 + np.abs(fd))
        assert smooth.mean() > 0.9, f"{name}: only {smooth.mean():.0%} of the points are smooth"
        ref_err = np.where(smooth, np.abs(d[i] - fd) - (spread + 1e-9 * (1 + np.abs(fd))), 0.0)
        worst = np.unravel_index(np.argmax(ref_err), ref_err.shape)
        assert ref_err[worst] <= 0, f"{name}: the reference derivative {i} at {x[worst]}: {d[i][worst]} vs {fd[worst]}"
        floor = np.abs(gs) * (C_OPS * U32 * md[i] + spread + underflow(a, b))
        assert_within(got[i][smooth], (gs * fd)[smooth], floor=floor[smooth], what=f"{name} derivative {i} vs FD")


@pytest.mark.parametrize("name", NAMES)
def test_huge_inputs_give_no_nan(rng, name):
    # ±1e20: the cube of gelu_tanh's polynomial and x² overflow fp32 unless guarded.
    params = first_params(name)
    p, a, b, s, g = make_inputs(rng, name, params, 16, 64, np.float32)
    a[:8, ::3] = np.where(a[:8, ::3] > 0, 1e20, -1e20)  # rows 8.. keep a dprobs to check for srelu
    if b is not None:
        b[:8, 1::3] = np.where(b[:8, 1::3] > 0, 1e20, -1e20)
    h = as_h(a, b, 0, np.float32)
    y = moe.scaled_act(name, h, s, **params)
    dh, ds = moe.scaled_act_backward(name, h, s, g, **params)
    assert not np.isnan(y).any() and not np.isnan(dh).any()
    check_forward(y, name, a, b, s, p)
    check_dh(dh, name, a, b, s, g, p, 0)
    # dprobs where no term overflows fp32 (srelu's 1e40 does: its sums may be inf - inf).
    f, _, _, _ = evaluate(name, a, b, p)
    fit = np.all(np.abs(g * f) < np.finfo(np.float32).max / g.shape[1], axis=1)
    assert fit.sum() >= 8
    check_dprobs(ds[fit], name, a[fit], None if b is None else b[fit], g[fit], p)


@pytest.mark.parametrize("name", NAMES)
def test_dprobs_is_bitwise_reproducible_across_runs_and_configs(rng, name):
    """dprobs sums in one fixed order: two runs and three tilings (and grids) agree bit for bit."""
    params = first_params(name)
    interleave, n = layouts(name)[-1]
    n = 200 if n == 100 else n  # several column tiles of every config, the last partial
    p, a, b, s, g = make_inputs(rng, name, params, 45, n, BF16)
    h = as_h(a, b, interleave, BF16)
    configs = [moe.ActConfig(16, 64, 4), moe.ActConfig(16, 64, 4), moe.ActConfig(4, 32, 1), moe.ActConfig(32, 128, 8)]
    runs = [moe.scaled_act_backward(name, h, s, g, interleave=interleave, config=c, **params) for c in configs]
    for dh, ds in runs[1:]:
        assert ds.tobytes() == runs[0][1].tobytes()
        assert dh.tobytes() == runs[0][0].tobytes()
    check_backward(*runs[0], name, a, b, s, g, p, interleave)
    y = [moe.scaled_act(name, h, s, interleave=interleave, config=c, **params) for c in configs[1:]]
    assert y[0].tobytes() == y[1].tobytes() == y[2].tobytes()


@pytest.mark.parametrize("config", [None, moe.ActConfig(4, 32, 1), moe.ActConfig(32, 256, 8)], ids=str)
def test_dprobs_order_is_the_documented_one(rng, config):
    # srelu's terms g·relu(x)² are plain fp32 products, so numpy can form the same terms
    # and sum them in the documented order: the bits must agree.
    _, x, _, s, g = make_inputs(rng, "srelu", {}, 21, 300, BF16)
    _, ds = moe.scaled_act_backward("srelu", x.astype(BF16), s, g, config=config)
    r = np.maximum(x.astype(np.float32), np.float32(0))
    assert ds.tobytes() == canonical_row_sums(g.astype(np.float32) * (r * r)).tobytes()


@pytest.mark.parametrize("name", [n for n in NAMES if moe.ACTIVATIONS[n].glu])
def test_glu_layouts_agree_bitwise(rng, name):
    """The same a and b stored in the three layouts give the same bits."""
    params = first_params(name)
    p, a, b, s, g = make_inputs(rng, name, params, 20, 96, BF16)
    out = []
    for interleave in (0, 32, 16, 1):
        h = as_h(a, b, interleave, BF16)
        y = moe.scaled_act(name, h, s, interleave=interleave, **params)
        dh, ds = moe.scaled_act_backward(name, h, s, g, interleave=interleave, **params)
        out.append([y.tobytes(), ds.tobytes(), *(half.tobytes() for half in glu_split(dh, interleave))])
    assert all(o == out[0] for o in out[1:])


def test_tanh_srelu_with_infinite_clamp_is_srelu(rng):
    """c_s → ∞: c_s = inf is srelu bit for bit; a large finite c_s is srelu within the bounds."""
    _, x, _, s, g = make_inputs(rng, "srelu", {}, 37, 100, BF16)
    h = x.astype(BF16)
    ref = moe.scaled_act("srelu", h, s), *moe.scaled_act_backward("srelu", h, s, g)
    inf = moe.scaled_act("tanh_srelu", h, s, c_s=np.inf), *moe.scaled_act_backward("tanh_srelu", h, s, g, c_s=np.inf)
    assert all(r.tobytes() == i.tobytes() for r, i in zip(ref, inf))
    big = moe.scaled_act("tanh_srelu", h, s, c_s=1e12), *moe.scaled_act_backward("tanh_srelu", h, s, g, c_s=1e12)
    check_forward(big[0], "srelu", x, None, s, {})
    check_backward(big[1], big[2], "srelu", x, None, s, g, {}, 0)


def epilogue_operands(rng, name):
    n1 = 128 if moe.ACTIVATIONS[name].glu else 64
    x = rng.standard_normal((64, 32)).astype(BF16)
    w = (rng.standard_normal((n1, 32)) * 0.5).astype(BF16)
    return x, w, (rng.random(64) + 0.5).astype(np.float32)


@pytest.mark.parametrize("name", NAMES)
def test_device_functions_run_in_a_gemm_epilogue(rng, name):
    """A GEMM's epilogue calls the registry's forward on its accumulators (FC1's fused path):
    y is bit for bit scaled_act of the stored fp32 C, the same fp32 operations on the same values."""
    params = first_params(name)
    x, w, s = epilogue_operands(rng, name)
    c, y = fc1_epilogue(name, params, x, w, s, lambda a: a)
    h64 = x.astype(np.float64) @ w.astype(np.float64).T
    assert_within(
        c, h64, ulps=0, floor=x.shape[1] * U32 * (np.abs(x.astype(np.float64)) @ np.abs(w.astype(np.float64)).T)
    )
    assert y.tobytes() == moe.scaled_act(name, c, s, **params).tobytes()


@pytest.mark.parametrize("name", NAMES)
def test_dprobs_from_tiles_in_separate_programs_is_the_same(rng, name):
    """The contract for a dgrad epilogue: run sums stored per column tile, added in order
    by another program, give scaled_act_backward's dprobs bit for bit."""
    params = first_params(name)
    _, a, b, s, g = make_inputs(rng, name, params, 29, 200, BF16)
    h = as_h(a, b, 0, BF16)
    _, ds = moe.scaled_act_backward(name, h, s, g, **params)
    for br, bc, runs in ((8, 64, 4), (4, 32, 1), (16, 128, 2)):
        assert tiled_dprobs(name, params, h, g, lambda v: v, br, bc, runs).tobytes() == ds.tobytes()


@pytest.mark.parametrize("limit", [7.0, 3.0])
def test_clamp_masks_pass_at_equality(rng, limit):
    """clamped_swiglu's derivative masks: a = limit and b = ±limit are inside (the derivative
    of the side within the clamp), one fp32 step beyond is outside (0)."""
    step = np.spacing(np.float32(limit))
    a = np.array([[limit, limit + step, 1.0, 1.0, 1.0, 1.0]], np.float32)
    b = np.array([[2.0, 2.0, limit, -limit, limit + step, -limit - step]], np.float32)
    s, g = (rng.random(1) + 0.5).astype(np.float32), (rng.random((1, 6)) + 0.5).astype(np.float32)  # positive
    dh, _ = moe.scaled_act_backward("clamped_swiglu", as_h(a, b, 0, np.float32), s, g, limit=limit)
    da, db = glu_split(dh, 0)
    assert da[0, 0] > 0 and da[0, 1] == 0  # a = limit passes, a beyond does not
    assert np.all(db[0, 2:4] > 0) and np.all(db[0, 4:] == 0)  # b = ±limit pass, beyond does not
    _, _, (da_ref, db_ref), _ = evaluate(
        "clamped_swiglu", a.astype(np.float64), b.astype(np.float64), full_params("clamped_swiglu", {"limit": limit})
    )
    gs = g.astype(np.float64) * s.astype(np.float64)[:, None]
    assert_within(da, gs * da_ref, floor=C_OPS * U32 * np.abs(gs * da_ref))
    assert_within(db, gs * db_ref, floor=C_OPS * U32 * np.abs(gs * db_ref))


def test_gelu_forms_differ(rng):
    # The two forms are different functions (up to ~5e-4 apart near |x| = 2): each is
    # checked against its own reference above; here, that the registry does not alias them
    # and their difference is float64's.
    x = (rng.random((3, 64)) * 8 - 4).astype(np.float32)
    s = (rng.random(3) + 0.5).astype(np.float32)
    t, e = (moe.scaled_act(n, x, s).astype(np.float64) for n in ("gelu_tanh", "gelu_erf"))
    x64, s64 = x.astype(np.float64), s.astype(np.float64)[:, None]
    diff = s64 * (evaluate("gelu_tanh", x64, None, {})[0] - evaluate("gelu_erf", x64, None, {})[0])
    assert np.abs(diff).max() > 1e-4
    assert np.abs((t - e) - diff).max() <= 2 * C_OPS * U32 * np.abs(s64 * x64).max()


def test_defaults_are_gpt_oss():
    assert dict(moe.ACTIVATIONS["clamped_swiglu"].params) == {"limit": 7.0, "alpha": 1.702, "offset": 1.0}
    assert set(moe.ACTIVATIONS) >= {"swiglu", "clamped_swiglu", "srelu", "tanh_srelu", "gelu_tanh", "gelu_erf"}


# --- adding an activation: two device functions and a register call ---


@tf.jit
def _scaled_relu_glu_fwd(a, b, scale, p1, p2):
    return scale * tl.maximum(a, 0.0) * b


@tf.jit
def _scaled_relu_glu_bwd(a, b, scale, p1, p2):
    return tl.where(a > 0, scale * b, 0.0), scale * tl.maximum(a, 0.0)


def test_a_registered_activation_runs_everywhere(rng):
    act = moe.register(
        moe.Activation("test_relu_glu", True, _scaled_relu_glu_fwd, _scaled_relu_glu_bwd, (("scale", 1.5),))
    )
    try:
        a = np.round(rng.standard_normal((19, 64)) * 3, 2).astype(np.float32).astype(np.float64)
        b = rng.standard_normal((19, 64)).astype(np.float32).astype(np.float64)
        s = rng.random(19).astype(np.float32)
        g = rng.standard_normal((19, 64)).astype(np.float32)
        h = as_h(a, b, 32, np.float32)
        y = moe.scaled_act("test_relu_glu", h, s, interleave=32, scale=0.75)
        dh, ds = moe.scaled_act_backward("test_relu_glu", h, s, g, interleave=32, scale=0.75)
        s64, g64 = s.astype(np.float64)[:, None], g.astype(np.float64)
        f = 0.75 * relu(a) * b
        assert_within(y, s64 * f, ulps=4)
        assert_within(glu_split(dh, 32)[0], g64 * s64 * np.where(a > 0, 0.75 * b, 0.0), ulps=4)
        assert_within(glu_split(dh, 32)[1], g64 * s64 * 0.75 * relu(a), ulps=4)
        assert_within(ds, np.sum(g64 * f, axis=1), ulps=0, floor=80 * U32 * np.sum(np.abs(g64 * f), axis=1))
    finally:
        del moe.ACTIVATIONS[act.name]


def test_register_takes_device_functions_only():
    with pytest.raises(TypeError, match="'bad': bwd must be a @tilefuse.jit device function"):
        moe.register(moe.Activation("bad", False, _scaled_relu_glu_fwd, lambda x: x))
    with pytest.raises(ValueError, match="at most 3 parameters"):
        moe.register(moe.Activation("bad", True, _scaled_relu_glu_fwd, _scaled_relu_glu_bwd, (("p", 1.0),) * 4))
    assert "bad" not in moe.ACTIVATIONS


# --- bad input ---

H = np.zeros((4, 64), BF16)
P = np.ones(4, np.float32)
DY = np.zeros((4, 32), BF16)
DY_UNARY = np.zeros((4, 64), BF16)
ERRORS = [
    (lambda: moe.scaled_act("relu9", H, P), ValueError, "unknown activation 'relu9'"),
    (lambda: moe.scaled_act(3, H, P), TypeError, "name must be an activation name"),
    (lambda: moe.scaled_act("swiglu", H.astype(np.float64), P), TypeError, "h must be bf16 or float32"),
    (lambda: moe.scaled_act("swiglu", H.astype(np.int32), P), TypeError, "h must be bf16 or float32"),
    (lambda: moe.scaled_act("swiglu", H[0], P), ValueError, r"h must be 2-D"),
    (lambda: moe.scaled_act("swiglu", H[:, ::2], P), ValueError, "h must be contiguous"),
    (lambda: moe.scaled_act("swiglu", [[1.0]], P), TypeError, "h must be a numpy array or a torch tensor"),
    (lambda: moe.scaled_act("swiglu", H, P[:3]), ValueError, r"probs must have shape \(4,\)"),
    (lambda: moe.scaled_act("swiglu", H, P[:, None]), ValueError, r"probs must have shape \(4,\)"),
    (lambda: moe.scaled_act("swiglu", H, P.astype(BF16)), TypeError, "probs must be float32"),
    (lambda: moe.scaled_act("swiglu", np.zeros((4, 63), BF16), P), ValueError, "even width of h, got 63"),
    (lambda: moe.scaled_act("swiglu", np.zeros((4, 96), BF16), P, interleave=32), ValueError, "multiple of 2 \\*"),
    (lambda: moe.scaled_act("swiglu", H, P, interleave=-1), ValueError, "interleave must be >= 0"),
    (lambda: moe.scaled_act("swiglu", H, P, interleave=2.0), TypeError, "interleave must be an int"),
    (lambda: moe.scaled_act("srelu", H, P, interleave=32), ValueError, "interleave applies to GLU"),
    (lambda: moe.scaled_act("tanh_srelu", H, P), ValueError, "needs the parameter 'c_s'"),
    (lambda: moe.scaled_act("tanh_srelu", H, P, c_s=0.0), ValueError, "c_s .* must be > 0"),
    (lambda: moe.scaled_act("tanh_srelu", H, P, c_s="2"), TypeError, "parameter 'c_s' must be a number"),
    (lambda: moe.scaled_act("swiglu", H, P, limit=7.0), ValueError, "'swiglu' has no parameter 'limit'"),
    (lambda: moe.scaled_act("clamped_swiglu", H, P, limit=-1.0), ValueError, "limit must be > 0"),
    (lambda: moe.scaled_act("srelu", H, P, config=(16, 64)), TypeError, "config must be a moe.ActConfig"),
    (lambda: moe.scaled_act("srelu", H, P, config=moe.ActConfig(12, 64)), ValueError, "block_rows must be a power"),
    (
        lambda: moe.scaled_act_backward("swiglu", H, P, DY[:, :16].copy()),
        ValueError,
        r"dy must have the output's shape",
    ),
    (lambda: moe.scaled_act_backward("swiglu", H, P, DY.astype(np.float16)), TypeError, "dy must be bf16 or float32"),
    (lambda: moe.scaled_act_backward("swiglu", H, P, DY, config=moe.ActConfig(16, 16)), ValueError, "multiple of 32"),
    (lambda: moe.scaled_act_backward("srelu", H, P, DY), ValueError, r"dy must have the output's shape \(4, 64\)"),
]


@pytest.mark.parametrize("call,exc,msg", ERRORS, ids=[e[2] for e in ERRORS])
def test_bad_input_names_the_argument(call, exc, msg):
    with pytest.raises(exc, match=msg):
        call()


def test_empty_inputs():
    h, p = np.zeros((0, 64), BF16), np.zeros(0, np.float32)
    assert moe.scaled_act("swiglu", h, p).shape == (0, 32)
    dh, ds = moe.scaled_act_backward("swiglu", h, p, np.zeros((0, 32), BF16))
    assert dh.shape == (0, 64) and ds.shape == (0,)
    # A row of width 0 has dprobs 0.
    dh, ds = moe.scaled_act_backward("srelu", np.zeros((3, 0), BF16), np.ones(3, np.float32), np.zeros((3, 0), BF16))
    assert dh.shape == (3, 0) and ds.tolist() == [0.0, 0.0, 0.0]


# --- the GPU code: every activation's kernels lower to PTX that ptxas accepts ---


def lowered(kernel, args, consts):
    return gpu.lower(kernel.compile(*args, **consts), "sm_90a", 4, 3, keep_ir=False)


# (K, GLU_RUN, EVEN_ODD) as the host API passes them for BLOCK_C = 64: halves of 128
# columns, blocks of 32, stride 1.
GLU_LAYOUTS = [(128, 64, False), (32, 32, False), (1, 1, True)]


@pytest.mark.skipif(not shutil.which("ptxas") and not os.path.exists(PTXAS), reason="needs ptxas")
@pytest.mark.parametrize("name", NAMES)
def test_kernels_assemble_for_sm90_with_full_width_accesses(name, tmp_path):
    """PTX that ptxas accepts, and no perf hint (every load and store 16 bytes wide), for
    every layout; the epilogue kernel runs the activation on wgmma accumulators."""
    act = moe.ACTIVATIONS[name]
    n = 128
    h, s, dy = np.zeros((32, 2 * n if act.glu else n), BF16), np.zeros(32, np.float32), np.zeros((32, n), BF16)
    for k, run, even_odd in GLU_LAYOUTS if act.glu else [(1, 1, False)]:
        consts = dict(ACT=act, BLOCK_R=16, BLOCK_C=64, GLU_RUN=run, EVEN_ODD=even_odd)
        q8, s8, s32 = np.zeros((32, n), np.int8), np.zeros((32, n // 32), np.int8), np.zeros((32, 1), np.float32)
        for kernel, args, extra in (
            (kernels.scaled_act_fwd_kernel, (h, s, dy, dy, 32, n, k, 7.0, 1.7, 1.0), {}),
            (kernels.scaled_act_fwd_kernel, (h, s, q8, s8, 32, n, k, 7.0, 1.7, 1.0), dict(OUT=1)),
            (kernels.scaled_act_fwd_kernel, (h, s, q8, s32, 32, n, k, 7.0, 1.7, 1.0), dict(OUT=2, BLOCK_C=128)),
            (kernels.scaled_act_bwd_kernel, (h, s, dy, h, s, 32, n, k, 7.0, 1.7, 1.0), {}),
        ):
            if extra.get("BLOCK_C") == 128 and run == 64:
                extra = dict(extra, GLU_RUN=128)
            low = lowered(kernel, args, consts | extra)
            assert low["hints"] == [], (k, low["hints"])
            assert_assembles(low["ptx"], "sm_90a", tmp_path)
    x, w = np.zeros((64, 32), BF16), np.zeros((2 * n if act.glu else n, 32), BF16)
    c, y = np.zeros((64, w.shape[0]), np.float32), np.zeros((64, n), np.float32)
    low = lowered(fc1_epilogue_kernel, (x, w, s, c, y, 7.0, 1.7, 1.0), dict(ACT=act, M=64, N=n, K=32))
    assert "wgmma" in low["ptx"]
    assert_assembles(low["ptx"], "sm_90a", tmp_path)
