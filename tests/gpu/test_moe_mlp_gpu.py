"""moe.mlp_forward / mlp_backward / backward_dw on CUDA torch tensors: the interpreter
suite (tests/python/moe/test_mlp.py, through mlp_cases.py) at larger shapes, every
activation x recipe x option, plus the bytes held between forward and backward and the
peak memory, with recompute off and on (torch.cuda.memory_allocated and
max_memory_allocated; printed: run with -s to see them), and the device-side splits
check without a host sync."""

import dataclasses

import ml_dtypes
import numpy as np
import pytest
from tilefuse import moe

from tests.python.moe import mlp_cases as cases
from tests.python.moe import mlp_reference as ref

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]

NAMES = list(moe.ACTIVATIONS)
RECIPES = ("bf16", "mxfp8", "fp8_block", "nvfp4")
# The options under NVFP4 for one activation (the GPU test budget; the interpreter runs
# them all with TILEFUSE_MOE_FULL=1).
NVFP4_OPTIONS_FOR = "gelu_tanh"
# Several 128-row tiles, partial ones, empty experts (the last too), pad rows; one expert
# owning every row; G = 1.
CASES = {
    "ragged": (1000, [300, 0, 333, 250, 0]),
    "one_owns_all": (768, [0, 768, 0, 0]),
    "g1": (500, [500]),
}
DIMS = {"bf16": (256, 192), "mxfp8": (256, 192), "fp8_block": (256, 256), "nvfp4": (256, 192)}


def to_device(a):
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).cuda()
    return torch.from_numpy(a).cuda()


def to_numpy(t):
    t = t.detach().cpu()
    return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16) if t.dtype == torch.bfloat16 else t.numpy()


@pytest.fixture(scope="module")
def rng():
    seed = np.random.SeedSequence().entropy
    print(f"seed = {seed}")
    return np.random.default_rng(seed)


def inputs(rng, name, recipe, case="ragged"):
    return ref.make_inputs(rng, name, recipe, case, cases=CASES, dims=DIMS)


def run(inp, cfg, needs=None, as_list=False):
    return cases.run(inp, cfg, needs, as_list, to_device)


_BASE = {}


def baseline(rng, name, recipe):
    if (name, recipe) not in _BASE:
        inp = inputs(rng, name, recipe)
        _BASE[name, recipe] = inp, run(inp, cases.config(name, recipe))
    return _BASE[name, recipe]


@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("name", NAMES)
def test_against_float64(rng, name, recipe):
    inp, res = baseline(rng, name, recipe)
    cases.check_reference(res, inp, cases.config(name, recipe), to_numpy=to_numpy, to_device=to_device)


@pytest.mark.parametrize("recipe", ["bf16", "mxfp8"])
@pytest.mark.parametrize("case", ["one_owns_all", "g1"])
@pytest.mark.parametrize("name", NAMES)
def test_expert_layouts(rng, name, case, recipe):
    inp = inputs(rng, name, recipe, case)
    cfg = cases.config(name, recipe)
    cases.check_reference(run(inp, cfg), inp, cfg, to_numpy=to_numpy, to_device=to_device)


def _memory(inp, cfg):
    """(bytes held from the end of the forward to the backward, peak bytes above the
    start over forward + backward) of one run, the inputs already on the device."""
    d = {k: to_device(v) for k, v in inp.items()}
    torch.cuda.synchronize()
    start = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out, ctx = moe.mlp_forward(d["x"], d["probs"], d["splits"], ref.params_of(d), cfg)
    torch.cuda.synchronize()
    held = torch.cuda.memory_allocated() - start - out.untyped_storage().nbytes()
    moe.mlp_backward(ctx, d["dy"])
    torch.cuda.synchronize()
    return held, torch.cuda.max_memory_allocated() - start


@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("name", NAMES)
def test_recompute_is_bitwise_and_frees_memory(rng, name, recipe):
    inp, off = baseline(rng, name, recipe)
    cfg = cases.config(name, recipe)
    on = run(inp, dataclasses.replace(cfg, recompute=True))
    drop = cases.check_recompute(off, on, inp, cfg, to_numpy)
    (held_off, peak_off), (held_on, peak_on) = (_memory(inp, dataclasses.replace(cfg, recompute=r)) for r in (0, 1))
    print(
        f"{name} {recipe}: held between forward and backward {held_off} -> {held_on} bytes with recompute "
        f"(the FC2 input: {drop}); peak over forward + backward {peak_off} -> {peak_on}"
    )
    # torch's caching allocator rounds each allocation up to 512 bytes: NVFP4's 4-byte
    # tensor scale holds 512 (its codes and scales are multiples of 512 here).
    rounding = 512 - 4 if recipe == "nvfp4" else 0
    assert held_off - held_on == drop + rounding, (held_off, held_on, drop)


@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("name", NAMES)
def test_accumulator_mode(rng, name, recipe):
    inp = inputs(rng, name, recipe)
    _, on = cases.accumulator_check(inp, name, recipe, run, to_numpy)
    cfg = cases.config(name, recipe, recompute_mode="accumulator")
    cases.check_reference(on, inp, cfg, to_numpy=to_numpy, to_device=to_device)


@pytest.mark.parametrize("option", list(cases.OPTIONS))
@pytest.mark.parametrize(
    "name,recipe", [(n, r) for r in RECIPES for n in NAMES if r != "nvfp4" or n == NVFP4_OPTIONS_FOR]
)
def test_option(rng, name, recipe, option):
    changes, needs, as_list, bitwise = cases.OPTIONS[option]
    inp, base = baseline(rng, name, recipe)
    cfg = cases.config(name, recipe, **changes)
    res = run(inp, cfg, needs, as_list)
    cases.check_reference(res, inp, cfg, needs, to_numpy=to_numpy, to_device=to_device)
    if bitwise:
        keys = [k for k in ("out",) + ref.GRADS if k == "out" or res.grads.get(k) is not None]
        cases.assert_bitwise(base, res, keys, to_numpy)


def test_bad_splits_flagged_on_the_device_without_a_sync(rng):
    from kernels_dsl.moe import mlp as k

    inp = inputs(rng, "swiglu", "bf16")
    cfg = cases.config("swiglu", "bf16")
    d = {key: to_device(v) for key, v in inp.items()}
    for sizes, code, message in (([300, -5, 333, 250, 0], k.SPLITS_NEGATIVE, "negative"),
                                 ([300, 0, 333, 250, 200], k.SPLITS_PAST_ROWS, "sum past")):  # fmt: skip
        splits = torch.tensor(sizes, dtype=torch.int32, device="cuda")
        out, ctx = moe.mlp_forward(d["x"], d["probs"], splits, ref.params_of(d), cfg)  # no sync, no error
        assert int(ctx.splits_status[0]) == code
        assert torch.isfinite(out.float()).all()  # the kernels clamped the sizes
        with pytest.raises(ValueError, match=message):
            moe.mlp_forward(d["x"], d["probs"], splits, ref.params_of(d), cfg, check_splits="sync")


def test_cpu_and_mixed_arrays_are_refused(rng):
    inp = inputs(rng, "srelu", "bf16")
    cfg = cases.config("srelu", "bf16")
    d = {key: to_device(v) for key, v in inp.items()}
    with pytest.raises(TypeError, match="CUDA"):
        moe.mlp_forward(d["x"].cpu(), d["probs"], d["splits"], ref.params_of(d), cfg)
    with pytest.raises(TypeError, match="probs"):
        moe.mlp_forward(d["x"], inp["probs"], d["splits"], ref.params_of(d), cfg)
    _, ctx = moe.mlp_forward(d["x"], d["probs"], d["splits"], ref.params_of(d), cfg)
    with pytest.raises(TypeError, match="dy must be a"):
        moe.mlp_backward(ctx, inp["dy"])
