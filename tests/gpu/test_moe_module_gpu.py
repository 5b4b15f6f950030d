"""moe.GroupedMLP on CUDA tensors: bitwise against the functional API (mlp_forward /
mlp_backward / backward_dw) over options; no host sync on the forward, backward and
backward_dw (torch.cuda.set_sync_debug_mode("error")); CUDA graph capture of a whole
training step, replayed with changed routing (split sizes stay on the device) against
eager functional runs; torch.compile(fullgraph=True) (inductor) over a model using it."""

import ml_dtypes
import numpy as np
import pytest
from tilefuse import moe

from tests.python.moe import mlp_reference as ref

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]

BF16 = ml_dtypes.bfloat16
# Several 128-row tiles, partial ones, empty experts (the last too), pad rows.
CASES = {"ragged": (1000, [300, 0, 333, 250, 0])}
DIMS = {"bf16": (256, 192), "mxfp8": (256, 192), "fp8_block": (256, 256)}


@pytest.fixture(scope="module")
def rng():
    seed = np.random.SeedSequence().entropy
    print(f"seed = {seed}")
    return np.random.default_rng(seed)


def cuda(a):
    if a.dtype == BF16:
        return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16).cuda()
    return torch.from_numpy(np.ascontiguousarray(a)).cuda()


def bits(t):
    t = t.detach()
    return t.view(torch.int16) if t.dtype == torch.bfloat16 else t


def make(rng, activation="swiglu", recipe="bf16", grouped=True, **kw):
    inp = ref.make_inputs(rng, activation, recipe, "ragged", cases=CASES, dims=DIMS)
    g, d, n = inp["w2"].shape
    m = moe.GroupedMLP(g, d, n, activation, recipe, True, grouped, scaled_bias=True, device="cuda", **kw)
    w1, w2 = m.weights()
    with torch.no_grad():
        for ws, k in ((w1, "w1"), (w2, "w2")):
            for e, w in enumerate(ws):
                w.copy_(cuda(inp[k] if grouped else inp[k][e]))
        m.fc1_bias.copy_(cuda(inp["b1"]))
        m.fc2_bias.copy_(cuda(inp["b2"]))
    return m, {k: cuda(v) for k, v in inp.items()}


def functional(m, t, needs=None):
    """out and the gradients of the functional API on the module's parameters."""
    w1, w2 = m.weights()
    params = {
        "w1": w1[0] if m.single_grouped_weight else list(w1),
        "w2": w2[0] if m.single_grouped_weight else list(w2),
    }
    params = {k: v.detach() if isinstance(v, torch.Tensor) else [e.detach() for e in v] for k, v in params.items()}
    params |= {"b1": m.fc1_bias.detach(), "b2": m.fc2_bias.detach()}
    out, ctx = moe.mlp_forward(t["x"], t["probs"], t["splits"], params, m.cfg, needs)
    grads = moe.mlp_backward(ctx, t["dy"])
    if ctx.stage == "backward":
        grads |= moe.backward_dw(ctx)
    return out, {k: torch.stack(v) if isinstance(v, list) else v for k, v in grads.items()}


def step(m, t, needs=None, fn=None):
    """forward + backward (+ backward_dw) through the module, or fn(x, splits, probs)
    calling it; (out, grads)."""
    needs = dict.fromkeys(ref.GRADS, True) | {f"d{k}": v for k, v in (needs or {}).items()}
    x = t["x"].detach().requires_grad_(needs["dx"])
    probs = t["probs"].detach().requires_grad_(needs["dprobs"])
    w1, w2 = m.weights()
    for ps, k in ((w1, "dw1"), (w2, "dw2"), ([m.fc1_bias], "db1"), ([m.fc2_bias], "db2")):
        for p in ps:
            p.requires_grad_(needs[k])
            p.grad = None
    out = (fn or m)(x, t["splits"], probs)
    out.backward(t["dy"])
    m.backward_dw()
    return out, grads_of(m, x, probs)


def grads_of(m, x, probs):
    """The gradients the last step left: dW [G, N, K] for grouped and per-expert weights."""
    grads = dict(dx=x.grad, dprobs=probs.grad, db1=m.fc1_bias.grad, db2=m.fc2_bias.grad)
    for k, ws in zip(("dw1", "dw2"), m.weights()):
        grads[k] = None if ws[0].grad is None else torch.stack([w.grad for w in ws]) if len(ws) > 1 else ws[0].grad
    return grads


def assert_bitwise(got, want, what=""):
    for k in ("out", *ref.GRADS):
        a, b = (got[0], want[0]) if k == "out" else (got[1][k], want[1][k])
        assert (a is None) == (b is None), f"{what}{k}: present in one run only"
        if a is not None:
            assert torch.equal(bits(a), bits(b)), f"{what}{k}: differs from the functional API"


OPTIONS = {
    "plain": ({}, None),
    "per_expert": (dict(grouped=False), None),
    "delay_wgrad": (dict(delay_wgrad_compute=True), None),
    "recompute": (dict(recompute_activation=True), None),
    "frozen_fc1": ({}, dict(x=False, w1=False, b1=False)),
    "mxfp8": (dict(recipe="mxfp8"), None),
    "fp8_block_delay": (dict(recipe="fp8_block", delay_wgrad_compute=True), None),
}


@pytest.mark.parametrize("option", list(OPTIONS))
def test_bitwise_against_functional(rng, option):
    kw, needs = OPTIONS[option]
    m, t = make(rng, **kw)
    assert_bitwise(step(m, t, needs), functional(m, t, needs))


@pytest.mark.parametrize("grouped", [True, False])
def test_no_host_sync(rng, grouped):
    """Forward, backward and backward_dw issue no synchronizing CUDA call (after a first
    step, which compiles, loads, and copies per-expert weights' address table once)."""
    m, t = make(rng, grouped=grouped, delay_wgrad_compute=True)
    step(m, t)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        step(m, t)
    finally:
        torch.cuda.set_sync_debug_mode("default")


def new_routing(rng, rows, groups):
    """Fresh split sizes summing to at most rows, one expert empty."""
    cuts = np.sort(rng.integers(0, rows - 17, groups - 1))
    sizes = np.diff(np.concatenate([[0], cuts, [rows - 17]])).astype(np.int32)
    sizes[rng.integers(groups)] = 0
    return sizes


@pytest.mark.parametrize("grouped", [True, False])
def test_cuda_graph_replay_with_new_routing(rng, grouped):
    """A training step (forward, backward, backward_dw) captured once and replayed on new
    inputs and new split sizes copied into the captured tensors: bitwise the eager
    functional API's results on those inputs."""
    m, t = make(rng, grouped=grouped, delay_wgrad_compute=True)
    static = {k: v.clone() for k, v in t.items()}
    x = static["x"].requires_grad_()
    probs = static["probs"].requires_grad_()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):  # warm-up: compiles, loads, allocates
            for p in (*m.parameters(), x, probs):
                p.grad = None
            m(x, static["splits"], probs).backward(static["dy"])
            m.backward_dw()
    torch.cuda.current_stream().wait_stream(side)
    for p in (*m.parameters(), x, probs):
        p.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = m(x, static["splits"], probs)
        out.backward(static["dy"])
        m.backward_dw()
    rows, groups = x.shape[0], static["splits"].shape[0]
    for _ in range(3):
        fresh = ref.make_inputs(rng, "swiglu", "bf16", "ragged", cases=CASES, dims=DIMS)
        fresh["splits"] = new_routing(rng, rows, groups)
        new = {k: cuda(fresh[k]) for k in ("x", "probs", "dy", "splits")}
        with torch.no_grad():
            for k, v in new.items():
                static[k].copy_(v)
        graph.replay()
        torch.cuda.synchronize()
        assert_bitwise((out, grads_of(m, x, probs)), functional(m, new), f"routing {fresh['splits'].tolist()}: ")


def test_torch_compile_fullgraph(rng):
    """torch.compile(fullgraph=True) over models using the module: one graph, the op
    opaque. Scaled by 2 (exact): output and gradients bitwise the functional API's (on
    dy·2); between a LayerNorm and a Linear: the eager model's within bf16 rounding (inductor
    fuses the torch ops its own way)."""
    m, t = make(rng)
    compiled = torch.compile(lambda x, splits, probs: m(x, splits, probs).float() * 2.0, fullgraph=True)
    got = step(m, t | {"dy": t["dy"].float()}, fn=compiled)
    out, grads = functional(m, t | {"dy": t["dy"] * 2.0})
    assert_bitwise(got, (out.float() * 2.0, grads), "compiled: ")

    d = m.hidden
    torch.manual_seed(int(rng.integers(1 << 31)))
    norm = torch.nn.LayerNorm(d, device="cuda", dtype=torch.bfloat16)
    proj = torch.nn.Linear(d, d, device="cuda", dtype=torch.bfloat16)

    def model(x, splits, probs):
        return proj(m(norm(x), splits, probs))

    eager, compiled = step(m, t, fn=model), step(m, t, fn=torch.compile(model, fullgraph=True))
    for k in ("out", *ref.GRADS):
        a, b = (eager[0], compiled[0]) if k == "out" else (eager[1][k], compiled[1][k])
        rms = (a.double() - b.double()).square().mean().sqrt() / b.double().square().mean().sqrt()
        assert rms <= 2.0**-7, f"{k}: compiled vs eager, error RMS {rms:.3g} of its RMS"
