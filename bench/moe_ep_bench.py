"""moe.ExpertParallelMLP across the GPUs of one host (NCCL, NVLink multicast off): tokens/s
of the forward and of forward + backward, and the fraction of the step spent in the
all-to-alls, at the DeepSeek-V3 and Qwen3-30B-A3B shapes of ../shared/PEERS.md (bf16,
SwiGLU, routing weights in the MLP's probs).

Shapes per rank, so that each GPU sees PEERS.md's load at any world size W:
  deepseekv3: 32 experts per rank (E = 32·W), top-8, 4096 tokens per rank (32768 routed
              rows), d = 7168, n = 2048 (PEERS.md's "EP=8 slice").
  qwen3_30b:  E = 128 over the W ranks, top-8, 32768 / W tokens per rank (262144 routed
              rows in all), d = 2048, n = 768.
Routing: top-k of random logits plus a per-expert bias (expert loads about 0.7-1.3x the
mean). Communication time: CUDA events on the current stream around every
all_to_all_single (the counts, the rows, the weights and the reverse exchanges, forward
and backward), which the stream waits for, summed over a step; the rest of the step is
the kernels and the one host copy of the split sizes.

    torchrun --nproc-per-node 2 bench/moe_ep_bench.py [--shapes deepseekv3,qwen3_30b] [--steps 10]
    python3 bench/moe_ep_bench.py --world 1          # mp.spawn; default: every GPU, at most 2
Rank 0 prints a table and writes --out (JSON) when given.
"""

from __future__ import annotations

import argparse
import json
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

# experts (in all) or experts_per_rank, tokens per rank at world size w, top-k, d, n
SHAPES = {
    "deepseekv3": dict(experts_per_rank=32, tokens=lambda w: 4096, k=8, d=7168, n=2048),
    "qwen3_30b": dict(experts=128, tokens=lambda w: 32768 // w, k=8, d=2048, n=768),
}


class CommTimer:
    """Wraps dist.all_to_all_single with CUDA events on the current stream."""

    def __init__(self):
        self.pairs, self._orig = [], dist.all_to_all_single

    def __enter__(self):
        def timed(*args, **kwargs):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            out = self._orig(*args, **kwargs)
            b.record()
            self.pairs.append((a, b))
            return out

        dist.all_to_all_single = timed
        return self

    def __exit__(self, *exc):
        dist.all_to_all_single = self._orig

    def ms(self) -> float:
        return sum(a.elapsed_time(b) for a, b in self.pairs)


def routing(tokens, experts, k, gen, device):
    bias = torch.empty(experts).uniform_(0.7, 1.3, generator=gen).log()
    logits = torch.rand(tokens, experts, generator=gen).log().neg().log().neg() + bias  # Gumbel + bias
    ids = logits.topk(k, dim=1).indices.to(torch.int32)
    weights = torch.softmax(torch.randn(tokens, k, generator=gen), dim=1)
    return ids.to(device), weights.to(device)


def step_ms(fn, steps):
    """(median step ms, median communication ms) over `steps` timed runs after two warm-ups."""
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    rows = []
    for _ in range(steps):
        dist.barrier()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with CommTimer() as timer:
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
        rows.append((start.elapsed_time(end), timer.ms()))
    rows.sort()
    return rows[len(rows) // 2]


def bench_shape(name, world, rank, device, steps):
    from tilefuse import moe

    s = SHAPES[name]
    experts = s.get("experts") or s["experts_per_rank"] * world
    tokens, k, d, n = s["tokens"](world), s["k"], s["d"], s["n"]
    gen = torch.Generator().manual_seed(1234 + rank)
    model = moe.ExpertParallelMLP(experts, d, n, device=device)
    ids, weights = routing(tokens, experts, k, gen, device)
    x = (torch.randn(tokens, d, generator=gen) * 0.5).to(torch.bfloat16).to(device)
    dout = torch.randn(tokens, d, generator=gen).to(torch.bfloat16).to(device)
    xg, wg = x.clone().requires_grad_(), weights.clone().requires_grad_()

    def forward():
        with torch.no_grad():
            model(x, ids, weights)

    def train():
        model(xg, ids, wg).backward(dout)

    fwd, fwd_comm = step_ms(forward, steps)
    both, both_comm = step_ms(train, steps)
    global_tokens = tokens * world
    return dict(
        shape=name,
        world=world,
        experts=experts,
        tokens_per_rank=tokens,
        k=k,
        d=d,
        n=n,
        fwd_ms=fwd,
        fwd_tokens_per_s=global_tokens / fwd * 1e3,
        fwd_comm_fraction=fwd_comm / fwd,
        fwd_bwd_ms=both,
        fwd_bwd_tokens_per_s=global_tokens / both * 1e3,
        fwd_bwd_comm_fraction=both_comm / both,
    )


def run(rank, world, port, args):
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    device = torch.device(f"cuda:{local}")
    init = "env://" if port is None else f"tcp://127.0.0.1:{port}"
    dist.init_process_group("nccl", init_method=init, rank=rank, world_size=world)
    results = [bench_shape(name, world, rank, device, args.steps) for name in args.shapes.split(",")]
    if rank == 0:
        head = f"{'shape':<12} {'W':>2} {'E':>4} {'tok/rank':>8} {'fwd tok/s':>12} {'comm':>6}"
        print(f"{head} {'fwd+bwd tok/s':>14} {'comm':>6}")
        for r in results:
            print(
                f"{r['shape']:<12} {r['world']:>2} {r['experts']:>4} {r['tokens_per_rank']:>8} "
                f"{r['fwd_tokens_per_s']:>12,.0f} {r['fwd_comm_fraction']:>6.1%} "
                f"{r['fwd_bwd_tokens_per_s']:>14,.0f} {r['fwd_bwd_comm_fraction']:>6.1%}"
            )
        if args.out:
            with open(args.out, "w") as f:
                json.dump(results, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--world", type=int, default=min(2, torch.cuda.device_count()))
    p.add_argument("--out")
    args = p.parse_args()
    for name in args.shapes.split(","):
        if name not in SHAPES:
            p.error(f"unknown shape {name!r}; known: {', '.join(SHAPES)}")
    if "RANK" in os.environ:  # torchrun
        run(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), None, args)
        return
    if args.world < 1 or args.world > torch.cuda.device_count():
        p.error(f"--world {args.world}: this machine has {torch.cuda.device_count()} GPUs")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(run, args=(args.world, port, args), nprocs=args.world, join=True)


if __name__ == "__main__":
    main()
