"""The autotuner on the GPU: the tutorial matmuls (pointers and descriptors) tuned over
their 10 configs at a 2048^3 and a ragged shape, each result checked against float64; a
second process reuses the decisions from the disk cache without timing anything."""

import json
import os
import pathlib
import subprocess
import sys

import pytest
import tilefuse as tf
import tilefuse.language as tl
from tilefuse import testing

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]

ROOT = pathlib.Path(__file__).resolve().parents[2]

# Run twice with one TILEFUSE_CACHE_DIR: prints, per kernel and shape, how many configs
# were timed, the choice and the largest error relative to the bf16 tolerance.
SCRIPT = r"""
import json
import torch
import tilefuse as tf
from tilefuse import testing
from kernels_dsl.tutorials import matmul
from kernels_dsl.tutorials.matmul_desc import matmul_desc_kernel

timed = []
measure = testing.measure
testing.measure = lambda *a, **kw: (timed.append(1), measure(*a, **kw))[1]
ptr = tf.autotune(matmul.autotune_configs(), key=["M", "N", "K"], warmup=5, rep=20)(matmul.matmul_kernel)
desc = tf.autotune(matmul.autotune_configs(), key=["M", "N", "K"], warmup=5, rep=20)(matmul_desc_kernel)
out = {}
for M, N, K in [(2048, 2048, 2048), (1000, 1104, 1200)]:
    g = torch.Generator(device="cuda").manual_seed(M)
    a = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
    b = torch.randn(K, N, device="cuda", generator=g).to(torch.bfloat16)
    grid = lambda META: (tf.cdiv(M, META["BLOCK_SIZE_M"]) * tf.cdiv(N, META["BLOCK_SIZE_N"]),)
    for name, k in (("ptr", ptr), ("desc", desc)):
        c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        before = len(timed)
        if name == "ptr":
            k[grid](a, b, c, M, N, K, a.stride(0), 1, b.stride(0), 1, c.stride(0), 1, ACTIVATION="")
        else:
            k[grid](a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0))
        torch.cuda.synchronize()
        ref = a.double() @ b.double()
        # fp32 accumulation, then one rounding to bf16 (2^-8 relative).
        tol = 2**-8 * ref.abs() + 2**-20 * (a.double().abs() @ b.double().abs())
        worst = float(((c.double() - ref).abs() / tol).nan_to_num(float("inf")).max())
        out[f"{name} {M}x{N}x{K}"] = [len(timed) - before, str(k.best_config), worst, len(k.configs_timings)]
print(json.dumps(out))
"""


def test_tuned_matmuls_are_right_and_the_decisions_cached(tmp_path):
    env = dict(os.environ, TILEFUSE_CACHE_DIR=str(tmp_path / "cache"), TILEFUSE_PRINT_AUTOTUNING="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), str(ROOT)) if p)
    runs, logs = [], []
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, cwd=ROOT)
        assert r.returncode == 0, r.stdout + r.stderr
        print(r.stdout + r.stderr)  # the tables of timings, rejections and choices
        runs.append(json.loads(r.stdout.splitlines()[-1]))
        logs.append(r.stderr)
    first, second = runs
    # The 2-warp configs cannot use wgmma (a warpgroup is 4 warps): rejected before timing, and said.
    two_warps = "BLOCK_SIZE_M: 64, BLOCK_SIZE_N: 32, BLOCK_SIZE_K: 32, GROUP_SIZE_M: 8, num_warps: 2, num_stages: 5"
    assert f"matmul_kernel: rejected {{{two_warps}}}: falls back: dot not on wgmma" in logs[0]
    assert f"matmul_desc_kernel: rejected {{{two_warps}}}: falls back: dot not on wgmma" in logs[0]
    assert "rejected" not in logs[1] and "best so far" not in logs[1]
    for case, (n_timed, choice, worst, n_configs) in first.items():
        assert worst <= 1.0, f"{case}: error {worst:.3g} x the tolerance with {choice}"
        # Every surviving config timed once, the finalists three more times each.
        assert n_configs >= 2 and n_timed == n_configs + 3 * min(3, n_configs), (case, n_timed, n_configs)
    for case, (n_timed, choice, worst, _) in second.items():
        assert n_timed == 0 and choice == first[case][1], (case, n_timed, choice)
        assert worst <= 1.0
    assert len(list((tmp_path / "cache" / "autotune").glob("*.json"))) == 4


def test_use_cuda_graph_tunes_from_graph_replays():
    """use_cuda_graph=True: each config's launches are captured into a CUDA graph on
    torch's stream and timed from its replays, and the choice computes the right result;
    do_bench_cudagraph returns its 10 replay times, and the kernel, counting its runs, ran
    1 + 5 + 10 n times (the replays really launched it)."""

    @tf.jit
    def count_add(x_ptr, y_ptr, runs_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * 3 + 1, mask=m)
        if tl.program_id(0) == 0:
            tl.atomic_add(runs_ptr, 1)

    cfgs = [tf.Config({"BLOCK": b}) for b in (128, 256, 1024)]
    k = tf.autotune(cfgs, key=["n"], rep=5, use_cuda_graph=True, cache_results=False)(count_add)
    n = 1 << 20
    x = torch.randn(n, device="cuda")
    y = torch.full_like(x, float("nan"))
    runs = torch.zeros(1, device="cuda", dtype=torch.int32)
    k[lambda m: (tf.cdiv(n, m["BLOCK"]),)](x, y, runs, n)
    torch.cuda.synchronize()
    torch.testing.assert_close(y, x * 3 + 1, rtol=0, atol=0)
    assert len(k.configs_timings) == 3 and all(0 < t[0] < 1.0 for t in k.configs_timings.values())
    runs.zero_()
    t = testing.do_bench_cudagraph(lambda: count_add[(n // 1024,)](x, y, runs, n, BLOCK=1024), rep=5, return_mode="all")
    torch.cuda.synchronize()
    calls = int(runs.item()) - 6
    assert len(t) == 10 and all(v > 0 for v in t)
    assert calls > 0 and calls % 10 == 0, runs.item()
