"""The autotuner beside Triton's: both tune the tutorial matmuls (pointers and descriptors,
the same source: kernels_dsl/tutorials/*.py with the import replaced) over the same 10
configs (matmul.autotune_configs) at 4096^3 bf16 from cold caches. Prints, as JSON, each
tuner's wall time (compiles included) and the chosen config with its TFLOP/s, measured
alike (triton.testing.do_bench, median) after tuning; and our compile of the 10 configs
serially and in parallel threads.

    python3 bench/autotune_bench.py --out autotune.json
"""

import argparse
import concurrent.futures
import json
import os
import tempfile
import time

# Cold caches for both: set before either compiles anything.
os.environ["TILEFUSE_CACHE_DIR"] = tempfile.mkdtemp(prefix="tilefuse-autotune-")
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="triton-autotune-")

import tilefuse as tf  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
from tilefuse import gpu  # noqa: E402

from bench.gpu_bench import triton_same_source  # noqa: E402
from kernels_dsl.tutorials import matmul  # noqa: E402
from kernels_dsl.tutorials.matmul_desc import matmul_desc_kernel  # noqa: E402


def launcher(kind, kernel, a, b, c):
    M, K = a.shape
    N = b.shape[1]

    def grid(meta):
        return (triton.cdiv(M, meta["BLOCK_SIZE_M"]) * triton.cdiv(N, meta["BLOCK_SIZE_N"]),)

    if kind == "ptr":
        args = (a, b, c, M, N, K, a.stride(0), 1, b.stride(0), 1, c.stride(0), 1)
        return lambda **kw: kernel[grid](*args, ACTIVATION="", **kw)
    args = (a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0))
    return lambda **kw: kernel[grid](*args, **kw)


def tune(kind, tuner, a, b, c, flop):
    """Tuning wall time (s), the choice and its TFLOP/s."""
    run = launcher(kind, tuner, a, b, c)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    run()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    best = tuner.best_config
    chosen = launcher(kind, tuner.fn, a, b, c)
    ms = triton.testing.do_bench(lambda: chosen(**best.all_kwargs()), warmup=25, rep=200, return_mode="median")
    return {"tuning_s": round(seconds, 2), "config": str(best), "tflops": round(flop / ms / 1e9, 1)}


def compile_times(kind, kernel, a, b, c):
    """Seconds to build (lower + ptxas) the configs from empty caches: serially, then one
    thread per config (the tuner's way: the C++ lowering runs without the GIL)."""
    M, K = a.shape
    N = b.shape[1]
    args = (
        (a, b, c, M, N, K, a.stride(0), 1, b.stride(0), 1, c.stride(0), 1)
        if kind == "ptr"
        else (a, b, c, M, N, K, K, N, N)
    )
    extra = {"ACTIVATION": ""} if kind == "ptr" else {}
    configs = matmul.autotune_configs()
    kernels = [kernel.compile(*args, **cfg.kwargs, **extra) for cfg in configs]
    arch = gpu.arch_of_device(0)
    out = {}
    for label, workers in (("serial_s", 1), ("parallel_s", len(configs))):
        os.environ["TILEFUSE_CACHE_DIR"] = tempfile.mkdtemp(prefix="tilefuse-compile-")
        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            list(pool.map(lambda kc: gpu.build(kc[0], arch, kc[1].num_warps, kc[1].num_stages), zip(kernels, configs)))
        out[label] = round(time.perf_counter() - t0, 2)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="autotune.json")
    ap.add_argument("--size", type=int, default=4096)
    opts = ap.parse_args()
    n = opts.size
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(n, n, device="cuda", generator=g).to(torch.bfloat16)
    b = torch.randn(n, n, device="cuda", generator=g).to(torch.bfloat16)
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    flop = 2.0 * n**3
    res = {"device": torch.cuda.get_device_name(), "triton": triton.__version__, "shape": [n, n, n], "dtype": "bf16"}
    for kind, kernel in (("ptr", matmul.matmul_kernel), ("desc", matmul_desc_kernel)):
        os.environ["TILEFUSE_CACHE_DIR"] = tempfile.mkdtemp(prefix="tilefuse-autotune-")
        theirs = triton_same_source(kernel)
        their_configs = [
            triton.Config(cfg.kwargs, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
            for cfg in matmul.autotune_configs()
        ]
        ours = tf.autotune(matmul.autotune_configs(), key=["M", "N", "K"])(kernel)
        triton_tuner = triton.autotune(their_configs, key=["M", "N", "K"])(theirs)
        row = {"tilefuse": tune(kind, ours, a, b, c, flop), "triton": tune(kind, triton_tuner, a, b, c, flop)}
        ref = a.float() @ b.float()
        launcher(kind, ours, a, b, c)()
        row["tilefuse"]["max_abs_err_vs_fp32"] = float((c.float() - ref).abs().max())
        row["tilefuse_compile_10_configs"] = compile_times(kind, kernel, a, b, c)
        res[kind] = row
        print(kind, json.dumps(row), flush=True)
    with open(opts.out, "w") as f:
        json.dump(res, f, indent=2)
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
