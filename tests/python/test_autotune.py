"""The autotuner on the interpreter, timed through an injected do_bench (or a fake clock):
pruning, the disk cache of decisions (hit, miss, corrupted, another process), the
restore_value / reset_to_zero hooks with real kernels, rejection of a planted outlier,
heuristics, pre_hook, re-tuning on a new key; the GPU screening (shared memory, registers,
fallbacks) through the stand-in driver; parallel compiles equal to serial ones."""

import concurrent.futures
import functools
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tilefuse as tf
import tilefuse.language as tl
from tilefuse import gpu, testing

from kernels_dsl.tutorials import matmul
from tests.python import test_launch_path

ROOT = pathlib.Path(__file__).resolve().parents[2]
fake_driver = test_launch_path.fake_driver  # the stand-in libcuda.so.1, built once


@tf.jit
def add_twice(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """out += 2 x: accumulates, so a tuner that launches it repeatedly must reset or restore out."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(out_ptr + offs, mask=m) + 2 * tl.load(x_ptr + offs, mask=m), mask=m)


def grid(meta):
    return (tf.cdiv(meta["n"], meta["BLOCK"]),)


class Bench:
    """An injected do_bench: runs the benchmarked call `calls` times (so that hooks and
    kernels really run) and returns the time `cost(block, k)` for the k-th measurement of
    that BLOCK. The configs record their BLOCK through their pre_hook."""

    def __init__(self, cost=lambda block, k: block / 64, calls=2):
        self.cost, self.calls, self.seen, self.measured = cost, calls, [], []

    def configs(self, blocks, **kw):
        return [tf.Config({"BLOCK": b}, pre_hook=lambda a: self.seen.append(a["BLOCK"]), **kw) for b in blocks]

    def __call__(self, fn, quantiles):
        assert tuple(quantiles) == (0.5, 0.2, 0.8)
        for _ in range(self.calls):
            fn()
        block = self.seen[-1]
        k = self.measured.count(block)
        self.measured.append(block)
        t = self.cost(block, k)
        return [t, t * 0.9, t * 1.1]


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEFUSE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def data(n, seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)


def test_planted_outlier_does_not_win():
    # 256's first measurement is a planted 0.1 ms (truly 3 ms); 128 is truly best.
    true = {32: 4.0, 64: 2.0, 128: 1.0, 256: 3.0}
    bench = Bench(lambda b, k: 0.1 if (b, k) == (256, 0) else true[b], calls=1)
    k = tf.autotune(bench.configs(true), key=["n"], do_bench=bench)(add_twice)
    x, out = data(1000, 0)
    k[grid](x, np.zeros_like(out), 1000)
    assert k.best_config.kwargs == {"BLOCK": 128}
    assert k.configs_timings[next(c for c in k.configs if c.kwargs["BLOCK"] == 256)][0] == 0.1
    # The three best of the first pass re-measured in three interleaved rounds, each in another order.
    assert bench.measured[4:] == [256, 128, 64, 128, 64, 256, 64, 256, 128]
    assert sorted(len(v) for v in k.remeasured.values()) == [3, 3, 3]


def test_reset_to_zero_and_restore_value_with_real_kernels():
    x, out0 = data(777, 1)
    # reset_to_zero: out is zeroed before every timed launch and before the real one.
    bench = Bench(calls=3)
    k = tf.autotune(bench.configs((64, 128, 256)), key=["n"], reset_to_zero=["out_ptr"], do_bench=bench)(add_twice)
    out = out0.copy()
    k[grid](x, out, 777)
    np.testing.assert_array_equal(out, 2 * x)  # exact: 0 + 2x in fp32
    assert len(bench.measured) == 3 + 3 * 3
    # restore_value: every timed launch is undone, the real one adds once.
    bench = Bench(calls=3)
    k = tf.autotune(bench.configs((64, 128, 256)), key=["n"], restore_value=["out_ptr"], do_bench=bench)(add_twice)
    out = out0.copy()
    k[grid](x, out, 777)
    np.testing.assert_array_equal(out, out0 + 2 * x)


def test_without_hooks_the_timed_launches_accumulate():
    # The check above can fail: without the hooks, out holds every timed launch's addition.
    x, out0 = data(300, 2)
    bench = Bench(calls=2)
    k = tf.autotune(bench.configs((64, 128)), key=["n"], do_bench=bench)(add_twice)
    out = out0.copy()
    k[grid](x, out, 300)
    launches = 2 * len(bench.measured) + 1
    np.testing.assert_allclose(out, out0 + launches * 2 * x, rtol=1e-5, atol=1e-4)


def test_interpreter_times_nothing_and_runs_the_first_valid_config(capsys):
    x, out0 = data(500, 3)
    seen = []
    # BLOCK=48 is not a power of two: it does not compile and is rejected, said on stderr.
    cfgs = [tf.Config({"BLOCK": b}, pre_hook=lambda a: seen.append(a["BLOCK"])) for b in (48, 128, 64)]
    k = tf.autotune(cfgs, key=["n"])(add_twice)
    out = out0.copy()
    k[grid](x, out, 500)
    np.testing.assert_array_equal(out, out0 + 2 * x)
    assert k.best_config.kwargs == {"BLOCK": 128} and seen == [128]
    err = capsys.readouterr().err
    assert "add_twice: rejected {BLOCK: 48, num_warps: 4, num_stages: 3}: does not compile" in err
    assert not (pathlib.Path(os.environ["TILEFUSE_CACHE_DIR"]) / "autotune").exists()  # nothing timed, nothing cached


def test_perf_model_ranks_and_top_k_prunes():
    bench = Bench()
    model = {32: 3.0, 64: 1.0, 128: 2.0, 256: 4.0}

    def perf_model(x_ptr, out_ptr, n, BLOCK, num_warps, num_stages, **kw):
        assert n == 640 and num_warps == 4 and "grid" in kw
        return model[BLOCK]

    prune = {"perf_model": perf_model, "top_k": 2}
    k = tf.autotune(bench.configs(model), key=["n"], prune_configs_by=prune, do_bench=bench)(add_twice)
    x, out = data(640, 4)
    k[grid](x, out, 640)
    assert set(bench.measured) == {64, 128}
    # On the interpreter without a do_bench, the model's first choice runs.
    k = tf.autotune(bench.configs(model), key=["n"], prune_configs_by={"perf_model": perf_model, "top_k": 0.5})(
        add_twice
    )
    k[grid](x, out, 640)
    assert k.best_config.kwargs == {"BLOCK": 64}


def test_early_config_prune():
    bench = Bench()

    def early(configs, nargs, **kwargs):
        assert nargs["n"] == 900
        return [c for c in configs if c.kwargs["BLOCK"] <= nargs["n"] // 4]

    k = tf.autotune(
        bench.configs((64, 128, 256, 512)), key=["n"], prune_configs_by={"early_config_prune": early}, do_bench=bench
    )(add_twice)
    x, out0 = data(900, 5)
    out = out0.copy()
    k[grid](x, out, 900)
    assert set(bench.measured) == {64, 128} and k.best_config.kwargs == {"BLOCK": 64}


def test_decisions_cached_on_disk(cache_dir):
    x, out = data(400, 6)

    def tuned(bench, blocks=(64, 128, 256)):
        return tf.autotune(bench.configs(blocks), key=["n"], do_bench=bench)(add_twice)

    first = Bench(lambda b, k: {64: 2.0, 128: 1.0, 256: 3.0}[b])
    tuned(first)[grid](x, out, 400)
    files = list((cache_dir / "autotune").glob("add_twice-*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text())["choice"] == "BLOCK: 128, num_warps: 4, num_stages: 3"
    # A new autotuner (as in a new process) reuses the decision without timing.
    again = Bench()
    k = tuned(again)
    k[grid](x, out, 400)
    assert again.measured == [] and k.best_config.kwargs == {"BLOCK": 128}
    # A new key, or another config list, is tuned and stored beside it.
    k[grid](x[:300], out[:300], 300)
    assert len(again.measured) == 3 + 3 * 3
    other = Bench()
    tuned(other, (64, 128))[grid](x, out, 400)
    assert len(other.measured) == 2 + 2 * 3
    assert len(list((cache_dir / "autotune").glob("*.json"))) == 3


@pytest.mark.parametrize("garbage", [b"{not json", b'{"best": 99, "configs": []}', b"\xff\xfe"])
def test_corrupted_decision_is_ignored_with_a_warning(cache_dir, garbage):
    x, out = data(200, 7)
    first = Bench()
    tf.autotune(first.configs((64, 128)), key=["n"], do_bench=first)(add_twice)[grid](x, out, 200)
    (path,) = (cache_dir / "autotune").glob("*.json")
    path.write_bytes(garbage)
    bench = Bench()
    with pytest.warns(UserWarning, match="ignoring the unreadable decision"):
        tf.autotune(bench.configs((64, 128)), key=["n"], do_bench=bench)(add_twice)[grid](x, out, 200)
    assert bench.measured and json.loads(path.read_text())["best"] in (0, 1)  # tuned again and rewritten


SECOND_PROCESS = """
import sys
import numpy as np
import tilefuse as tf
from tests.python.test_autotune import Bench, add_twice, grid

bench = Bench(lambda b, k: {64: 2.0, 128: 1.0, 256: 3.0}[b])
k = tf.autotune(bench.configs((64, 128, 256)), key=["n"], reset_to_zero=["out_ptr"], do_bench=bench)(add_twice)
x = np.arange(1000, dtype=np.float32)
out = np.zeros_like(x)
k[grid](x, out, 1000)
assert (out == 2 * x).all()
print(len(bench.measured), k.best_config.kwargs["BLOCK"])
"""


def test_a_later_process_reuses_the_decision(cache_dir):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "frontend"), str(ROOT)]))
    runs = [
        subprocess.run([sys.executable, "-c", SECOND_PROCESS], capture_output=True, text=True, env=env, cwd=ROOT)
        for _ in range(2)
    ]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr + runs[1].stderr
    assert [r.stdout.split() for r in runs] == [["12", "128"], ["0", "128"]]
    assert "config 3 of 3" in runs[0].stderr and "config" not in runs[1].stderr


def test_print_autotuning_table(monkeypatch, capsys):
    monkeypatch.setenv("TILEFUSE_PRINT_AUTOTUNING", "1")
    bench = Bench(lambda b, k: {64: 2.0, 128: 1.0}[b])
    k = tf.autotune(bench.configs((64, 48, 128)), key=["n"], do_bench=bench)(add_twice)
    x, out = data(100, 12)
    k[grid](x, out, 100)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("tilefuse autotuning of add_twice, key (100, 'float32', 'float32', 'interp', None)")
    assert lines[2].split()[:4] == ["1.0000", "0.9000", "1.1000", "1.0000"] and "BLOCK: 128," in lines[2]
    assert lines[3].split()[:4] == ["2.0000", "1.8000", "2.2000", "2.0000"] and "BLOCK: 64," in lines[3]
    assert lines[4].split()[0] == "rejected" and "BLOCK: 48," in lines[4] and "does not compile" in lines[4]
    assert lines[5] == "best config: BLOCK: 128, num_warps: 4, num_stages: 3"


def test_fake_clock_through_do_bench(monkeypatch):
    # The whole path with Triton's do_bench and a fake clock in which BLOCK b costs b/64 ms.
    clock = FakeClock()
    monkeypatch.setattr(testing, "_make_clock", lambda backend: clock)
    cfgs = [tf.Config({"BLOCK": b}, pre_hook=lambda a: clock.advance(a["BLOCK"] / 64)) for b in (256, 64, 128)]
    k = tf.autotune(cfgs, key=["n"], do_bench=functools.partial(testing.do_bench, warmup=2, rep=10))(add_twice)
    x, out0 = data(100, 8)
    out = out0.copy()
    k[grid](x, out, 100)
    assert k.best_config.kwargs == {"BLOCK": 64}
    assert {c.kwargs["BLOCK"]: t[0] for c, t in k.configs_timings.items()} == pytest.approx(
        {256: 4.0, 64: 1.0, 128: 2.0}
    )


def test_use_cuda_graph_times_graph_replays(monkeypatch):
    # BLOCK b costs b/64 ms on the device; timed from graphs, the 1 ms of launch is not in it.
    clock = FakeGraphClock()
    monkeypatch.setattr(testing, "_make_clock", lambda backend: clock)
    cost = lambda a: clock.advance(a["BLOCK"] / 64 + (0 if clock.replaying else 1.0))  # noqa: E731
    cfgs = [tf.Config({"BLOCK": b}, pre_hook=cost) for b in (256, 64, 128)]
    k = tf.autotune(cfgs, key=["n"], rep=30, use_cuda_graph=True)(add_twice)
    x, out0 = data(100, 8)
    out = out0.copy()
    # Timed as on the GPU ("cuda": the fake clock stands for CUDA events), run on the interpreter.
    k.nargs = dict(zip(k.arg_names, (x, out, 100)))
    timings = {c.kwargs["BLOCK"]: k._bench((x, out, 100), {}, grid, c, "cuda") for c in cfgs}
    assert {b: t[0] for b, t in timings.items()} == pytest.approx({256: 4.0, 64: 1.0, 128: 2.0})
    # n calls per graph: rep over the estimate, which includes the launch (1 + b/64 ms)
    assert clock.captures == [int(30 / 5.0), int(30 / 2.0), int(30 / 3.0)]
    # each config ran once, five times for the estimate, then ten replays of its graph
    calls = sum(1 + 5 + 10 * n for n in clock.captures)
    np.testing.assert_allclose(out, out0 + calls * 2 * x, rtol=1e-5)


def test_do_bench_cudagraph_on_the_interpreter_uses_the_wall_clock():
    x, out0 = data(100, 8)
    out, calls = out0.copy(), []
    t = testing.do_bench_cudagraph(
        lambda: (calls.append(1), add_twice[grid](x, out, 100, BLOCK=64)), rep=5, return_mode="all"
    )
    assert 1 <= len(t) < len(calls) and all(v > 0 for v in t)  # measure: untimed calls, then timed ones
    np.testing.assert_allclose(out, out0 + len(calls) * 2 * x, rtol=1e-5)
    with pytest.raises(ValueError, match="return_mode"):
        testing.do_bench_cudagraph(lambda: None, return_mode="avg")


def test_heuristics_and_pre_hook():
    seen = []

    @tf.autotune(
        [tf.Config({"BLOCK": 64}), tf.Config({"BLOCK": 128})],
        key=["n"],
        pre_hook=lambda a, reset_only=False: seen.append(dict(a)),
    )
    @tf.heuristics({"EVEN": lambda a: a["n"] % a["BLOCK"] == 0})
    @tf.jit
    def masked(x_ptr, out_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        if EVEN:
            tl.store(out_ptr + offs, tl.load(x_ptr + offs) * 3)
        else:
            tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 3, mask=offs < n)

    for n in (256, 300):
        x, _ = data(n, n)
        out = np.zeros_like(x)
        masked[grid](x, out, n)
        np.testing.assert_array_equal(out, 3 * x)
    # On the interpreter the first config runs; user hooks replace the default ones (unused here).
    assert masked.best_config.kwargs == {"BLOCK": 64} and seen == []
    h = tf.heuristics({"BLOCK": lambda a: tf.next_power_of_2(a["n"])})(add_twice)
    x, out0 = data(100, 9)
    out = out0.copy()
    h[(1,)](x, out, 100)
    np.testing.assert_array_equal(out, out0 + 2 * x)


def test_key_change_retunes_and_in_memory_cache():
    bench = Bench()
    k = tf.autotune(bench.configs((64, 128)), key=["n"], do_bench=bench, cache_results=False)(add_twice)
    for n in (100, 100, 200, 100):
        x, out = data(n, n)
        k[grid](x, out, n)
    assert len(bench.measured) == 2 * (2 + 2 * 3)  # n=100 and n=200 tuned once each
    # A dtype change is a new key too.
    x, out = data(100, 10)
    k[grid](x.astype(np.float16), out.astype(np.float16), 100)
    assert len(bench.measured) == 3 * 8


def test_bad_input_is_named():
    with pytest.raises(ValueError, match=r"key names \['m'\], not arguments"):
        tf.autotune([tf.Config({"BLOCK": 64})], key=["m"])(add_twice)
    with pytest.raises(ValueError, match="num_ctas is not supported"):
        tf.Config({"BLOCK": 64}, num_ctas=2)
    for bad in (0, 256, 32.0, True):
        with pytest.raises(ValueError, match=r"maxnreg must be an int in \[1, 255\] or None, got"):
            tf.Config({"BLOCK": 64}, maxnreg=bad)
    with pytest.raises(ValueError, match="prune_configs_by takes"):
        tf.autotune([tf.Config({"BLOCK": 64})], key=["n"], prune_configs_by={"perf": None})(add_twice)
    k = tf.autotune([tf.Config({"BLOCK": 64}), tf.Config({"BLOCK": 32})], key=["n"])(add_twice)
    x, out = data(10, 11)
    with pytest.raises(ValueError, match="BLOCK given at the launch and by the autotuner"):
        k[grid](x, out, 10, BLOCK=64)
    with pytest.raises(TypeError, match="decorate a @tilefuse.jit kernel"):
        tf.heuristics({})(lambda: None)


def test_parallel_compiles_equal_serial(tmp_path, monkeypatch):
    # gpu.build in threads (the C++ lowering releases the GIL) gives the PTX and hints of a
    # serial build.
    a = np.zeros((256, 256), np.float16)
    args = (a, a, a, 256, 256, 256, 256, 1, 256, 1, 256, 1)
    cfgs = [(64, 64, 32, 4, 3), (128, 128, 64, 8, 3), (128, 256, 64, 8, 4), (16, 64, 32, 4, 2), (64, 64, 32, 8, 2)]
    kernels = [
        matmul.matmul_kernel.compile(
            *args, BLOCK_SIZE_M=m, BLOCK_SIZE_N=n, BLOCK_SIZE_K=k, GROUP_SIZE_M=8, ACTIVATION=""
        )
        for m, n, k, _, _ in cfgs
    ]
    # The first and last share one module: two threads lower it at once (distinct cache keys:
    # concurrent writers of one key are the disk cache's business, not this test's).
    jobs = [(kern, w, s) for kern, (*_, w, s) in zip(kernels, cfgs)]

    def build(job):
        entry, hints = gpu.build(job[0], "sm_90a", job[1], job[2])
        return entry.ptx, hints

    monkeypatch.setenv("TILEFUSE_CACHE_DIR", str(tmp_path / "serial"))
    serial = [build(j) for j in jobs]
    monkeypatch.setenv("TILEFUSE_CACHE_DIR", str(tmp_path / "parallel"))
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        parallel = list(pool.map(build, jobs))
    assert parallel == serial and len({p for p, _ in serial}) == len(cfgs)
    assert any("not on wgmma" in h[3] for h in serial[3][1])  # the 16-row dot falls back to mma.sync
    # A cached kernel reports its hints too.
    assert [build(j) for j in jobs] == serial


class FakeClock:
    """A clock that only moves when told: the benchmarked function advances it."""

    def __init__(self):
        self.now, self.flushes = 0.0, 0

    def advance(self, ms):
        self.now += ms

    def sync(self):
        pass

    def flush(self):
        self.flushes += 1

    def mark(self):
        return self.now

    def elapsed_ms(self, start, end):
        return end - start


class FakeGraphClock(FakeClock):
    """FakeClock with CUDA graphs: a call outside a graph also costs 1 ms of host launch,
    a replay runs the captured calls without it (capturing runs nothing)."""

    def __init__(self):
        super().__init__()
        self.replaying, self.captures = False, []

    def graph_runs(self, fn, n):
        self.captures.append(n)

        def replay():
            self.replaying = True
            for _ in range(n):
                fn()
            self.replaying = False

        return replay


GPU_SCREEN = r"""
import json
import tilefuse as tf
from kernels_dsl.tutorials import matmul
from tests.python.test_launch_path import SCRIPT

exec(SCRIPT.split("full = []")[0])  # the stand-in tensors
M = N = K = 512
a, b, c = (Tensor(0x100000 * (i + 1), "torch.bfloat16", 2) for i in range(3))
cost = {(128, 128): 1.0, (64, 64): 2.0}
timed = []


def bench(fn, quantiles):
    fn()
    timed.append(last[0])
    return [cost[last[0]]] * 3


last = []
hook = lambda nargs: last.__setitem__(slice(None), [(nargs["BLOCK_SIZE_M"], nargs["BLOCK_SIZE_N"])])
meta = lambda m, n, k: dict(BLOCK_SIZE_M=m, BLOCK_SIZE_N=n, BLOCK_SIZE_K=k, GROUP_SIZE_M=8)
cfg = lambda m, n, k, w, s: tf.Config(meta(m, n, k), num_warps=w, num_stages=s, pre_hook=hook)
configs = [
    cfg(128, 128, 64, 4, 3),  # fits
    cfg(128, 128, 64, 8, 3),  # 256 threads: beyond the stand-in's register file
    cfg(256, 256, 128, 4, 4),  # shared memory beyond 232448 bytes
    cfg(16, 64, 32, 4, 3),  # 16 rows: the dot is not on wgmma
    cfg(64, 64, 32, 4, 3),  # fits
]
k = tf.autotune(configs, key=["M", "N", "K"], do_bench=bench)(matmul.matmul_kernel)
grid = lambda META: (tf.cdiv(M, META["BLOCK_SIZE_M"]) * tf.cdiv(N, META["BLOCK_SIZE_N"]),)
k[grid](a, b, c, M, N, K, K, 1, N, 1, N, 1, ACTIVATION="")
print(json.dumps({"timed": sorted(set(timed)), "best": str(k.best_config)}))
"""


def test_gpu_screening_rejects_before_timing(fake_driver, tmp_path):
    # Through the stand-in driver (one sm_90 device, 232448 bytes of shared memory per
    # block, 128 threads at most with its 128 registers per thread): the configs that cannot
    # run or fall back are rejected before timing, each with its reason.
    env = dict(
        os.environ,
        LD_LIBRARY_PATH=str(fake_driver),
        FAKE_CUDA_LOG=str(tmp_path / "launches.log"),
        FAKE_CUDA_MAX_THREADS="128",
        TILEFUSE_TARGET="sm_90a",
        TILEFUSE_CACHE_DIR=str(tmp_path / "cache"),
        PYTHONPATH=os.pathsep.join([str(ROOT / "frontend"), str(ROOT)]),
    )
    r = subprocess.run([sys.executable, "-c", GPU_SCREEN], capture_output=True, text=True, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.splitlines()[-1])
    assert got == {
        "timed": [[64, 64], [128, 128]],
        "best": "BLOCK_SIZE_M: 128, BLOCK_SIZE_N: 128, BLOCK_SIZE_K: 64, GROUP_SIZE_M: 8, num_warps: 4, num_stages: 3",
    }
    err = r.stderr

    def rejected(m, n, k, w, s):
        c = tf.Config(dict(BLOCK_SIZE_M=m, BLOCK_SIZE_N=n, BLOCK_SIZE_K=k, GROUP_SIZE_M=8), num_warps=w, num_stages=s)
        return f"rejected {{{c}}}: "

    assert (
        rejected(128, 128, 64, 8, 3) + "needs 128 registers per thread, which allows 128 threads per block on fake"
        in err
    )
    assert rejected(256, 256, 128, 4, 4) + "needs 524288 bytes of shared memory with num_warps=4, num_stages=4" in err
    assert rejected(16, 64, 32, 4, 3) + "falls back: dot not on wgmma" in err
    # The chosen config launched once after tuning (and once per timed call), 128 threads.
    lines = (tmp_path / "launches.log").read_text().splitlines()
    assert lines[-1].startswith("grid=16,1,1 block=128 ")


PORTED = """
import numpy as np
import tilefuse as triton
import tilefuse.language as tl


@triton.autotune(
    configs=[triton.Config({"BLOCK_SIZE": 128}, num_warps=4), triton.Config({"BLOCK_SIZE": 1024}, num_warps=8)],
    key=["n_elements"],
)
@triton.jit
def add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(output_ptr + offsets, x + y, mask=mask)


def add(x, y):
    output = np.empty_like(x)
    n_elements = output.size
    grid = lambda meta: (triton.cdiv(n_elements, meta["BLOCK_SIZE"]),)
    add_kernel[grid](x, y, output, n_elements)
    return output


rng = np.random.default_rng(0)
x, y = rng.random(98432, dtype=np.float32), rng.random(98432, dtype=np.float32)
triton.testing.assert_close(add(x, y), x + y, atol=0, rtol=0)


@triton.testing.perf_report(
    triton.testing.Benchmark(
        x_names=["size"],
        x_vals=[2**i for i in range(12, 15)],
        x_log=True,
        line_arg="provider",
        line_vals=["triton", "numpy"],
        line_names=["Triton", "Numpy"],
        styles=[("blue", "-"), ("green", "-")],
        ylabel="GB/s",
        plot_name="vector-add-performance",
        args={},
    )
)
def benchmark(size, provider):
    x, y = rng.random(size, dtype=np.float32), rng.random(size, dtype=np.float32)
    fn = (lambda: add(x, y)) if provider == "triton" else (lambda: x + y)
    ms, min_ms, max_ms = triton.testing.do_bench(fn, warmup=1, rep=5, quantiles=[0.5, 0.2, 0.8])
    gbps = lambda ms: 3 * x.size * x.itemsize * 1e-9 / (ms * 1e-3)
    return gbps(ms), gbps(max_ms), gbps(min_ms)


benchmark.run(print_data=True, show_plots=False)
"""


def test_a_ported_triton_tutorial_runs(tmp_path):
    # Tutorial 01 as Triton users write it (numpy arrays for torch), with only the imports changed.
    path = tmp_path / "vector_add_ported.py"
    path.write_text(PORTED)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "frontend"))
    r = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0] == "vector-add-performance:" and out[1].split() == ["size", "Triton", "Numpy"]
    assert [line.split()[1] for line in out[2:]] == ["4096", "8192", "16384"]
    assert all(float(v) > 0 for line in out[2:] for v in line.split()[2:])


def test_user_hooks_replace_the_default_ones():
    # pre_hook / post_hook of autotune run around every timed launch (and pre_hook once with
    # reset_only after tuning), in place of the reset_to_zero / restore_value hooks.
    events = []
    bench = Bench(calls=2)
    k = tf.autotune(
        bench.configs((64, 128)),
        key=["n"],
        reset_to_zero=["out_ptr"],
        pre_hook=lambda nargs, reset_only=False: events.append(("pre", nargs["BLOCK"], reset_only)),
        post_hook=lambda nargs, exception: events.append(("post", nargs["BLOCK"], exception)),
        do_bench=bench,
    )(add_twice)
    x, out0 = data(256, 13)
    out = out0.copy()
    k[grid](x, out, 256)
    launches = 2 * len(bench.measured)
    assert events[:4] == [("pre", 64, False), ("post", 64, None)] * 2
    assert len(events) == 2 * launches + 1 and events[-1] == ("pre", 64, True)
    # The default reset did not run: out holds every launch's addition.
    np.testing.assert_allclose(out, out0 + (launches + 1) * 2 * x, rtol=1e-5, atol=1e-4)


def test_warmup_compiles_every_kept_config():
    def early(configs, nargs, **kwargs):
        return configs[:2]

    k = tf.autotune(
        [tf.Config({"BLOCK": b}, num_warps=w) for b, w in ((64, 4), (128, 8), (256, 4))],
        key=["n"],
        prune_configs_by={"early_config_prune": early},
    )(add_twice)
    x, out = data(100, 14)
    compiled = k.warmup(x, out, 100, grid=grid, target="sm_90a")
    assert len(compiled) == 2 and all(".target sm_90a" in c.asm["ptx"] for c in compiled)
    assert ".maxntid 128" in compiled[0].asm["ptx"] and ".maxntid 256" in compiled[1].asm["ptx"]


def test_maxnreg_is_a_config_option():
    # A register cap is part of a config: its launches compile a capped kernel (its own
    # specialization), configs differing only in it are distinct, and it prints.
    capped, free = tf.Config({"BLOCK": 64}, maxnreg=40), tf.Config({"BLOCK": 64})
    assert capped != free and len({capped, free}) == 2
    assert str(capped) == "BLOCK: 64, num_warps: 4, num_stages: 3, maxnreg: 40"
    assert capped.all_kwargs()["maxnreg"] == 40 and "maxnreg" not in free.all_kwargs()
    k = tf.autotune([capped, free], key=["n"], restore_value=["out_ptr"], cache_results=False)(add_twice)
    x, out = data(100, 5)
    want = out + 2 * x
    k[grid](x, out, 100)
    np.testing.assert_array_equal(out, want)
    # The interpreter times nothing: the first config ran, capped; a plain launch is its own build.
    add_twice[grid](x, out, 100, BLOCK=64)
    np.testing.assert_array_equal(out, want + 2 * x)
    funcs = [line for c in add_twice.cache.values() for line in c.asm["tile"].splitlines() if "func @" in line]
    assert sum("maxnreg = 40" in f for f in funcs) == 1 and any("maxnreg" not in f for f in funcs)
