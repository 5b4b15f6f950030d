"""moe.fc1_forward / moe.fc2_dgrad with recipe "nvfp4" (kernels_dsl/moe/fused.py's
fc1_nvfp4_kernel and fc2_nvfp4_kernel) on the interpreter, over the activation registry,
the GLU layouts and test_fused.py's cases (partial tiles, empty experts, the last too,
one expert owning every row, G = 1): bit for bit against the composition written here
(grouped GEMM → scaled_act → moe.quantize, the columnwise copies of each group
zero-padded to whole chunks of 16 rows with the random Hadamard transform, dh by
stochastic rounding), whole arrays (pads and blocks past the groups included) and the
tensor scales; recompute's y_col against the forward's; y, dh and dprobs against float64
by error RMS. The helpers take a backend (numpy here, CUDA torch tensors in
tests/gpu/test_moe_fused_gpu.py)."""

from __future__ import annotations

import numpy as np
import pytest
from tilefuse import moe

from tests.python.moe import act_reference as act_ref
from tests.python.moe import gemm_reference as ref
from tests.python.moe.errors import assert_error_rms
from tests.python.moe.test_fused import (
    CASES,
    NAMES,
    SMALL,
    Numpy,
    assert_same,
    group_blocks,
    make_problem,
    merge,
    split_c,
)

BF16 = ref.BF16
# E2M1 keeps one mantissa bit: one round-to-nearest quantization of these tensors errs by
# about 0.095 RMS relative, a stochastic one by sqrt(2) times that (mlp_reference.py);
# bounds about 1.5 times those. The max error: at most one E2M1 step (2 at a block's
# amax 6, a third of it) of the block's largest element, after the e4m3 scale's rounding.
RMS = {"rne": 0.15, "stochastic": 0.2}
MAX_REL = 0.5


def layouts(name):
    """(interleave, n): every GLU layout with n a multiple of 16 (halves, blocks of 32
    and 16, stride 1), one width for a unary activation."""
    return [(0, 64), (32, 64), (16, 64), (1, 48)] if moe.ACTIVATIONS[name].glu else [(0, 80)]


def operands(be, p, seed):
    """(x, w1, dy, w2) as NVFP4 copies (weights in 16 x 16 tiles, dy stochastic) and the
    float64 values they stand for."""
    g, n1, d = p.w1.shape
    q = (
        moe.quantize(be.dev(p.x), "nvfp4"),
        moe.quantize(be.dev(np.ascontiguousarray(p.w1.reshape(g * n1, d))), "nvfp4", tile2d=True),
        moe.quantize(be.dev(p.dy), "nvfp4", stochastic=True, seed=seed),
        moe.quantize(be.dev(np.ascontiguousarray(p.w2.reshape(g * d, p.n))), "nvfp4", tile2d=True),
    )
    shapes = (p.x.shape, p.w1.shape, p.dy.shape, p.w2.shape)
    return q, tuple(be.host(moe.dequantize(a)).astype(np.float64).reshape(s) for a, s in zip(q, shapes))


def padded(values, splits, rp):
    """values [R, width] with each group from its padded row (whole chunks of 16), zeros elsewhere."""
    out = np.zeros((rp, values.shape[1]), BF16)
    for r0, size, c0, _ in group_blocks(splits, values.shape[0], 16):
        out[c0 : c0 + size] = values[r0 : r0 + size]
    return out


def assert_copy(be, got, want, what):
    for field in ("data", "scale", "tensor_scale"):
        assert_same(be.host(getattr(got, field)), be.host(getattr(want, field)), f"{what} {field}")


def assert_pair_as(be, pair, values, splits, what, seeds=None):
    """pair = (rowwise, columnwise) holds exactly moe.quantize of the bf16 `values` [R,
    width] (host): rowwise, and columnwise over the padded groups with the Hadamard
    transform; seeds (rowwise, columnwise): stochastic rounding keyed by them."""
    row, col = pair
    opts = [{} if seeds is None else dict(stochastic=True, seed=s) for s in (seeds or (0, 0))]
    assert_copy(be, row, moe.quantize(be.dev(values), "nvfp4", **opts[0]), f"{what} rowwise")
    want = moe.quantize(be.dev(padded(values, splits, col.shape[0])), "nvfp4", axis=0, rht=True, **opts[1])
    assert_copy(be, col, want, f"{what} columnwise")


def fc1(be, p, q, mode="exact", config=SMALL, **kw):
    bias = None if p.bias is None else be.dev(p.bias)
    scale = None if p.bias_scale is None else be.dev(p.bias_scale)
    return moe.fc1_forward(
        q[0], q[1], be.dev(p.splits), be.dev(p.probs), p.name, "nvfp4", bias=bias, bias_scale=scale,
        interleave=p.interleave, act_params=p.params, mode=mode, config=config, **kw,
    )  # fmt: skip


def fc2(be, p, q, c, seeds, recompute=True, config=SMALL):
    return moe.fc2_dgrad(
        q[2], q[3], be.dev(p.splits), c, be.dev(p.probs), p.name, "nvfp4", interleave=p.interleave,
        act_params=p.params, recompute=recompute, seeds=seeds, config=config,
    )  # fmt: skip


def composed_fc1(be, p, q, mode, config):
    """(C, y in bf16) of the composition: grouped GEMM (the fp32 accumulator in accumulator
    mode), scaled_act, bf16 roundings."""
    bias = None if p.bias is None else be.dev(p.bias)
    scale = None if p.bias_scale is None else be.dev(p.bias_scale)
    kind = np.float32 if mode == "accumulator" else BF16
    h = be.dev(np.zeros((p.rows, p.w1.shape[1]), kind))
    moe.grouped_gemm(q[0], q[1], be.dev(p.splits), bias, scale, out=h, out_dtype=np.dtype(kind).name, config=config)
    y = be.host(moe.scaled_act(p.name, h, be.dev(p.probs), p.interleave, **p.params))
    return be.host(h).astype(BF16), y.astype(BF16)


def check_against_composition(be, p, q, seeds, mode="exact", config=SMALL):
    """The fused outputs bit for bit against the composition (the same tiles: the GEMMs'
    sums follow the K loop); returns (C, y, dh, dprobs, y_col)."""
    end, splits = p.end, be.dev(p.splits)
    c, y = fc1(be, p, q, mode, config)
    c_ref, y_ref = composed_fc1(be, p, q, mode, config)
    assert_same(be.host(c)[:end], c_ref[:end], "C")
    assert_pair_as(be, y, y_ref, p.splits, "y")
    dh, dprobs, y_col = fc2(be, p, q, c, seeds, config=config)
    g = moe.grouped_gemm_dgrad(q[2], q[3], splits, out=be.dev(np.zeros((p.rows, p.n), BF16)), config=config)
    dh_ref, ds_ref = (
        be.host(a) for a in moe.scaled_act_backward(p.name, c, be.dev(p.probs), g, p.interleave, **p.params)
    )
    assert_same(be.host(dprobs)[:end], ds_ref[:end], "dprobs")
    assert not be.host(dprobs)[end:].any(), "dprobs of rows past the groups must be 0"
    assert_pair_as(be, dh, dh_ref, p.splits, "dh", seeds)
    if mode == "exact":  # the regeneration is exact mode's y (its columnwise copy)
        assert_copy(be, y_col, y[1], "recomputed y_col vs the forward's")
    return c, y, dh, dprobs, y_col


def assert_rms(got, expected, bound, what, max_rel=MAX_REL):
    """errors.assert_error_rms; the max error's ceiling max_rel of the largest |expected|."""
    expected = np.asarray(expected, np.float64)
    peak = np.abs(expected).max() / np.sqrt(np.mean(expected * expected))
    return assert_error_rms(got, expected, rms_bound=bound, max_bound=max_rel * peak, what=what)


def check_against_float64(be, p, outputs, q64):
    """y and dh (dequantized rowwise copies) against float64 from the kernels' own C and
    the dgrad of the dequantized operands; dprobs against float64."""
    c, y, dh, dprobs, _ = outputs
    end = p.end
    if not end:
        return
    a, b = split_c(p, be.host(c)[:end].astype(np.float64))
    s = p.probs[:end].astype(np.float64)
    f, _, d, _ = act_ref.evaluate(p.name, a, b, act_ref.full_params(p.name, p.params))
    assert_rms(be.host(moe.dequantize(y[0]))[:end], s[:, None] * f, RMS["rne"], "y")
    g64, _ = ref.dgrad(q64[2], q64[3], p.splits)
    gs = g64 * s[:, None]
    want = merge(p, gs * d[0], gs * d[1]) if b is not None else gs * d
    assert_rms(be.host(moe.dequantize(dh[0]))[:end], want, RMS["stochastic"], "dh")
    # dprobs: g's bf16 rounding (2^-9 relative) and fp32 sums; its max at most 2^-7 of the peak.
    assert_rms(be.host(dprobs)[:end], np.sum(g64 * f, axis=1), 2.0**-8, "dprobs", 2.0**-7)


def seeds_of(rng):
    return tuple(int(v) for v in rng.integers(0, 2**63, 3, dtype=np.int64))


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", NAMES)
def test_fused_nvfp4_equals_composition_and_float64(rng, name, case):
    rows, splits = CASES[case]
    for interleave, n in layouts(name):
        p = make_problem(rng, name, "nvfp4", rows, splits, interleave, n, d=64, bias=1 if case == "several" else 0)
        dy_seed, *seeds = seeds_of(rng)
        q, q64 = operands(Numpy, p, dy_seed)
        outputs = check_against_composition(Numpy, p, q, tuple(seeds))
        check_against_float64(Numpy, p, outputs, q64)


@pytest.mark.parametrize("name", ["swiglu", "srelu"])
def test_accumulator_mode_round_to_nearest_and_scaled_bias(rng, name):
    """Accumulator mode (the activation of the fp32 accumulator), dh by round-to-nearest
    (no seeds), the scaled bias: each still the composition's bits."""
    interleave, n = layouts(name)[0]
    p = make_problem(rng, name, "nvfp4", *CASES["several"], interleave, n, d=64, bias=2)
    q, _ = operands(Numpy, p, seeds_of(rng)[0])
    check_against_composition(Numpy, p, q, None, mode="accumulator")


def test_seeds_and_tiles(rng):
    """The same seeds give the same bits with other tiles; other seeds other bits; y is
    the quantization of quantize_out=False's bf16 y."""
    p = make_problem(rng, "swiglu", "nvfp4", *CASES["several"], 32, 64, d=64)
    dy_seed, *seeds = seeds_of(rng)
    q, _ = operands(Numpy, p, dy_seed)
    c, y = fc1(Numpy, p, q)
    dh, ds, _ = fc2(Numpy, p, q, c, tuple(seeds))
    big = moe.GemmConfig(64, 64, 32, 4, 2)
    c2, y2 = fc1(Numpy, p, q, config=big)
    dh2, ds2, _ = fc2(Numpy, p, q, c2, tuple(seeds), config=big)
    for got, want, what in ((y2, y, "y"), (dh2, dh, "dh")):
        for i in range(2):
            assert_copy(Numpy, got[i], want[i], f"{what}[{i}] with {big}")
    assert_same(ds2, ds, "dprobs")
    _, y_bf16 = fc1(Numpy, p, q, quantize_out=False)
    assert y_bf16.dtype == BF16 and y_bf16.shape == (p.rows, p.n)
    assert_pair_as(Numpy, y, y_bf16, p.splits, "y vs quantize_out=False's")
    other = fc2(Numpy, p, q, c, (seeds[0] ^ 1, seeds[1]))[0]
    assert (other[0].data != dh[0].data).any(), "another rowwise seed gave the same bits"
    assert_copy(Numpy, other[1], dh[1], "dh columnwise (its seed unchanged)")


def test_bad_nvfp4_input(rng):
    p = make_problem(rng, "swiglu", "nvfp4", *CASES["several"], 0, 64, d=64)
    q, _ = operands(Numpy, p, 1)
    c, _ = fc1(Numpy, p, q)
    s, pr = p.splits, p.probs
    f1, f2 = moe.fc1_forward, moe.fc2_dgrad
    mx = moe.quantize(p.x, "mxfp8")
    bad = [
        (lambda: f1(mx, q[1], s, pr, "swiglu", "nvfp4"), ValueError, "x must be a rowwise NVFP4 copy"),
        (lambda: f1(q[0], moe.quantize(p.x[:, :32], "nvfp4"), s, pr, "swiglu", "nvfp4"), ValueError, "w1 quantizes"),
        (lambda: f1(q[0], q[1], s[:3], pr, "swiglu", "nvfp4"), ValueError, "w1 quantizes"),
        (lambda: f2(q[2], q[1], s, c, pr, "swiglu", "nvfp4"), ValueError, "w2 quantizes"),
        (lambda: f2(q[2], q[3], s, c, pr, "swiglu", "nvfp4", config=SMALL._replace(block_m=8)), ValueError, "block_m"),
        (lambda: f2(p.dy, p.w2, s, c, pr, "swiglu", seeds=(1, 2)), ValueError, "seeds"),
    ]
    for call, err, text in bad:
        with pytest.raises(err, match=text):
            call()
