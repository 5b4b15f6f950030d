"""Tuned tile configs of the MoE GEMMs, one table per GPU architecture (tuned_<arch>.json
beside this file), built by bench/moe_tune.py from bench/moe_bench.py's measurements: for
each measured (op, shape), the fastest config whose float64 check passed. The host code
asks `lookup` when a call passes no config; an explicit config always wins, and a call the
table does not cover takes the built-in default (grouped_gemm.default_config).

Coverage is what was measured, nothing inferred past it: an entry serves its own (N, K)
and shapes within a factor of two of it on both axes (the nearest such entry), and only
calls of the measured kind (moe_bench times no bias, so a call with a bias is not covered).
"""

from __future__ import annotations

import functools
import json
import math
import pathlib

HERE = pathlib.Path(__file__).resolve().parent
NEAR = 2.0  # an entry serves shapes within this factor of its N and K


def path(arch: str) -> pathlib.Path:
    return HERE / f"tuned_{arch}.json"


@functools.lru_cache(maxsize=8)
def table(arch: str) -> dict | None:
    """The table of `arch` ({"source": ..., "entries": [...]}), None where none ships."""
    p = path(arch)
    return json.loads(p.read_text()) if p.exists() else None


def lookup(arch: str, op: str, n: int, k: int):
    """The tuned moe.GemmConfig for `op` ("fwd bf16", "dgrad bf16", "wgrad bf16", "fwd mxfp8",
    "fwd fp8_block", "dgrad fp8_block": bench/moe_tune.py's TUNED_OPS) producing N columns
    from a K reduction (the wgrad: dw's columns and rows), or None where the table does not cover it."""
    from .grouped_gemm import GemmConfig

    t = table(arch)
    if t is None or n < 1 or k < 1:
        return None
    best, best_d = None, math.inf
    for e in t["entries"]:
        if e["op"] != op:
            continue
        rn, rk = n / e["n"], k / e["k"]
        if max(rn, 1 / rn, rk, 1 / rk) > NEAR:
            continue
        d = abs(math.log(rn)) + abs(math.log(rk))
        if d < best_d:
            best, best_d = e, d
    return None if best is None else GemmConfig(*best["config"])
