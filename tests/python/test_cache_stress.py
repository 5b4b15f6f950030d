"""N processes compiling for sm_90a (gpu.build: lowering, the disk cache's kernel and hint
entries) and autotuning on the interpreter (decisions) at once, on one cache dir small
enough that every put also evicts: every process gets correct results, and the cache left
behind holds only whole, valid entries within its bound."""

import hashlib
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import tilefuse as tf
import tilefuse.language as tl
from tilefuse import _C, gpu

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROCESSES = 6
BLOCKS = (16, 32, 64, 128, 256)
MAX_BYTES = 20_000  # about three kernel entries of the six kernels: evictions race reads and writes


@tf.jit
def axpy(x_ptr, y_ptr, o_ptr, a, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o_ptr + offs, a * tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


def _cost(config):
    return {16: 5.0, 32: 4.0, 64: 1.0, 128: 2.0, 256: 3.0}[config["BLOCK"]]


def child(seed: int):
    """One process: compiles every BLOCK for sm_90a three times over and autotunes on the
    interpreter; prints the PTX digests and the tuned choice, which the parent compares."""
    rng = np.random.default_rng(seed)
    n = 1000
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    digests = {}
    for _ in range(3):
        for block in rng.permutation(BLOCKS):
            kernel = axpy.compile(x, y, x, 1.5, n, BLOCK=int(block))
            entry, hints = gpu.build(kernel, "sm_90a", 4, 3)
            assert f".entry {kernel.name}" in entry.ptx and isinstance(hints, list)
            d = hashlib.sha256(entry.ptx.encode()).hexdigest()
            assert digests.setdefault(int(block), d) == d, "a cached kernel differs from the compiled one"
    chosen = []

    def bench(fn, quantiles):
        fn()
        return [chosen[-1]] * 3

    configs = [tf.Config({"BLOCK": b}, pre_hook=lambda a: chosen.append(_cost(a))) for b in BLOCKS]
    tuned = tf.autotune(configs, key=["n"], do_bench=bench)(axpy)
    for size in (n, 700, 300):
        out = np.empty(size, np.float32)
        tuned[lambda meta: (tf.cdiv(meta["n"], meta["BLOCK"]),)](x, y, out, 1.5, size)
        ax, yy = np.float64(1.5) * x[:size], y[:size].astype(np.float64)
        # a * x + y in float32: two roundings (one with an fma), each within eps/2 of its terms
        bound = np.finfo(np.float32).eps * (np.abs(ax) + np.abs(yy))
        assert (np.abs(out - (ax + yy)) <= bound).all()
        assert tuned.best_config.kwargs == {"BLOCK": 64}
    print(json.dumps(digests))


def _check_cache(d: pathlib.Path):
    cache = _C.runtime.DiskCache(str(d), max_bytes=0)
    kernels = 0
    for path in d.rglob("*"):
        assert ".tmp" not in path.name, f"a temporary file was left behind: {path}"
        if not path.is_file():
            continue
        if path.parent.name == "autotune":
            decision = json.loads(path.read_text())
            assert decision["choice"] == "BLOCK: 64, num_warps: 4, num_stages: 3"
        elif path.name.endswith("-hints"):
            assert gpu._is_build_info(json.loads(cache.get(path.name))), f"a broken hints entry: {path}"
        else:
            entry = cache.get_kernel(path.name)
            assert entry is not None and ".entry axpy" in entry.ptx, f"a broken entry: {path}"
            kernels += 1
    return kernels


def test_processes_compiling_and_autotuning_at_once(tmp_path):
    d = tmp_path / "cache"
    env = dict(
        os.environ,
        TILEFUSE_CACHE_DIR=str(d),
        TILEFUSE_CACHE_MAX_BYTES=str(MAX_BYTES),
        PYTHONPATH=os.pathsep.join([str(ROOT / "frontend"), str(ROOT)]),
    )
    code = "import sys; from tests.python.test_cache_stress import child; child(int(sys.argv[1]))"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(s)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for s in range(PROCESSES)
    ]
    results = [p.communicate(timeout=500) + (p.returncode,) for p in procs]
    for _, err, rc in results:
        assert rc == 0, err
    digests = [json.loads(out) for out, _, _ in results]
    assert all(dg == digests[0] for dg in digests), "processes compiled different PTX for one kernel"
    assert _check_cache(d) >= 1
    total = sum(p.stat().st_size for p in d.rglob("*") if p.is_file())
    biggest = max(p.stat().st_size for p in d.rglob("*") if p.is_file())
    # Each eviction leaves at most 90% of the bound; writers racing the last one add an entry each.
    assert total <= MAX_BYTES + PROCESSES * biggest, total
