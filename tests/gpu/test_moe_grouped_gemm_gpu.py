"""moe.grouped_gemm / _dgrad / _wgrad on CUDA torch tensors at larger shapes, against
torch float64 per-group matmuls of the bf16 inputs, with the interpreter suite's checks
(gemm_reference.check: one rounding plus the fp32 accumulation bound, and the error RMS
of errors.GEMM_RMS_BOUNDS): several tiles and partial tiles per dim (K and N not
multiples of the tiles, and of 16: the unaligned fallback too), empty experts (the last
too), one expert owning every row, G = 1, pad rows left as they were, device-side
clamping of the splits, both weight forms (bitwise equal), bias and scaled bias, tile
configs, and no host sync: the launches are captured in a CUDA graph and replayed with
new split sizes written into the same device buffer."""

import numpy as np
import pytest
from tilefuse import moe

from tests.python.moe import gemm_reference as ref

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]

SENTINEL = -12352.0  # exact in bf16
# (rows R, K, N, splits)
CASES = {
    "skewed": (4096, 1024, 768, [900, 0, 1500, 37, 1, 1200, 0]),
    "unaligned": (1000, 200, 100, [300, 0, 333, 250]),
    "one_owns_all": (2048, 512, 384, [0, 2048, 0, 0]),
    "g1": (1500, 256, 640, [1400]),
    "past_the_rows": (1024, 384, 256, [600, 700, 500]),
    "negative": (777, 256, 256, [300, -40, 400]),
}
CONFIGS = [None, moe.GemmConfig(64, 128, 64, 4, 4), moe.GemmConfig(128, 256, 64, 8, 3)]


@pytest.fixture
def gen():
    seed = int(np.random.SeedSequence().entropy % 2**63)
    print(f"seed = {seed}")
    return torch.Generator(device="cuda").manual_seed(seed)


def bf16(gen, *shape):
    return torch.randn(shape, generator=gen, device="cuda").to(torch.bfloat16)


def host(t):
    return t.cpu().view(torch.int16).numpy().view(ref.BF16) if t.dtype == torch.bfloat16 else t.cpu().numpy()


def groups(splits, rows):
    return [(int(a), int(b)) for a, b in zip(ref.offsets(splits, rows)[:-1], ref.offsets(splits, rows)[1:])]


def matmuls(pairs, fn):
    """(ref, mag) float64 numpy: fn(a, b) per group of (a, b) float64 CUDA tensors."""
    r = [fn(a, b) for a, b in pairs]
    m = [fn(a.abs(), b.abs()) for a, b in pairs]
    return torch.cat(r).cpu().numpy(), torch.cat(m).cpu().numpy()


def prefilled(rows, cols, out_dtype):
    return torch.full((rows, cols), SENTINEL, device="cuda", dtype=getattr(torch, out_dtype))


def check_rows(got, expected, mag, terms, splits, out_dtype, what):
    end = int(ref.offsets(splits, got.shape[0])[-1])
    got = host(got)
    ref.check(got[:end], expected, mag, terms, out_dtype, what)
    assert (got[end:].astype(np.float32) == SENTINEL).all(), f"{what}: pad rows were written"


def setup(gen, name):
    rows, k, n, s = CASES[name]
    return rows, k, n, s, torch.tensor(s, dtype=torch.int32, device="cuda"), bf16(gen, rows, k), bf16(gen, len(s), n, k)


@pytest.mark.parametrize("config", CONFIGS, ids=["default", "64x128x64", "128x256x64"])
@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("name", CASES)
def test_forward_dgrad_wgrad(gen, name, out_dtype, config):
    rows, k, n, s, splits, x, w = setup(gen, name)
    dy = bf16(gen, rows, n)
    g = groups(s, rows)
    x64, dy64, w64 = x.double(), dy.double(), w.double()
    y = moe.grouped_gemm(x, w, splits, out=prefilled(rows, n, out_dtype), out_dtype=out_dtype, config=config)
    dx = moe.grouped_gemm_dgrad(dy, w, splits, out=prefilled(rows, k, out_dtype), out_dtype=out_dtype, config=config)
    dw = moe.grouped_gemm_wgrad(dy, x, splits, out_dtype=out_dtype, config=config)
    torch.cuda.synchronize()
    fwd = matmuls([(x64[a:b], w64[i]) for i, (a, b) in enumerate(g)], lambda p, q: p @ q.T)
    check_rows(y, *fwd, k, s, out_dtype, "y")
    bwd = matmuls([(dy64[a:b], w64[i]) for i, (a, b) in enumerate(g)], lambda p, q: p @ q)
    check_rows(dx, *bwd, n, s, out_dtype, "dx")
    dw = host(dw)
    for i, (a, b) in enumerate(g):
        if a == b:
            assert (dw[i].astype(np.float32) == 0).all(), f"dw[{i}] of an empty group"
            continue
        e, m = matmuls([(dy64[a:b], x64[a:b])], lambda p, q: p.T @ q)
        ref.check(dw[i], e, m, b - a, out_dtype, f"dw[{i}]")


WGRAD_CASES = {**CASES, "k_aligned_ragged": (3000, 768, 320, [1, 700, 0, 63, 1000, 129, 1])}
WGRAD_CONFIGS = [
    moe.GemmConfig(64, 128, 64, 4, 4),
    moe.GemmConfig(128, 128, 64, 8, 3),
    moe.GemmConfig(128, 256, 64, 8, 3),
    moe.GemmConfig(128, 256, 64, 8, 4),
    moe.GemmConfig(128, 128, 128, 8, 3),
    # Warp-specialized (persistent only): 128 x 128 tiles; 128 x 256 needs more shared memory
    # than a block has (the producer runs ahead, so the ring is not the epilogue's scratch).
    moe.GemmConfig(128, 128, 64, 8, 4, warp_specialize=1),
    moe.GemmConfig(128, 128, 64, 8, 3, warp_specialize=1),
]


@pytest.mark.parametrize("persistent", [True, False])
@pytest.mark.parametrize("config", WGRAD_CONFIGS, ids=lambda c: "x".join(map(str, c[:5])))
@pytest.mark.parametrize("name", WGRAD_CASES)
def test_wgrad_configs(gen, name, config, persistent):
    """Both wgrad kernels at each tile config (warp-specialized: the persistent one): groups
    of every size against BR (a single row, partial last steps, empty groups); rows past
    the groups hold huge values that any read of them would show in dw."""
    if config.warp_specialize and not persistent:
        pytest.skip("warp specialization runs the persistent kernel")
    rows, k, n, s = WGRAD_CASES[name]
    splits = torch.tensor(s, dtype=torch.int32, device="cuda")
    x, dy = bf16(gen, rows, k), bf16(gen, rows, n)
    end = int(ref.offsets(s, rows)[-1])
    x[end:], dy[end:] = 1e30, 1e30
    dw = host(moe.grouped_gemm_wgrad(dy, x, splits, out_dtype="float32", config=config._replace(persistent=persistent)))
    e, m = ref.wgrad(host(dy), host(x), s)
    for i, size in enumerate(np.diff(ref.offsets(s, rows))):
        if size:
            ref.check(dw[i], e[i], m[i], int(size), "float32", f"dw[{i}]")
        else:
            assert (dw[i] == 0).all(), f"dw[{i}] of an empty group"


@pytest.mark.parametrize("scaled", [False, True])
def test_bias(gen, scaled):
    rows, k, n, s, splits, x, w = setup(gen, "skewed")
    bias = torch.randn((len(s), n), generator=gen, device="cuda")
    probs = torch.rand((rows,), generator=gen, device="cuda") if scaled else None
    y = moe.grouped_gemm(x, w, splits, bias, probs, out=prefilled(rows, n, "float32"), out_dtype="float32")
    torch.cuda.synchronize()
    e, m = ref.forward(host(x), host(w), s, host(bias), None if probs is None else host(probs))
    check_rows(y, e, m, k + 1, s, "float32", "y")


@pytest.mark.parametrize("name", ["skewed", "unaligned", "g1"])
def test_weight_list_is_bitwise_the_grouped_weight(gen, name):
    rows, k, n, s, splits, x, w = setup(gen, name)
    experts = [wi.clone() for wi in w]  # separate allocations
    dy = bf16(gen, rows, n)
    a = moe.grouped_gemm(x, w, splits, out=prefilled(rows, n, "bfloat16"))
    b = moe.grouped_gemm(x, experts, splits, out=prefilled(rows, n, "bfloat16"))
    c = moe.grouped_gemm_dgrad(dy, w, splits, out=prefilled(rows, k, "bfloat16"))
    d = moe.grouped_gemm_dgrad(dy, experts, splits, out=prefilled(rows, k, "bfloat16"))
    assert torch.equal(a.view(torch.int16), b.view(torch.int16)) and torch.equal(
        c.view(torch.int16), d.view(torch.int16)
    )


def test_new_routing_replays_in_a_cuda_graph(gen):
    # Captured once; new split sizes copied into the same device buffer; replayed.
    rows, k, n, s, splits, x, w = setup(gen, "skewed")
    dy = bf16(gen, rows, n)
    y, dx = prefilled(rows, n, "bfloat16"), prefilled(rows, k, "bfloat16")
    experts = [wi.clone() for wi in w]  # the list form's offset table is on the device after the first call
    moe.grouped_gemm(x, w, splits, out=y)  # compile and load outside the capture
    moe.grouped_gemm_dgrad(dy, experts, splits, out=dx)
    moe.grouped_gemm_wgrad(dy, x, splits)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        moe.grouped_gemm(x, w, splits, out=y)
        moe.grouped_gemm_dgrad(dy, experts, splits, out=dx)
        dw = moe.grouped_gemm_wgrad(dy, x, splits)
    rng = np.random.default_rng(int(torch.randint(0, 2**31, (1,), generator=gen, device="cuda")))
    for _ in range(3):
        new = rng.multinomial(int(rng.integers(0, rows + 1)), [1 / len(s)] * len(s)).astype(np.int32)
        splits.copy_(torch.from_numpy(new))
        y.fill_(SENTINEL)
        dx.fill_(SENTINEL)
        graph.replay()
        torch.cuda.synchronize()
        e, m = ref.forward(host(x), host(w), new)
        check_rows(y, e, m, k, new, "bfloat16", "y")
        e, m = ref.dgrad(host(dy), host(w), new)
        check_rows(dx, e, m, n, new, "bfloat16", "dx")
        e, m = ref.wgrad(host(dy), host(x), new)
        got = host(dw)
        for i, size in enumerate(np.diff(ref.offsets(new, rows))):
            if size:
                ref.check(got[i], e[i], m[i], int(size), "bfloat16", f"dw[{i}]")
            else:
                assert (got[i].astype(np.float32) == 0).all()


FP8 = {
    "mxfp8": (dict(recipe="mxfp8"), dict(recipe="mxfp8")),
    "mxfp8_e5m2_w": (dict(recipe="mxfp8"), dict(recipe="mxfp8", fmt="e5m2")),
    "fp8_block": (dict(recipe="fp8_block"), dict(recipe="fp8_block", block=(128, 128))),
    "fp8_block_1x128_w": (dict(recipe="fp8_block"), dict(recipe="fp8_block")),
}


@pytest.mark.parametrize("config", CONFIGS, ids=["default", "64x128x64", "128x256x64"])
@pytest.mark.parametrize("recipe", FP8)
@pytest.mark.parametrize("name", ["skewed", "one_owns_all", "g1", "past_the_rows"])
def test_forward_fp8(gen, name, recipe, config):
    # Against the float64 product of the dequantized operands; the fp8 tensor cores add a
    # block's products with fewer bits than fp32 (2^-9 of Σ|products|, as tests/gpu/test_tile_sweep.py).
    rows, k, n, s, splits, x, w = setup(gen, name)
    ox, ow = FP8[recipe]
    qx, qw = moe.quantize(x, **ox), moe.quantize(w.reshape(-1, k), **ow)
    bias = torch.randn((len(s), n), generator=gen, device="cuda")
    probs = torch.rand((rows,), generator=gen, device="cuda")
    y = moe.grouped_gemm(
        qx, qw, splits, bias, probs, out=prefilled(rows, n, "float32"), out_dtype="float32", config=config
    )
    xd, wd = moe.dequantize(qx), moe.dequantize(qw).reshape(w.shape)
    torch.cuda.synchronize()
    e, m = ref.forward(host(xd), host(wd), s, host(bias), host(probs))
    end = int(ref.offsets(s, rows)[-1])
    ref.check(host(y)[:end], e, m, k + 1, "float32", "y", recipe="mxfp8", block_error=2.0**-9)
    assert (host(y)[end:] == SENTINEL).all(), "pad rows were written"


DGRAD_FP8 = {  # dy rowwise, w columnwise (stored [K, G·N])
    "mxfp8": (dict(recipe="mxfp8", fmt="e5m2"), dict(recipe="mxfp8", axis=0)),
    "fp8_block": (dict(recipe="fp8_block"), dict(recipe="fp8_block", block=(128, 128), axis=0)),
    "fp8_block_1x128_w": (dict(recipe="fp8_block"), dict(recipe="fp8_block", axis=0)),
}


@pytest.mark.parametrize("config", CONFIGS, ids=["default", "64x128x64", "128x256x64"])
@pytest.mark.parametrize("recipe", DGRAD_FP8)
@pytest.mark.parametrize("name", ["skewed", "one_owns_all", "g1", "past_the_rows"])
def test_dgrad_fp8(gen, name, recipe, config):
    rows, k, n, s, splits, _, w = setup(gen, name)
    dy = bf16(gen, rows, n)
    od, ow = DGRAD_FP8[recipe]
    qd, qw = moe.quantize(dy, **od), moe.quantize(w.reshape(-1, k), **ow)
    dx = moe.grouped_gemm_dgrad(qd, qw, splits, out=prefilled(rows, k, "float32"), out_dtype="float32", config=config)
    dyd, wd = moe.dequantize(qd), moe.dequantize(qw).reshape(w.shape)
    torch.cuda.synchronize()
    e, m = ref.dgrad(host(dyd), host(wd), s)
    end = int(ref.offsets(s, rows)[-1])
    ref.check(host(dx)[:end], e, m, n, "float32", "dx", recipe="mxfp8", block_error=2.0**-9)
    assert (host(dx)[end:] == SENTINEL).all(), "pad rows were written"


@pytest.mark.parametrize("w_block", [(128, 128), (1, 128)], ids=["w128x128", "w1x128"])
@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize("dgrad", [False, True])
@pytest.mark.parametrize("name", ["skewed", "one_owns_all", "g1", "past_the_rows"])
def test_fp8_block_steps_of_two_blocks(gen, name, dgrad, stages, w_block):
    # K steps of 256 (two 128-blocks, the first promoted while the second's wgmma run;
    # where C is not a multiple of 256 the host steps by 128): the same bits as steps of
    # 128 (the same 128-chunks promoted in the same order), and the float64 bound.
    rows, k, n, s, splits, x, w = setup(gen, name)
    if dgrad:
        a = moe.quantize(bf16(gen, rows, n), recipe="fp8_block")
        qw = moe.quantize(w.reshape(-1, k), recipe="fp8_block", block=w_block, axis=0)
    else:
        a = moe.quantize(x, recipe="fp8_block")
        qw = moe.quantize(w.reshape(-1, k), recipe="fp8_block", block=w_block)
    fn = moe.grouped_gemm_dgrad if dgrad else moe.grouped_gemm
    o = k if dgrad else n
    outs = [
        fn(
            a,
            qw,
            splits,
            out=prefilled(rows, o, "float32"),
            out_dtype="float32",
            config=moe.GemmConfig(128, 128, bk, 8, stages),
        )
        for bk in (256, 128)
    ]
    torch.cuda.synchronize()
    assert torch.equal(outs[0], outs[1])
    ad, wd = moe.dequantize(a), moe.dequantize(qw).reshape(w.shape)
    e, m = (ref.dgrad if dgrad else ref.forward)(host(ad), host(wd), s)
    end = int(ref.offsets(s, rows)[-1])
    ref.check(host(outs[0])[:end], e, m, n if dgrad else k + 1, "float32", "y", recipe="mxfp8", block_error=2.0**-9)
    assert (host(outs[0])[end:] == SENTINEL).all(), "pad rows were written"


def test_bad_devices(gen):
    rows, k, n, s, splits, x, w = setup(gen, "g1")
    bad = [
        (lambda: moe.grouped_gemm(x, w, splits.cpu()), TypeError, "splits must be int32 .*CUDA device"),
        (lambda: moe.grouped_gemm(x, w, np.array(s, np.int32)), TypeError, "splits must be a Tensor like"),
        (lambda: moe.grouped_gemm(x, host(w), splits), TypeError, "w must be a Tensor like"),
        (lambda: moe.grouped_gemm(x.cpu(), w, splits), TypeError, "x must be bfloat16 .*CUDA device"),
        (lambda: moe.grouped_gemm_wgrad(bf16(gen, rows, n), x.double(), splits), TypeError, "x must be bfloat16"),
    ]
    if torch.cuda.device_count() > 1:
        bad.append((lambda: moe.grouped_gemm(x, w, splits.to("cuda:1")), ValueError, "splits is on cuda:1"))
    for call, err, text in bad:
        with pytest.raises(err, match=text):
            call()


@pytest.mark.parametrize("config", CONFIGS[:2], ids=["default", "64x128x64"])
@pytest.mark.parametrize("recipe", ["mxfp8", "fp8_block"])
@pytest.mark.parametrize("name", ["skewed", "one_owns_all", "g1"])
def test_wgrad_fp8(gen, name, recipe, config):
    """The fp8 wgrad on the MLP's columnwise copies (each group whole blocks of rows)
    against float64 of the dequantized copies (fp8 tensor cores: 2^-9 of a block's
    Σ|products|, as the forward's)."""
    from tilefuse.moe import _mlp_ops as ops

    rows, k, n, s, splits, x, _ = setup(gen, name)
    dy = bf16(gen, rows, n)
    qd, qx = ops.quantize_cols(dy, recipe, splits), ops.quantize_cols(x, recipe, splits)
    psplits = ops.padded_splits(dy, splits, rows, recipe)
    dw = moe.grouped_gemm_wgrad(qd, qx, psplits, out_dtype="float32", config=config)
    dyd, xd = moe.dequantize(qd), moe.dequantize(qx)
    torch.cuda.synchronize()
    p = host(psplits)
    e, m = ref.wgrad(host(dyd), host(xd), p)
    ref.check(host(dw), e, m, int(p.max()), "float32", "dw", recipe="mxfp8", block_error=2.0**-9)
    assert not host(dw)[p == 0].any(), "an empty expert's dw is not 0"
