"""tilefuse.moe.tuned: the shipped table is what bench/moe_tune.py builds from the committed
measurements; lookup serves measured shapes and their neighbours within a factor of two,
nothing else; the grouped GEMM's host code launches the table's tiles when no config is
passed (on CPU torch tensors taken for CUDA ones, scripts/prebuild.py's recording), and
the defaults where the table does not cover the call (a bias, an unmeasured shape, the
interpreter)."""

import importlib
import json
import pathlib
import sys

import numpy as np
import pytest
from tilefuse import moe
from tilefuse.moe import tuned

from scripts import prebuild

ROOT = pathlib.Path(__file__).resolve().parents[2]  # not tilefuse's: a copied package (build-asan/pkg) has no bench/
sys.path.insert(0, str(ROOT / "bench"))
import moe_tune  # noqa: E402

SOURCES = [
    ROOT / "bench" / "data" / f"moe_bench_{d}.json"
    for d in (
        "h200_2026-12-02",
        "h200_2026-12-03_wgrad",
        "h200_2026-12-04_fp8",
        "h200_2026-12-04_fp8_tma",
        "h100_2026-12-05_fp8_dgrad",
        "h200_2026-12-05_fp8_two",
        "h100_2026-12-05_fp8_two_qwen_fc1",
    )
]
gg = importlib.import_module("tilefuse.moe.grouped_gemm")


def test_shipped_table_is_built_from_the_committed_measurements(tmp_path):
    out = tmp_path / "t.json"
    assert moe_tune.main([*map(str, SOURCES), "--out", str(out)]) == 0
    assert json.loads(out.read_text()) == tuned.table("sm_90a")


def test_entries_are_the_fastest_checked_rows():
    rows = [r for s in SOURCES for r in json.loads(s.read_text())["rows"]]
    t = tuned.table("sm_90a")
    assert {e["op"] for e in t["entries"]} == set(moe_tune.TUNED_OPS)
    for e in t["entries"]:
        timed = [
            r["tflops"]
            for r in rows
            if (r["shape"], moe_tune.tuned_op(r), r["routing"], r["who"], r["status"])
            == (e["shape"], e["op"], "0.7-1.3", "ours", "ok")
        ]
        assert len(timed) >= 2 and max(timed) == pytest.approx(e["tflops"], abs=0.05)
        cfg = moe.GemmConfig(*e["config"])
        assert gg._config("t", cfg, None) == cfg  # a valid config
        n, k = e["n"], e["k"]
        assert tuned.lookup("sm_90a", e["op"], n, k) == cfg


def test_lookup_covers_only_near_shapes():
    e = next(e for e in tuned.table("sm_90a")["entries"] if e["op"] == "fwd bf16" and e["shape"] == "qwen3_30b_fc2")
    n, k = e["n"], e["k"]
    assert tuned.lookup("sm_90a", "fwd bf16", n * 2, k // 2) == moe.GemmConfig(*e["config"])
    assert tuned.lookup("sm_90a", "fwd bf16", 64, 64) is None  # no entry within 2x
    assert tuned.lookup("sm_90a", "dgrad mxfp8", n, k) is None  # not measured
    assert tuned.lookup("sm_80", "fwd bf16", n, k) is None  # no table
    assert tuned.table("sm_80") is None


def launched(fn, *args, **kwargs):
    """{kernel name: (key as a dict, num_warps, num_stages)} of a call on CPU tensors taken for CUDA."""
    with prebuild.recording() as launches:
        fn(*args, **kwargs)
    return {f.__name__: (dict(key), nw, ns) for (f, key, nw, ns) in launches}


def test_grouped_gemm_launches_the_tuned_tiles():
    torch = pytest.importorskip("torch")
    e = next(e for e in tuned.table("sm_90a")["entries"] if e["op"] == "fwd bf16")
    bm, bn, bk, nw, ns = e["config"][:5]
    x = torch.empty((4096, e["k"]), dtype=torch.bfloat16)
    w = torch.empty((4, e["n"], e["k"]), dtype=torch.bfloat16)
    splits = torch.zeros(4, dtype=torch.int32)
    got = launched(moe.grouped_gemm, x, w, splits)
    name = next(n for n in got if n.startswith("grouped_gemm"))
    key, warps, stages = got[name]
    assert (key["BM"], key["BO"], key["BC"], warps, stages) == (str(bm), str(bn), str(bk), nw, ns)
    # with a bias (not measured) and with an explicit config: not the table's
    d = moe.GemmConfig()
    for kwargs in (dict(bias=torch.empty((4, e["n"]))), dict(config=d)):
        key, warps, _ = launched(moe.grouped_gemm, x, w, splits, **kwargs)[name]
        assert (key["BM"], key["BO"], key["BC"], warps) == (str(d.block_m), str(d.block_n), str(d.block_k), d.num_warps)


def test_dgrad_launches_the_tuned_tiles():
    torch = pytest.importorskip("torch")
    e = next(e for e in tuned.table("sm_90a")["entries"] if e["op"] == "dgrad bf16")
    bm, bn, bk, nw, ns = e["config"][:5]
    dy = torch.empty((4096, e["k"]), dtype=torch.bfloat16)  # dgrad: N columns of dy reduce to K = e["n"]
    w = torch.empty((4, e["k"], e["n"]), dtype=torch.bfloat16)
    got = launched(moe.grouped_gemm_dgrad, dy, w, torch.zeros(4, dtype=torch.int32))
    key, warps, _ = next(v for n, v in got.items() if n.startswith("grouped_gemm"))
    assert (key["BM"], key["BO"], key["BC"], warps) == (str(bm), str(bn), str(bk), nw)


def test_wgrad_launches_the_tuned_tiles_persistent():
    torch = pytest.importorskip("torch")
    e = next(e for e in tuned.table("sm_90a")["entries"] if e["op"] == "wgrad bf16")
    bm, bn, bk, nw, ns = e["config"][:5]
    dy = torch.empty((4096, e["k"]), dtype=torch.bfloat16)  # dw [N, K]: e["k"] rows, e["n"] columns
    x = torch.empty((4096, e["n"]), dtype=torch.bfloat16)
    got = launched(moe.grouped_gemm_wgrad, dy, x, torch.zeros(4, dtype=torch.int32))
    key, warps, stages = got["grouped_wgrad_persistent_kernel"]
    assert (key["BN"], key["BK"], key["BR"], warps, stages) == (str(bm), str(bn), str(bk), nw, ns)


@pytest.mark.parametrize("recipe", ["mxfp8", "fp8_block"])
def test_fp8_forward_launches_the_tuned_tiles(recipe):
    torch = pytest.importorskip("torch")
    e = next(e for e in tuned.table("sm_90a")["entries"] if e["op"] == f"fwd {recipe}")
    bm, bn, bk, nw, ns = e["config"][:5]
    groups, splits = 4, torch.zeros(4, dtype=torch.int32)
    x = torch.empty((4096, e["k"]), dtype=torch.bfloat16)
    w = torch.empty((groups * e["n"], e["k"]), dtype=torch.bfloat16)
    wkw = dict(block=(128, 128)) if recipe == "fp8_block" else {}
    with prebuild.recording():
        qx, qw = moe.quantize(x, recipe), moe.quantize(w, recipe, **wkw)
    got = launched(moe.grouped_gemm, qx, qw, splits)
    launched_tiles(got["grouped_gemm_fp8_kernel"], moe.GemmConfig(*e["config"]))
    # with a bias (not measured): the recipe's default (FP8-block's own)
    d = gg.fp8_default_config(x, recipe)
    launched_tiles(
        launched(moe.grouped_gemm, qx, qw, splits, torch.empty((groups, e["n"])))["grouped_gemm_fp8_kernel"], d
    )


def launched_tiles(launch, cfg):
    """The fp8 kernel's launch ran `cfg`'s tiles: a persistent tile wider than FP8_WIDEST_DOT
    as two dots of half its width (TWO)."""
    key, warps, stages = launch
    two = bool(cfg.persistent or cfg.warp_specialize) and cfg.block_n > gg.FP8_WIDEST_DOT
    assert key.get("TWO", "False") == str(two)
    bo = cfg.block_n // 2 if two else cfg.block_n
    want = (str(cfg.block_m), str(bo), str(cfg.block_k), cfg.num_warps, cfg.num_stages)
    assert (key["BM"], key["BO"], key["BC"], warps, stages) == want


def test_interpreter_keeps_its_small_tiles():
    x = np.empty((40, 64), np.float32)  # only its type is read
    assert gg._config("t", None, x, "fwd bf16", 1536, 2048) == gg.default_config(x)
