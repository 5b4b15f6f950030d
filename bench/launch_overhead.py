"""Host launch overhead of the vector add tutorial: `kernel[grid](x, y, out, n, BLOCK_SIZE=1024)`
from Python beside the same kernel launched from C++ (bench/launch_cpp.cpp: the runtime's
LoadedKernel::launch and a bare cuLaunchKernel), with the parts of the Python launch.

    python3 bench/launch_overhead.py            # a GPU with torch: torch tensors
    python3 bench/launch_overhead.py --fake     # no GPU: the stand-in driver of tests/python/fake_cuda.c

With --fake every driver call is a no-op, so the figures are the host side alone, and the
tensors are stand-ins whose data_ptr, get_device and dtype are C-level reads as torch's are.
The output names the driver and the tensors used.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
CUDA_HOME = pathlib.Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
ROUNDS = 5


def per_call_us(fn, batch=500, batches=40):
    """Median over batches of the mean host time per call, in µs (launches are asynchronous).
    As bench/launch_cpp.cpp's: batches of 500, well inside the driver's queue of pending
    launches, so that no launch waits for the GPU and the time is the host's alone."""
    from tilefuse import _C

    times = []
    for b in range(batches + 3):
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        t1 = time.perf_counter()
        _C.runtime.synchronize()
        if b >= 3:
            times.append((t1 - t0) / batch * 1e6)
    return sorted(times)[len(times) // 2]


def build_cpp_launch(x, y, out, n):
    """Builds bench/launch_cpp.cpp against the runtime sources for vector add's PTX; returns
    the command that measures {"tilefuse_cpp_us", "bare_cuLaunchKernel_us", "ratio"}."""
    from tilefuse import gpu

    from kernels_dsl.tutorials import vector_add

    d = pathlib.Path(tempfile.mkdtemp())
    k = vector_add.add_kernel.warmup(x, y, out, n, BLOCK_SIZE=1024, grid=(4,), target=gpu.arch_of_device(0))
    (d / "add.ptx").write_text(k.asm["ptx"])
    sources = sorted(str(p) for p in (ROOT / "runtime" / "lib").glob("*.cpp"))
    cmd = ["g++", "-O2", "-std=c++20", str(ROOT / "bench" / "launch_cpp.cpp"), *sources]
    subprocess.run(
        cmd + [f"-I{ROOT / 'runtime' / 'include'}", f"-I{CUDA_HOME / 'include'}", "-ldl", "-o", str(d / "launch_cpp")],
        check=True,
    )
    return [str(d / "launch_cpp"), str(d / "add.ptx"), "add_kernel", "128"]


def alternate(launch, cmd, first=None):
    """The Python launch's per-call time and the C++ figures of `cmd`, taken in alternation
    ROUNDS times (a launch's cost drifts by ~10% within minutes, so both are compared by
    their medians over the same minutes)."""
    pys = [first if first is not None else per_call_us(launch)]
    rounds = [run_cpp_launch(cmd)]
    for _ in range(ROUNDS - 1):
        pys.append(per_call_us(launch))
        rounds.append(run_cpp_launch(cmd))
    return pys, rounds


def median(xs):
    return sorted(xs)[len(xs) // 2]


def run_cpp_launch(cmd):
    return json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)


class _StandInTensor(int):
    """An address with the reads the launch path makes of a torch tensor, as cheap as torch's:
    data_ptr() and get_device() are C methods without arguments (of int, as torch's are of
    Tensor), dtype and device class attributes."""

    __slots__ = ()
    data_ptr = int.conjugate  # the address
    get_device = int.bit_length  # any int: the fast path keys by it; the stand-in driver has one device
    dtype = "torch.float32"

    class device:  # noqa: N801 - what torch.Tensor.device reads as
        type, index = "cuda", 0

    def element_size(self):
        return 4


_StandInTensor.__module__ = "torch.stand_in"


def tensors(n):
    try:
        import torch

        if torch.cuda.is_available():
            return [torch.randn(n, device="cuda") for _ in range(3)], "torch"
    except ImportError:
        pass
    return [_StandInTensor(0x7F0000000000 + i * 0x100000) for i in range(3)], "stand-in"


def build_fake_driver() -> pathlib.Path:
    d = pathlib.Path(tempfile.mkdtemp())
    src = ROOT / "tests" / "python" / "fake_cuda.c"
    subprocess.run(
        ["cc", "-O2", "-shared", "-fPIC", f"-I{CUDA_HOME / 'include'}", str(src), "-o", str(d / "libcuda.so.1")],
        check=True,
    )
    return d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fake", action="store_true", help="run on the stand-in driver of tests/python/fake_cuda.c")
    args = ap.parse_args()
    if args.fake and "TILEFUSE_FAKE_DRIVER" not in os.environ:
        # libcuda is found through LD_LIBRARY_PATH as the process started: run again with it set.
        lib = build_fake_driver()
        env = dict(
            os.environ, LD_LIBRARY_PATH=f"{lib}:{os.environ.get('LD_LIBRARY_PATH', '')}", TILEFUSE_FAKE_DRIVER="1"
        )
        env.setdefault("TILEFUSE_CACHE_DIR", tempfile.mkdtemp())
        env["TILEFUSE_TARGET"] = "sm_90a"  # PTX images: the stand-in driver reads the parameter list from them
        env.pop("FAKE_CUDA_LOG", None)  # unlogged launches cost nothing
        sys.exit(subprocess.run([sys.executable, __file__, *sys.argv[1:]], env=env).returncode)

    import tilefuse as tf

    from kernels_dsl.tutorials import vector_add

    n = 4096
    (x, y, out), kind = tensors(n)
    k = vector_add.add_kernel
    k[(4,)](x, y, out, n, BLOCK_SIZE=1024)  # compiles; the next launch of this key takes the fast path
    # The ratio's launches do what launch_cpp.cpp's do: n = 0, every lane masked off (the same
    # compiled kernel: 0 and 4096 are both multiples of 16).
    n = 0
    held = k[(4,)]
    res = {
        "driver": tf._C.runtime.device_info(0).name,
        "tensors": kind,
        "torch_reads": "direct" if tf._C.launcher.torch_reads_enabled() else f"methods: {tf.gpu.torch_reads_why}",
        "python_launch_us": per_call_us(lambda: k[(4,)](x, y, out, n, BLOCK_SIZE=1024)),
        "parts_us": {
            "empty lambda": per_call_us(lambda: None),
            "kernel[grid]": per_call_us(lambda: k[(4,)]),
            "kernel[grid] held, its call": per_call_us(lambda: held(x, y, out, n, BLOCK_SIZE=1024)),
            "x.data_ptr()": per_call_us(lambda: x.data_ptr()),
            "x.get_device()": per_call_us(lambda: x.get_device()),
            "x.dtype": per_call_us(lambda: x.dtype),
        },
    }
    stream = tf.gpu.stream_function()
    if stream is not None:
        res["parts_us"]["current stream"] = per_call_us(lambda: stream(0))
    try:
        cmd = build_cpp_launch(x, y, out, n)
        pys, rounds = alternate(lambda: k[(4,)](x, y, out, n, BLOCK_SIZE=1024), cmd, first=res["python_launch_us"])
        res["python_launch_us_rounds"] = pys
        res["cpp_rounds"] = rounds
        res["python_launch_us"] = median(pys)
        res["cpp"] = {key: median([r[key] for r in rounds]) for key in rounds[0]}
        if os.environ.get("TILEFUSE_FAKE_DRIVER"):
            res["note"] = "the stand-in driver's calls cost nothing: these are host-side costs, no ratio to a launch"
        else:
            res["python_over_bare_cpp"] = res["python_launch_us"] / res["cpp"]["bare_cuLaunchKernel_us"]
    except (subprocess.CalledProcessError, OSError) as e:
        res["cpp"] = f"not measured: {e}"
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
