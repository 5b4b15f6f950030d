"""The memory-bound stages and the MoE MLP cases of bench/moe_bench.py (see moe_bench_cases
for a case's fields), with their float64 references written on the operations numpy and
torch share."""

from moe_bench_arrays import check_groups, error_rms, offsets, torch
from moe_bench_cases import _case, _missing
from tilefuse import moe

LIMIT, ALPHA = 7.0, 1.702  # GPT-OSS's clamped SwiGLU (moe's defaults, PEERS.md's peer)
GRADS = ("x", "probs", "w1", "w2", "b1", "b2")
_COMPILED = {}  # one torch.compile per function: shapes after the second reuse its dynamic graph


def _sigmoid(xp, z):
    return 1.0 / (1.0 + xp.exp(-z))


def act_parts(xp, name, a, b):
    """(f, ∂f/∂a, ∂f/∂b) of the GLU `name`, float64."""
    if name == "swiglu":
        sg = _sigmoid(xp, a)
        return a * sg * b, b * (sg + a * sg * (1.0 - sg)), a * sg
    ac, bc = xp.clip(a, None, LIMIT), xp.clip(b, -LIMIT, LIMIT) + 1.0
    sg = _sigmoid(xp, ALPHA * ac)
    fa = xp.where(a <= LIMIT, bc * (sg + ALPHA * ac * sg * (1.0 - sg)), 0.0)
    return ac * sg * bc, fa, xp.where(abs(b) <= LIMIT, ac * sg, 0.0)


def split_glu(h, run):
    """(a, b) of h [rows, 2n] whose a and b columns alternate in runs of `run`."""
    rows, n = h.shape[0], h.shape[1] // 2
    h4 = h.reshape(rows, n // run, 2, run)
    return h4[:, :, 0, :].reshape(rows, n), h4[:, :, 1, :].reshape(rows, n)


def join_glu(B, da, db, run):
    rows, n = da.shape
    return B.stack([da.reshape(rows, n // run, run), db.reshape(rows, n // run, run)], 2).reshape(rows, 2 * n)


def mlp_reference(B, t, offs, groups, act, run):
    """Out and gradients over `groups` (rows concatenated, per-expert tensors stacked), in
    the arrays' dtype, for t = dict(x, p, w1, w2, b1, b2, dy) (b1, b2 None without bias)."""
    parts = {k: [] for k in ("out", "dx", "dprobs", "dw1", "dw2", "db1", "db2")}
    for g in groups:
        a0, e0 = offs[g], offs[g + 1]
        xg, sg, dyg, w1, w2 = t["x"][a0:e0], t["p"][a0:e0, None], t["dy"][a0:e0], t["w1"][g], t["w2"][g]
        h = xg @ w1.T + (0.0 if t["b1"] is None else t["b1"][g])
        a, b = split_glu(h, run)
        f, fa, fb = act_parts(B.xp, act, a, b)
        y = sg * f
        gy = dyg @ w2
        dh = join_glu(B, gy * sg * fa, gy * sg * fb, run)
        vals = dict(out=y @ w2.T + (0.0 if t["b2"] is None else t["b2"][g]), dx=dh @ w1, dprobs=(gy * f).sum(1))
        vals |= dict(dw1=dh.T @ xg, dw2=dyg.T @ y, db1=dh.sum(0), db2=dyg.sum(0))
        for k, v in vals.items():
            parts[k].append(v)
    rows = {k: B.cat(parts[k]) for k in ("out", "dx", "dprobs")}
    return rows | {k: B.stack(parts[k], 0) for k in ("dw1", "dw2", "db1", "db2") if t["b1"] is not None or k[1] == "w"}


def _subset(B, full, key, offs, groups):
    if key in ("out", "dx", "dprobs"):
        return B.cat([B.f64(full[offs[g] : offs[g + 1]]) for g in groups])
    return B.stack([B.f64(full[g]) for g in groups], 0)


def mlp_cases(B, name, shape, splits_for, rng):
    e, r, d, n, act, il, bias = shape
    s = splits_for(r, e, False, rng)
    splits, offs, groups = B.int32(s), offsets(s), check_groups(B, s)
    t = dict(x=B.randn((r, d), 0.5), p=B.rand((r,)), w1=B.randn((e, 2 * n, d), d**-0.5), w2=B.randn((e, d, n), n**-0.5))
    t |= dict(b1=B.f32(B.randn((e, 2 * n), 0.1)), b2=B.f32(B.randn((e, d), 0.1))) if bias else dict(b1=None, b2=None)
    t["dy"] = B.randn((r, d))
    run = il or n
    t64 = {k: None if v is None else B.f64(v) for k, v in t.items()}
    ref = mlp_reference(B, t64, offs, groups, act, run)

    def check(got):
        return max(error_rms(B, [(_subset(B, got[k], k, offs, groups), ref[k])]) for k in ref if k in got)

    cfg = moe.MLPConfig(activation=act, recipe="bf16", bias=bias, interleave=il)
    params = {k: t[k] for k in ("w1", "w2", "b1", "b2") if t[k] is not None}
    no_grads = dict.fromkeys(GRADS, False)

    def ours_fb():
        out, ctx = moe.mlp_forward(t["x"], t["p"], splits, params, cfg)
        return {"out": out, **{k: v for k, v in moe.mlp_backward(ctx, t["dy"]).items() if v is not None}}

    fl = 6.0 * r * d * n

    def c(op, v, who, fn, flops):
        return _case("mlp", name, "0.7-1.3", op, v, who, "mlp", fn, check, flops=flops)

    out = [
        c(
            "fwd",
            "mlp_forward",
            "ours",
            lambda: {"out": moe.mlp_forward(t["x"], t["p"], splits, params, cfg, no_grads)[0]},
            fl,
        ),
        c("fwd+bwd", "mlp_forward+mlp_backward", "ours", ours_fb, 3 * fl),
    ]
    if not B.gpu:
        t32 = {k: None if v is None else B.f32(v) for k, v in t.items()}
        every = list(range(e))

        def peer():
            return mlp_reference(B, t32, offs, every, act, run)

        out += [c(op, "numpy float32 composition", "peer", peer, f) for op, f in (("fwd", fl), ("fwd+bwd", 3 * fl))]
        return out + [
            _missing("mlp", name, "0.7-1.3", "fwd+bwd", "torch composition", "no torch / GPU on the interpreter")
        ]
    return out + _torch_mlp(t, s, e, act, c, fl)


def _torch_act(name):
    """PEERS.md's peer activations (../shared/bench/moe_peers.py), bf16 math as there."""
    if name == "swiglu":
        return lambda h, p: torch.nn.functional.silu(h[:, : h.shape[1] // 2]) * h[:, h.shape[1] // 2 :] * p[:, None]

    def clamped(h, p):
        a, b = h[:, 0::2].clamp(max=LIMIT), h[:, 1::2]
        return a * torch.sigmoid(ALPHA * a) * (b.clamp(-LIMIT, LIMIT) + 1) * p[:, None]

    return clamped


def _torch_mlp(t, s, e, act, c, fl):
    """The composition of PEERS.md: torch._grouped_mm, the activation eager or compiled,
    autograd for the backward; biases (GPT-OSS) added per row by expert index."""
    if not hasattr(torch, "_grouped_mm"):
        return [_missing("mlp", "", "0.7-1.3", "fwd+bwd", "torch composition", "no torch._grouped_mm")]
    ends = torch.tensor(s, device="cuda").cumsum(0).to(torch.int32)
    idx = torch.repeat_interleave(torch.arange(e, device="cuda"), torch.tensor(s, device="cuda"))
    leaves = {
        k: (v.to(torch.bfloat16) if k[0] == "b" else v).detach().requires_grad_()
        for k, v in t.items()
        if v is not None and k != "dy"
    }
    eager = _torch_act(act)
    compiled = _COMPILED.setdefault(act, torch.compile(_torch_act(act)))

    def fwd(fn):
        h = torch._grouped_mm(leaves["x"], leaves["w1"].transpose(-2, -1), offs=ends)
        if "b1" in leaves:
            h = h + leaves["b1"][idx]
        y = torch._grouped_mm(fn(h, leaves["p"]).to(torch.bfloat16), leaves["w2"].transpose(-2, -1), offs=ends)
        return y + leaves["b2"][idx] if "b2" in leaves else y

    def fwd_only(fn):
        with torch.no_grad():
            return {"out": fwd(fn)}

    def fb(fn):
        for v in leaves.values():
            v.grad = None
        y = fwd(fn)
        y.backward(t["dy"])
        names = dict(x="dx", p="dprobs", w1="dw1", w2="dw2", b1="db1", b2="db2")
        return {"out": y.detach(), **{names[k]: v.grad for k, v in leaves.items()}}

    out = []
    for tag, fn in (("eager act", eager), ("compiled act", compiled)):
        out.append(c("fwd", f"torch._grouped_mm + {tag}", "peer", lambda fn=fn: fwd_only(fn), fl))
        out.append(c("fwd+bwd", f"torch._grouped_mm + {tag}", "peer", lambda fn=fn: fb(fn), 3 * fl))
    return out


def _mx_torch(a):
    """PEERS.md's eager MXFP8 quantize: e4m3 codes and e8m0 exponents of 32-blocks."""
    t = a.shape[0]
    a32 = a.float().view(t, -1, 32)
    amax = a32.abs().amax(-1, keepdim=True).clamp_min(2**-127)
    ex = torch.floor(torch.log2(amax)) - 8  # e4m3's emax
    return (a32 / torch.exp2(ex)).clamp(-448, 448).to(torch.float8_e4m3fn).view(t, -1), (ex + 127).to(torch.uint8)


def _swiglu_torch(h, p):
    f = h.shape[1] // 2
    return (torch.nn.functional.silu(h[:, :f].float()) * h[:, f:].float() * p[:, None]).to(torch.bfloat16)


def memory_cases(B, t, f, rng):
    """Scaled SwiGLU (h [T, 2F] bf16, probs fp32 -> bf16 [T, F]), MXFP8 quantize of its
    output (-> e4m3 + e8m0 per 32), and both in a row; GB/s over the bytes read + written."""
    h, p = B.randn((t, 2 * f)), B.rand((t,))
    h64, p64 = B.f64(h), B.f64(p)
    a, b = h64[:, :f], h64[:, f:]
    ref = p64[:, None] * a * _sigmoid(B.xp, a) * b
    y = moe.scaled_act("swiglu", h, p)
    y64 = B.f64(y)

    def deq(q):
        return B.f64(moe.dequantize(q)) if isinstance(q, moe.Quantized) else _dequant_peer(B, q)

    def act_check(out):
        return error_rms(B, [(B.f64(out), ref)])

    def q_check(q):
        return error_rms(B, [(deq(q), y64)])

    def fused_check(q):
        return error_rms(B, [(deq(q), ref)])

    fused_bytes = 2 * t * 2 * f + 4 * t + t * f + t * f // 32
    stages = {
        "scaled swiglu": ("bf16", 2 * t * 2 * f + 4 * t + 2 * t * f, act_check, lambda: moe.scaled_act("swiglu", h, p)),
        "mxfp8 quant": ("fp8", 2 * t * f + t * f + t * f // 32, q_check, lambda: moe.quantize(y, "mxfp8")),
        "swiglu+mxfp8": ("fp8", fused_bytes, fused_check, lambda: moe.scaled_act("swiglu", h, p, quantize="mxfp8")),
    }
    peers = {
        "scaled swiglu": lambda: _swiglu_torch(h, p),
        "mxfp8 quant": lambda: _mx_torch(y),
        "swiglu+mxfp8": lambda: _mx_torch(_swiglu_torch(h, p)),
    }
    shape, out = f"T{t} F{f}", []
    for op, (dtype, nbytes, check, fn) in stages.items():
        runs = [("moe.scaled_act / moe.quantize", "ours", fn)]
        if op == "swiglu+mxfp8":  # the two kernels in a row, y through memory: what fusing saves
            two = lambda: moe.quantize(moe.scaled_act("swiglu", h, p), "mxfp8")  # noqa: E731
            runs.append(("scaled_act, then quantize", "ours", two))
        if B.gpu:
            runs += [("torch eager", "peer", peers[op]), ("torch.compile", "peer", torch.compile(peers[op]))]
        else:
            out.append(_missing("memory", shape, "-", op, "torch eager / torch.compile", "no torch on the interpreter"))
        out += [_case("memory", shape, "-", op, v, who, dtype, g, check, bytes=nbytes) for v, who, g in runs]
    if B.gpu:  # the copy that bounds them all (PEERS.md: the fused target is 90% of it)
        same = lambda c: 0.0 if torch.equal(c, h) else float("inf")  # noqa: E731
        copy = _case(
            "memory", shape, "-", "copy", "torch clone of h", "peer", "bf16", h.clone, same, bytes=4 * h.numel()
        )
        out.append(copy)
    return out


def _dequant_peer(B, q):
    codes, ex = q
    t = codes.shape[0]
    return (B.f64(codes.float()).view(t, -1, 32) * torch.exp2(ex.double() - 127)).view(t, -1)
