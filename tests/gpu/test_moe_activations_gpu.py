"""Scaled activations on the GPU: tilefuse.moe on CUDA torch tensors, against the
interpreter (the same kernels on numpy copies) and against float64 (act_reference.py).

Bit-identical where the math is the same: srelu (and tanh_srelu at c_s = inf) uses only
max, mul and add, which the two backends compute bit for bit, and dprobs' fixed order is
a tree of elementwise adds, so y, dh and dprobs match bit for bit. The other activations
call exp, tanh or erf (libdevice on the GPU, within 2 fp32 ulps; the interpreter rounds
the host's double result): their outputs differ from the interpreter's by at most one ulp
of the stored dtype plus that error carried through the formula, 16 · 2^-24 · M (M the
magnitude act_reference.py derives: 2 ulps are up to 2^-22 relative, doubled where the
result is squared, as tanh_srelu's c², and the formula's other roundings on either side),
and meet the same float64 bounds. dprobs is bitwise
reproducible on the GPU across runs and launch configs (tile sizes, warps, grids).
"""

import math

import numpy as np
import pytest
import tilefuse as tf
import tilefuse.language as tl
from tilefuse import moe

from kernels_dsl.moe import activations as kernels
from tests.python.moe.act_reference import (
    BF16,
    REFERENCE,
    TINY,
    as_h,
    canonical_row_sums,
    check_backward,
    check_forward,
    evaluate,
    fc1_epilogue,
    first_params,
    glu_split,
    make_inputs,
    tiled_dprobs,
)
from tests.python.moe.errors import U32, assert_within

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]

EXACT = {"srelu"}  # no transcendental functions: bit-identical to the interpreter
CASES = [
    pytest.param(name, params, id=f"{name}{''.join(f'-{k}={v}' for k, v in params.items())}")
    for name in moe.ACTIVATIONS
    for params in (REFERENCE[name][1] if name in REFERENCE else [{}])
]
NAMES = list(moe.ACTIVATIONS)


def cuda(a):
    if a.dtype == BF16:
        return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16).cuda()
    return torch.from_numpy(np.ascontiguousarray(a)).cuda()


def host(t):
    if t.dtype == torch.bfloat16:
        return t.cpu().view(torch.int16).numpy().view(BF16)
    return t.cpu().numpy()


def gpu_layouts(name):
    # Several tiles of every default config, the last partial (rows and columns).
    return [(0, 320), (32, 320), (1, 320)] if moe.ACTIVATIONS[name].glu else [(0, 333)]


# (interleave, n) of the fused quantization on the GPU: several column tiles, the last
# partial for MXFP8 (n = 352 at 128 columns); the explicit configs vary the tile and warps.
GPU_QUANT_LAYOUTS = {"mxfp8": [(0, 352), (32, 320), (1, 160)], "fp8_block": [(0, 384), (128, 256), (1, 640)]}
QUANT_CONFIGS = [None, moe.ActConfig(8, 256, 4), moe.ActConfig(32, 128, 8), moe.ActConfig(16, 512, 8)]


@pytest.mark.parametrize("quantize", ["mxfp8", "fp8_block"])
@pytest.mark.parametrize("dtype", [BF16, np.float32], ids=["bf16", "f32"])
@pytest.mark.parametrize("name,params", CASES)
def test_forward_quantized_equals_quantize_of_forward(rng, name, params, dtype, quantize):
    """scaled_act(quantize=...) on the GPU, one kernel, is bit for bit moe.quantize of the
    GPU's scaled_act output (y checked against the interpreter and float64 above), at
    every tile config; NaN and inf inputs included."""
    layouts = GPU_QUANT_LAYOUTS[quantize] if moe.ACTIVATIONS[name].glu else GPU_QUANT_LAYOUTS[quantize][:1]
    for interleave, n in layouts:
        _, a, b, s, _ = make_inputs(rng, name, params, 203, n, dtype)
        h, sc = cuda(as_h(a, b, interleave, dtype)), cuda(s)
        ref = moe.quantize(moe.scaled_act(name, h, sc, interleave=interleave, **params), quantize)
        for cfg in QUANT_CONFIGS:
            q = moe.scaled_act(name, h, sc, interleave=interleave, quantize=quantize, config=cfg, **params)
            what = f"{quantize} interleave={interleave} n={n} config={cfg}"
            assert torch.equal(q.data.view(torch.uint8), ref.data.view(torch.uint8)), what
            assert torch.equal(q.scale.view(torch.uint8), ref.scale.view(torch.uint8)), what


def run_both(name, params, interleave, h, s, g):
    """((y, dh, ds) on the GPU, the same on the interpreter), as numpy arrays."""
    args = dict(interleave=interleave, **params)
    gpu = (moe.scaled_act(name, cuda(h), cuda(s), **args),)
    gpu += moe.scaled_act_backward(name, cuda(h), cuda(s), cuda(g), **args)
    torch.cuda.synchronize()
    cpu = (moe.scaled_act(name, h, s, **args), *moe.scaled_act_backward(name, h, s, g, **args))
    return tuple(host(t) for t in gpu), cpu


LIBDEVICE = 16  # the module docstring's allowance, in units of 2^-24 · M


def libdevice_floor(name, a, b, s, g, p, interleave):
    """Per-element allowances for the GPU-interpreter difference of y and dh (h's layout)."""
    _, mf, _, md = evaluate(name, a, b, p)
    s64 = s.astype(np.float64)[:, None]
    gs = np.abs(g.astype(np.float64) * s64)
    tiny = TINY * 64 * (1.0 + np.abs(a)) ** 2 * (1.0 + (0.0 if b is None else np.abs(b)))
    fy = s64 * (LIBDEVICE * U32 * mf + tiny)
    fdh = (
        gs * (LIBDEVICE * U32 * md + tiny)
        if b is None
        else as_h(gs * (LIBDEVICE * U32 * md[0] + tiny), gs * (LIBDEVICE * U32 * md[1] + tiny), interleave, np.float64)
    )
    return fy, fdh


@pytest.mark.parametrize("dtype", [BF16, np.float32], ids=["bf16", "f32"])
@pytest.mark.parametrize("name,params", CASES)
def test_gpu_matches_interpreter_and_float64(rng, name, params, dtype):
    for interleave, n in gpu_layouts(name):
        p, a, b, s, g = make_inputs(rng, name, params, 200, n, dtype)
        h = as_h(a, b, interleave, dtype)
        (y, dh, ds), (y_i, dh_i, ds_i) = run_both(name, params, interleave, h, s, g)
        check_forward(y, name, a, b, s, p)
        check_backward(dh, ds, name, a, b, s, g, p, interleave)
        if name in EXACT:
            assert y.tobytes() == y_i.tobytes() and dh.tobytes() == dh_i.tobytes() and ds.tobytes() == ds_i.tobytes()
        else:
            fy, fdh = libdevice_floor(name, a, b, s, g, p, interleave)
            assert_within(y, y_i.astype(np.float64), floor=fy, what=f"{name} y: GPU vs interpreter")
            assert_within(dh, dh_i.astype(np.float64), floor=fdh, what=f"{name} dh: GPU vs interpreter")


@pytest.mark.parametrize("name", NAMES)
def test_gpu_large_shape_against_float64(rng, name):
    params = first_params(name)
    glu = moe.ACTIVATIONS[name].glu
    interleave, n = (32, 768) if glu else (0, 1000)
    p, a, b, s, g = make_inputs(rng, name, params, 1500, n, BF16)
    h, sd, gd = cuda(as_h(a, b, interleave, BF16)), cuda(s), cuda(g)
    y = host(moe.scaled_act(name, h, sd, interleave=interleave, **params))
    dh, ds = (host(t) for t in moe.scaled_act_backward(name, h, sd, gd, interleave=interleave, **params))
    check_forward(y, name, a, b, s, p)
    check_backward(dh, ds, name, a, b, s, g, p, interleave)


@pytest.mark.parametrize("name", NAMES)
def test_gpu_dprobs_is_bitwise_reproducible_across_runs_and_configs(rng, name):
    params = first_params(name)
    interleave, n = (32, 640) if moe.ACTIVATIONS[name].glu else (0, 1000)
    _, a, b, s, g = make_inputs(rng, name, params, 777, n, BF16)
    h, sd, gd = cuda(as_h(a, b, interleave, BF16)), cuda(s), cuda(g)
    configs = [moe.ActConfig(16, 64, 4), moe.ActConfig(16, 64, 4), moe.ActConfig(1, 32, 1)]
    configs += [moe.ActConfig(64, 128, 8), moe.ActConfig(32, 256, 4), moe.ActConfig(128, 32, 8)]
    runs = [moe.scaled_act_backward(name, h, sd, gd, interleave=interleave, config=c, **params) for c in configs]
    first = [host(t) for t in runs[0]]
    for dh, ds in runs[1:]:
        assert host(ds).tobytes() == first[1].tobytes()
        assert host(dh).tobytes() == first[0].tobytes()


def test_gpu_tanh_srelu_with_infinite_clamp_is_srelu(rng):
    _, x, _, s, g = make_inputs(rng, "srelu", {}, 300, 333, BF16)
    h, sd, gd = cuda(x.astype(BF16)), cuda(s), cuda(g)
    ref = (moe.scaled_act("srelu", h, sd), *moe.scaled_act_backward("srelu", h, sd, gd))
    got = (
        moe.scaled_act("tanh_srelu", h, sd, c_s=math.inf),
        *moe.scaled_act_backward("tanh_srelu", h, sd, gd, c_s=math.inf),
    )
    assert all(host(r).tobytes() == host(t).tobytes() for r, t in zip(ref, got))


def test_gpu_glu_layouts_agree_bitwise(rng):
    _, a, b, s, g = make_inputs(rng, "swiglu", {}, 100, 256, BF16)
    out = []
    for interleave in (0, 32, 1):
        h = cuda(as_h(a, b, interleave, BF16))
        y = host(moe.scaled_act("swiglu", h, cuda(s), interleave=interleave))
        dh, ds = (host(t) for t in moe.scaled_act_backward("swiglu", h, cuda(s), cuda(g), interleave=interleave))
        out.append([y.tobytes(), ds.tobytes(), *(half.tobytes() for half in glu_split(dh, interleave))])
    assert out[0] == out[1] == out[2]


def test_gpu_arguments_must_share_the_device():
    h = torch.zeros((4, 64), dtype=torch.bfloat16, device="cuda")
    with pytest.raises(TypeError, match="probs must be a Tensor like h"):
        moe.scaled_act("swiglu", h, np.ones(4, np.float32))
    with pytest.raises(ValueError, match="probs is on cpu but h is on cuda"):
        moe.scaled_act("swiglu", h, torch.ones(4))
    with pytest.raises(ValueError, match="dy is on cpu"):
        moe.scaled_act_backward("swiglu", h, torch.ones(4, device="cuda"), torch.zeros((4, 32), dtype=torch.bfloat16))


@tf.jit
def _row_sums_kernel(t_ptr, out_ptr, R, N, BR: tl.constexpr, BC: tl.constexpr):
    rows = tl.program_id(0) * BR + tl.arange(0, BR)
    acc = tl.zeros([BR], tl.float32)
    for c0 in range(0, N, BC):
        cols = c0 + tl.arange(0, BC)
        m = (rows[:, None] < R) & (cols[None, :] < N)
        acc = kernels.fixed_order_row_sum(
            acc, tl.load(t_ptr + rows[:, None] * N + cols[None, :], mask=m, other=0.0), BR, BC
        )
    tl.store(out_ptr + rows, acc, mask=rows < R)


@pytest.mark.parametrize("br,bc,warps", [(16, 64, 4), (1, 32, 1), (64, 128, 8), (128, 256, 4), (8, 512, 8)])
def test_gpu_fixed_order_row_sum_is_the_documented_order(rng, br, bc, warps):
    # The reshape / split tree on the GPU's layouts: numpy's float32 sum in the same order, bit for bit.
    t = (rng.standard_normal((300, 1000)) * np.exp2(rng.integers(-20, 20, (300, 1000)))).astype(np.float32)
    out = torch.empty(300, device="cuda")
    _row_sums_kernel[(-(-300 // br),)](cuda(t), out, 300, 1000, BR=br, BC=bc, num_warps=warps)
    assert host(out).tobytes() == canonical_row_sums(t).tobytes()


@pytest.mark.parametrize("name", NAMES)
def test_gpu_epilogue_on_wgmma_accumulators_matches_scaled_act(rng, name):
    # The same fp32 operations on the same values, in the wgmma accumulator layout there and
    # a blocked layout in scaled_act: bit for bit (what exact-mode recompute relies on).
    params = first_params(name)
    n1 = 128 if moe.ACTIVATIONS[name].glu else 64
    x = rng.standard_normal((64, 32)).astype(BF16)
    w = (rng.standard_normal((n1, 32)) * 0.5).astype(BF16)
    s = (rng.random(64) + 0.5).astype(np.float32)
    c, y = fc1_epilogue(name, params, x, w, s, cuda)
    assert host(y).tobytes() == host(moe.scaled_act(name, c, cuda(s), **params)).tobytes()


@pytest.mark.parametrize("name", NAMES)
def test_gpu_dprobs_from_tiles_in_separate_programs_is_the_same(rng, name):
    # A dgrad epilogue's way (run sums per column tile, added in order by another program).
    params = first_params(name)
    _, a, b, s, g = make_inputs(rng, name, params, 333, 700, BF16)
    h = as_h(a, b, 0, BF16)
    _, ds = moe.scaled_act_backward(name, cuda(h), cuda(s), cuda(g), **params)
    for br, bc, runs in ((8, 64, 4), (1, 32, 1), (64, 256, 8)):
        assert host(tiled_dprobs(name, params, h, g, cuda, br, bc, runs)).tobytes() == host(ds).tobytes()
