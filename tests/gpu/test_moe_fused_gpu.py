"""moe.fc1_forward / moe.fc2_dgrad on CUDA torch tensors at larger shapes, with the checks
of the interpreter suite (tests/python/moe/test_fused.py, whose helpers take the backend):
the fused kernels bit for bit against the unfused composition on the GPU (grouped_gemm →
scaled_act → quantize; grouped_gemm_dgrad → scaled_act_backward), against float64
references (tight bounds from the kernels' own inputs, error RMS end to end), recompute's
y_col against the forward's y bit for bit, dprobs reproducible across runs and tile
configs, and the accumulator mode's FC2-wgrad deviation by error RMS (per recipe and
relative to SReLU's). Every activation of the registry, recipes bf16, MXFP8 and FP8-block, several
tiles and partial tiles, empty experts (the last too), one expert owning every row, G = 1,
the GPU's default config and a second one. NVFP4 (test_fused_nvfp4.py's checks): seven
cases, most sharing one compile of each kernel (the same constexprs, other shapes)."""

import ml_dtypes
import numpy as np
import pytest
from tilefuse import moe

from tests.python.moe import test_fused as F
from tests.python.moe import test_fused_nvfp4 as NV

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]

CASES = {  # (rows R, splits)
    "skewed": (4096, [900, 0, 1500, 37, 1, 1200, 0]),
    "one_owns_all": (2048, [0, 2048, 0, 0]),
    "g1": (1500, [1400]),
}
DEFAULT = moe.GemmConfig(128, 128, 64, 8, 3)
# A second config per recipe (FP8-block's outputs need 128-column tiles).
SECOND = {
    "bf16": moe.GemmConfig(128, 64, 64, 4, 4),
    "mxfp8": moe.GemmConfig(128, 64, 64, 4, 4),
    "fp8_block": moe.GemmConfig(128, 128, 128, 8, 2),
}
D = {"bf16": 392, "mxfp8": 512, "fp8_block": 512}  # bf16: K not a multiple of the K tile
_TORCH = {
    np.dtype(ml_dtypes.bfloat16): (np.int16, "bfloat16"),
    np.dtype(ml_dtypes.float8_e4m3fn): (np.int8, "float8_e4m3fn"),
    np.dtype(ml_dtypes.float8_e8m0fnu): (np.int8, "float8_e8m0fnu"),
}


class Cuda:
    """numpy arrays to CUDA tensors and back, bit for bit (bf16 and fp8 through int views).
    The fp8 tensor cores add a 32-block's products with fewer bits (tests/gpu/
    test_moe_grouped_gemm_gpu.py's bound)."""

    fp8_block_error = 2.0**-9

    @staticmethod
    def dev(a):
        a = np.ascontiguousarray(a)
        if a.dtype in _TORCH:
            ints, name = _TORCH[a.dtype]
            return torch.from_numpy(a.view(ints)).cuda().view(getattr(torch, name))
        return torch.from_numpy(a).cuda()

    @staticmethod
    def host(t):
        if isinstance(t, np.ndarray):
            return t
        for dtype, (ints, name) in _TORCH.items():
            if t.dtype == getattr(torch, name):
                return t.contiguous().view(getattr(torch, np.dtype(ints).name)).cpu().numpy().view(dtype)
        return t.cpu().numpy()


def layouts(name, recipe):
    glu = moe.ACTIVATIONS[name].glu
    if recipe == "bf16":
        return [(0, 200), (32, 256), (1, 192)] if glu else [(0, 300)]
    if recipe == "fp8_block":
        return [(0, 256), (32, 256), (1, 128)] if glu else [(0, 384)]
    return [(0, 256), (32, 192), (1, 128), (16, 128)] if glu else [(0, 320)]


# The second config on one case: every config is a compile of each kernel variant.
RUNS = [("skewed", "default"), ("skewed", "second"), ("one_owns_all", "default"), ("g1", "default")]


@pytest.mark.parametrize("case,config", RUNS)
@pytest.mark.parametrize("recipe", F.RECIPES)
@pytest.mark.parametrize("name", F.NAMES)
def test_fused_equals_unfused_and_float64(rng, name, recipe, case, config):
    rows, splits = CASES[case]
    cfg = DEFAULT if config == "default" else SECOND[recipe]
    for interleave, n in layouts(name, recipe):
        p = F.make_problem(rng, name, recipe, rows, splits, interleave, n, d=D[recipe])
        outputs = F.check_against_unfused(Cuda, p, cfg)
        F.check_against_float64(Cuda, p, outputs, F.operands(Cuda, p)[1], cfg)


@pytest.mark.parametrize("case", ["skewed", "g1"])
@pytest.mark.parametrize("recipe", ["bf16", "mxfp8"])
@pytest.mark.parametrize("name", F.NAMES)
def test_dgrad_epilogue_in_column_halves(rng, name, recipe, case, monkeypatch):
    """fused.DGRAD_HALVES (the default): the same bits as the
    unfused composition and float64, per tile and (bf16, by default) persistent."""
    monkeypatch.setattr(F.host_fused, "DGRAD_HALVES", True)
    rows, splits = CASES[case]
    for interleave, n in layouts(name, recipe):
        p = F.make_problem(rng, name, recipe, rows, splits, interleave, n, d=D[recipe])
        outputs = F.check_against_unfused(Cuda, p, DEFAULT)
        F.check_against_float64(Cuda, p, outputs, F.operands(Cuda, p)[1], DEFAULT)


PERSISTENT = [DEFAULT, moe.GemmConfig(128, 64, 64, 4, 4), moe.GemmConfig(64, 128, 64, 4, 3)]


@pytest.mark.parametrize("config", PERSISTENT, ids=lambda c: "x".join(map(str, c[:5])))
@pytest.mark.parametrize("bias", [0, 2], ids=["no_bias", "scaled_bias"])
@pytest.mark.parametrize("name", F.NAMES)
def test_persistent_kernels(rng, name, bias, config):
    """fc1_persistent_kernel and fc2_dgrad_persistent_kernel (d = 512: the K loops on TMA
    copies) bit for bit fc1_kernel (both modes) and fc2_dgrad_kernel, and their results
    against the unfused composition and float64; the layouts whose column tiles they take
    (halves, stride 1, blocks of 32 where block_n divides them)."""
    on, off = config._replace(persistent=True), config._replace(persistent=False)
    for interleave, n in layouts(name, "bf16"):
        if moe.ACTIVATIONS[name].glu and interleave not in (0, 1) and interleave % config.block_n:
            continue
        p = F.make_problem(rng, name, "bf16", *CASES["skewed"], interleave, n, d=512, bias=bias)
        ops, ops64 = F.operands(Cuda, p)
        for mode in ("exact", "accumulator"):
            got, want = F.fc1(Cuda, p, ops, mode, on), F.fc1(Cuda, p, ops, mode, off)
            for a, b, what in zip(got, want, ("C", "y")):
                F.assert_same(Cuda.host(a)[: p.end], Cuda.host(b)[: p.end], f"{what} ({interleave}, {mode})")
        outs = F.fc2(Cuda, p, ops, got[0], config=on), F.fc2(Cuda, p, ops, got[0], config=off)
        for a, b, what in zip(*outs, ("dh", "dprobs", "y")):
            F.assert_same(Cuda.host(a)[: p.end], Cuda.host(b)[: p.end], f"{what} ({interleave})")
        F.check_against_float64(Cuda, p, F.check_against_unfused(Cuda, p, on), ops64, on)


@pytest.mark.parametrize("bias", [1, 2], ids=["bias", "scaled_bias"])
@pytest.mark.parametrize("recipe", F.RECIPES)
@pytest.mark.parametrize("name", ["swiglu", "clamped_swiglu", "srelu"])
def test_bias(rng, name, recipe, bias):
    for interleave, n in layouts(name, recipe)[:2]:
        p = F.make_problem(rng, name, recipe, *CASES["skewed"], interleave, n, d=D[recipe], bias=bias)
        outputs = F.check_against_unfused(Cuda, p, DEFAULT)
        F.check_against_float64(Cuda, p, outputs, F.operands(Cuda, p)[1], DEFAULT)


@pytest.mark.parametrize("recipe", F.RECIPES)
@pytest.mark.parametrize("name", F.NAMES)
def test_accumulator_mode(rng, name, recipe):
    rows, splits = CASES["skewed"]
    (interleave, n), unary_n = layouts(name, recipe)[0], layouts("srelu", recipe)[0][1]
    cfg = DEFAULT
    p = F.make_problem(rng, name, recipe, rows, splits, interleave, n, d=D[recipe], bias=1)
    base = F.make_problem(rng, "srelu", recipe, rows, splits, 0, unary_n, d=D[recipe], bias=1)
    baseline = F.accumulator_deviation(Cuda, base, rng, cfg)[0]
    stats, y_acc, y_ref = F.accumulator_deviation(Cuda, p, rng, cfg)
    print(f"{name} {recipe}: FC2 wgrad deviation {stats}, SReLU's {baseline}")
    assert stats.rms > 0, "accumulator mode gave exact mode's y: the mode had no effect"
    assert stats.rms <= F.ACC_RMS[recipe] and stats.rms <= F.ACC_BASELINE * baseline.rms, (stats, baseline)
    assert stats.max <= 1.0, stats
    F.assert_rms(y_acc, y_ref, recipe, "accumulator-mode y")


@pytest.mark.parametrize("recipe", F.RECIPES)
def test_dprobs_is_reproducible_and_independent_of_tiles(rng, recipe):
    p = F.make_problem(rng, "swiglu", recipe, *CASES["skewed"], 0, 256, d=D[recipe])
    ops, _ = F.operands(Cuda, p)
    c, _ = F.fc1(Cuda, p, ops, config=DEFAULT)
    first = Cuda.host(F.fc2(Cuda, p, ops, c, config=DEFAULT)[1])
    # Other row and column tiles, DEFAULT's K step (g's fp32 sums follow the K loop).
    # FP8-block takes only 128x128 tiles (its output's 128-blocks; 128x256 needs more shared
    # memory than a block has): other warps and stages there.
    configs = [DEFAULT, moe.GemmConfig(128, 128, 64, 4, 2), DEFAULT]
    if recipe != "fp8_block":
        configs += [moe.GemmConfig(64, 128, 64, 4, 3), moe.GemmConfig(128, 64, 64, 4, 4)]
        configs += [moe.GemmConfig(64, 256, 64, 4, 3)]
    for config in configs:
        F.assert_same(Cuda.host(F.fc2(Cuda, p, ops, c, config=config)[1]), first, f"dprobs with {config}")


# NVFP4: (activation, case, (interleave, n), mode, bias, config); the first three share
# every kernel's compile (only runtime arguments differ).
NVFP4_RUNS = {
    "swiglu_skewed": ("swiglu", "skewed", (0, 256), "exact", 1, "default"),
    "swiglu_one_owns_all": ("swiglu", "one_owns_all", (0, 256), "exact", 0, "default"),
    "swiglu_g1": ("swiglu", "g1", (0, 256), "exact", 1, "default"),
    "srelu": ("srelu", "skewed", (0, 320), "exact", 1, "default"),
    "clamped_swiglu_stride1": ("clamped_swiglu", "skewed", (1, 128), "exact", 0, "default"),
    "swiglu_accumulator_scaled_bias": ("swiglu", "skewed", (32, 192), "accumulator", 2, "default"),
    "swiglu_second_config": ("swiglu", "skewed", (32, 192), "exact", 0, "second"),
}


@pytest.mark.parametrize("run", NVFP4_RUNS)
def test_fused_nvfp4(rng, run):
    name, case, (interleave, n), mode, bias, config = NVFP4_RUNS[run]
    cfg = DEFAULT if config == "default" else SECOND["mxfp8"]
    p = F.make_problem(rng, name, "nvfp4", *CASES[case], interleave, n, d=512, bias=bias)
    dy_seed, *seeds = NV.seeds_of(rng)
    q, q64 = NV.operands(Cuda, p, dy_seed)
    outputs = NV.check_against_composition(Cuda, p, q, tuple(seeds), mode, cfg)
    if mode == "exact":
        NV.check_against_float64(Cuda, p, outputs, q64)
