"""The MoE benchmark of issue [8], in one GPU call: tilefuse beside every peer on the shapes
of ../shared/PEERS.md, each result checked against a float64 reference before it is timed.

Grouped GEMMs (bf16 in and out, fp32 accumulation; T rows sorted by expert, per-expert rows
drawn 0.7-1.3x the mean, and PEERS.md's skewed routing (exponential weights) at two shapes):
  fwd   y_g = x_g w_gᵀ    ours: persistent and per-tile kernels, each --config; MXFP8 and
                          FP8-block operands (quantized beforehand, not timed)
        peers: cuBLAS per-expert loop (torch.matmul), torch._grouped_mm, a Triton persistent
        grouped GEMM (bench/triton_grouped.py, best of its configs); fp8: torch's rowwise
        torch._scaled_grouped_mm (the fp8 rows compare with it)
  dgrad dx_g = dy_g w_g   ours persistent and per-tile; peers cuBLAS loop, torch._grouped_mm
  wgrad dw_g = dy_gᵀ x_g  ours persistent and per-tile; peers cuBLAS loop, torch._grouped_mm
                          (2-D x 2-D with offs)
Memory-bound stages (T x 2F bf16 + fp32 probs): scaled SwiGLU, MXFP8 quantize, both in a
row; ours beside torch eager and torch.compile of the same composition (GB/s: bytes read
and written once).
The MoE MLP forward and forward+backward (bf16): moe.mlp_forward / mlp_backward beside
PEERS.md's composition (torch._grouped_mm, the activation eager or torch.compile'd,
autograd; GPT-OSS: clamped interleaved SwiGLU with biases), TFLOP/s-equivalent
6·R·d·n (fwd), 18·R·d·n (fwd+bwd).

Checks: error RMS / reference RMS against float64, per dtype (BOUNDS), on up to four
experts per case (all of them on the interpreter), plus every output finite. A failed check
is printed and the case is not timed (exit status 1). Timing: CUDA events around each call,
WARMUP calls, then the cases of a shape timed in turn over --rounds rounds (so that the
GPU's clock drifting over a shape's run reaches ours and the peers alike), the median of
REPS calls, L2 flushed before each call (a 256 MiB write, outside the events). The first
call's wall time (compile + load + run) is reported apart: `first_ms`.
Ratios: ours over the best peer of the same op (and dtype). Output: a table, JSON (--out,
rewritten after each shape: a run cut short keeps what it measured) and a PNG of the
ratios beside it.

    python3 bench/moe_bench.py --out $OUT/moe_bench.json          # everything (estimated 4-7 min, H200)
    python3 bench/moe_bench.py --quick --out $OUT/moe_bench.json  # one shape per section, fewer reps
    python3 bench/moe_bench.py --check-only                      # no timing; without a GPU: the
                                                                  # interpreter at tiny shapes, numpy peers
"""

import argparse
import functools
import importlib
import json
import os
import statistics
import sys
import time

import numpy as np
from moe_bench_arrays import Backend
from moe_bench_cases import BOUNDS, GEMM_SHAPES, gemm_cases
from moe_bench_mlp import memory_cases, mlp_cases

SKEWED = ("deepseekv3_fc1", "qwen3_30b_fc1")  # also run with PEERS.md's skewed routing
MLP_SHAPES = {  # name: (experts, routed rows R, d, n, activation, interleave, bias)
    "deepseekv3_ep8": (32, 32768, 7168, 2048, "swiglu", 0, False),
    "qwen3_30b": (128, 262144, 2048, 768, "swiglu", 0, False),
    "qwen3_235b": (128, 262144, 4096, 1536, "swiglu", 0, False),
    "gpt_oss_120b": (128, 131072, 2880, 2880, "clamped_swiglu", 1, True),
    "mixtral": (8, 65536, 4096, 14336, "swiglu", 0, False),
}
MEMORY_SHAPE = (32768, 2048)  # T, F: PEERS.md's memory-bound stages
QUICK = {"gemm": ("deepseekv3_fc1", "qwen3_30b_fc1"), "mlp": ("qwen3_30b",), "skewed": ("qwen3_30b_fc1",)}
CONFIGS = ("128x128x64w8s3", "128x256x64w8s3")


def tiny(shape):
    """The CPU interpreter's stand-in for a shape (experts, rows, dim, dim, ...): at most 4
    experts of ~24 rows, each dim 64, or 96 where the real one is not a multiple of 128
    (both multiples of 32, as MXFP8 needs)."""
    e = min(shape[0], 4)
    return (e, 24 * e, *(64 if d % 128 == 0 else 96 for d in shape[2:4]), *shape[4:])


def parse_config(text):
    from tilefuse import moe

    bm, rest = text.split("x", 1)
    bn, rest = rest.split("x", 1)
    bk, rest = rest.split("w", 1)
    # Warp-specialized (the persistent forward and dgrad): "ws", or "pp" ping-pong consumers;
    # "p" before them: persistent=True (the FP8-block GEMMs' persistent kernel).
    ws = 1 if rest.endswith("ws") else 2 if rest.endswith("pp") else 0
    rest = rest.removesuffix("ws").removesuffix("pp")
    persistent = True if rest.endswith("p") else None
    warps, stages = rest.removesuffix("p").split("s", 1)
    return moe.GemmConfig(int(bm), int(bn), int(bk), int(warps), int(stages), persistent, ws)


def splits_for(rows, experts, skewed, rng):
    if skewed:  # PEERS.md: exponential weights
        wts = rng.exponential(size=experts) + 0.25
    else:
        wts = 0.7 + 0.6 * rng.random(experts)
    s = np.floor(wts / wts.sum() * rows).astype(np.int64)
    s[0] += rows - int(s.sum())
    return [int(v) for v in s]


def check_case(case, backend):
    """One row: the case's first call (its wall time) and its check against float64."""
    row = {
        k: case[k]
        for k in ("section", "shape", "routing", "op", "variant", "who", "config", "persistent", "waves")
        if k in case
    }
    if case.get("unavailable"):
        row["status"] = "unavailable: " + case["unavailable"]
        return row
    try:
        t0 = time.perf_counter()
        got = case["fn"]()
        backend.sync()
        row["first_ms"] = (time.perf_counter() - t0) * 1e3
        err = case["check"](got)
        del got
    except Exception as e:  # noqa: BLE001 - a peer this torch lacks: reported, not fatal
        why = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
        row["status"] = ("ERROR " if case["who"] == "ours" else "unavailable: ") + why
        return row
    row["err_rms"] = err
    row["bound"] = BOUNDS[case["dtype"]]
    row["status"] = "ok" if err <= row["bound"] else "FAILED check"
    return row


def time_cases(pairs, backend, reps, warmup, rounds):
    """Times the checked (case, row) pairs of one shape side by side: `rounds` rounds, each
    timing every case in turn (reps / rounds calls each), so that a drift of the GPU's clock
    over the shape's run reaches every case alike; a case's time is the median of all its
    calls."""
    for case, _ in pairs:
        for _ in range(warmup):
            case["fn"]()
    samples = [[] for _ in pairs]
    per_round = max(1, -(-reps // rounds))
    for _ in range(rounds):
        for (case, _), got in zip(pairs, samples):
            got += backend.time_samples(case["fn"], per_round)
    for (case, row), got in zip(pairs, samples):
        ms = statistics.median(got)
        row["ms"] = ms
        if "flops" in case:
            row["tflops"] = case["flops"] / ms / 1e9
        else:
            row["gbps"] = case["bytes"] / ms / 1e6


def add_ratios(rows):
    """ratio: ours over the best peer of the same (section, shape, routing, op)."""
    best = {}

    def rate(r):
        return r.get("tflops", r.get("gbps"))

    for r in rows:
        key = (r["section"], r["shape"], r["routing"], r["op"])
        if r["who"] == "peer" and rate(r) is not None and rate(r) > best.get(key, (0, ""))[0]:
            best[key] = (rate(r), r["variant"])
    for r in rows:
        key = (r["section"], r["shape"], r["routing"], r["op"])
        if r["who"] == "ours" and rate(r) is not None and key in best:
            r["ratio"], r["best_peer"] = rate(r) / best[key][0], best[key][1]


def rule_report(rows):
    """Persistent over per-tile, same shape, op and tiles, beside the tile waves per SM (the
    rule's measure: persistent from PERSISTENT_WAVES up): the least threshold that every
    measured pair agrees with, where one exists."""
    pairs = {}
    for r in rows:
        if "waves" in r and "tflops" in r:
            pairs.setdefault((r["shape"], r["routing"], r["op"], r["config"]), {})[r["persistent"]] = r
    lines, wins, losses = [], [], []
    for key, p in sorted(pairs.items()):
        if True in p and False in p:
            speedup = p[True]["tflops"] / p[False]["tflops"]
            (wins if speedup > 1 else losses).append(p[True]["waves"])
            lines.append(f"  {' '.join(key):60s} waves {p[True]['waves']:7.1f}  persistent/per-tile {speedup:5.2f}")
    if not lines:
        return
    print("\n=== persistent vs per-tile (the rule: persistent from PERSISTENT_WAVES waves up)")
    print("\n".join(lines))
    lo, hi = max(losses, default=0.0), min(wins, default=float("inf"))
    verdict = (
        f"any PERSISTENT_WAVES in ({lo:.1f}, {hi:.1f}]" if lo < hi else "no single threshold: the waves do not decide"
    )
    print(f"  measured: {verdict}")


def print_row(r):
    rate = f"{r['tflops']:8.1f} TF" if "tflops" in r else f"{r['gbps']:8.0f} GB/s" if "gbps" in r else " " * 11
    ratio = f"{r['ratio']:5.2f}x {r['best_peer'][:22]}" if "ratio" in r else ""
    err = f"err {r['err_rms']:.1e}" if "err_rms" in r else ""
    first = f"first {r['first_ms']:7.0f} ms" if "first_ms" in r else ""
    status = "" if r["status"] == "ok" else r["status"]
    print(
        f"{r['section']:6s} {r['shape']:16s} {r['routing']:7s} {r['op']:12s} {r['who']:4s} "
        f"{r['variant']:34s} {rate} {ratio:29s} {err:12s} {first:16s} {status}",
        flush=True,
    )


def plot(rows, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"no matplotlib: {path} not drawn")
        return
    ours = [r for r in rows if "ratio" in r]
    if not ours:
        return
    labels = [f"{r['shape']} {r['routing']} {r['op']} {r['variant']}" for r in ours]
    fig, ax = plt.subplots(figsize=(10, max(4, 0.22 * len(ours))))
    colors = ["tab:green" if r["ratio"] >= 1.0 else "tab:red" for r in ours]
    ax.barh(range(len(ours)), [r["ratio"] for r in ours], color=colors)
    ax.set_yticks(range(len(ours)), labels, fontsize=6)
    ax.invert_yaxis()
    for x, style in ((1.0, "-"), (1.05, ":"), (1.1, "--")):
        ax.axvline(x, color="black", linestyle=style, linewidth=0.8)
    ax.set_xlabel("tilefuse / best peer (same op, shape, routing); lines at 1.0, 1.05, 1.1")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot: {path}")


def write_json(path, argv, backend, reps, warmup, knobs, start, rows, done):
    add_ratios(rows)
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "command": " ".join([os.path.basename(sys.argv[0])] + (argv if argv is not None else sys.argv[1:])),
        "backend": backend.describe(),
        "reps": reps,
        "warmup": warmup,
        "knobs": knobs,
        "seconds": time.perf_counter() - start,
        "complete": done,
        "rows": rows,
    }
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as fh:
        json.dump(result, fh, indent=1, default=str)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one or two shapes per section, fewer reps")
    ap.add_argument("--check-only", action="store_true", help="check every case, time none")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "moe_bench.json"))
    ap.add_argument(
        "--config",
        action="append",
        help="our bf16 tiles, e.g. 128x256x64w8s3; suffix ws: warp-specialized, pp: ping-pong (repeatable)",
    )
    ap.add_argument(
        "--fp8-config",
        action="append",
        help="our fp8 forward's and dgrad's tiles (repeatable; default: the host's pick)",
    )
    ap.add_argument("--sections", default="gemm,memory,mlp")
    ap.add_argument("--shapes", help="only these GEMM / MLP shapes, e.g. deepseekv3_fc1,qwen3_30b (default: all)")
    ap.add_argument(
        "--ops",
        help="only these GEMM ops, by first word or whole: wgrad, fwd,dgrad, 'fwd fp8,dgrad fp8' (default: all)",
    )
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds per shape (default 3)")
    ap.add_argument("--group-m", type=int, help="PERSISTENT_GROUP_M of the persistent order (default 8)")
    ap.add_argument("--programs-per-sm", type=int, help="PERSISTENT_PROGRAMS_PER_SM (default 1)")
    ap.add_argument("--fp8-pointers", action="store_true", help="FP8_DESCRIPTORS off: the fp8 codes by cp.async")
    ap.add_argument("--per-tile-fused", action="store_true", help="the fused FC1 / FC2-dgrad per tile (A/B)")
    ap.add_argument("--tail-tiles", action="store_true", help="TAIL_TILES on: a group's last tile at half height")
    ap.add_argument("--whole-dgrad-epilogue", action="store_true", help="DGRAD_HALVES off: the FC2 dgrad's whole tile")
    args = ap.parse_args(argv)
    args.shapes = args.shapes and args.shapes.split(",")
    if args.per_tile_fused:
        fused = importlib.import_module("tilefuse.moe.fused")
        default = fused.default_config
        fused.default_config = lambda x, recipe="bf16": default(x, recipe)._replace(persistent=False)
    importlib.import_module("tilefuse.moe.fused").DGRAD_HALVES = not args.whole_dgrad_epilogue
    host = importlib.import_module("tilefuse.moe.grouped_gemm")
    host.PERSISTENT_GROUP_M = args.group_m or host.PERSISTENT_GROUP_M
    host.FP8_DESCRIPTORS = not args.fp8_pointers
    host.TAIL_TILES = args.tail_tiles
    host.PERSISTENT_PROGRAMS_PER_SM = args.programs_per_sm or host.PERSISTENT_PROGRAMS_PER_SM
    backend = Backend.pick()
    if not backend.gpu and not args.check_only:
        ap.error("timing needs a CUDA GPU and torch; without them run --check-only (the interpreter)")
    reps = args.reps or (5 if args.quick else 15)
    warmup = 2 if args.quick else 3
    configs = [parse_config(c) for c in (args.config or CONFIGS)]
    fp8_configs = [parse_config(c) for c in args.fp8_config] if args.fp8_config else [None]
    sections = args.sections.split(",")
    rng = np.random.default_rng(int(os.environ.get("MOE_BENCH_SEED", "0")))
    start = time.perf_counter()
    rows, failed, peers_failed = [], 0, 0
    knobs = f"persistent GROUP_M {host.PERSISTENT_GROUP_M}, {host.PERSISTENT_PROGRAMS_PER_SM} program(s) per SM"
    knobs += f", fp8 descriptors {host.FP8_DESCRIPTORS}, tail tiles {host.TAIL_TILES}"
    knobs += ", fused kernels per tile" if args.per_tile_fused else ""
    print(f"backend: {backend.describe()}; reps {reps}, warmup {warmup}, L2 flushed before each call; {knobs}")

    def pick(table, key):
        names = [n for n in table if (not args.quick or n in QUICK[key]) and (not args.shapes or n in args.shapes)]
        return {n: table[n] if backend.gpu else tiny(table[n]) for n in names}

    jobs = []
    if "gemm" in sections:
        skewed = [n for n in SKEWED if not args.quick or n in QUICK["skewed"]]
        for name, shape in pick(GEMM_SHAPES, "gemm").items():
            for sk in (False, True) if name in skewed else (False,):
                job = functools.partial(gemm_cases, backend, name, shape, splits_for, sk, configs, rng, fp8_configs)
                jobs.append((f"gemm {name}{' skewed' if sk else ''}", job))
    if "memory" in sections:
        t, f = MEMORY_SHAPE if backend.gpu else (96, 64)
        jobs.append(("memory", functools.partial(memory_cases, backend, t, f, rng)))
    if "mlp" in sections:
        for name, shape in pick(MLP_SHAPES, "mlp").items():
            jobs.append((f"mlp {name}", functools.partial(mlp_cases, backend, name, shape, splits_for, rng)))
    for label, job in jobs:
        section_start = time.perf_counter()
        try:
            cases = job()
        except Exception as e:  # noqa: BLE001 - the data or reference of one shape: the others still run
            print(f"ERROR setting up {label}: {type(e).__name__}: {e}", flush=True)
            rows.append(dict(section=label, shape="", routing="", op="", variant="", who="ours", status=f"ERROR {e}"))
            failed += 1
            backend.free()
            continue
        if args.ops:
            ops = args.ops.split(",")
            cases = [c for c in cases if c["section"] != "gemm" or c["op"].split()[0] in ops or c["op"] in ops]
        checked = [(case, check_case(case, backend)) for case in cases]
        if not args.check_only:
            time_cases([(c, r) for c, r in checked if r["status"] == "ok"], backend, reps, warmup, args.rounds)
        for _, r in checked:
            bad = r["status"] == "FAILED check" or r["status"].startswith("ERROR")
            failed += bad and r["who"] == "ours"
            peers_failed += bad and r["who"] != "ours"
            rows.append(r)
            print_row(r)
        cases = checked = None  # their closures hold the shape's data
        backend.free()
        print(f"# {time.perf_counter() - section_start:.1f} s", flush=True)
        write_json(args.out, argv, backend, reps, warmup, knobs, start, rows, done=False)  # kept if cut short
    print(f"\n=== ratios (ours / best peer), {time.perf_counter() - start:.0f} s in all")
    for r in rows:
        if "ratio" in r:
            print_row(r)
    rule_report(rows)
    write_json(args.out, argv, backend, reps, warmup, knobs, start, rows, done=True)
    print(f"json: {args.out}")
    if not args.check_only:
        plot(rows, os.path.splitext(args.out)[0] + ".png")
    if peers_failed:
        print(f"{peers_failed} peer case(s) failed or FAILED their check (no ratio for those rows)")
    if failed:
        print(f"{failed} case(s) of ours failed or FAILED their check")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
