"""Expert parallelism's cases, single-process reference and per-rank check, shared by the
gloo tests on the CPU (test_parallel.py) and the NCCL tests (tests/gpu/test_moe_parallel_gpu.py).

The reference holds every expert in one process and composes the library's functions
directly (moe.route, dispatch, mlp_forward, combine and their backwards, chained by hand:
no all-to-all, no second permutation, no autograd). Each rank rebuilds the same case from
the seed, runs ExpertParallelMLP on its share of the tokens and compares its output, its
tokens' dx and dweights and its experts' weight gradients with the reference's."""

from __future__ import annotations

import os
import socket
from typing import NamedTuple

import ml_dtypes
import numpy as np
from tilefuse import moe

BF16 = ml_dtypes.bfloat16


class Case(NamedTuple):
    world: int
    tokens: int  # per rank
    k: int
    experts: int
    d: int = 32
    n: int = 32
    activation: str = "swiglu"
    bias: bool = False
    weights_at: str = "mlp"
    routing: str = "random"  # random | rank0 (every entry on rank 0's experts) | dropped


def inputs(case: Case, seed: int) -> dict:
    """numpy inputs for all world·tokens tokens (the same on every rank)."""
    rng = np.random.default_rng(seed)
    t, e, d, n = case.world * case.tokens, case.experts, case.d, case.n
    n1 = 2 * n if moe.ACTIVATIONS[case.activation].glu else n
    owned = e // case.world if case.routing == "rank0" else e
    ids = np.argsort(rng.random((t, owned)), axis=1)[:, : case.k].astype(np.int32)
    if case.routing == "dropped":
        ids[rng.random(ids.shape) < 0.25] = -1
    inp = dict(
        x=rng.standard_normal((t, d)).astype(BF16),
        ids=ids,
        weights=(1.0 - rng.random((t, case.k))).astype(np.float32),
        w1=(rng.standard_normal((e, n1, d)) / np.sqrt(d)).astype(BF16),
        w2=(rng.standard_normal((e, d, n)) / np.sqrt(n)).astype(BF16),
        dout=rng.standard_normal((t, d)).astype(BF16),
    )
    if case.bias:
        inp["b1"] = (0.5 * rng.standard_normal((e, n1))).astype(np.float32)
        inp["b2"] = (0.5 * rng.standard_normal((e, d))).astype(np.float32)
    return inp


def reference(case: Case, inp: dict, dev=lambda a: a, host=np.asarray) -> dict:
    """{out, dx, dweights, dw1, dw2 (, db1, db2)} of all experts in one process (numpy on
    the interpreter, or `dev` puts the arrays on the GPU and `host` brings them back)."""
    a = {k: dev(v) for k, v in inp.items()}
    cfg = moe.MLPConfig(activation=case.activation, bias=case.bias)
    r = moe.route(a["ids"], case.experts)
    rows = moe.dispatch(a["x"], r)
    at_mlp = case.weights_at == "mlp"
    n = case.world * case.tokens * case.k
    probs = moe.dispatch_weights(a["weights"], r) if at_mlp else dev(np.ones(n, np.float32))
    params = {k: a[k] for k in ("w1", "w2", "b1", "b2") if k in a}
    y, ctx = moe.mlp_forward(rows, probs, r.counts, params, cfg)
    w_combine = None if at_mlp else a["weights"]
    out = moe.combine(y, r, w_combine)
    dy_rows, dweights = moe.combine_backward(a["dout"], y, r, w_combine)
    g = moe.mlp_backward(ctx, dy_rows)
    res = dict(out=out, dx=moe.dispatch_backward(g["dx"], r), dw1=g["dw1"], dw2=g["dw2"])
    res["dweights"] = moe.dispatch_weights_backward(g["dprobs"], r) if at_mlp else dweights
    if case.bias:
        res |= dict(db1=g["db1"], db2=g["db2"])
    return {k: host(v) for k, v in res.items()}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bits(a):
    a = np.ascontiguousarray(a)
    return a.view(np.uint8 if a.dtype.itemsize == 1 else f"u{a.dtype.itemsize}")


def check(name, got, want):
    """Bitwise equal (the same dtype and shape)."""
    assert (
        got.shape == want.shape and got.dtype == want.dtype
    ), f"{name}: {got.dtype}{got.shape} vs {want.dtype}{want.shape}"
    diff = int(np.count_nonzero(_bits(got) != _bits(want)))
    assert diff == 0, f"{name}: {diff} of {got.size} elements differ from the single-process reference"


def _to_numpy(t):
    import torch

    t = t.detach().cpu()
    return t.view(torch.int16).numpy().view(BF16) if t.dtype == torch.bfloat16 else t.numpy()


def _to_torch(a, device):
    import torch

    a = np.ascontiguousarray(a)
    if a.dtype == BF16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).to(device)
    return torch.from_numpy(a).to(device)


def run_rank(rank: int, case: Case, seed: int, port: int, backend: str):
    """One rank: ExpertParallelMLP forward and backward on its tokens against the reference.
    Ends through _leave (see there)."""
    import torch
    import torch.distributed as dist

    device = torch.device(f"cuda:{rank}") if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=case.world)
    inp = inputs(case, seed)
    on_gpu = backend == "nccl"
    want = reference(
        case, inp, (lambda a: _to_torch(a, device)) if on_gpu else (lambda a: a), _to_numpy if on_gpu else np.asarray
    )
    model = moe.ExpertParallelMLP(
        case.experts,
        case.d,
        case.n,
        activation=case.activation,
        bias=case.bias,
        weights_at=case.weights_at,
        device=device,
    )
    mine = slice(model.first_expert, model.first_expert + model.local)
    params = [k for k in ("w1", "w2", "b1", "b2") if k in inp]
    with torch.no_grad():
        for k in params:
            getattr(model.experts, k).copy_(_to_torch(inp[k][mine], device))
    tok = slice(rank * case.tokens, (rank + 1) * case.tokens)
    x = _to_torch(inp["x"][tok], device).requires_grad_()
    w = _to_torch(inp["weights"][tok], device).requires_grad_()
    out = model(x, _to_torch(inp["ids"][tok], device), w)
    out.backward(_to_torch(inp["dout"][tok], device))
    check("out", _to_numpy(out), want["out"][tok])
    with torch.no_grad():
        check("out under no_grad", _to_numpy(model(x, _to_torch(inp["ids"][tok], device), w)), want["out"][tok])
    check("dx", _to_numpy(x.grad), want["dx"][tok])
    check("dweights", _to_numpy(w.grad), want["dweights"][tok])
    for k in params:
        check(f"d{k}", _to_numpy(getattr(model.experts, k).grad), want[f"d{k}"][mine])
    _leave(dist)


def _leave(dist):
    """Ends a rank whose checks all passed, once every rank has reached this point. Neither
    way out through Python's exit is reliable with gloo: destroy_process_group hung at
    times (once in three runs of a case), and leaving the group to the interpreter's exit
    aborted at times (std::terminate on a still-joinable gloo thread, SIGABRT in CI). So
    the process exits without running destructors, status 0, after flushing its output."""
    import sys

    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def bad_input(rank: int, port: int):
    """World size 1 on the CPU: each bad argument is refused with a message naming it."""
    import pytest
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=1)
    with pytest.raises(ValueError, match="num_experts must be a positive int, got 0"):
        moe.ExpertParallelMLP(0, 32, 32)
    with pytest.raises(ValueError, match="weights_at must be one of"):
        moe.ExpertParallelMLP(4, 32, 32, weights_at="router")
    with pytest.raises(ValueError, match="experts holds 3 experts; rank 0 owns 4"):
        moe.ExpertParallelMLP(4, 32, 32, experts=moe.LocalExperts(3, 32, 32))
    model = moe.ExpertParallelMLP(4, 32, 32)
    x, ids, w = torch.zeros(5, 32, dtype=torch.bfloat16), torch.zeros(5, 2, dtype=torch.int32), torch.zeros(5, 2)
    with pytest.raises(TypeError, match=r"x must be torch.bfloat16 \[T, ·\]"):
        model(x.float(), ids, w)
    with pytest.raises(TypeError, match=r"ids must be torch.int32 \[T, ·\] \(T = x's rows\), got torch.int32 \(4, 2\)"):
        model(x, ids[:4], w)
    with pytest.raises(TypeError, match=r"weights must be torch.float32 of ids' shape \(5, 2\)"):
        model(x, ids, w[:, :1])
    with pytest.raises(ValueError, match=r"ids\[1, 0\] = 9 is not an expert in \[0, 4\)"):
        model(x, ids.index_fill(0, torch.tensor([1]), 9), w)
    _leave(dist)
