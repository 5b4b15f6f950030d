"""moe.MLPConfig / mlp_forward / mlp_backward / backward_dw (SPEC-moe.md §4, §5, §7): the
grouped MLP  out = (act(x W1_gᵀ + b1_g)·s) W2_gᵀ + b2_g (· s)  and its backward, on
numpy arrays (interpreter) or CUDA torch tensors (GPU). This module checks arguments,
allocates, decides what to save and launches the steps of _mlp_ops.py; it does no
arithmetic on the data.

Recipes: "bf16"; "mxfp8" (E4M3 blocks of 32; d, n and n1 multiples of 32) and
"fp8_block" (1 x 128 activations and gradients, 128 x 128 weights; multiples of 128),
whose GEMMs take block-scaled fp8 operands (the wgrads: see _mlp_ops.py); "nvfp4" (E2M1
in blocks of 16; d, n and n1 multiples of 16), whose GEMMs dequantize their operands in
registers, with gradients quantized by stochastic rounding keyed by mlp_backward's seed
(bitwise reproducible given it). The FC1 and FC2-dgrad epilogues are moe.fused's kernels
for every recipe (ctx.record: "fused"; _mlp_ops.py's composition of the grouped GEMM,
scaled activation and quantizer kernels is what they equal bit for bit).

Split sizes stay on the device. mlp_forward launches check_splits, which flags negative
sizes or sizes summing past the rows in ctx.splits_status (int32 [1], on the device):
the interpreter's flag is host memory and read at once (a ValueError naming splits);
on the GPU reading it would be a host sync, so it is read only with check_splits="sync"
(or later by the caller); the kernels meanwhile clamp the sizes as the grouped GEMMs
document. Rows past the (clamped) sum are ignored; out, dx and dprobs are zero there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kernels_dsl.moe import mlp as K

from ..arrays import is_torch_tensor
from . import _arrays, fused
from . import _mlp_ops as ops
from .activations import _activation, _layout, _params
from .grouped_gemm import _check, _check_splits, _weights, grouped_gemm, grouped_gemm_dgrad
from .quant import Quantized, dequantize

RECIPES = ("bf16", "mxfp8", "fp8_block", "nvfp4")
MODES = ("exact", "accumulator")
GRADS = ("x", "probs", "w1", "w2", "b1", "b2")
_MULTIPLE = {"bf16": 1, "mxfp8": 32, "fp8_block": 128, "nvfp4": 16}
_FN = "mlp_forward"
# The FC1 and FC2-dgrad epilogues per recipe: moe.fused's kernels (the composition of
# _mlp_ops.py takes the same arguments and gives the same outputs, bit for bit).
_EPILOGUES = {r: (fused.fc1_forward, fused.fc2_dgrad, "fused") for r in fused.RECIPES}
# mlp_backward's NVFP4 gradient copies, each its own Philox key derived from the call's seed.
_SEED_STREAMS = ("dy_rows", "dy_cols", "dh_rows", "dh_cols")


@dataclass
class MLPConfig:
    """What the MLP computes (SPEC-moe.md §7). interleave and act_params: the activation's
    GLU layout and parameters (moe.scaled_act). scaled_bias: FC2's bias is b2_g·s.
    recompute: drop the FC2 input after the forward and regenerate it in the backward
    (recompute_mode "exact": bitwise the same results; "accumulator": the forward's
    activation reads the fp32 accumulator, only dW2 may differ). delay_wgrad: the
    backward queues the wgrads for backward_dw."""

    activation: str = "swiglu"
    recipe: str = "bf16"
    bias: bool = False
    scaled_bias: bool = False
    interleave: int = 0
    act_params: dict = field(default_factory=dict)
    recompute: bool = False
    recompute_mode: str = "exact"
    delay_wgrad: bool = False


@dataclass
class MLPContext:
    """What mlp_forward leaves for the backward. saved: {name: array} held until the
    backward (until backward_dw for the queued wgrads' operands); record: the steps run,
    "step:variant"; splits_status: see the module docstring."""

    cfg: MLPConfig
    needs: dict
    shapes: dict
    saved: dict = field(default_factory=dict)
    record: list = field(default_factory=list)
    splits_status: object = None
    stage: str = "forward"  # then "backward" (wgrads queued), then "done"
    queued: list = field(default_factory=list)
    kept: dict = field(default_factory=dict)  # what the steps read: arrays, Quantized, lists

    @property
    def saved_bytes(self) -> int:
        """Bytes of the storage behind ctx.saved, each buffer counted once."""
        seen = {}
        for a in self.saved.values():
            key, size = _storage(a)
            seen[key] = size
        return sum(seen.values())


def _storage(a):
    if isinstance(a, np.ndarray):
        root = a
        while isinstance(root.base, np.ndarray):
            root = root.base
        return ("np", id(root)), root.nbytes
    s = a.untyped_storage()
    return ("cuda", s.data_ptr()), s.nbytes()


def _check_cfg(cfg):
    if not isinstance(cfg, MLPConfig):
        raise TypeError(f"{_FN}: cfg must be a moe.MLPConfig, got {type(cfg).__name__}")
    act = _activation(f"{_FN}: cfg.activation", cfg.activation)
    if cfg.recipe not in RECIPES:
        raise ValueError(f"{_FN}: cfg.recipe must be one of {RECIPES}, got {cfg.recipe!r}")
    if cfg.recompute_mode not in MODES:
        raise ValueError(f"{_FN}: cfg.recompute_mode must be one of {MODES}, got {cfg.recompute_mode!r}")
    if cfg.scaled_bias and not cfg.bias:
        raise ValueError(f"{_FN}: cfg.scaled_bias scales FC2's bias; it needs cfg.bias=True")
    if not isinstance(cfg.act_params, dict):
        raise TypeError(f"{_FN}: cfg.act_params must be a dict, got {type(cfg.act_params).__name__}")
    _params(f"{_FN}: cfg.act_params", act, cfg.act_params)
    return act


def _check_needs(requires_grad):
    given = {} if requires_grad is None else requires_grad
    if not isinstance(given, dict):
        raise TypeError(f"{_FN}: requires_grad must be a dict over {GRADS}, got {type(given).__name__}")
    for k, v in given.items():
        if k not in GRADS:
            raise ValueError(f"{_FN}: requires_grad has no entry {k!r} (entries: {GRADS})")
        if not isinstance(v, bool):
            raise TypeError(f"{_FN}: requires_grad[{k!r}] must be a bool, got {type(v).__name__}")
    needs = {k: given.get(k, True) for k in GRADS[:4]}
    # Biases follow their weights unless given.
    return needs | {"b1": given.get("b1", needs["w1"]), "b2": given.get("b2", needs["w2"])}


def _check_params(params, cfg, act, x, g, d):
    if not isinstance(params, dict):
        raise TypeError(f"{_FN}: params must be a dict with w1, w2 (and b1, b2), got {type(params).__name__}")
    allowed = ("w1", "w2", "b1", "b2") if cfg.bias else ("w1", "w2")
    for k in params:
        if k not in allowed:
            why = "" if cfg.bias or k not in ("b1", "b2") else " (cfg.bias is False)"
            raise ValueError(f"{_FN}: params has an unexpected entry {k!r}{why}; expected {allowed}")
    for k in allowed:
        if k not in params:
            raise ValueError(f"{_FN}: params needs {k!r}")
    w1 = _weights(f"{_FN}: params['w1']", params["w1"], x)
    w2 = _weights(f"{_FN}: params['w2']", params["w2"], x)
    (n1, d1), (d2, n) = w1.shape, w2.shape
    if w1.groups != g or w2.groups != g:
        raise ValueError(f"{_FN}: splits names {g} experts but w1 has {w1.groups} and w2 {w2.groups}")
    if d1 != d or d2 != d:
        raise ValueError(
            f"{_FN}: x has d = {d} columns; w1 must be [G, n1, d] and w2 [G, d, n], got {w1.shape} and {w2.shape}"
        )
    n_out, _ = _layout(f"{_FN}: cfg.interleave with w1's n1 = {n1}", act, n1, cfg.interleave)
    if n_out != n:
        raise ValueError(f"{_FN}: w1's n1 = {n1} gives {act.name!r} an output of {n_out} columns but w2 takes n = {n}")
    for k, cols in (("b1", n1), ("b2", d)):
        if k in params:
            _check(_FN, f"params['{k}']", params[k], x, ("bfloat16", "float32"), 2)
            if tuple(params[k].shape) != (g, cols):
                raise ValueError(f"{_FN}: params['{k}'] must have shape ({g}, {cols}), got {tuple(params[k].shape)}")
    m = _MULTIPLE[cfg.recipe]
    for what, v in (("d", d), ("n", n), ("n1", n1)):
        if v % m:
            raise ValueError(f"{_FN}: recipe {cfg.recipe!r} needs {what} to be a multiple of {m}, got {v}")
    return n1, n


def _check_splits_values(splits, rows, check):
    if check not in (None, "sync"):
        raise ValueError(f"{_FN}: check_splits must be None or 'sync', got {check!r}")
    status = ops.splits_status(splits, rows)
    if isinstance(status, np.ndarray) or check == "sync":
        code = int(status[0])
        if code == K.SPLITS_NEGATIVE:
            raise ValueError(f"{_FN}: splits holds a negative size")
        if code == K.SPLITS_PAST_ROWS:
            raise ValueError(f"{_FN}: splits sum past the {rows} rows of x")
    return status


def _check_inputs(x, probs, splits):
    _check(_FN, "x", x, x, ("bfloat16",), 2)
    rows, d = (int(v) for v in x.shape)
    _check(_FN, "probs", probs, x, ("float32",), 1)
    if int(probs.shape[0]) != rows:
        raise ValueError(f"{_FN}: probs must have shape ({rows},) (one weight per row of x), got {tuple(probs.shape)}")
    _check_splits(_FN, splits, x, None)
    return rows, d, int(splits.shape[0])


def mlp_forward(x, probs, splits, params, cfg, requires_grad=None, *, check_splits=None):
    """(out, ctx): out [T, d] bf16 for x [T, d] bf16, probs [T] fp32, splits [G] int32,
    params w1 [G, n1, d], w2 [G, d, n] (or lists of G experts), b1 [G, n1], b2 [G, d]
    (cfg.bias). requires_grad: {x, probs, w1, w2, b1, b2: bool}, all True by default
    (b1, b2 follow w1, w2)."""
    act = _check_cfg(cfg)
    rows, d, g = _check_inputs(x, probs, splits)
    n1, n = _check_params(params, cfg, act, x, g, d)
    needs = _check_needs(requires_grad)
    lists = {f"{k}_list": isinstance(params[k], (list, tuple)) for k in ("w1", "w2")}
    kinds = {f"{k}_kind": _arrays.kind_of(k, params[k]) for k in ("b1", "b2") if k in params}
    ctx = MLPContext(cfg, needs, dict(rows=rows, d=d, n=n, n1=n1, **lists, **kinds))
    ctx.splits_status = _check_splits_values(splits, rows, check_splits)
    w1, w2, b1, b2 = params["w1"], params["w2"], params.get("b1"), params.get("b2")
    r, mode = cfg.recipe, cfg.recompute_mode
    act_args = dict(interleave=cfg.interleave, act_params=cfg.act_params)
    xa, w1a = ops.gemm_operands(x, w1, r, splits, dgrad=False)
    fc1_forward, _, variant = _EPILOGUES[r]
    c, y = fc1_forward(xa, w1a, splits, probs, cfg.activation, r, bias=b1, mode=mode, **act_args)
    ctx.record.append(f"fc1_forward:{variant}-{mode}-{r}")
    y_row, y_col = (y, y) if r == "bf16" else y
    w2a = w2 if r == "bf16" else ops.quantize_weight(w2, r, -1)
    out = ops.zeros(x, (rows, d), "bfloat16")
    grouped_gemm(y_row, w2a, splits, b2, probs if cfg.scaled_bias else None, out=out)
    ctx.record.append(f"fc2_forward:grouped_gemm-{r}" + ("-scaled_bias" if cfg.scaled_bias else "-bias" * cfg.bias))
    _save(ctx, x, probs, splits, w1, w2, b2, c, y_col)
    return out, ctx


def _upstream(needs) -> bool:
    """Whether the backward needs dA (the FC2 dgrad): a gradient below FC2 is wanted."""
    return needs["x"] or needs["probs"] or needs["w1"] or needs["b1"]


def _put(saved, name, a):
    if isinstance(a, Quantized):
        saved[f"{name}.data"], saved[f"{name}.scale"] = a.data, a.scale
        if a.tensor_scale is not None:
            saved[f"{name}.tensor_scale"] = a.tensor_scale
    elif isinstance(a, (list, tuple)):
        saved.update({f"{name}[{i}]": e for i, e in enumerate(a)})
    else:
        saved[name] = a


def _save(ctx, x, probs, splits, w1, w2, b2, c, y_col):
    needs, cfg, s = ctx.needs, ctx.cfg, ctx.saved
    upstream = _upstream(needs)
    regen = cfg.recompute and needs["w2"]
    ctx.kept = {"splits": splits}
    if upstream or regen:
        ctx.kept.update(c=c, probs=probs, w2=w2)
    elif cfg.scaled_bias and needs["b2"]:
        ctx.kept.update(probs=probs)
    if needs["w2"] and not cfg.recompute:
        ctx.kept["fc2_input"] = y_col
    if needs["w1"]:
        ctx.kept["x"] = x if cfg.recipe == "bf16" else ops.quantize_cols(x, cfg.recipe, splits)
    if needs["x"]:
        ctx.kept["w1"] = w1
    if cfg.scaled_bias and needs["probs"]:
        ctx.kept["b2"] = b2
    for k, v in ctx.kept.items():
        _put(s, k, v)


def _check_dy(ctx, dy):
    like = ctx.kept["splits"]
    fn = "mlp_backward"
    _check(fn, "dy", dy, dy, ("bfloat16",), 2)
    if isinstance(dy, np.ndarray) != isinstance(like, np.ndarray):
        raise TypeError(f"{fn}: dy must be a {type(like).__name__} like the forward's inputs, got {type(dy).__name__}")
    if is_torch_tensor(dy) and dy.device != like.device:
        raise ValueError(f"{fn}: dy is on {dy.device} but the forward ran on {like.device}")
    shape = (ctx.shapes["rows"], ctx.shapes["d"])
    if tuple(dy.shape) != shape:
        raise ValueError(f"{fn}: dy must have the output's shape {shape}, got {tuple(dy.shape)}")


def _like_weights(dw, as_list):
    """dw [G, N, K] in its weight's form: per-expert views for a list of weights."""
    return [dw[g] for g in range(dw.shape[0])] if as_list else dw


def _seeds(seed):
    """{stream: Philox key} for NVFP4's stochastic rounding: the call's seed (an int in
    [0, 2^64); None draws one from the OS) spread by the golden-ratio constant."""
    if seed is None:
        seed = int(np.random.SeedSequence().entropy) % 2**64
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**64:
        raise ValueError(f"mlp_backward: seed must be an int in [0, 2^64) or None, got {seed!r}")
    return {k: (seed + i * 0x9E3779B97F4A7C15) % 2**64 for i, k in enumerate(_SEED_STREAMS)}


def mlp_backward(ctx, dy, *, seed=None):
    """{dx, dprobs, dw1, dw2, db1, db2} for the output gradient dy [T, d] bf16 (dx, dw bf16,
    dw in its weight's form; dprobs fp32; db in its bias's dtype); None where not required,
    and dw1, dw2 None when cfg.delay_wgrad (backward_dw returns them). seed: the key of
    NVFP4's stochastic rounding of the gradients (the same seed, the same bits; None: a
    fresh one); the other recipes round to nearest and do not read it."""
    if not isinstance(ctx, MLPContext):
        raise TypeError(f"mlp_backward: ctx must be what mlp_forward returned, got {type(ctx).__name__}")
    if ctx.stage != "forward":
        raise ValueError("mlp_backward: ctx: the backward already ran on this context")
    _check_dy(ctx, dy)
    seeds = _seeds(seed)
    cfg, needs, kept, rec = ctx.cfg, ctx.needs, ctx.kept, ctx.record
    r, splits = cfg.recipe, kept["splits"]
    grads = dict.fromkeys(("dx", "dprobs", "dw1", "dw2", "db1", "db2"))
    wgrads = []
    regen = cfg.recompute and needs["w2"]
    if _upstream(needs) or regen:
        nv = r == "nvfp4"
        dya, w2a = ops.gemm_operands(dy, kept["w2"], r, splits, dgrad=True, seed=seeds["dy_rows"] if nv else None)
        _, fc2_dgrad, variant = _EPILOGUES[r]
        extra = dict(seeds=(seeds["dh_rows"], seeds["dh_cols"])) if nv else {}
        dh, dprobs, y_col = fc2_dgrad(
            dya,
            w2a,
            splits,
            kept["c"],
            kept["probs"],
            cfg.activation,
            r,
            interleave=cfg.interleave,
            act_params=cfg.act_params,
            recompute=regen,
            **extra,
        )
        rec.append(f"fc2_dgrad:{variant}{'-recompute' if regen else ''}-{r}")
        dh_row, dh_col = (dh, dh) if r == "bf16" else dh
        if needs["probs"]:
            if cfg.scaled_bias:
                ops.add_scaled_bias_dprobs(dprobs, dy, kept["b2"], splits)
                rec.append("dprobs:scaled_bias_dprobs")
            grads["dprobs"] = dprobs
        if needs["x"]:
            dx = ops.zeros(dy, (ctx.shapes["rows"], ctx.shapes["d"]), "bfloat16")
            wq = kept["w1"] if r == "bf16" else ops.quantize_weight(kept["w1"], r, 0)
            grads["dx"] = grouped_gemm_dgrad(dh_row, wq, splits, out=dx)
            rec.append(f"fc1_dgrad:grouped_gemm_dgrad-{r}")
        if needs["b1"] and cfg.bias:
            kind = ctx.shapes["b1_kind"]
            grads["db1"] = ops.bias_grad(dh_row if r == "bf16" else dequantize(dh_row), splits, kind)
            rec.append("db1:grouped_bias_grad")
        if needs["w1"]:
            wgrads.append(("dw1", "fc1_wgrad", dh_col, kept["x"], ctx.shapes["w1_list"]))
        if regen:
            kept["fc2_input"] = y_col
    if needs["b2"] and cfg.bias:
        scale = kept["probs"] if cfg.scaled_bias else None
        grads["db2"] = ops.bias_grad(dy, splits, ctx.shapes["b2_kind"], scale)
        rec.append("db2:grouped_bias_grad" + "-scaled" * cfg.scaled_bias)
    if needs["w2"]:
        dy_col = dy if r == "bf16" else ops.quantize_cols(dy, r, splits, seeds["dy_cols"] if r == "nvfp4" else None)
        wgrads.append(("dw2", "fc2_wgrad", dy_col, kept["fc2_input"], ctx.shapes["w2_list"]))
    ctx.saved.clear()
    ctx.kept = {"splits": splits}
    ctx.queued = wgrads
    if cfg.delay_wgrad:
        for _, step, a, b, _ in wgrads:
            _put(ctx.saved, f"{step}.dy", a)
            _put(ctx.saved, f"{step}.input", b)
            rec.append(f"{step}:queued")
        ctx.stage = "backward"
    else:
        grads.update(_run_wgrads(ctx))
    return grads


def _run_wgrads(ctx):
    r, out = ctx.cfg.recipe, {}
    splits = ctx.kept["splits"]
    for name, step, a, b, as_list in ctx.queued:
        dw = ops.wgrad(a, b, splits, ctx.shapes["rows"])
        ctx.record.append(f"{step}:grouped_gemm_wgrad-{r}")
        out[name] = _like_weights(dw, as_list)
    ctx.queued, ctx.saved, ctx.stage = [], {}, "done"
    return out


def backward_dw(ctx):
    """The wgrads mlp_backward queued (cfg.delay_wgrad): {dw1, dw2} for those required."""
    if not isinstance(ctx, MLPContext):
        raise TypeError(f"backward_dw: ctx must be what mlp_forward returned, got {type(ctx).__name__}")
    if ctx.stage == "forward":
        raise ValueError("backward_dw: ctx: run mlp_backward first")
    if ctx.stage == "done":
        raise ValueError("backward_dw: ctx: no wgrads queued (cfg.delay_wgrad is False, or backward_dw already ran)")
    return _run_wgrads(ctx)
