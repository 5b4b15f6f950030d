"""First-call latency of a GroupedMLP training step (forward + backward, synchronized) on
the GPU, each in a fresh process:

  cold      an empty kernel cache, no prebuilt kernels: every kernel is compiled
  disk      the kernel cache the cold run left: IR is generated, the cubins are read
  prebuilt  an empty kernel cache and the prebuilt kernels: no compiler call

The prebuilt kernels: frontend/tilefuse/prebuilt/ when valid, else made by
scripts/prebuild.py into a temporary folder first (torch, and ptxas for cubins). Prints
the first and the second step's wall time per mode (median of --repeat processes).

  python bench/first_call.py [--repeat 3] [--tokens 4096] [--profile]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]

CHILD = r"""
import cProfile, json, os, pstats, sys, time
import torch
from tilefuse import moe, prebuilt

g, d, n, act, recipe, bias = json.loads(sys.argv[1])
rows = int(sys.argv[2])
m = moe.GroupedMLP(g, d, n, act, recipe, bias, device="cuda")
x = torch.randn(rows, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
probs = torch.rand(rows, device="cuda", requires_grad=True)
cuts = torch.sort(torch.randint(0, rows, (g - 1,))).values
splits = torch.diff(torch.cat([torch.tensor([0]), cuts, torch.tensor([rows])])).to(torch.int32).cuda()
dy = torch.randn(rows, d, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
times = []
prof = cProfile.Profile() if os.environ.get("FIRST_CALL_PROFILE") else None
for step in range(2):
    if prof and step == 0:
        prof.enable()
    start = time.perf_counter()
    m(x, splits, probs).backward(dy)
    torch.cuda.synchronize()
    times.append(time.perf_counter() - start)
    if prof and step == 0:
        prof.disable()
if prof:
    pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(40)
index, why = prebuilt.index()
kinds = "/".join(sorted({k["image"] for k in index["kernels"].values()})) if index else ""
found = f"{len(index['kernels'])} ({kinds})" if index else why
print(json.dumps({"first": times[0], "second": times[1], "prebuilt": found}))
"""


def child(env, shape, rows):
    r = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(shape), str(rows)], env=env, capture_output=True, text=True
    )
    if r.returncode != 0:
        sys.exit(f"first_call: the child failed:\n{r.stderr}")
    if "FIRST_CALL_PROFILE" in env:
        print(r.stderr, file=sys.stderr)
    return json.loads(r.stdout.splitlines()[-1])


def main():
    # tilefuse as PYTHONPATH has it (the GPU machine's staged .gpu/pkg), else this checkout's.
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if importlib.util.find_spec("tilefuse") is None:
        paths.append(str(ROOT / "frontend"))
    paths.append(str(ROOT))
    sys.path[:0] = paths
    from tilefuse import prebuilt

    from scripts import prebuild

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--profile", action="store_true", help="also print cProfile's top of one first step per mode")
    args = ap.parse_args()
    shape = prebuild.SHAPES[0]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    with tempfile.TemporaryDirectory() as tmp:
        folder = pathlib.Path(tmp) / "prebuilt"
        if prebuilt.index()[0] is None:
            print(f"prebuilt kernels: {prebuilt.index()[1]}; making them (scripts/prebuild.py)", file=sys.stderr)
            subprocess.run(
                [sys.executable, str(ROOT / "scripts" / "prebuild.py"), "--out", str(folder)], env=env, check=True
            )
            env["TILEFUSE_PREBUILT_DIR"] = str(folder)
        results = {mode: [] for mode in ("cold", "disk", "prebuilt")}
        for i in range(args.repeat):
            cache = pathlib.Path(tmp) / f"cache{i}"
            off = dict(env, TILEFUSE_CACHE_DIR=str(cache), TILEFUSE_PREBUILT="0")
            results["cold"].append(child(off, shape, args.tokens))
            results["disk"].append(child(off, shape, args.tokens))
            fresh = dict(env, TILEFUSE_CACHE_DIR=str(pathlib.Path(tmp) / f"empty{i}"))
            results["prebuilt"].append(child(fresh, shape, args.tokens))
        if args.profile:
            for mode, e in (("disk", off), ("prebuilt", fresh)):
                print(f"=== cProfile of the first step, mode {mode}", file=sys.stderr)
                child(dict(e, FIRST_CALL_PROFILE="1"), shape, args.tokens)
    print(f"GroupedMLP{tuple(shape)}, {args.tokens} tokens: first and second training step, median of {args.repeat}")
    print(f"{'mode':10} {'first (ms)':>12} {'second (ms)':>12}  prebuilt kernels")
    for mode, runs in results.items():
        first = statistics.median(r["first"] for r in runs) * 1e3
        second = statistics.median(r["second"] for r in runs) * 1e3
        print(f"{mode:10} {first:12.1f} {second:12.2f}  {runs[0]['prebuilt']}")


if __name__ == "__main__":
    main()
