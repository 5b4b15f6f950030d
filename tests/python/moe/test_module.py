"""moe.GroupedMLP on CPU torch tensors (the interpreter, through numpy views: module.py):
bitwise against the functional API (mlp_forward / mlp_backward / backward_dw), its
gradients against torch autograd in float64, frozen subsets, torch.no_grad,
delay_wgrad_compute, the contexts' lifetime, torch.compile(fullgraph=True) over a model
using it, bad arguments. Fresh random inputs (the seed is printed). Needs torch: skipped
where it is not installed (CI); tests/gpu/test_moe_module_gpu.py runs it on the GPU."""

import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tilefuse import moe  # noqa: E402
from tilefuse.moe import module  # noqa: E402

from tests.python.moe import mlp_reference as ref  # noqa: E402

BF16 = ref.BF16
# (T rows, splits): partial tiles, empty experts in the middle and last, pad rows.
CASES = {"ragged": (100, [30, 0, 45, 20, 0]), "one_owns_all": (40, [0, 40, 0])}
DIMS = {"bf16": (64, 32), "mxfp8": (64, 32), "nvfp4": (64, 32)}


@pytest.fixture(scope="module")
def rng():
    seed = np.random.SeedSequence().entropy
    print(f"seed = {seed}")
    return np.random.default_rng(seed)


def tensor(a):
    """A CPU tensor holding numpy array a (bf16 through its bits)."""
    if a.dtype == BF16:
        return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(a))


def array(t):
    """The float64 values of a CPU tensor."""
    return t.detach().double().numpy()


def make(rng, activation="swiglu", recipe="bf16", case="ragged", bias=True, grouped=True, **kw):
    """(module, numpy inputs) with the module's parameters set to the inputs' weights."""
    inp = ref.make_inputs(rng, activation, recipe, case, bias=bias, cases=CASES, dims=DIMS)
    g, d, n = inp["w2"].shape
    m = moe.GroupedMLP(g, d, n, activation, recipe, bias, single_grouped_weight=grouped, **kw)
    w1, w2 = m.weights()
    with torch.no_grad():
        for ws, name in ((w1, "w1"), (w2, "w2")):
            for g_, w in enumerate(ws):
                w.copy_(tensor(inp[name]) if grouped else tensor(inp[name][g_]))
        if bias:
            m.fc1_bias.copy_(tensor(inp["b1"]))
            m.fc2_bias.copy_(tensor(inp["b2"]))
    return m, inp


def run_module(m, inp, needs=None):
    """(out, {dx, dprobs, dw1, dw2, db1, db2}) of forward + backward with dy; needs: which
    of x, probs, w1, w2, b1, b2 require grad (all by default)."""
    needs = {"x": True, "probs": True, "w1": True, "w2": True, "b1": True, "b2": True} | (needs or {})
    x = tensor(inp["x"]).requires_grad_(needs["x"])
    probs = tensor(inp["probs"]).requires_grad_(needs["probs"])
    w1, w2 = m.weights()
    for ws, k in ((w1, "w1"), (w2, "w2")):
        for w in ws:
            w.requires_grad_(needs[k])
    for b, k in ((m.fc1_bias, "b1"), (m.fc2_bias, "b2")):
        if b is not None:
            b.requires_grad_(needs[k])
    before = [None if w.grad is None else w.grad.clone() for w in (*w1, *w2)]
    out = m(x, tensor(inp["splits"]), probs)
    out.backward(tensor(inp["dy"]))
    if m.cfg.delay_wgrad:
        for w, b in zip((*w1, *w2), before):
            same = w.grad is None if b is None else torch.equal(w.grad, b)
            assert same, "delayed wgrads reached .grad in the backward"
        m.backward_dw()
    grads = dict(dx=x.grad, dprobs=probs.grad, db1=grad_of(m.fc1_bias), db2=grad_of(m.fc2_bias))
    grads["dw1"], grads["dw2"] = (stacked_grad(ws) for ws in (w1, w2))
    return out, grads


def grad_of(p):
    return None if p is None else p.grad


def stacked_grad(ws):
    if len(ws) == 1:
        return ws[0].grad
    if all(w.grad is None for w in ws):
        return None
    return torch.stack([torch.zeros_like(w) if w.grad is None else w.grad for w in ws])


def run_functional(m, inp, needs=None, seed=None):
    params = {k: inp[k] for k in ("w1", "w2", "b1", "b2") if k in inp}
    if not m.single_grouped_weight:
        params["w1"], params["w2"] = list(params["w1"]), list(params["w2"])
    out, ctx = moe.mlp_forward(inp["x"], inp["probs"], inp["splits"], params, m.cfg, needs)
    grads = moe.mlp_backward(ctx, inp["dy"], seed=seed)
    if m.cfg.delay_wgrad and ctx.stage == "backward":
        grads |= moe.backward_dw(ctx)
    return out, {k: np.stack(v) if isinstance(v, list) else v for k, v in grads.items()}


def assert_same_bits(got, want, what):
    if want is None:
        assert got is None, f"{what}: expected no gradient, got one"
        return
    assert got is not None, f"{what}: no gradient"
    want = np.asarray(want)
    g = got.detach().numpy() if got.dtype != torch.bfloat16 else got.detach().view(torch.int16).numpy()
    w = want.view(np.int16) if want.dtype == BF16 else want
    assert g.shape == w.shape, f"{what}: shape {g.shape} != {w.shape}"
    bad = np.flatnonzero(g.reshape(-1) != w.reshape(-1))
    assert bad.size == 0, f"{what}: {bad.size} elements differ from the functional API (first at {bad[0]})"


def check_bitwise(m, inp, needs=None):
    out, grads = run_module(m, inp, needs)
    want_out, want = run_functional(m, inp, needs)
    assert_same_bits(out, want_out, "out")
    for k in ref.GRADS:
        assert_same_bits(grads[k], want[k], k)


@pytest.mark.parametrize(
    "activation, recipe, case, bias, grouped",
    [
        ("swiglu", "bf16", "ragged", True, True),
        ("srelu", "bf16", "one_owns_all", True, False),
        ("gelu_tanh", "bf16", "ragged", False, True),
        ("swiglu", "mxfp8", "ragged", True, False),
    ],
)
def test_bitwise_against_functional(rng, activation, recipe, case, bias, grouped):
    m, inp = make(rng, activation, recipe, case, bias, grouped, scaled_bias=bias)
    check_bitwise(m, inp)


def test_seed_replays_nvfp4_gradients(rng):
    """GroupedMLP(seed=s): its k-th backward rounds NVFP4's gradients as mlp_backward with
    seed s + k (mod 2^64) does, bit for bit (without seed= each backward draws fresh bits)."""
    seed = 2**64 - 1  # the second backward wraps to 0
    m, inp = make(rng, "swiglu", "nvfp4", "ragged", False, True, seed=seed)
    for k in range(2):
        m.zero_grad()
        out, grads = run_module(m, inp)
        want_out, want = run_functional(m, inp, seed=(seed + k) % 2**64)
        assert_same_bits(out, want_out, "out")
        for name in ref.GRADS:
            assert_same_bits(grads[name], want[name], f"backward {k}: {name}")
    with pytest.raises(ValueError, match="seed must be an int"):
        moe.GroupedMLP(2, 32, 32, seed=-1)


# --- gradients against torch autograd in float64 ---


def act64(name, h):
    if name == "swiglu":
        a, b = h.chunk(2, dim=-1)
        return torch.nn.functional.silu(a) * b
    if name == "srelu":
        return torch.relu(h) ** 2
    return torch.nn.functional.gelu(h, approximate="tanh")


def reference64(m, inp):
    """out and the gradients by torch autograd over the float64 values of the inputs."""
    f = {k: torch.tensor(np.asarray(v, np.float64), requires_grad=k != "splits") for k, v in inp.items()}
    sizes = [int(s) for s in inp["splits"]]
    rows = sum(sizes)
    outs, start = [], 0
    for g, size in enumerate(sizes):
        xg, sg = f["x"][start : start + size], f["probs"][start : start + size, None]
        h = xg @ f["w1"][g].T + f["b1"][g]
        outs.append((act64(m.cfg.activation, h) * sg) @ f["w2"][g].T + f["b2"][g] * sg)
        start += size
    out = torch.cat(outs)
    out.backward(f["dy"][:rows])
    names = {"dx": "x", "dprobs": "probs", "dw1": "w1", "dw2": "w2", "db1": "b1", "db2": "b2"}
    return out.detach(), {k: f[v].grad for k, v in names.items()}, rows


@pytest.mark.parametrize("activation", ["swiglu", "srelu", "gelu_tanh"])
@pytest.mark.parametrize("delay", [False, True])
def test_gradients_against_float64(rng, activation, delay):
    """Error RMS relative to each tensor's RMS within the functional API's bf16 bound
    (mlp_reference.RMS_BOUNDS: about six bf16 roundings on the longest path)."""
    m, inp = make(rng, activation, scaled_bias=True, delay_wgrad_compute=delay)
    out, grads = run_module(m, inp)
    want_out, want, rows = reference64(m, inp)
    bound = ref.RMS_BOUNDS["bf16"]
    for k, got, w in [("out", out, want_out), *((k, grads[k], want[k]) for k in ref.GRADS)]:
        got, w = array(got), w.numpy()
        if k in ("out", "dx", "dprobs"):
            assert not np.any(got[rows:]), f"{k}: rows past the splits' sum are not zero"
            got = got[:rows]
            w = w[:rows]
        rms = np.sqrt(np.mean((got - w) ** 2)) / np.sqrt(np.mean(w**2))
        assert rms <= bound, f"{k}: error RMS {rms:.3g} of its RMS, bound {bound:.3g}"


# --- frozen subsets, no_grad, delayed wgrads ---

FROZEN = {
    "fc1": dict(w1=False, b1=False, x=False),
    "fc2": dict(w2=False, b2=False),
    "probs": dict(probs=False),
    "x_only": dict(x=False, probs=False, w1=False, w2=False, b1=False, b2=False) | dict(x=True),
}


@pytest.mark.parametrize("frozen", list(FROZEN))
@pytest.mark.parametrize("grouped", [True, False])
def test_frozen_subsets(rng, frozen, grouped):
    m, inp = make(rng, "swiglu", grouped=grouped)
    check_bitwise(m, inp, FROZEN[frozen])


def test_frozen_expert(rng):
    """One expert's weights frozen (per-expert parameters): its .grad stays None, the
    others' are the functional API's."""
    m, inp = make(rng, "srelu", grouped=False)
    m.fc1_weights[2].requires_grad_(False)
    x = tensor(inp["x"]).requires_grad_()
    m(x, tensor(inp["splits"]), tensor(inp["probs"])).backward(tensor(inp["dy"]))
    _, want = run_functional(m, inp)
    assert m.fc1_weights[2].grad is None
    for g in (0, 1, 3, 4):
        assert_same_bits(m.fc1_weights[g].grad, want["dw1"][g], f"dw1[{g}]")
    assert_same_bits(x.grad, want["dx"], "dx")


def test_no_grad_keeps_nothing(rng):
    m, inp = make(rng, "swiglu")
    before = len(module._CONTEXTS)
    x = tensor(inp["x"]).requires_grad_()
    with torch.no_grad():
        out = m(x, tensor(inp["splits"]), tensor(inp["probs"]))
    assert not out.requires_grad
    assert len(module._CONTEXTS) == before, "a context was kept under torch.no_grad"
    want, _ = moe.mlp_forward(
        inp["x"], inp["probs"], inp["splits"], {k: inp[k] for k in ("w1", "w2", "b1", "b2")}, m.cfg
    )
    assert_same_bits(out, want, "out")


def test_context_freed_without_backward(rng):
    m, inp = make(rng, "srelu")
    before = len(module._CONTEXTS)
    out = m(tensor(inp["x"]).requires_grad_(), tensor(inp["splits"]), tensor(inp["probs"]))
    assert len(module._CONTEXTS) == before + 1
    del out
    assert len(module._CONTEXTS) == before, "the context outlived its output"


def test_second_backward_is_an_error(rng):
    m, inp = make(rng, "srelu")
    out = m(tensor(inp["x"]).requires_grad_(), tensor(inp["splits"]), tensor(inp["probs"]))
    out.backward(tensor(inp["dy"]), retain_graph=True)
    with pytest.raises(RuntimeError, match="backward already ran"):
        out.backward(tensor(inp["dy"]))


@pytest.mark.parametrize("recompute", [False, True])
def test_delay_wgrad_accumulates(rng, recompute):
    """backward_dw adds to existing .grad (as autograd accumulates) and equals the
    undelayed module's gradients bitwise; recompute changes none of them."""
    m, inp = make(rng, "swiglu", delay_wgrad_compute=True, recompute_activation=recompute)
    check_bitwise(m, inp)
    first = [w.grad.clone() for w in (m.fc1_weight, m.fc2_weight)]
    run_module(m, inp)
    for w, g in zip((m.fc1_weight, m.fc2_weight), first):
        assert_same_bits(w.grad, (g + g).view(torch.int16).numpy().view(BF16), "accumulated dw")
    m.backward_dw()  # nothing queued: no change
    plain, _ = make(rng, "swiglu")
    with torch.no_grad():
        for a, b in zip(plain.parameters(), m.parameters()):
            a.copy_(b)
    _, want = run_module(plain, inp)
    for w, g in zip((m.fc1_weight, m.fc2_weight), first):
        assert torch.equal(g.view(torch.int16), (want["dw1"] if w is m.fc1_weight else want["dw2"]).view(torch.int16))


def test_torch_compile_fullgraph(rng):
    """A model around the module compiles as one graph (the op is opaque, its fake
    implementation gives the shapes) and runs bitwise like eager."""
    m, inp = make(rng, "swiglu")
    d = m.hidden
    torch.manual_seed(int(rng.integers(1 << 31)))
    proj = torch.nn.Linear(d, d).bfloat16()

    def model(x, splits, probs):
        return proj(m(x, splits, probs)).float().square().sum()

    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    results = []
    for fn in (model, compiled):
        x = tensor(inp["x"]).requires_grad_()
        probs = tensor(inp["probs"]).requires_grad_()
        for p in m.parameters():
            p.grad = None
        loss = fn(x, tensor(inp["splits"]), probs)
        loss.backward()
        results.append([loss, x.grad, probs.grad, *(p.grad for p in m.parameters())])
    for a, b in zip(*results):
        assert torch.equal(a, b)


def test_opcheck():
    """torch's own checks of the ops' schema, fake implementations and autograd registration."""
    x = torch.randn(20, 64).bfloat16().requires_grad_()
    probs = torch.rand(20).requires_grad_()
    splits = torch.tensor([12, 0, 8], dtype=torch.int32)
    m = moe.GroupedMLP(3, 64, 32, "srelu", bias=True)
    args = (x, probs, splits, *m.weights(), m.fc1_bias, m.fc2_bias, m._cfg_json, [True] * 6, 0)
    tests = ("test_schema", "test_autograd_registration", "test_faketensor")
    torch.library.opcheck(torch.ops.tilefuse.grouped_mlp_forward, args, test_utils=tests)


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown activation 'relu3'"):
        moe.GroupedMLP(2, 64, 32, "relu3")
    with pytest.raises(ValueError, match="num_experts must be a positive int"):
        moe.GroupedMLP(0, 64, 32)
    m = moe.GroupedMLP(2, 64, 32)
    splits = torch.tensor([3, 2], dtype=torch.int32)
    with pytest.raises(TypeError, match="x"):
        m(torch.randn(5, 64), splits, torch.rand(5))
    with pytest.raises(ValueError, match="splits sum past the 5 rows"):
        m(torch.randn(5, 64).bfloat16(), torch.tensor([4, 2], dtype=torch.int32), torch.rand(5))


def test_import_without_torch():
    """tilefuse and tilefuse.moe import with torch absent; GroupedMLP says it needs torch."""
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import tilefuse, tilefuse.moe\n"
        "try:\n    tilefuse.moe.GroupedMLP\nexcept ImportError as e:\n    print('ImportError', e)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "ImportError" in r.stdout and "torch" in r.stdout


def test_eager_step_imports_no_compiler_stack():
    """An eager training step goes past torch's dispatcher (module._Eager): a custom op's
    first call would import torch._dynamo (seconds of a first step, bench/first_call.py)."""
    code = (
        "import sys, torch\n"
        "from tilefuse import moe\n"
        "m = moe.GroupedMLP(2, 64, 32, 'swiglu')\n"
        "x = torch.randn(24, 64).bfloat16().requires_grad_()\n"
        "probs = torch.rand(24).requires_grad_()\n"
        "m(x, torch.tensor([10, 14], dtype=torch.int32), probs).float().sum().backward()\n"
        "assert x.grad is not None and m.fc1_weight.grad is not None\n"
        "print(sorted(k for k in ('torch._dynamo', 'sympy') if k in sys.modules))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]", r.stdout


@pytest.mark.parametrize("tracer", ["make_fx", "export"])
def test_traces_keep_the_custom_op(tracer):
    """Traces other than torch.compile (make_fx's dispatch mode, torch.export) record the
    forward as the opaque custom op, not the eager path's kernel launches (which a trace
    would not see)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    m = moe.GroupedMLP(2, 64, 32, "swiglu")
    x, probs = torch.randn(24, 64).bfloat16(), torch.rand(24)
    splits = torch.tensor([10, 14], dtype=torch.int32)
    if tracer == "make_fx":
        graph = make_fx(lambda x, s, p: m(x, s, p))(x, splits, probs).graph
    else:
        graph = torch.export.export(m, (x, splits, probs), strict=False).graph
    targets = [str(n.target) for n in graph.nodes if n.op == "call_function"]
    assert any("grouped_mlp_forward" in t for t in targets), targets
