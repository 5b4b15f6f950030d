"""Builds the tuned-config table of the MoE GEMMs (frontend/tilefuse/moe/tuned_<arch>.json,
read by tilefuse.moe.tuned) from bench/moe_bench.py JSON results: for each measured GEMM op
and shape, the fastest of our configs whose float64 check passed, timed with the balanced
routing (0.7-1.3x the mean rows per expert); the skewed routing's figures of the same
config are kept beside it. Only ops moe.tuned.lookup serves are taken (TUNED_OPS).

    # on the GPU: measure candidates, then build the table from the JSON
    python3 bench/moe_bench.py --sections gemm --config 128x128x64w8s3 --config 128x256x64w8s3 \\
        --out $OUT/moe_bench.json
    python3 bench/moe_tune.py $OUT/moe_bench.json --arch sm_90a
    # the shipped table from the measurements in the repo (tests/python/test_tuned.py checks it)
    python3 bench/moe_tune.py bench/data/moe_bench_h200_2026-12-01.json --arch sm_90a
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from moe_bench import parse_config  # noqa: E402
from moe_bench_cases import GEMM_SHAPES  # noqa: E402

TUNED_OPS = ("fwd bf16", "dgrad bf16", "wgrad bf16", "fwd mxfp8", "fwd fp8_block", "dgrad fp8_block")
BALANCED = "0.7-1.3"


def label(config: str, persistent) -> str:
    return config + ("" if persistent is None else f" persistent={persistent}")


def gemm_dims(shape: str, op: str):
    """(N, K) of the op: output columns and reduction length."""
    _, _, k, n = GEMM_SHAPES[shape]
    return (n, k) if op.startswith("fwd") else (k, n)


def tuned_op(row: dict) -> str | None:
    """The op moe.tuned names a row's measurement by: its op, except the fp8 rows ("fwd fp8",
    "dgrad fp8" beside torch's fp8 for the ratios), tuned per recipe, the variant's first
    word: "fwd mxfp8", "dgrad fp8_block"."""
    op = row.get("op")
    if op in ("fwd fp8", "dgrad fp8") and row.get("variant"):
        return f"{op.split()[0]} {row['variant'].split()[0]}"
    return op


def build(results: list[dict], sources: list[str]) -> dict:
    """The table from moe_bench JSON documents (their rows of ours)."""
    runs, best = [], {}
    for doc, src in zip(results, sources):
        runs.append(dict(file=src, date=doc["date"], backend=doc["backend"], command=doc["command"]))
        for r in doc["rows"]:
            op = tuned_op(r)
            if r.get("section") != "gemm" or r.get("who") != "ours" or op not in TUNED_OPS or "config" not in r:
                continue
            if r.get("status") != "ok" or "tflops" not in r:
                continue
            # the rule's pick is stored as None: lookup's callers keep deciding by the rule
            persistent = None if "[rule]" in r["variant"] else r["persistent"]
            key = (op, r["shape"], r["routing"], r["config"], persistent)
            best[key] = max(best.get(key, 0.0), r["tflops"])
    entries = []
    for op, shape, routing, config, persistent in sorted(best, key=str):
        if routing != BALANCED:
            continue
        key = (op, shape, routing, config, persistent)
        rivals = {k: v for k, v in best.items() if k[:3] == (op, shape, routing)}
        if max(rivals.values()) != best[key]:
            continue
        n, k = gemm_dims(shape, op)
        skewed = {label(*k2[3:]): round(v, 1) for k2, v in best.items() if k2[:2] == (op, shape) and k2[2] != BALANCED}
        entries.append(
            dict(
                op=op,
                shape=shape,
                n=n,
                k=k,
                config=list(parse_config(config)._replace(persistent=persistent)),
                tflops=round(best[key], 1),
                candidates={label(c, p): round(v, 1) for (*_, c, p), v in rivals.items()},
                **({"skewed_tflops": skewed} if skewed else {}),
            )
        )
    return dict(source=runs, entries=entries)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", type=pathlib.Path, help="moe_bench.py --out JSON files")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--out", type=pathlib.Path, help="default: the package's tuned_<arch>.json")
    args = ap.parse_args(argv)
    docs = [json.loads(p.read_text()) for p in args.results]
    names = [str(p.resolve().relative_to(ROOT)) if p.resolve().is_relative_to(ROOT) else p.name for p in args.results]
    table = build(docs, names)
    if not table["entries"]:
        print("no checked GEMM rows of ours with timings in the results: nothing written")
        return 1
    out = args.out or ROOT / "frontend" / "tilefuse" / "moe" / f"tuned_{args.arch}.json"
    out.write_text(json.dumps(table, indent=1) + "\n")
    print(f"{len(table['entries'])} entries -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
