"""bench/moe_bench.py kept runnable without a GPU: `--check-only` on the CPU interpreter at
tiny shapes (numpy peers; the torch and Triton peers reported unavailable) runs every
section and every check passes; a wrong result fails its check and is not timed; the
ratio and table helpers."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "bench")
sys.path.insert(0, BENCH)

import moe_bench  # noqa: E402
from moe_bench_arrays import CpuBackend, error_rms  # noqa: E402

pytestmark = pytest.mark.skipif(moe_bench.Backend.pick().gpu, reason="the interpreter run; the GPU runs the bench")


def test_check_only_on_the_interpreter(tmp_path):
    out = tmp_path / "moe_bench.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "frontend"), ROOT]))
    proc = subprocess.run(
        [sys.executable, os.path.join(BENCH, "moe_bench.py"), "--check-only", "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    ours = [r for r in rows if r["who"] == "ours"]
    sections = {r["section"] for r in ours}
    assert sections == {"gemm", "memory", "mlp"}
    ops = {r["op"] for r in ours}
    assert {"fwd bf16", "dgrad bf16", "wgrad bf16", "fwd fp8", "swiglu+mxfp8", "fwd+bwd"} <= ops
    assert any("persistent" in r["variant"] for r in ours) and any("per-tile" in r["variant"] for r in ours)
    for r in rows:
        if r["status"] == "ok":
            assert 0 <= r["err_rms"] <= r["bound"], r
            assert "ms" not in r, "--check-only timed a case"
        else:
            assert r["who"] == "peer" and r["status"].startswith("unavailable"), r
    checked_peers = [r for r in rows if r["who"] == "peer" and r["status"] == "ok"]
    assert {r["section"] for r in checked_peers} == {"gemm", "mlp"}
    shapes = {r["shape"] for r in ours if r["section"] == "gemm"}
    assert shapes == set(moe_bench.GEMM_SHAPES)
    assert {r["routing"] for r in ours if r["shape"] in moe_bench.SKEWED} == {"0.7-1.3", "skewed"}


def test_a_wrong_result_fails_its_check():
    b = CpuBackend()
    ref = np.arange(1.0, 7.0).reshape(2, 3)
    case = dict(section="gemm", shape="s", routing="r", op="fwd bf16", variant="v", who="ours", dtype="bf16")
    case |= dict(fn=lambda: ref * (1 + 2.0**-5), check=lambda got: error_rms(b, [(got, ref)]), flops=1.0)
    row = moe_bench.check_case(case, b)
    assert row["status"] == "FAILED check" and "ms" not in row
    case["fn"] = lambda: np.where(ref > 3, np.nan, ref)
    assert moe_bench.check_case(case, b)["err_rms"] == float("inf")
    case["fn"] = lambda: ref * (1 + 2.0**-10)
    assert moe_bench.check_case(case, b)["status"] == "ok"


def test_cases_are_timed_in_turns():
    # A clock that slows down over the run: timed in turns, the two cases' medians differ by
    # one round's drift (2 ms here), where one after the other they would differ by 4.
    calls, clock = [], iter(range(1, 1000))

    class Drifting(CpuBackend):
        def time_samples(self, fn, reps):
            calls.append(fn())
            return [float(next(clock)) for _ in range(reps)]

    cases = [dict(fn=lambda n=n: n, flops=1e9) for n in ("a", "b")]
    pairs = [(c, {}) for c in cases]
    moe_bench.time_cases(pairs, Drifting(), reps=4, warmup=0, rounds=2)
    assert calls == ["a", "b", "a", "b"]
    (_, a), (_, b) = pairs
    assert a["ms"] == 3.5 and b["ms"] == 5.5 and a["tflops"] == pytest.approx(1e9 / 3.5 / 1e9)


def test_ratio_is_over_the_best_peer_of_the_same_op():
    key = dict(section="gemm", shape="s", routing="r", status="ok")
    rows = [
        dict(key, op="fwd bf16", who="peer", variant="a", tflops=400.0),
        dict(key, op="fwd bf16", who="peer", variant="b", tflops=500.0),
        dict(key, op="fwd fp8", who="peer", variant="c", tflops=900.0),
        dict(key, op="fwd bf16", who="ours", variant="x", tflops=550.0),
        dict(key, op="fwd fp8", who="ours", variant="y", tflops=990.0),
        dict(key, op="wgrad bf16", who="ours", variant="z", tflops=10.0),
    ]
    moe_bench.add_ratios(rows)
    assert rows[3]["ratio"] == pytest.approx(1.1) and rows[3]["best_peer"] == "b"
    assert rows[4]["ratio"] == pytest.approx(1.1) and rows[4]["best_peer"] == "c"
    assert "ratio" not in rows[5], "no peer of that op: no ratio"


def test_timing_needs_a_gpu(capsys):
    with pytest.raises(SystemExit):
        moe_bench.main(["--quick"])
    assert "timing needs a CUDA GPU" in capsys.readouterr().err


def _pair(shape, waves, persistent_tf, per_tile_tf):
    key = dict(shape=shape, routing="r", op="fwd bf16", config="c", waves=waves)
    return [dict(key, persistent=True, tflops=persistent_tf), dict(key, persistent=False, tflops=per_tile_tf)]


def test_rule_report_names_the_thresholds_the_measurements_allow(capsys):
    moe_bench.rule_report(_pair("a", 1.0, 90.0, 100.0) + _pair("b", 5.0, 110.0, 100.0) + _pair("c", 9.0, 120.0, 100.0))
    assert "any PERSISTENT_WAVES in (1.0, 5.0]" in capsys.readouterr().out
    moe_bench.rule_report(_pair("a", 1.0, 110.0, 100.0) + _pair("b", 5.0, 90.0, 100.0))
    assert "no single threshold" in capsys.readouterr().out
