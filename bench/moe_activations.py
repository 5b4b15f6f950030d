"""Bandwidth of the MoE scaled activations (tilefuse.moe.scaled_act / scaled_act_backward)
on the GPU, beside torch eager computing the same forward from the same bf16 tensors.
Every activation of the registry, every GLU layout; bytes are those each kernel must move
(h, probs, dy in; y, dh, dprobs out), so GB/s compares directly with the HBM peak.

    python3 bench/moe_activations.py [--rows 16384 --width 4096] [--out moe_act.json]
"""

import argparse
import functools
import json

import torch
import torch.nn.functional as F
from tilefuse import moe

PARAMS = {"tanh_srelu": {"c_s": 4.0}}


def ms(fn, reps=50):
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def torch_forward(name, h, s):
    """The same forward in torch eager (halves layout), where torch has the function."""
    n = h.shape[1] // 2
    a, b = h[:, :n].float(), h[:, n:].float()
    x = h.float()
    f = {
        "swiglu": lambda: F.silu(a) * b,
        "srelu": lambda: F.relu(x) ** 2,
        "gelu_tanh": lambda: F.gelu(x, approximate="tanh"),
        "gelu_erf": lambda: F.gelu(x),
    }.get(name)
    return None if f is None else (lambda: (s[:, None] * f()).to(h.dtype))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=16384)
    ap.add_argument("--width", type=int, default=4096, help="the width of h (n1)")
    ap.add_argument("--out", default="moe_act.json")
    args = ap.parse_args()
    rows, n1 = args.rows, args.width
    g = torch.Generator(device="cuda").manual_seed(0)
    s = torch.rand(rows, device="cuda", generator=g)
    results = []
    for name, act in moe.ACTIVATIONS.items():
        params = PARAMS.get(name, {})
        n = n1 // 2 if act.glu else n1
        h = (torch.randn(rows, n1, device="cuda", generator=g) * 3).to(torch.bfloat16)
        dy = torch.randn(rows, n, device="cuda", generator=g).to(torch.bfloat16)
        for interleave in (0, 32, 1) if act.glu else (0,):
            fwd = ms(functools.partial(moe.scaled_act, name, h, s, interleave=interleave, **params))
            bwd = ms(functools.partial(moe.scaled_act_backward, name, h, s, dy, interleave=interleave, **params))
            fwd_bytes = 2 * rows * (n1 + n) + 4 * rows
            bwd_bytes = 2 * rows * (2 * n1 + n) + 8 * rows
            row = dict(activation=name, interleave=interleave, rows=rows, width=n1)
            row |= dict(fwd_ms=fwd, fwd_gbs=fwd_bytes / fwd / 1e6, bwd_ms=bwd, bwd_gbs=bwd_bytes / bwd / 1e6)
            ref = torch_forward(name, h, s) if interleave == 0 else None
            if ref is not None:
                row["torch_fwd_ms"] = ms(ref)
            results.append(row)
            print(json.dumps(row))
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
