"""GPU benchmarks, each side by side with Triton in one run (targets: ../shared/PEERS.md):
host launch overhead from Python and from C++, cold compile time split into our part
(Python -> PTX) and ptxas, the tutorial matmul at 4096^3 bf16 against torch.matmul and
Triton, and the descriptor matmul at 4096^3 and 8192^3 beside cuBLAS and Triton
compiling the same source (kernels_dsl/tutorials/matmul_desc.py with the import changed).

    python3 bench/gpu_bench.py --out bench.json
"""

import argparse
import importlib.util
import inspect
import json
import os
import subprocess
import tempfile
import time

import tilefuse as tf  # noqa: F401
import torch
import triton
import triton.language as ttl
from launch_overhead import alternate, build_cpp_launch, median, per_call_us
from tilefuse import gpu

from kernels_dsl.tutorials import matmul, softmax, vector_add
from kernels_dsl.tutorials.matmul_desc import matmul_desc_kernel


@triton.jit
def _triton_add(x_ptr, y_ptr, out_ptr, n, BLOCK: ttl.constexpr):
    offs = ttl.program_id(0) * BLOCK + ttl.arange(0, BLOCK)
    m = offs < n
    ttl.store(out_ptr + offs, ttl.load(x_ptr + offs, mask=m) + ttl.load(y_ptr + offs, mask=m), mask=m)


@triton.jit
def _triton_matmul(a_ptr, b_ptr, c_ptr, M, N, K, BM: ttl.constexpr, BN: ttl.constexpr, BK: ttl.constexpr):
    pm, pn = ttl.program_id(0), ttl.program_id(1)
    rm = pm * BM + ttl.arange(0, BM)
    rn = pn * BN + ttl.arange(0, BN)
    rk = ttl.arange(0, BK)
    acc = ttl.zeros((BM, BN), dtype=ttl.float32)
    for k in range(0, K, BK):
        a = ttl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = ttl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc = ttl.dot(a, b, acc)
    ttl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(ttl.bfloat16))


def triton_same_source(jit_fn):
    """A tilefuse kernel's own source compiled by Triton: the module imported with
    `tilefuse` replaced by `triton` (descriptors made in the kernel need an allocator)."""
    src = inspect.getsource(inspect.getmodule(jit_fn.fn))
    src = src.replace("import tilefuse.language as tl", "import triton.language as tl")
    src = src.replace("import tilefuse as tf", "import triton as tf")
    path = os.path.join(tempfile.mkdtemp(), "triton_" + os.path.basename(inspect.getsourcefile(jit_fn.fn)))
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    return getattr(mod, jit_fn.fn.__name__)


def compile_split(kernel, args, kwargs, grid, reps=5):
    """Cold compiles of one kernel, in ms: our part to PTX (the median and the least of `reps`,
    and of it the frontend and tile passes), then ptxas once. One compile alone drifts by tens
    of percent on a shared host."""
    to_ptx, frontend = [], []
    for _ in range(reps):
        kernel.cache.clear()
        t0 = time.perf_counter()
        # What a cold launch runs before ptxas: the frontend, the passes, lowering and PTX.
        compiled = kernel.compile(*args, **kwargs)
        t1 = time.perf_counter()
        low = gpu.lower(compiled, "sm_90a", 4, 3, keep_ir=False)
        t2 = time.perf_counter()
        to_ptx.append((t2 - t0) * 1e3)
        frontend.append((t1 - t0) * 1e3)
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "k.ptx")
        with open(src, "w") as f:
            f.write(low["ptx"])
        t0 = time.perf_counter()
        subprocess.run([gpu.ptxas_path(), "-arch=sm_90a", src, "-o", os.path.join(d, "k.cubin")], check=True)
        ptxas = (time.perf_counter() - t0) * 1e3
    median = sorted(to_ptx)[reps // 2]
    return {"to_ptx": median, "to_ptx_min": min(to_ptx), "frontend": sorted(frontend)[reps // 2], "ptxas": ptxas}


def triton_cold_compile(jit_fn, grid, *args, **kwargs):
    """Cold compile + first launch of a fresh Triton JIT function with an empty disk cache."""
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
    fresh = triton.jit(jit_fn.fn)
    t0 = time.perf_counter()
    fresh[grid](*args, **kwargs)
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3


def tflops(fn, flop, reps=10):
    ms = triton.testing.do_bench(fn, warmup=25, rep=max(100, reps), return_mode="median")
    return flop / (ms * 1e-3) / 1e12, ms


def desc_matmul_vs_peers():
    """The descriptor matmul (128x256x64, 8 warps, 3 stages) beside cuBLAS and Triton
    compiling the same source with the same config, at 4096^3 and 8192^3 bf16."""
    out = {}
    try:
        theirs = triton_same_source(matmul_desc_kernel)
    except Exception as e:  # noqa: BLE001 - reported, not fatal
        theirs, out["triton_error"] = None, f"{type(e).__name__}: {e}"
    for n in (4096, 8192):
        out[str(n)] = _desc_row(n, theirs)
    return out


def _desc_row(n, theirs):
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    args = (a, b, c, n, n, n, n, n, n)
    kw = dict(BLOCK_SIZE_M=128, BLOCK_SIZE_N=256, BLOCK_SIZE_K=64, GROUP_SIZE_M=8, num_warps=8, num_stages=3)
    grid = ((n // 128) * (n // 256),)
    flop = 2 * n**3
    row = {
        "tilefuse": tflops(lambda: matmul_desc_kernel[grid](*args, **kw), flop)[0],
        "cublas": tflops(lambda: torch.matmul(a, b, out=c), flop)[0],
    }
    if theirs is not None:
        try:
            row["triton_same_source"] = tflops(lambda: theirs[grid](*args, **kw), flop)[0]
            row["over_triton"] = row["tilefuse"] / row["triton_same_source"]
        except Exception as e:  # noqa: BLE001
            row["triton_same_source"] = f"failed: {type(e).__name__}: {e}"
    row["over_cublas"] = row["tilefuse"] / row["cublas"]
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench.json")
    args = ap.parse_args()
    res = {
        "date": time.strftime("%Y-%m-%d"),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
    }

    n = 4096
    x, y, out = (torch.randn(n, device="cuda") for _ in range(3))
    ours = per_call_us(lambda: vector_add.add_kernel[(4,)](x, y, out, n, BLOCK_SIZE=1024))
    theirs = per_call_us(lambda: _triton_add[(4,)](x, y, out, n, BLOCK=1024))
    res["launch_us"] = {"tilefuse": ours, "triton": theirs}
    try:
        # As launch_overhead.py's ratio: Python and C++ launches taken in alternation.
        pys, rounds = alternate(
            lambda: vector_add.add_kernel[(4,)](x, y, out, n, BLOCK_SIZE=1024), build_cpp_launch(x, y, out, n)
        )
        res["launch_us"]["tilefuse_alternated"] = median(pys)
        res["launch_us"]["cpp"] = {key: median([r[key] for r in rounds]) for key in rounds[0]}
    except (subprocess.CalledProcessError, OSError) as e:
        res["launch_us"]["cpp"] = f"not measured: {e}"

    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(4096, 4096, device="cuda", dtype=torch.bfloat16)
    margs = (a, b, c, 4096, 4096, 4096, 4096, 1, 4096, 1, 4096, 1)
    mkw = dict(BLOCK_SIZE_M=64, BLOCK_SIZE_N=64, BLOCK_SIZE_K=32, GROUP_SIZE_M=8, ACTIVATION="")
    comp = {
        "vector_add": compile_split(vector_add.add_kernel, (x, y, out, n), {"BLOCK_SIZE": 1024}, (4,)),
        "softmax": compile_split(softmax.softmax_kernel, (a, a, 4096, 4096, 4096), {"BLOCK_SIZE": 4096}, (4096,)),
        "matmul": compile_split(matmul.matmul_kernel, margs, mkw, (4096,)),
    }
    res["compile_ms"] = comp
    res["compile_ms"]["triton_vector_add_cold"] = triton_cold_compile(_triton_add, (4,), x, y, out, n, BLOCK=1024)
    res["compile_ms"]["triton_matmul_cold"] = triton_cold_compile(
        _triton_matmul, (32, 32), a, b, c, 4096, 4096, 4096, BM=128, BN=128, BK=64, num_warps=8, num_stages=4
    )

    flop = 2 * 4096**3
    grid = ((4096 // 64) * (4096 // 64),)
    res["matmul_4096_bf16_tflops"] = {
        "tilefuse": tflops(lambda: matmul.matmul_kernel[grid](*margs, **mkw), flop)[0],
        "torch": tflops(lambda: torch.matmul(a, b, out=c), flop)[0],
        "triton": tflops(
            lambda: _triton_matmul[(32, 32)](
                a, b, c, 4096, 4096, 4096, BM=128, BN=128, BK=64, num_warps=8, num_stages=4
            ),
            flop,
        )[0],
    }
    for bm, bn, bk, w, st in [(128, 256, 32, 8, 4), (256, 128, 64, 8, 3), (128, 128, 64, 8, 4)]:
        kw = dict(BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=8, ACTIVATION="")
        g = ((4096 // bm) * (4096 // bn),)
        res["matmul_4096_bf16_tflops"][f"tilefuse_{bm}x{bn}x{bk}_{w}warps_{st}stages"] = tflops(
            lambda g=g, kw=kw, w=w, st=st: matmul.matmul_kernel[g](*margs, num_warps=w, num_stages=st, **kw), flop
        )[0]
    # The tensor-descriptor version (TMA copies) and Triton's tuned tile config beside it.
    dargs = (a, b, c, 4096, 4096, 4096, 4096, 4096, 4096)
    for bm, bn, bk, w, st in [(128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 128, 64, 4, 4)]:
        kw = dict(BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=8)
        g = ((4096 // bm) * (4096 // bn),)
        res["matmul_4096_bf16_tflops"][f"tilefuse_desc_{bm}x{bn}x{bk}_{w}warps_{st}stages"] = tflops(
            lambda g=g, kw=kw, w=w, st=st: matmul_desc_kernel[g](*dargs, num_warps=w, num_stages=st, **kw), flop
        )[0]
    for st in (3, 4):
        try:
            res["matmul_4096_bf16_tflops"][f"triton_128x256x64_8warps_{st}stages"] = tflops(
                lambda st=st: _triton_matmul[(32, 16)](
                    a, b, c, 4096, 4096, 4096, BM=128, BN=256, BK=64, num_warps=8, num_stages=st
                ),
                flop,
            )[0]
        except Exception as e:  # noqa: BLE001 - a config Triton refuses (shared memory) is reported, not fatal
            res["matmul_4096_bf16_tflops"][f"triton_128x256x64_8warps_{st}stages"] = f"failed: {type(e).__name__}"
    res["desc_matmul_bf16"] = desc_matmul_vs_peers()
    cpp = res["launch_us"]["cpp"]
    if isinstance(cpp, dict):
        res["launch_us"]["python_over_bare_cpp"] = (
            res["launch_us"]["tilefuse_alternated"] / cpp["bare_cuLaunchKernel_us"]
        )
    with open(args.out, "w") as f:
        json.dump(res, f, indent=2)
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
