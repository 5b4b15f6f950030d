"""tilefuse.moe.ExpertParallelMLP: the grouped MLP with its experts sharded over the ranks
of a torch.distributed process group (rank r of W owns experts [r·E/W, (r+1)·E/W)).

forward(x [T, d] bf16, ids [T, K] int32, weights [T, K] fp32) -> [T, d] bf16, for this
rank's T tokens routed to global experts by top-k (ids -1: a dropped entry):
 1. moe.route sorts the T·K entries by expert (then token, then slot) on the device;
    moe.dispatch gathers them into expert-contiguous rows, which are also rank-contiguous.
 2. The per-expert counts go to the ranks owning the experts: one all_to_all_single of
    E ints, on the device.
 3. torch's all_to_all_single takes its split sizes as host lists: the rows sent to and
    received from each rank are one [2, W] tensor copied to the host once per forward
    (the only device-to-host copy; the backward reuses the sizes). The rows then go with
    an all_to_all_single of those sizes.
 4. The received rows come grouped by source rank, then local expert; a second moe.route
    (over the local experts, K = 1) orders them by local expert, then source rank: each
    expert's rows in the global token order, as a single process holding every expert
    sees them, so per-expert sums (the weight gradients) run in the same order.
 5. The local experts run (a module with forward(x, splits, probs), GroupedMLP's
    signature), the rows go back to their source order, through the reverse all-to-all,
    and moe.combine sums each token's K rows in slot order.
The routing weights scale the experts' activations (weights_at="mlp": the grouped MLP's
probs, SPEC-moe.md §1) or the combine's sum (weights_at="combine", the MLP's probs 1).
The backward is torch.autograd's: each all-to-all's is the reverse all-to-all, each
gather's the fixed-order combine and back.

Tensors: CUDA (the library's GPU kernels, NCCL) or CPU (the interpreter on numpy views of
the same memory; gloo)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch
import torch.distributed as dist

from .activations import ACTIVATIONS
from .dispatch import (
    combine,
    combine_backward,
    dispatch,
    dispatch_backward,
    dispatch_weights,
    dispatch_weights_backward,
    route,
    segments,
)
from .mlp import MLPConfig, mlp_backward, mlp_forward

WEIGHTS_AT = ("mlp", "combine")


def _api(t):
    """A tensor as the library takes it: CUDA as it is, CPU as a numpy view."""
    if t is None or t.device.type == "cuda":
        return t
    t = t.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16) if t.dtype == torch.bfloat16 else t.numpy()


def _tensor(a):
    """A library result as a tensor (numpy arrays wrapped without a copy)."""
    if a is None or isinstance(a, torch.Tensor):
        return a
    a = np.ascontiguousarray(a)
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def _routed(name, forward, backward, doc):
    """An autograd Function y = forward(x, routing), dx = backward(dy, routing)."""

    def fwd(ctx, x, r):
        ctx.r = r
        return _tensor(forward(_api(x), r))

    def bwd(ctx, g):
        return _tensor(backward(_api(g), ctx.r)), None

    return type(
        name, (torch.autograd.Function,), {"__doc__": doc, "forward": staticmethod(fwd), "backward": staticmethod(bwd)}
    )


_Dispatch = _routed(
    "_Dispatch", dispatch, dispatch_backward, "rows = moe.dispatch(x, routing); dx = moe.dispatch_backward(drows)."
)
_DispatchWeights = _routed(
    "_DispatchWeights",
    dispatch_weights,
    dispatch_weights_backward,
    "Each row's routing weight [T·K]; its adjoint back to [T, K].",
)


class _Combine(torch.autograd.Function):
    """out = moe.combine(rows, routing, weights) and moe.combine_backward."""

    @staticmethod
    def forward(ctx, rows, r, weights):
        ctx.r = r
        ctx.save_for_backward(rows, weights)
        return _tensor(combine(_api(rows), r, _api(weights)))

    @staticmethod
    def backward(ctx, dout):
        rows, weights = ctx.saved_tensors
        drows, dw = combine_backward(_api(dout), _api(rows), ctx.r, _api(weights))
        return _tensor(drows), None, _tensor(dw)


class _AllToAll(torch.autograd.Function):
    """all_to_all_single with host split sizes; the backward is the reverse exchange."""

    @staticmethod
    def forward(ctx, x, recv, send, group):
        ctx.sizes, ctx.group = (recv, send), group
        out = x.new_empty((sum(recv), *x.shape[1:]))
        dist.all_to_all_single(out, x.contiguous(), recv, send, group=group)
        return out

    @staticmethod
    def backward(ctx, g):
        recv, send = ctx.sizes
        out = g.new_empty((sum(send), *g.shape[1:]))
        dist.all_to_all_single(out, g.contiguous(), send, recv, group=ctx.group)
        return out, None, None, None


def _pad_rows(t, rows):
    """t with zero rows appended up to `rows` (the routing's pad rows)."""
    return (
        torch.nn.functional.pad(t, (0, 0, 0, rows - t.shape[0]))
        if t.dim() == 2
        else torch.nn.functional.pad(t, (0, rows - t.shape[0]))
    )


class _MLP(torch.autograd.Function):
    """moe.mlp_forward / mlp_backward under autograd: only the gradients asked for, none
    (nothing saved) when `grad` is off (torch.is_grad_enabled() of the caller: forward
    runs without grad mode)."""

    @staticmethod
    def forward(ctx, grad, x, splits, probs, cfg, w1, w2, b1, b2):
        names = (None, "x", None, "probs", None, "w1", "w2", "b1", "b2")
        needs = {k: grad and bool(n) for k, n in zip(names, ctx.needs_input_grad) if k is not None}
        params = {"w1": _api(w1), "w2": _api(w2)} | ({"b1": _api(b1), "b2": _api(b2)} if cfg.bias else {})
        out, ctx.mlp = mlp_forward(_api(x), _api(probs), _api(splits), params, cfg, needs)
        return _tensor(out)

    @staticmethod
    def backward(ctx, dout):
        g = {k: _tensor(v) for k, v in mlp_backward(ctx.mlp, _api(dout.contiguous())).items()}
        return None, g["dx"], None, g["dprobs"], None, g["dw1"], g["dw2"], g["db1"], g["db2"]


class LocalExperts(torch.nn.Module):
    """num_experts experts of the functional grouped MLP (bf16 recipe): w1 [G, n1, d], w2
    [G, d, n] bf16, optional fp32 biases b1 [G, n1], b2 [G, d]; forward(x, splits, probs)
    as GroupedMLP's, which can stand in for it (ExpertParallelMLP(experts=...))."""

    def __init__(self, num_experts, hidden, ffn, activation="swiglu", bias=False, device=None):
        super().__init__()
        self.cfg = MLPConfig(activation=activation, bias=bias)
        if activation not in ACTIVATIONS:
            raise ValueError(
                f"LocalExperts: unknown activation {activation!r}; moe.ACTIVATIONS has {sorted(ACTIVATIONS)}"
            )
        n1 = 2 * ffn if ACTIVATIONS[activation].glu else ffn
        self.num_experts = num_experts
        bf16 = dict(dtype=torch.bfloat16, device=device)
        self.w1 = torch.nn.Parameter(torch.empty(num_experts, n1, hidden, **bf16))
        self.w2 = torch.nn.Parameter(torch.empty(num_experts, hidden, ffn, **bf16))
        self.b1 = torch.nn.Parameter(torch.zeros(num_experts, n1, device=device)) if bias else None
        self.b2 = torch.nn.Parameter(torch.zeros(num_experts, hidden, device=device)) if bias else None
        with torch.no_grad():
            self.w1.uniform_(-(hidden**-0.5), hidden**-0.5)
            self.w2.uniform_(-(ffn**-0.5), ffn**-0.5)

    def forward(self, x, splits, probs):
        return _MLP.apply(torch.is_grad_enabled(), x, splits, probs, self.cfg, self.w1, self.w2, self.b1, self.b2)


def _group_info(group):
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("ExpertParallelMLP: torch.distributed is not initialized (dist.init_process_group first)")
    return dist.get_world_size(group), dist.get_rank(group)


class ExpertParallelMLP(torch.nn.Module):
    """Experts sharded over `group` (default: the world); see the module docstring.
    experts: the module of this rank's E/W experts, forward(x, splits, probs) -> out
    (default LocalExperts(E/W, hidden, ffn, activation, bias))."""

    def __init__(
        self,
        num_experts,
        hidden,
        ffn,
        *,
        group=None,
        experts=None,
        activation="swiglu",
        bias=False,
        weights_at="mlp",
        device=None,
    ):
        super().__init__()
        self.world, self.rank = _group_info(group)
        name = "ExpertParallelMLP"
        if isinstance(num_experts, bool) or not isinstance(num_experts, int) or num_experts < 1:
            raise ValueError(f"{name}: num_experts must be a positive int, got {num_experts!r}")
        if num_experts % self.world:
            raise ValueError(f"{name}: num_experts = {num_experts} is not a multiple of the group's {self.world} ranks")
        if weights_at not in WEIGHTS_AT:
            raise ValueError(f"{name}: weights_at must be one of {WEIGHTS_AT}, got {weights_at!r}")
        self.group, self.num_experts, self.weights_at = group, num_experts, weights_at
        self.local = num_experts // self.world
        if experts is None:
            experts = LocalExperts(self.local, hidden, ffn, activation, bias, device)
        if getattr(experts, "num_experts", self.local) != self.local:
            raise ValueError(f"{name}: experts holds {experts.num_experts} experts; rank {self.rank} owns {self.local}")
        self.experts = experts

    @property
    def first_expert(self) -> int:
        return self.rank * self.local

    def _check(self, x, ids, weights):
        name, t = "ExpertParallelMLP", tuple(x.shape[:1])
        for arg, v, dtype in (("x", x, torch.bfloat16), ("ids", ids, torch.int32)):
            if v.dtype != dtype or v.dim() != 2 or tuple(v.shape[:1]) != t:
                raise TypeError(f"{name}: {arg} must be {dtype} [T, ·] (T = x's rows), got {v.dtype} {tuple(v.shape)}")
        if weights.dtype != torch.float32 or weights.shape != ids.shape:
            got = f"{weights.dtype} {tuple(weights.shape)}"
            raise TypeError(f"{name}: weights must be torch.float32 of ids' shape {tuple(ids.shape)}, got {got}")
        for arg, v in (("ids", ids), ("weights", weights)):
            if v.device != x.device:
                raise ValueError(f"{name}: {arg} is on {v.device} but x is on {x.device}")

    def _exchange_counts(self, counts):
        """(rows sent to each rank, rows received from each rank: host lists, one copy to
        the host), the received per-(source rank, local expert) counts on the device."""
        recv_counts = torch.empty_like(counts)
        dist.all_to_all_single(recv_counts, counts, group=self.group)
        w = self.world
        sizes = torch.stack([counts.view(w, self.local).sum(1), recv_counts.view(w, self.local).sum(1)])
        send, recv = sizes.tolist()
        return send, recv, recv_counts

    def forward(self, x, ids, weights):
        self._check(x, ids, weights)
        tokens, k = (int(v) for v in ids.shape)
        r = route(_api(ids.contiguous()), self.num_experts)
        send, recv, recv_counts = self._exchange_counts(_tensor(r.counts))
        n_send, n_recv = sum(send), sum(recv)
        rows = _Dispatch.apply(x.contiguous(), r)[:n_send]
        got = _AllToAll.apply(rows, recv, send, self.group)
        local = route(segments(_api(recv_counts), n_recv, self.local).reshape(n_recv, 1), self.local)
        xe = _Dispatch.apply(got, local)
        if self.weights_at == "mlp":
            w_rows = _DispatchWeights.apply(weights.contiguous(), r)[:n_send]
            w_got = _AllToAll.apply(w_rows, recv, send, self.group)
            probs = _DispatchWeights.apply(w_got.reshape(n_recv, 1), local)
        else:
            probs = torch.ones(n_recv, dtype=torch.float32, device=x.device)
        ye = self.experts(xe, _tensor(local.counts), probs)
        back = _AllToAll.apply(_Combine.apply(ye, local, None), send, recv, self.group)
        at_combine = weights.contiguous() if self.weights_at == "combine" else None
        return _Combine.apply(_pad_rows(back, tokens * k), r, at_combine)
