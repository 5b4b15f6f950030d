"""The persistent grouped GEMM (GemmConfig.persistent=True: one program per SM over the
device tile schedule, TMA descriptors) on CUDA: bit for bit the one-program-per-tile
kernel with the same tiles (the same wgmma K steps per tile; rows past a group read the
next group's rows, which changes no stored row), and against float64 (gemm_reference.check)
on ragged splits: skewed with empty experts, the last empty, one expert owning every row,
G = 1, sums past the rows, negative sizes, K and N not multiples of the tiles (and of 16:
the descriptors' unaligned fallback); the forward with each bias kind, the dgrad; the
rule's choice at a large shape; new routings replayed in a CUDA graph (the tile count is
read on the device). The persistent FP8-block kernel (plain, warp-specialized, ping-pong)
likewise against the per-tile fp8 kernel."""

import numpy as np
import pytest
from tilefuse import moe

from tests.python.moe import gemm_reference as ref

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]

SENTINEL = -12352.0  # exact in bf16
# (rows R, K, N, splits); the dgrad runs where N is a multiple of the config's block_k.
CASES = {
    "skewed": (8192, 1024, 768, [1900, 0, 3000, 37, 1, 2200, 0, 1054]),
    "last_empty": (4096, 512, 1024, [1000, 2000, 1096, 0]),
    "one_owns_all": (4096, 512, 384, [0, 4096, 0, 0]),
    "g1": (3000, 256, 640, [2900]),
    "past_the_rows": (2048, 384, 256, [1200, 1400, 500]),
    "negative": (1777, 256, 512, [700, -40, 900]),
    "unaligned": (1000, 200, 100, [300, 0, 333, 250]),
    "many_experts": (16384, 256, 512, [int(v) for v in np.random.default_rng(7).multinomial(16000, [1 / 64] * 64)]),
}
CONFIGS = [(128, 128, 64, 8, 3), (128, 256, 64, 8, 3), (64, 128, 64, 4, 4)]


@pytest.fixture
def gen():
    seed = int(np.random.SeedSequence().entropy % 2**63)
    print(f"seed = {seed}")
    return torch.Generator(device="cuda").manual_seed(seed)


def bf16(gen, *shape):
    return torch.randn(shape, generator=gen, device="cuda").to(torch.bfloat16)


def host(t):
    return t.cpu().view(torch.int16).numpy().view(ref.BF16) if t.dtype == torch.bfloat16 else t.cpu().numpy()


def prefilled(rows, cols, out_dtype):
    return torch.full((rows, cols), SENTINEL, device="cuda", dtype=getattr(torch, out_dtype))


def same_bits(a, b, what):
    bits = torch.int16 if a.dtype == torch.bfloat16 else torch.int32
    diff = (a.view(bits) != b.view(bits)).sum().item()
    assert diff == 0, f"{what}: {diff} elements differ from the per-tile kernel"


def check_rows(got, expected, mag, terms, splits, out_dtype, what):
    end = int(ref.offsets(splits, got.shape[0])[-1])
    got = host(got)
    ref.check(got[:end], expected, mag, terms, out_dtype, what)
    assert (got[end:].astype(np.float32) == SENTINEL).all(), f"{what}: pad rows were written"


def setup(gen, name):
    rows, k, n, s = CASES[name]
    splits = torch.tensor(s, dtype=torch.int32, device="cuda")
    return rows, k, n, s, splits, bf16(gen, rows, k), bf16(gen, len(s), n, k)


@pytest.mark.parametrize("tiles", CONFIGS, ids=lambda t: "x".join(map(str, t)))
@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("name", CASES)
def test_forward_and_dgrad(gen, name, out_dtype, tiles):
    rows, k, n, s, splits, x, w = setup(gen, name)
    on, off = moe.GemmConfig(*tiles, persistent=True), moe.GemmConfig(*tiles, persistent=False)
    y = moe.grouped_gemm(x, w, splits, out=prefilled(rows, n, out_dtype), out_dtype=out_dtype, config=on)
    y0 = moe.grouped_gemm(x, w, splits, out=prefilled(rows, n, out_dtype), out_dtype=out_dtype, config=off)
    same_bits(y, y0, "y")
    check_rows(y, *ref.forward(host(x), host(w), s), k, s, out_dtype, "y")
    if n % tiles[2]:
        return
    dy = bf16(gen, rows, n)
    dx = moe.grouped_gemm_dgrad(dy, w, splits, out=prefilled(rows, k, out_dtype), out_dtype=out_dtype, config=on)
    dx0 = moe.grouped_gemm_dgrad(dy, w, splits, out=prefilled(rows, k, out_dtype), out_dtype=out_dtype, config=off)
    same_bits(dx, dx0, "dx")
    check_rows(dx, *ref.dgrad(host(dy), host(w), s), n, s, out_dtype, "dx")


@pytest.mark.parametrize("tiles", [c for c in CONFIGS if c[0] >= 128], ids=lambda t: "x".join(map(str, t)))
@pytest.mark.parametrize("name", ["skewed", "negative", "unaligned", "many_experts"])
def test_tail_tiles(gen, monkeypatch, name, tiles):
    """TAIL_TILES: a group's last tile whose rows end in its first half runs the half-height K
    loop (64×N on two warpgroups): bit for bit the per-tile kernel's full tiles, float64."""
    import importlib

    monkeypatch.setattr(importlib.import_module("tilefuse.moe.grouped_gemm"), "TAIL_TILES", True)
    rows, k, n, s, splits, x, w = setup(gen, name)
    on, off = moe.GemmConfig(*tiles, persistent=True), moe.GemmConfig(*tiles, persistent=False)
    y, y0 = (
        moe.grouped_gemm(x, w, splits, out=prefilled(rows, n, "float32"), out_dtype="float32", config=c)
        for c in (on, off)
    )
    same_bits(y, y0, "y")
    check_rows(y, *ref.forward(host(x), host(w), s), k, s, "float32", "y")
    if n % tiles[2] == 0:
        dy = bf16(gen, rows, n)
        dx, dx0 = (
            moe.grouped_gemm_dgrad(dy, w, splits, out=prefilled(rows, k, "bfloat16"), config=c) for c in (on, off)
        )
        same_bits(dx, dx0, "dx")
        check_rows(dx, *ref.dgrad(host(dy), host(w), s), n, s, "bfloat16", "dx")


FP8_CONFIGS = {  # the persistent FP8-block kernel: plain, warp-specialized (one or two dots), ping-pong
    "persistent": moe.GemmConfig(128, 128, 128, 8, 3, persistent=True),
    "ws": moe.GemmConfig(128, 128, 128, 8, 4, warp_specialize=1),
    "ws_two_halves": moe.GemmConfig(128, 256, 128, 8, 3, warp_specialize=1),  # TWO: 2 dots of 128
    "pingpong": moe.GemmConfig(64, 128, 128, 4, 3, warp_specialize=2),
    "pingpong_k64": moe.GemmConfig(64, 128, 64, 4, 4, warp_specialize=2),
}


@pytest.mark.parametrize("cfg", FP8_CONFIGS)
@pytest.mark.parametrize("dgrad", [False, True])
@pytest.mark.parametrize("name", [c for c in CASES if c != "unaligned"])  # FP8-block: whole 128-blocks
def test_fp8_block(gen, name, dgrad, cfg):
    """grouped_gemm_fp8_kernel's PERSISTENT form: bit for bit the per-tile fp8 kernel with the same
    tiles (the same K steps and promotions per tile), float64 on the dequantized operands;
    the forward with a scaled bias, the dgrad (w columnwise)."""
    rows, k, n, s, splits, x, w = setup(gen, name)
    on = FP8_CONFIGS[cfg]
    off = on._replace(persistent=False, warp_specialize=0)
    a = bf16(gen, rows, n) if dgrad else x
    qa = moe.quantize(a, "fp8_block")
    qw = moe.quantize(w.reshape(-1, k), "fp8_block", block=(128, 128), axis=0 if dgrad else -1)
    ad, wd = host(moe.dequantize(qa)), host(moe.dequantize(qw)).reshape(w.shape)
    if dgrad:
        got, want = (moe.grouped_gemm_dgrad(qa, qw, splits, out=prefilled(rows, k, "float32"), out_dtype="float32",
                                            config=c) for c in (on, off))  # fmt: skip
        expected, mag = ref.dgrad(ad, wd, s)
        terms = n
    else:
        bias = torch.randn((len(s), n), generator=gen, device="cuda")
        probs = torch.rand((rows,), generator=gen, device="cuda")
        got, want = (moe.grouped_gemm(qa, qw, splits, bias, probs, out=prefilled(rows, n, "float32"),
                                      out_dtype="float32", config=c) for c in (on, off))  # fmt: skip
        expected, mag = ref.forward(ad, wd, s, host(bias), host(probs))
        terms = k + 1
    same_bits(got, want, "dx" if dgrad else "y")
    end = int(ref.offsets(s, rows)[-1])
    g = host(got)
    # fp8 wgmma adds each block's products with fewer bits than fp32 (the same allowance as
    # test_moe_grouped_gemm_gpu.py's fp8 checks).
    ref.check(g[:end], expected, mag, terms, "float32", "out", recipe="mxfp8", block_error=2.0**-9)
    assert (g[end:] == SENTINEL).all(), "pad rows were written"


@pytest.mark.parametrize("dgrad", [False, True])
def test_fp8_block_default_config(gen, monkeypatch, dgrad):
    """Without a config (and no tuned entry) FP8-block runs FP8_BLOCK_CONFIG, persistent and
    warp-specialized: bit for bit the per-tile kernel at its tiles."""
    import importlib

    h = importlib.import_module("tilefuse.moe.grouped_gemm")
    monkeypatch.setattr(h.tuned, "lookup", lambda *a: None)
    ran = []
    persistent = h.fp8_persistent
    monkeypatch.setattr(h, "fp8_persistent", lambda *a: ran.append(persistent(*a)) or ran[-1])
    rows, k, n, s, splits, x, w = setup(gen, "skewed")
    a = bf16(gen, rows, n) if dgrad else x
    qa = moe.quantize(a, "fp8_block")
    qw = moe.quantize(w.reshape(-1, k), "fp8_block", block=(128, 128), axis=0 if dgrad else -1)
    call = moe.grouped_gemm_dgrad if dgrad else moe.grouped_gemm
    off = h.FP8_BLOCK_CONFIG._replace(persistent=False, warp_specialize=0)
    got, want = (call(qa, qw, splits, out=prefilled(rows, k if dgrad else n, "float32"), out_dtype="float32",
                      config=c) for c in (None, off))  # fmt: skip
    assert ran == [True, False]
    same_bits(got, want, "dx" if dgrad else "y")


@pytest.mark.parametrize("scaled", [False, True])
def test_bias(gen, scaled):
    rows, k, n, s, splits, x, w = setup(gen, "skewed")
    bias = torch.randn((len(s), n), generator=gen, device="cuda")
    probs = torch.rand((rows,), generator=gen, device="cuda") if scaled else None
    y, y0 = (
        moe.grouped_gemm(x, w, splits, bias, probs, out=prefilled(rows, n, "float32"), out_dtype="float32", config=c)
        for c in (moe.GemmConfig(persistent=True), moe.GemmConfig(persistent=False))
    )
    same_bits(y, y0, "y")
    e, m = ref.forward(host(x), host(w), s, host(bias), None if probs is None else host(probs))
    check_rows(y, e, m, k + 1, s, "float32", "y")


def test_rule_picks_persistent_at_a_peer_shape(monkeypatch):
    import importlib

    h = importlib.import_module("tilefuse.moe.grouped_gemm")
    x = torch.empty((32768, 16), device="cuda", dtype=torch.bfloat16)
    assert h.use_persistent(x, 32768, 32, 4096, moe.GemmConfig())
    assert not h.use_persistent(x, 1024, 4, 256, moe.GemmConfig())
    # FP8-block: persistent when asked (its default config asks, warp-specialized)
    fp8 = moe.GemmConfig(128, 128, 128, 8, 3)
    assert not h.fp8_persistent(32768, fp8, True)
    assert h.fp8_persistent(32768, fp8._replace(persistent=True), True)
    assert not h.fp8_persistent(32768, fp8._replace(warp_specialize=1), False), "no descriptors"
    assert h.fp8_default_config(x, "fp8_block") == h.FP8_BLOCK_CONFIG
    assert h.fp8_persistent(32768, h.FP8_BLOCK_CONFIG, True)


def test_new_routing_replays_in_a_cuda_graph(gen):
    rows, k, n, s, splits, x, w = setup(gen, "skewed")
    cfg = moe.GemmConfig(persistent=True)
    dy = bf16(gen, rows, n)
    y, dx = prefilled(rows, n, "bfloat16"), prefilled(rows, k, "bfloat16")
    moe.grouped_gemm(x, w, splits, out=y, config=cfg)
    moe.grouped_gemm_dgrad(dy, w, splits, out=dx, config=cfg)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        moe.grouped_gemm(x, w, splits, out=y, config=cfg)
        moe.grouped_gemm_dgrad(dy, w, splits, out=dx, config=cfg)
    rng = np.random.default_rng(int(torch.randint(0, 2**31, (1,), generator=gen, device="cuda")))
    for total in (rows, int(rng.integers(1, rows)), 0):
        new = rng.multinomial(total, [1 / len(s)] * len(s)).astype(np.int32)
        splits.copy_(torch.from_numpy(new))
        y.fill_(SENTINEL)
        dx.fill_(SENTINEL)
        graph.replay()
        torch.cuda.synchronize()
        check_rows(y, *ref.forward(host(x), host(w), new), k, new, "bfloat16", "y")
        check_rows(dx, *ref.dgrad(host(dy), host(w), new), n, new, "bfloat16", "dx")
