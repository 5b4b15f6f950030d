"""The cases of bench/moe_bench.py: per shape, a list of dicts {section, shape, routing, op,
variant, who ("ours" / "peer"), dtype (its BOUNDS key), flops or bytes, fn (the timed
call, returning its result), check (result -> error RMS against float64)} or, for a peer
this machine lacks, {..., unavailable: why}. Data is made when a shape's cases are asked
for and dropped with them."""

import functools
import importlib

from moe_bench_arrays import check_groups, error_rms, offsets, torch
from tilefuse import cdiv, moe

# Error RMS / reference RMS, against float64. bf16 out: one rounding (2^-9 relative, RMS
# ~2^-10) and fp32 sums, with room; fp8 (E4M3 operands: half a 2^-3 step each, RMS
# ~2^-5.5 per product): the quantization of both operands; MLP: a few bf16 roundings in a
# chain (h, y, dh), as bench's demo bound.
BOUNDS = {"bf16": 2.0**-7, "fp8": 2.0**-3, "mlp": 2.0**-6}
host = importlib.import_module("tilefuse.moe.grouped_gemm")

GEMM_SHAPES = {  # PEERS.md's grouped GEMMs, name: (experts, rows T, K, N)
    "deepseekv3_fc1": (32, 32768, 7168, 4096),
    "deepseekv3_fc2": (32, 32768, 2048, 7168),
    "mixtral_fc1": (8, 16384, 4096, 28672),
    "mixtral_fc2": (8, 16384, 14336, 4096),
    "qwen3_30b_fc1": (128, 65536, 2048, 1536),
    "qwen3_30b_fc2": (128, 65536, 768, 2048),
}


def _case(section, shape, routing, op, variant, who, dtype, fn, check, **extra):
    return dict(section=section, shape=shape, routing=routing, op=op, variant=variant, who=who, dtype=dtype) | dict(
        fn=fn, check=check, **extra
    )


def _missing(section, shape, routing, op, variant, why):
    return dict(section=section, shape=shape, routing=routing, op=op, variant=variant, who="peer", unavailable=why)


def _cfg_name(c):
    return (
        f"{c.block_m}x{c.block_n}x{c.block_k}w{c.num_warps}s{c.num_stages}" + ("", "ws", "pp")[int(c.warp_specialize)]
    )


def gemm_cases(B, name, shape, splits_for, skewed, configs, rng, fp8_configs=(None,)):
    e, rows, k, n = shape
    s = splits_for(rows, e, skewed, rng)
    routing = "skewed" if skewed else "0.7-1.3"
    x, w, dy = B.randn((rows, k)), B.randn((e, n, k), 0.02), B.randn((rows, n))
    splits, offs = B.int32(s), offsets(s)
    groups = check_groups(B, s)
    x64, dy64 = B.f64(x), B.f64(dy)
    w64 = {g: B.f64(w[g]) for g in groups}

    def rows_check(fn_ref):
        def check(y):
            pairs = [(B.f64(y[offs[g] : offs[g + 1]]), fn_ref(g)) for g in groups]
            return error_rms(B, pairs) if B.all_finite(y[: offs[-1]]) else float("inf")

        return check

    fwd_check = rows_check(lambda g: x64[offs[g] : offs[g + 1]] @ w64[g].T)
    dgrad_check = rows_check(lambda g: dy64[offs[g] : offs[g + 1]] @ w64[g])

    def wgrad_check(dw):
        return error_rms(
            B, [(B.f64(dw[g]), dy64[offs[g] : offs[g + 1]].T @ x64[offs[g] : offs[g + 1]]) for g in groups]
        )

    flops = 2.0 * rows * n * k

    def c(op, variant, who, dtype, fn, check):
        return _case("gemm", name, routing, op, variant, who, dtype, fn, check, flops=flops)

    out = []
    for cfg in configs:
        # Warp specialization is the persistent forward's and dgrad's only (GemmConfig).
        for persistent in (True,) if cfg.warp_specialize else (True, False):
            p = cfg._replace(persistent=persistent)
            tag = f"{'persistent' if persistent else 'per-tile'} {_cfg_name(cfg)}"
            fits_fwd = host.persistent_fits(host._weights("", w, x), rows, k, cfg, False)
            fits_dg = host.persistent_fits(host._weights("", w, x), rows, n, cfg, True)
            for op, fits, o, fn, check in (
                ("fwd bf16", fits_fwd, n, lambda p=p: moe.grouped_gemm(x, w, splits, config=p), fwd_check),
                ("dgrad bf16", fits_dg, k, lambda p=p: moe.grouped_gemm_dgrad(dy, w, splits, config=p), dgrad_check),
            ):
                if persistent and not fits:
                    continue
                rule = host.use_persistent(x, rows, e, o, cfg) == persistent or (persistent is False and not fits)
                case = c(op, tag + (" [rule]" if rule else ""), "ours", "bf16", fn, check)
                waves = (cdiv(rows, cfg.block_m) + min(e, rows)) * cdiv(o, cfg.block_n) / host.num_programs(x)
                out.append(case | dict(config=_cfg_name(cfg), persistent=persistent, waves=waves))
            if cfg.warp_specialize == 2 or (cfg.warp_specialize and not persistent):
                continue  # the wgrad specializes its persistent kernel, one consumer group
            # The wgrad's tiles are dw's: block_m of N by block_n of K, block_k rows a step.
            fn = functools.partial(moe.grouped_gemm_wgrad, dy, x, splits, config=p)
            rule = host.wgrad_persistent(x, n, k, cfg) == persistent
            case = c("wgrad bf16", tag + (" [rule]" if rule else ""), "ours", "bf16", fn, wgrad_check)
            waves = e * cdiv(n, cfg.block_m) * cdiv(k, cfg.block_n) / host.num_programs(x)
            out.append(case | dict(config=_cfg_name(cfg), persistent=persistent, waves=waves))
    for cfg in fp8_configs:
        out += _fp8_ours(B, x, w, dy, splits, c, fwd_check, dgrad_check, cfg)
    out += _gemm_peers(B, name, routing, x, w, dy, s, offs, c, fwd_check, dgrad_check, wgrad_check)
    return out


def _fp8_ours(B, x, w, dy, splits, c, fwd_check, dgrad_check, cfg):
    """Our fp8 forward and dgrad on MXFP8 and FP8-block operands (quantized here, not timed)
    at tile config `cfg` (None: what the host picks); bench/moe_tune.py tunes them per
    recipe, the variant's first word."""
    w2 = w.reshape(-1, w.shape[2])
    recipes = [("mxfp8", "mxfp8 (1x32 e8m0)", {})]
    if w2.shape[0] % 128 == 0 and x.shape[1] % 128 == 0:
        recipes.append(("fp8_block", "fp8_block (1x128, 128x128)", dict(block=(128, 128))))
    out = []
    for recipe, variant, wkw in recipes:
        if cfg is not None and recipe == "mxfp8" and (cfg.persistent or cfg.warp_specialize):
            continue  # the persistent fp8 kernel reads FP8-block codes through descriptors only
        name = None if cfg is None else _cfg_name(cfg) + ("p" if cfg.persistent and not cfg.warp_specialize else "")
        tag = {} if cfg is None else dict(config=name, persistent=cfg.persistent)
        label = variant + ("" if cfg is None else f" {name}")
        qx, qw = moe.quantize(x, recipe), moe.quantize(w2, recipe, **wkw)
        fn = functools.partial(moe.grouped_gemm, qx, qw, splits, config=cfg)
        out.append(c("fwd fp8", label, "ours", "fp8", fn, fwd_check) | tag)
        qdy, qwc = moe.quantize(dy, recipe), moe.quantize(w2, recipe, axis=0, **wkw)
        fn = functools.partial(moe.grouped_gemm_dgrad, qdy, qwc, splits, config=cfg)
        out.append(c("dgrad fp8", label, "ours", "fp8", fn, dgrad_check) | tag)
    return out


def _gemm_peers(B, name, routing, x, w, dy, s, offs, c, fwd_check, dgrad_check, wgrad_check):
    e, n, k = w.shape
    rows = x.shape[0]
    if not B.gpu:
        return _numpy_peers(B, x, w, dy, offs, c, fwd_check, dgrad_check, wgrad_check) + [
            _missing("gemm", name, routing, op, v, "no torch / GPU on the interpreter")
            for op, v in (
                ("fwd bf16", "torch._grouped_mm"),
                ("fwd bf16", "triton persistent"),
                ("fwd fp8", "torch._scaled_grouped_mm"),
                ("dgrad fp8", "torch._scaled_grouped_mm"),
            )
        ]
    import triton_grouped

    xs, dys = list(torch.split(x, s)), list(torch.split(dy, s))
    y, dx, dw = (torch.empty(sh, device="cuda", dtype=torch.bfloat16) for sh in ((rows, n), (rows, k), (e, n, k)))
    ys, dxs = list(torch.split(y, s)), list(torch.split(dx, s))

    def fwd_loop():
        return [torch.mm(xs[i], w[i].t(), out=ys[i]) for i in range(e)] and y

    def dgrad_loop():
        return [torch.mm(dys[i], w[i], out=dxs[i]) for i in range(e)] and dx

    def wgrad_loop():
        return [torch.mm(dys[i].t(), xs[i], out=dw[i]) for i in range(e)] and dw

    ends = torch.tensor(offs[1:], dtype=torch.int32, device="cuda")
    offs_dev = torch.tensor(offs, dtype=torch.int32, device="cuda")
    out = [
        c("fwd bf16", "cuBLAS per-expert loop", "peer", "bf16", fwd_loop, fwd_check),
        c("dgrad bf16", "cuBLAS per-expert loop", "peer", "bf16", dgrad_loop, dgrad_check),
        c("wgrad bf16", "cuBLAS per-expert loop", "peer", "bf16", wgrad_loop, wgrad_check),
    ]
    if hasattr(torch, "_grouped_mm"):
        wt = w.transpose(-2, -1)
        out += [
            c("fwd bf16", "torch._grouped_mm", "peer", "bf16", lambda: torch._grouped_mm(x, wt, offs=ends), fwd_check),
            c(
                "dgrad bf16",
                "torch._grouped_mm",
                "peer",
                "bf16",
                lambda: torch._grouped_mm(dy, w, offs=ends),
                dgrad_check,
            ),
            c(
                "wgrad bf16",
                "torch._grouped_mm",
                "peer",
                "bf16",
                lambda: torch._grouped_mm(dy.t(), x, offs=ends),
                wgrad_check,
            ),
        ]
    else:
        out.append(
            _missing("gemm", name, routing, "fwd bf16", "torch._grouped_mm", f"not in torch {torch.__version__}")
        )
    for cfg in triton_grouped.CONFIGS:
        tag = "triton persistent " + "x".join(map(str, cfg[:3])) + f"w{cfg[4]}s{cfg[5]}"
        out.append(
            c(
                "fwd bf16",
                tag,
                "peer",
                "bf16",
                lambda cfg=cfg: triton_grouped.grouped_gemm(x, w, offs_dev, cfg, y),
                fwd_check,
            )
        )
    out += _scaled_grouped(name, routing, x, w, dy, ends, c, fwd_check, dgrad_check)
    return out


def _scaled_grouped(name, routing, x, w, dy, ends, c, fwd_check, dgrad_check):
    """torch's fp8 rowwise grouped GEMM, forward and dgrad: e4m3 A with a scale per row, B
    with one per (expert, output column), as torch 2.11's torch._scaled_grouped_mm(mat_a,
    mat_b, scale_a, scale_b, offs=, out_dtype=) takes them (B column-major)."""
    fn = getattr(torch, "_scaled_grouped_mm", None)
    if fn is None:
        why = f"not in torch {torch.__version__}"
        return [_missing("gemm", name, routing, op, "torch._scaled_grouped_mm", why) for op in ("fwd fp8", "dgrad fp8")]
    fmax = torch.finfo(torch.float8_e4m3fn).max

    def rowwise(a, dim):
        s = a.float().abs().amax(dim=dim).clamp_min(1e-12) / fmax
        return (a.float() / s.unsqueeze(dim)).to(torch.float8_e4m3fn), s

    x8, sx = rowwise(x, 1)
    dy8, sdy = rowwise(dy, 1)
    w8, sw = rowwise(w, 2)  # [E, N, K], a scale per (expert, n): the forward's B [K, N] per expert
    wk8, swk = rowwise(w.transpose(-2, -1).contiguous(), 2)  # [E, K, N]: the dgrad's B [N, K]
    w8, wk8 = w8.transpose(-2, -1), wk8.transpose(-2, -1)

    def fwd():
        return fn(x8, w8, sx, sw, offs=ends, out_dtype=torch.bfloat16)

    def dgrad():
        return fn(dy8, wk8, sdy, swk, offs=ends, out_dtype=torch.bfloat16)

    return [
        c("fwd fp8", "torch._scaled_grouped_mm rowwise", "peer", "fp8", fwd, fwd_check),
        c("dgrad fp8", "torch._scaled_grouped_mm rowwise", "peer", "fp8", dgrad, dgrad_check),
    ]


def _numpy_peers(B, x, w, dy, offs, c, fwd_check, dgrad_check, wgrad_check):
    """The interpreter's stand-in for the cuBLAS loop: numpy float32 matmuls per expert."""
    e = w.shape[0]
    xf, dyf, wf = B.f32(x), B.f32(dy), B.f32(w)
    r = [(offs[i], offs[i + 1]) for i in range(e)]

    def fwd():
        return B.bf16(B.cat([xf[a:b] @ wf[i].T for i, (a, b) in enumerate(r)]))

    def dgrad():
        return B.bf16(B.cat([dyf[a:b] @ wf[i] for i, (a, b) in enumerate(r)]))

    def wgrad():
        return B.bf16(B.stack([dyf[a:b].T @ xf[a:b] for a, b in r], 0))

    v = "numpy per-expert loop"
    return [
        c("fwd bf16", v, "peer", "bf16", fwd, fwd_check),
        c("dgrad bf16", v, "peer", "bf16", dgrad, dgrad_check),
        c("wgrad bf16", v, "peer", "bf16", wgrad, wgrad_check),
    ]
