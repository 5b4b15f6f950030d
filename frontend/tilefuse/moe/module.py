"""tilefuse.moe.GroupedMLP: the grouped MLP of mlp.py as a torch.nn.Module.

A thin layer over the functional API (SPEC-moe.md §7): forward and backward are two torch
custom ops (tilefuse::grouped_mlp_forward / _backward, opaque to torch.compile, with fake
implementations) tied together by torch.library.register_autograd, whose real
implementations call mlp_forward and mlp_backward; plain eager calls run the same
implementations under a torch.autograd.Function (_Eager), past the dispatcher, and traces
the ops (_traced). The functional API's context (a Python object holding what the
backward reads) cannot pass through an op's schema: the forward op returns a one-element
int64 CPU tensor, a handle, that names it in _CONTEXTS; autograd saves the handle, the
backward op pops the context, and the context goes away with the handle when no backward
runs. Reading a CPU tensor is no device sync, and split sizes are
never read on the host, so forward and backward are CUDA-graph capturable.

Arrays: CUDA tensors go to the functional API as they are (the GPU); CPU tensors go as
numpy views of their memory (bf16 through ml_dtypes), so the interpreter runs them and
the results come back as CPU tensors over the interpreter's arrays (no copies either way).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import weakref

import ml_dtypes
import numpy as np
import torch

from .activations import ACTIVATIONS
from .mlp import MLPConfig, backward_dw, mlp_backward, mlp_forward

_CONTEXTS = {}  # handle value -> (MLPContext, owner)
_DELAYED = {}  # owner -> [MLPContext] whose wgrads backward_dw runs
_HANDLES = itertools.count(1)
_OWNERS = itertools.count(1)
_SEEDS = {}  # owner -> [seed, backward count] of a GroupedMLP built with seed=
_REQUIRES = ("x", "probs", "w1", "w2", "b1", "b2")


def _to_api(t):
    """A tensor as the functional API takes it: CUDA tensors as they are, CPU tensors as
    numpy views (None stays None)."""
    if t is None or t.device.type == "cuda":
        return t
    t = t.detach()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def _from_api(a):
    """An API result as a tensor: numpy arrays wrapped without a copy."""
    if a is None or isinstance(a, torch.Tensor):
        return a
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(a))


def _stacked(dw):
    """dW [G, N, K] from the API's form of it (per-expert [N, K] for weight lists)."""
    if isinstance(dw, (list, tuple)):
        return torch.stack([_from_api(e) for e in dw])
    return _from_api(dw)


def _weights(ws):
    """The API's weight argument: one [G, N, K] tensor, or a list of G [N, K] experts."""
    return _to_api(ws[0]) if ws[0].dim() == 3 else [_to_api(w) for w in ws]


def _forward_impl(
    x: torch.Tensor,
    probs: torch.Tensor,
    splits: torch.Tensor,
    w1: list[torch.Tensor],
    w2: list[torch.Tensor],
    b1: torch.Tensor | None,
    b2: torch.Tensor | None,
    cfg: str,
    needs: list[bool],
    owner: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    params = {"w1": _weights(w1), "w2": _weights(w2)}
    params |= {k: _to_api(b) for k, b in (("b1", b1), ("b2", b2)) if b is not None}
    config = MLPConfig(**json.loads(cfg))
    out, ctx = mlp_forward(_to_api(x), _to_api(probs), _to_api(splits), params, config, dict(zip(_REQUIRES, needs)))
    key = next(_HANDLES)
    handle = torch.tensor([key], dtype=torch.int64)
    if any(needs):
        _CONTEXTS[key] = (ctx, owner)
        weakref.finalize(handle, _CONTEXTS.pop, key, None)
    return _from_api(out), handle


_forward_op = torch.library.custom_op("tilefuse::grouped_mlp_forward", mutates_args=())(_forward_impl)


@_forward_op.register_fake
def _(x, probs, splits, w1, w2, b1, b2, cfg, needs, owner):
    return torch.empty(x.shape, dtype=torch.bfloat16, device=x.device), torch.empty(1, dtype=torch.int64)


def _step_seed(owner):
    """The seed of this backward of a GroupedMLP: None without seed= (fresh entropy per
    call), else seed + k mod 2^64 for its k-th backward (k = 0, 1, ...)."""
    entry = _SEEDS.get(owner)
    if entry is None:
        return None
    seed = (entry[0] + entry[1]) % 2**64
    entry[1] += 1
    return seed


# The backward op's spec: [rows, d, G, n1, n, b1's, b2's] (0: no bias, 1: bf16, 2: fp32).
_BIAS_DTYPES = {1: torch.bfloat16, 2: torch.float32}


def _grad_shapes(spec, needs, delay):
    """{gradient: (shape, dtype), or None where the backward op returns none}."""
    rows, d, g, n1, n, b1t, b2t = spec
    bf16, need = torch.bfloat16, dict(zip(_REQUIRES, needs))
    shapes = {
        "dx": ((rows, d), bf16),
        "dprobs": ((rows,), torch.float32),
        "dw1": ((g, n1, d), bf16),
        "dw2": ((g, d, n), bf16),
        "db1": ((g, n1), _BIAS_DTYPES.get(b1t)),
        "db2": ((g, d), _BIAS_DTYPES.get(b2t)),
    }
    absent = {"dw1": delay, "dw2": delay, "db1": not b1t, "db2": not b2t}
    return {k: None if not need[k[1:]] or absent.get(k, False) else v for k, v in shapes.items()}


def _backward_impl(
    handle: torch.Tensor, dy: torch.Tensor, spec: list[int], needs: list[bool], delay: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    entry = _CONTEXTS.pop(int(handle[0]), None)
    if entry is None:
        raise RuntimeError("GroupedMLP: the backward already ran on this forward's context")
    ctx, owner = entry
    grads = mlp_backward(ctx, _to_api(dy), seed=_step_seed(owner))
    if ctx.stage == "backward":  # wgrads queued (delay_wgrad)
        _DELAYED.setdefault(owner, []).append(ctx)
    out = []
    for k, shape in _grad_shapes(spec, needs, delay).items():
        if shape is None:  # custom ops return no None: an empty placeholder
            out.append(torch.empty(0))
        else:
            out.append(_stacked(grads[k]) if k[:2] == "dw" else _from_api(grads[k]))
    return tuple(out)


_backward_op = torch.library.custom_op("tilefuse::grouped_mlp_backward", mutates_args=())(_backward_impl)


@_backward_op.register_fake
def _(handle, dy, spec, needs, delay):
    def fake(v):
        return torch.empty(0) if v is None else torch.empty(v[0], dtype=v[1], device=dy.device)

    return tuple(fake(v) for v in _grad_shapes(spec, needs, delay).values())


def _setup_context(ctx, inputs, output):
    x, _, _, w1, w2, b1, b2, cfg, needs, _ = inputs
    g, n1 = (w1[0].shape[0], w1[0].shape[1]) if w1[0].dim() == 3 else (len(w1), w1[0].shape[0])
    kinds = [0 if b is None else 1 if b.dtype == torch.bfloat16 else 2 for b in (b1, b2)]
    ctx.spec = [x.shape[0], x.shape[1], g, n1, w2[0].shape[-1], *kinds]
    ctx.needs, ctx.delay = needs, json.loads(cfg)["delay_wgrad"]
    ctx.wants = [[w.requires_grad for w in ws] for ws in (w1, w2)]  # per list entry
    ctx.grouped = w1[0].dim() == 3
    ctx.save_for_backward(output[1])


def _as_inputs(dw, wants, grouped):
    """dW [G, N, K] as the gradient of a weight-list input ([dW] for one grouped weight,
    else each expert's): None for entries that want none."""
    parts = [None] * len(wants) if dw is None else [dw] if grouped else dw.unbind(0)
    return [p if want else None for p, want in zip(parts, wants)]


def _grads(ctx, d_out, backward):
    """(dx, dprobs, dw1 per w1 entry, dw2 per w2 entry, db1, db2) through `backward` (the
    op or its implementation)."""
    (handle,) = ctx.saved_tensors
    outs = backward(handle, d_out.contiguous(), ctx.spec, ctx.needs, ctx.delay)
    shapes = _grad_shapes(ctx.spec, ctx.needs, ctx.delay).values()
    dx, dprobs, dw1, dw2, db1, db2 = (None if s is None else t for t, s in zip(outs, shapes))
    w1, w2 = (_as_inputs(dw, e, ctx.grouped) for dw, e in zip((dw1, dw2), ctx.wants))
    return dx, dprobs, w1, w2, db1, db2


def _backward(ctx, d_out, _d_handle):
    dx, dprobs, w1, w2, db1, db2 = _grads(ctx, d_out, _backward_op)
    return dx, dprobs, None, w1, w2, db1, db2, None, None, None


torch.library.register_autograd("tilefuse::grouped_mlp_forward", _backward, setup_context=_setup_context)


def _traced() -> bool:
    """Whether torch is tracing (torch.compile, torch.export, make_fx and other dispatch
    modes): those must see the custom ops, which a trace keeps as one opaque node."""
    stack = getattr(torch._C, "_len_torch_dispatch_stack", lambda: 0)
    return torch.compiler.is_compiling() or stack() > 0


class _Eager(torch.autograd.Function):
    """The ops' implementations under autograd without torch's dispatcher, for eager calls:
    a custom op's first call imports torch._dynamo and its dependencies (2-4 s, measured
    by bench/first_call.py), which an eager training step does not need. Traces see the
    ops (_traced, GroupedMLP.forward). The weights come as separate
    arguments (autograd tracks no tensors inside lists): n_w1 of w1, then w2's."""

    @staticmethod
    def forward(ctx, x, probs, splits, b1, b2, cfg, needs, owner, n_w1, *ws):
        w1, w2 = list(ws[:n_w1]), list(ws[n_w1:])
        out, handle = _forward_impl(x, probs, splits, w1, w2, b1, b2, cfg, needs, owner)
        _setup_context(ctx, (x, probs, splits, w1, w2, b1, b2, cfg, needs, owner), (out, handle))
        return out

    @staticmethod
    def backward(ctx, d_out):
        dx, dprobs, w1, w2, db1, db2 = _grads(ctx, d_out, _backward_impl)
        return dx, dprobs, None, db1, db2, None, None, None, None, *w1, *w2


class GroupedMLP(torch.nn.Module):
    """The grouped MLP out = (act(x W1_gᵀ + b1_g)·probs) W2_gᵀ + b2_g over num_experts
    experts (SPEC-moe.md §4): hidden = d, ffn = n (the activation's output width; FC1 has
    n1 = 2·ffn rows for a GLU activation). Weights are bf16, [G, n1, d] and [G, d, n] as one
    parameter each (single_grouped_weight) or G parameters each (fc1_weights[g] [n1, d],
    fc2_weights[g] [d, n]); biases fp32 [G, n1] and [G, d]. Initialized like torch.nn.Linear.

    forward(x [T, d] bf16, splits [G] int32 on x's device, probs [T] fp32) -> [T, d] bf16.
    Gradients follow requires_grad of x, probs and each parameter (nothing is kept under
    torch.no_grad). delay_wgrad_compute: the backward leaves the weight gradients to
    backward_dw(), which adds them to .grad as autograd would. recompute_activation: the
    FC2 input is regenerated in the backward instead of kept (recompute_mode: MLPConfig's).
    seed (NVFP4's stochastic rounding of gradients): None draws fresh bits each backward;
    an int makes the k-th backward of this module use mlp_backward's seed + k, so that a
    run replays bit for bit (a captured CUDA graph replays the seed it captured).
    """

    def __init__(
        self,
        num_experts: int,
        hidden: int,
        ffn: int,
        activation: str = "swiglu",
        recipe: str = "bf16",
        bias: bool = False,
        single_grouped_weight: bool = True,
        recompute_activation: bool = False,
        delay_wgrad_compute: bool = False,
        *,
        scaled_bias: bool = False,
        interleave: int = 0,
        act_params: dict | None = None,
        recompute_mode: str = "exact",
        seed: int | None = None,
        device=None,
    ):
        super().__init__()
        for name, v in (("num_experts", num_experts), ("hidden", hidden), ("ffn", ffn)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"GroupedMLP: {name} must be a positive int, got {v!r}")
        if activation not in ACTIVATIONS:
            raise ValueError(
                f"GroupedMLP: unknown activation {activation!r}; moe.ACTIVATIONS has {sorted(ACTIVATIONS)}"
            )
        self.cfg = MLPConfig(
            activation=activation,
            recipe=recipe,
            bias=bias,
            scaled_bias=scaled_bias,
            interleave=interleave,
            act_params=dict(act_params or {}),
            recompute=recompute_activation,
            recompute_mode=recompute_mode,
            delay_wgrad=delay_wgrad_compute,
        )
        self._cfg_json = json.dumps(dataclasses.asdict(self.cfg))
        self.num_experts, self.hidden, self.ffn = num_experts, hidden, ffn
        n1 = 2 * ffn if ACTIVATIONS[activation].glu else ffn
        self.single_grouped_weight = single_grouped_weight

        def weight(*shape):
            return torch.nn.Parameter(torch.empty(shape, dtype=torch.bfloat16, device=device))

        if single_grouped_weight:
            self.fc1_weight = weight(num_experts, n1, hidden)
            self.fc2_weight = weight(num_experts, hidden, ffn)
        else:
            self.fc1_weights = torch.nn.ParameterList([weight(n1, hidden) for _ in range(num_experts)])
            self.fc2_weights = torch.nn.ParameterList([weight(hidden, ffn) for _ in range(num_experts)])
        for name, cols in (("fc1_bias", n1), ("fc2_bias", hidden)):
            b = torch.nn.Parameter(torch.empty(num_experts, cols, device=device)) if bias else None
            self.register_parameter(name, b)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64):
            raise ValueError(f"GroupedMLP: seed must be an int in [0, 2^64) or None, got {seed!r}")
        self._owner = next(_OWNERS)
        if seed is not None:
            _SEEDS[self._owner] = [seed, 0]
            weakref.finalize(self, _SEEDS.pop, self._owner, None)
        self.reset_parameters()

    def weights(self) -> tuple[list, list]:
        """FC1's and FC2's weights as the op takes them: [grouped] or the experts'."""
        if self.single_grouped_weight:
            return [self.fc1_weight], [self.fc2_weight]
        return list(self.fc1_weights), list(self.fc2_weights)

    @torch.no_grad()
    def reset_parameters(self):
        """U(-1/sqrt(fan_in), 1/sqrt(fan_in)) per expert, as torch.nn.Linear's weight and bias."""
        w1, w2 = self.weights()
        for ws, bias, fan_in in ((w1, self.fc1_bias, self.hidden), (w2, self.fc2_bias, self.ffn)):
            bound = 1.0 / math.sqrt(fan_in)
            for t in [*ws, *([] if bias is None else [bias])]:
                t.uniform_(-bound, bound)

    def forward(self, x, splits, probs):
        w1, w2 = self.weights()
        b1, b2 = self.fc1_bias, self.fc2_bias
        on = torch.is_grad_enabled()
        needs = [on and t.requires_grad for t in (x, probs)]
        needs += [on and any(w.requires_grad for w in ws) for ws in (w1, w2)]
        needs += [on and b is not None and b.requires_grad for b in (b1, b2)]
        if _traced():
            out, _ = _forward_op(x, probs, splits, w1, w2, b1, b2, self._cfg_json, needs, self._owner)
            return out
        return _Eager.apply(x, probs, splits, b1, b2, self._cfg_json, needs, self._owner, len(w1), *w1, *w2)

    def backward_dw(self):
        """Run the weight gradients the backward queued (delay_wgrad_compute) and add them
        to the parameters' .grad (set where it is None); nothing to do otherwise."""
        w1, w2 = self.weights()
        for ctx in _DELAYED.pop(self._owner, []):
            grads = backward_dw(ctx)
            for name, ws in (("dw1", w1), ("dw2", w2)):
                if grads.get(name) is None:
                    continue
                dw = _stacked(grads[name])
                for p, g in zip(ws, [dw] if self.single_grouped_weight else dw.unbind(0)):
                    if p.requires_grad:
                        p.grad = g if p.grad is None else p.grad.add_(g)

    def extra_repr(self) -> str:
        c = self.cfg
        return (
            f"num_experts={self.num_experts}, hidden={self.hidden}, ffn={self.ffn}, activation={c.activation!r}, "
            f"recipe={c.recipe!r}, bias={c.bias}, single_grouped_weight={self.single_grouped_weight}, "
            f"recompute_activation={c.recompute}, delay_wgrad_compute={c.delay_wgrad}"
        )
