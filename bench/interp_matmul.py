"""Benchmark (not a test): the CPU interpreter running the tutorial matmul
(kernels_dsl/tutorials/matmul.py), 512x512x512 with 64x64x32 tiles.

    PYTHONPATH=frontend:. .venv/bin/python bench/interp_matmul.py [--size 512] [--runs 5]

Compile time is measured on its own (cold in-memory cache); the run time is the
median wall time of --runs launches after one warm-up launch.
"""

import argparse
import statistics
import time

import ml_dtypes
import numpy as np

from kernels_dsl.tutorials.matmul import matmul, matmul_kernel

BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M = 64, 64, 32, 8
DTYPES = {"f32": np.float32, "bf16": ml_dtypes.bfloat16}


def compile_seconds(a, b, c) -> float:
    """Time to build and optimize the kernel's tile IR for these arguments."""
    M, K = a.shape
    N = b.shape[1]
    strides = [s // x.itemsize for x in (a, b, c) for s in x.strides]
    matmul_kernel.cache.clear()
    t = time.perf_counter()
    matmul_kernel.compile(
        a,
        b,
        c,
        M,
        N,
        K,
        *strides,
        BLOCK_SIZE_M=BLOCK_M,
        BLOCK_SIZE_N=BLOCK_N,
        BLOCK_SIZE_K=BLOCK_K,
        GROUP_SIZE_M=GROUP_M,
        ACTIVATION="",
    )
    return time.perf_counter() - t


def bench(size: int, dtype_name: str, runs: int) -> str:
    rng = np.random.default_rng()
    dtype = DTYPES[dtype_name]
    a = rng.standard_normal((size, size)).astype(dtype)
    b = rng.standard_normal((size, size)).astype(dtype)
    c = np.empty((size, size), dtype)
    compile_s = compile_seconds(a, b, c)

    def launch():
        matmul(a, b, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M, out=c)

    launch()  # warm-up (the kernel is already compiled: this one hits the cache)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        launch()
        times.append(time.perf_counter() - t)
    # A wrong result would make the timing meaningless.
    ref = a.astype(np.float64) @ b.astype(np.float64)
    err = np.abs(c.astype(np.float64) - ref).max() / np.abs(ref).max()
    if not err < (2.0**-8 if dtype is not np.float32 else 1e-5):
        raise SystemExit(f"wrong result: max relative error {err:.3g}")
    med = statistics.median(times)
    programs = (size // BLOCK_M) * (size // BLOCK_N)
    gflops = 2 * size**3 / med / 1e9
    return (
        f"interp matmul {size}x{size}x{size} {dtype_name} (fp32 acc, {BLOCK_M}x{BLOCK_N}x{BLOCK_K} tiles, "
        f"{programs} programs): {med * 1e3:.0f} ms median of {runs} ({gflops:.2f} GFLOP/s), "
        f"compile {compile_s * 1e3:.0f} ms"
    )


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=512)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--dtype", choices=[*DTYPES, "all"], default="all")
    args = p.parse_args()
    for name in DTYPES if args.dtype == "all" else [args.dtype]:
        print(bench(args.size, name, args.runs), flush=True)


if __name__ == "__main__":
    main()
