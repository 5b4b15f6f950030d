"""moe.mlp_forward / mlp_backward / backward_dw on the interpreter (SPEC-moe.md §5-§7),
parametrized over the activation registry and the recipes, on fresh random inputs
(the seed is printed): against float64 (mlp_reference.py), recompute on vs off bitwise,
the record and saved bytes, the accumulator mode's FC2 wgrad against SReLU's, every
option of §5, and bad input.

CI runs a covering subset: every activation under bf16 and MXFP8 for every check, and
FP8-block (128-multiple dims, the slowest on the interpreter) for one GLU and one unary
activation; every option under bf16 for every activation, and under MXFP8 and FP8-block
for one activation each. TILEFUSE_MOE_FULL=1 runs the whole cross product (.ci/run does).
"""

import dataclasses
import os

import ml_dtypes
import numpy as np
import pytest
from tilefuse import moe
from tilefuse.moe import _mlp_ops as ops

from tests.python.moe import mlp_cases as cases
from tests.python.moe import mlp_reference as ref
from tests.python.moe.gemm_reference import offsets

FULL = os.environ.get("TILEFUSE_MOE_FULL") == "1"
NAMES = list(moe.ACTIVATIONS)
RECIPES = ("bf16", "mxfp8", "fp8_block", "nvfp4")
CI_FP8_BLOCK = ("swiglu", "srelu")
# every option under a quantized recipe
CI_OPTIONS = (("swiglu", "mxfp8"), ("srelu", "fp8_block"), ("gelu_tanh", "nvfp4"))


def heavy(*values, when):
    return pytest.param(*values, marks=pytest.mark.skipif(when and not FULL, reason="TILEFUSE_MOE_FULL=1"))


def grid():
    """Every activation x recipe, FP8-block for CI_FP8_BLOCK only unless FULL."""
    return [
        heavy(name, recipe, when=recipe == "fp8_block" and name not in CI_FP8_BLOCK)
        for recipe in RECIPES
        for name in NAMES
    ]


@pytest.fixture(scope="module")
def rng():
    seed = np.random.SeedSequence().entropy
    print(f"seed = {seed}")
    return np.random.default_rng(seed)


_BASE = {}


def baseline(rng, name, recipe):
    """(inputs, the baseline run): ragged experts, bias and scaled bias, no recompute;
    one per activation and recipe, shared by the tests of this module."""
    if (name, recipe) not in _BASE:
        inp = ref.make_inputs(rng, name, recipe, "ragged")
        _BASE[name, recipe] = inp, cases.run(inp, cases.config(name, recipe))
    return _BASE[name, recipe]


@pytest.mark.parametrize("name,recipe", grid())
def test_against_float64(rng, name, recipe):
    inp, res = baseline(rng, name, recipe)
    cases.check_reference(res, inp, cases.config(name, recipe))


@pytest.mark.parametrize("name,recipe", grid())
def test_record_names_the_epilogues(rng, name, recipe):
    """ctx.record says which FC1 and FC2-dgrad epilogues ran (moe.fused's kernels, every
    recipe) and which wgrads."""
    _, res = baseline(rng, name, recipe)
    assert f"fc1_forward:fused-exact-{recipe}" in res.record, res.record
    assert f"fc2_dgrad:fused-{recipe}" in res.record, res.record
    # The wgrads run on the recipe's own operands (block-scaled fp8, NVFP4), never dequantized.
    for step in ("fc1_wgrad", "fc2_wgrad"):
        assert f"{step}:grouped_gemm_wgrad-{recipe}" in res.record, res.record


@pytest.mark.parametrize("case,recipe", [("one_owns_all", "bf16"), ("g1", "bf16"), ("no_rows", "mxfp8")])
@pytest.mark.parametrize("name", NAMES)
def test_expert_layouts(rng, name, case, recipe):
    inp = ref.make_inputs(rng, name, recipe, case)
    cfg = cases.config(name, recipe)
    cases.check_reference(cases.run(inp, cfg), inp, cfg)


@pytest.mark.parametrize("name,recipe", grid())
def test_recompute_is_bitwise(rng, name, recipe):
    inp, off = baseline(rng, name, recipe)
    on = cases.run(inp, cases.config(name, recipe, recompute=True))
    drop = cases.check_recompute(off, on, inp, cases.config(name, recipe), np.asarray)
    print(f"{name} {recipe}: recompute saves {drop} bytes of {off.saved_bytes}")


@pytest.mark.parametrize("name,recipe", grid())
def test_accumulator_mode(rng, name, recipe):
    inp = ref.make_inputs(rng, name, recipe, "ragged")
    off, on = cases.accumulator_check(inp, name, recipe, cases.run, np.asarray)
    cfg = cases.config(name, recipe, recompute_mode="accumulator")
    cases.check_reference(off, inp, cfg)
    cases.check_reference(on, inp, cfg)


def _options_grid():
    return [
        heavy(name, recipe, option, when=recipe != "bf16" and (name, recipe) not in CI_OPTIONS)
        for recipe in RECIPES
        for name in NAMES
        for option in cases.OPTIONS
    ]


@pytest.mark.parametrize("name,recipe,option", _options_grid())
def test_option(rng, name, recipe, option):
    changes, needs, as_list, bitwise = cases.OPTIONS[option]
    inp, base = baseline(rng, name, recipe)
    cfg = cases.config(name, recipe, **changes)
    res = cases.run(inp, cfg, needs, as_list)
    cases.check_reference(res, inp, cfg, needs)
    if bitwise:
        keys = [k for k in ("out",) + ref.GRADS if res.grads.get(k) is not None or k == "out"]
        cases.assert_bitwise(base, res, keys, np.asarray)
    if as_list:  # the experts are views of one buffer: its storage counted once
        assert res.saved_bytes == base.saved_bytes, (res.saved_bytes, base.saved_bytes)
    if cfg.delay_wgrad:
        assert any(k.startswith("fc2_wgrad.input") for k in res.saved_after_backward), res.saved_after_backward
        assert "fc2_wgrad:queued" in res.record
    # What a frozen tensor's gradient needs is neither saved nor computed.
    frozen = {k for k, v in (needs or {}).items() if v is False}
    for weight, tensor, step in (("w1", "x", "fc1_wgrad"), ("w2", "fc2_input", "fc2_wgrad")):
        if weight in frozen:
            assert not any(s.startswith(tensor) for s in res.saved), res.saved
            assert not any(s.startswith(step) for s in res.record), res.record
    if "x" in frozen:
        assert not any(s.startswith("w1") for s in res.saved) and "fc1_dgrad" not in " ".join(res.record)


@pytest.mark.parametrize("name", NAMES)
def test_saved_bytes(rng, name):
    """bf16, everything required: x, probs, splits, C, the FC2 input, both weights and b2
    (the scaled bias's dprobs reads it), from the shapes."""
    inp, res = baseline(rng, name, "bf16")
    (t, d), (g, n1, _), n = inp["x"].shape, inp["w1"].shape, inp["w2"].shape[2]
    want = 2 * t * d + 4 * t + 4 * g + 2 * t * n1 + 2 * t * n + 2 * g * d * n + 2 * g * n1 * d + 4 * g * d
    assert res.saved_bytes == want, (res.saved, res.saved_bytes, want)


@pytest.mark.parametrize("pad", ["nan", "huge"])
@pytest.mark.parametrize("recipe", RECIPES)
def test_pad_rows_are_ignored(rng, recipe, pad):
    """NaN, or finite values 1000 times the largest in use (not a power of two, which NVFP4's
    two-level scale would absorb), in x, probs and dy past the splits' sum: every result
    bitwise as with the baseline's random pad rows (the columnwise copies zero those rows
    before their blocks' scales; NVFP4's rowwise copies take their tensor scale over the
    rows in use only)."""
    inp, base = baseline(rng, "swiglu", recipe)
    end = offsets(inp["splits"], inp["x"].shape[0])[-1]
    assert end < inp["x"].shape[0]
    bad = {k: inp[k].copy() for k in ("x", "probs", "dy")}
    for v in bad.values():
        v[end:] = np.nan if pad == "nan" else 1000 * np.abs(v[:end].astype(np.float32)).max()
    res = cases.run(inp | bad, cases.config("swiglu", recipe))
    cases.assert_bitwise(base, res, ("out",) + ref.GRADS, np.asarray)


def test_nvfp4_columnwise_copy_is_the_padded_layout_transformed(rng):
    """NVFP4's wgrad copies: the groups' rows from multiples of 16 (zeros between and past
    them), quantized as one tensor (one S_enc) with the random Hadamard transform, whose
    chunks of 16 then never mix two groups."""
    rows, sizes = ref.CASES["ragged"]
    a = rng.standard_normal((rows, 64)).astype(ml_dtypes.bfloat16)
    q = ops.quantize_cols(a, "nvfp4", np.array(sizes, np.int32))
    padded = np.zeros((q.shape[0], 64), a.dtype)
    off, col = offsets(sizes, rows), 0
    for g in range(len(sizes)):
        padded[col : col + off[g + 1] - off[g]] = a[off[g] : off[g + 1]]
        col += -(-(off[g + 1] - off[g]) // 16) * 16
    want = moe.quantize(padded, "nvfp4", axis=0, rht=True)
    assert q.rht and not q.stochastic
    for f in ("data", "scale", "tensor_scale"):
        assert np.array_equal(getattr(q, f).view(np.uint8), getattr(want, f).view(np.uint8)), f


@pytest.mark.parametrize("recipe", ["mxfp8", "fp8_block"])
def test_columnwise_copies_pad_each_group(rng, recipe):
    """The wgrads' columnwise copies (moe.fused's layout): group g's codes and scales are
    moe.quantize of its rows zero-padded to whole blocks, axis=0, from column padded[g]."""
    rows, sizes = ref.CASES["ragged"]
    a = rng.standard_normal((rows, 128)).astype(ml_dtypes.bfloat16)
    q = ops.quantize_cols(a, recipe, np.array(sizes, np.int32))
    blk, off, col = (32 if recipe == "mxfp8" else 128), offsets(sizes, rows), 0
    for g in range(len(sizes)):
        size = off[g + 1] - off[g]
        p = -(-size // blk) * blk
        if p:
            block = np.zeros((p, a.shape[1]), a.dtype)
            block[:size] = a[off[g] : off[g + 1]]
            want = moe.quantize(block, recipe, axis=0)
            got_data, got_scale = q.data[:, col : col + p], q.scale[:, col // blk : (col + p) // blk]
            assert (got_data.view(np.uint8) == want.data.view(np.uint8)).all(), f"group {g}: codes"
            assert (got_scale.view(np.uint8) == want.scale.view(np.uint8)).all(), f"group {g}: scales"
        col += p
    assert not np.asarray(moe.dequantize(q), np.float64)[col:].any(), "rows past the padded groups are not 0"


@pytest.mark.parametrize("name", NAMES)
def test_nvfp4_stochastic_rounding_is_seeded_per_call(rng, name):
    """NVFP4's gradients are rounded stochastically from mlp_backward's seed: the same seed
    gives the same bits, another seed other bits (dx, dw1, dw2: downstream of dy's and
    dh's copies), and the other results (which read no stochastic copy) stay bitwise."""
    inp, base = baseline(rng, name, "nvfp4")
    cfg = cases.config(name, "nvfp4")
    cases.assert_bitwise(base, cases.run(inp, cfg), ("out",) + ref.GRADS, np.asarray)
    other = cases.run(inp, cfg, seed=cases.SEED + 1)
    cases.assert_bitwise(base, other, ("out", "db2"), np.asarray)
    for k in ("dx", "dw1", "dw2"):
        assert not np.array_equal(
            np.asarray(base.grads[k]), np.asarray(other.grads[k])
        ), f"{k}: the seed changed nothing"


@pytest.mark.parametrize("interleave", [32, 1])
@pytest.mark.parametrize("name", [n for n in NAMES if moe.ACTIVATIONS[n].glu])
def test_glu_interleave(rng, name, interleave):
    inp = ref.make_inputs(rng, name, "bf16", "ragged")
    cfg = cases.config(name, "bf16", interleave=interleave)
    cases.check_reference(cases.run(inp, cfg), inp, cfg)


# --- bad input: a ValueError/TypeError naming the argument ---


def _inputs(rng):
    inp = ref.make_inputs(rng, "swiglu", "bf16", "ragged")
    return inp, cases.config("swiglu", "bf16")


def _forward(inp, cfg, needs=None, **kw):
    return moe.mlp_forward(inp["x"], inp["probs"], inp["splits"], ref.params_of(inp), cfg, needs, **kw)


BAD = {
    "negative_splits": (lambda i, c: i | {"splits": np.array([30, -1, 45, 20, 0], np.int32)}, None, "negative"),
    "splits_past_rows": (lambda i, c: i | {"splits": np.array([30, 0, 45, 26, 0], np.int32)}, None, "sum past"),
    "splits_dtype": (lambda i, c: i | {"splits": i["splits"].astype(np.int64)}, None, "splits must be int32"),
    "splits_count": (lambda i, c: i | {"splits": i["splits"][:3]}, None, "splits names 3 experts"),
    "x_dtype": (lambda i, c: i | {"x": i["x"].astype(np.float32)}, None, "x must be bfloat16"),
    "x_ndim": (lambda i, c: i | {"x": i["x"][None]}, None, "x must be 2-D"),
    "x_columns": (lambda i, c: i | {"x": i["x"][:, :32].copy()}, None, "x has d = 32"),
    "probs_shape": (lambda i, c: i | {"probs": i["probs"][:-1]}, None, "probs must have shape"),
    "probs_dtype": (lambda i, c: i | {"probs": i["probs"].astype(np.float64)}, None, "probs must be float32"),
    "w1_dtype": (lambda i, c: i | {"w1": i["w1"].astype(np.float32)}, None, r"params\['w1'\]"),
    "w2_width": (lambda i, c: i | {"w2": i["w2"][:, :, :16].copy()}, None, "w2 takes n = 16"),
    "b1_shape": (lambda i, c: i | {"b1": i["b1"][:, :8].copy()}, None, r"params\['b1'\] must have shape"),
    "bias_without_cfg": (lambda i, c: i, dict(bias=False, scaled_bias=False), "cfg.bias is False"),
    "activation": (lambda i, c: i, dict(activation="relu6"), "unknown activation 'relu6'"),
    "recipe": (lambda i, c: i, dict(recipe="int4"), "cfg.recipe must be one of"),
    "recompute_mode": (lambda i, c: i, dict(recompute_mode="fast"), "cfg.recompute_mode"),
    "scaled_bias_alone": (lambda i, c: i, dict(bias=False), "scaled_bias"),
    "act_param": (lambda i, c: i, dict(act_params={"beta": 1.0}), "no parameter 'beta'"),
    "interleave": (lambda i, c: i, dict(interleave=24), "interleave"),
    "mxfp8_dims": (lambda i, c: i | {"w2": i["w2"][:, :, :16].copy(), "w1": i["w1"][:, :32].copy(),
                                     "b1": i["b1"][:, :32].copy()}, dict(recipe="mxfp8"), "n to be a multiple of 32"),
    "nvfp4_dims": (lambda i, c: i | {"w2": i["w2"][:, :, :8].copy(), "w1": i["w1"][:, :16].copy(),
                                     "b1": i["b1"][:, :16].copy()}, dict(recipe="nvfp4"), "n to be a multiple of 16"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input(rng, case):
    inp, cfg = _inputs(rng)
    change_inputs, change_cfg, message = BAD[case]
    cfg = dataclasses.replace(cfg, **(change_cfg or {}))
    with pytest.raises((ValueError, TypeError), match=message):
        _forward(change_inputs(inp, cfg), cfg)


def test_bad_requires_grad_cfg_and_backward(rng):
    inp, cfg = _inputs(rng)
    with pytest.raises(ValueError, match="requires_grad has no entry 'w3'"):
        _forward(inp, cfg, dict(w3=True))
    with pytest.raises(TypeError, match="cfg must be a moe.MLPConfig"):
        _forward(inp, dict(activation="swiglu"))
    with pytest.raises(ValueError, match="check_splits"):
        _forward(inp, cfg, check_splits="later")
    out, ctx = _forward(inp, cfg)
    with pytest.raises(ValueError, match="backward_dw: ctx: run mlp_backward first"):
        moe.backward_dw(ctx)
    with pytest.raises(ValueError, match="dy must have the output's shape"):
        moe.mlp_backward(ctx, inp["dy"][:-1])
    with pytest.raises(TypeError, match="dy must be bfloat16"):
        moe.mlp_backward(ctx, inp["dy"].astype(np.float32))
    with pytest.raises(ValueError, match="seed must be an int"):
        moe.mlp_backward(ctx, inp["dy"], seed=-1)
    moe.mlp_backward(ctx, inp["dy"])
    with pytest.raises(ValueError, match="the backward already ran"):
        moe.mlp_backward(ctx, inp["dy"])
    with pytest.raises(ValueError, match="no wgrads queued"):
        moe.backward_dw(ctx)
    assert ctx.saved == {} and ctx.saved_bytes == 0


def test_splits_status_flag(rng):
    """The device-side check's flag, read on the host here (interpreter memory)."""
    from kernels_dsl.moe import mlp as k

    inp, cfg = _inputs(rng)
    _, ctx = _forward(inp, cfg)
    assert int(ctx.splits_status[0]) == k.SPLITS_OK
    big = np.array([2**30, 2**30, 2**30, 2**30, 2**30], np.int32)  # sums past int32: no overflow
    with pytest.raises(ValueError, match="sum past"):
        _forward(inp | {"splits": big}, cfg)


def test_torch_cpu_tensor_is_refused(rng):
    torch = pytest.importorskip("torch")
    inp, cfg = _inputs(rng)
    x = torch.from_numpy(inp["x"].astype(np.float32)).to(torch.bfloat16)
    with pytest.raises(TypeError, match="CUDA"):
        moe.mlp_forward(x, inp["probs"], inp["splits"], ref.params_of(inp), cfg)


def test_output_dtypes_and_bf16_bias(rng):
    """dx and dw bf16, dprobs fp32, db in its bias's dtype (bf16 biases here)."""
    inp = ref.make_inputs(rng, "srelu", "bf16", "ragged")
    inp |= {k: inp[k].astype(ml_dtypes.bfloat16) for k in ("b1", "b2")}
    cfg = cases.config("srelu", "bf16")
    res = cases.run(inp, cfg)
    bf16, g = ml_dtypes.bfloat16, res.grads
    assert res.out.dtype == bf16 and g["dx"].dtype == bf16 and g["dw1"].dtype == bf16 and g["dw2"].dtype == bf16
    assert g["dprobs"].dtype == np.float32 and g["db1"].dtype == bf16 and g["db2"].dtype == bf16
    cases.check_reference(res, inp, cfg)


def test_a_training_step_leaves_no_reference_cycles(rng):
    """mlp_forward + mlp_backward create no cyclic garbage, so the activations and
    gradients they allocate are freed as soon as the caller drops them (GPU memory would
    otherwise stay held until the cyclic collector ran)."""
    import gc

    inp = ref.make_inputs(rng, "swiglu", "mxfp8", "ragged")
    cfg = cases.config("swiglu", "mxfp8")
    cases.run(inp, cfg)  # compiles outside the measurement
    gc.collect()
    gc.disable()
    try:
        cases.run(inp, dataclasses.replace(cfg, recompute=True))
        assert gc.collect() == 0
    finally:
        gc.enable()
