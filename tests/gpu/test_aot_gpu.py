"""tilefuse.aot on the GPU: the C++ example (examples/aot, built with CMake against the runtime
library) checks its own result against float64; launch functions loaded with ctypes run axpy
over dtypes, sizes, block sizes and alignments, and the TMA matmul (tensor maps encoded by the
runtime from the C arguments) against float64 references; misaligned arguments are refused."""

import ctypes
import os
import shutil
import subprocess

import numpy as np
import pytest
from tilefuse import aot

from examples.aot.axpy import axpy
from kernels_dsl.tutorials.matmul_desc import matmul_desc_kernel
from tests.python.test_aot import AXPY_SIG, CUDA_INCLUDE, ROOT, generate

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]


@pytest.fixture(scope="module", autouse=True)
def toolchain():
    missing = [t for t in ("g++", "cmake") if shutil.which(t) is None]
    if missing or not (CUDA_INCLUDE / "cuda.h").exists() or not os.path.exists(aot.runtime_library()):
        pytest.skip(f"needs g++, cmake, cuda.h and {aot.runtime_library()} (scripts/gpu/build.sh stages it)")


def test_the_cpp_example_runs_and_checks_itself(tmp_path):
    out = tmp_path / "aot"
    out.mkdir()
    compiled = generate(out, axpy, AXPY_SIG, "cdiv(n, BLOCK)", image="auto")
    build = tmp_path / "build"
    cmds = [
        [
            "cmake",
            "-S",
            str(ROOT / "examples/aot"),
            "-B",
            str(build),
            f"-DTILEFUSE_AOT_DIR={out}",
            f"-DTILEFUSE_INCLUDE_DIR={aot.include_dir()}",
            f"-DTILEFUSE_RUNTIME_LIBRARY={aot.runtime_library()}",
        ],
        ["cmake", "--build", str(build)],
    ]
    for cmd in cmds:
        r = subprocess.run(cmd, capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
    for n in (1, 1000, 1024, 1025, 1000003, 1 << 22):
        r = subprocess.run([str(build / "axpy_example"), str(n)], capture_output=True, text=True)
        assert r.returncode == 0 and f"axpy n={n} ok" in r.stdout, r.stdout + r.stderr
    print(f"image: {compiled.image_kind}")


def library(tmp_path, kernel, signature, grid, name, argtypes, **kw):
    """The launch function `name` in a shared library, loaded with ctypes."""
    d = tmp_path / name
    d.mkdir()
    generate(d, kernel, signature, grid, name=name, image="auto", **kw)
    so = d / f"lib{name}.so"
    cmd = ["g++", "-std=c++20", "-O2", "-shared", "-fPIC", f"-I{d}", f"-I{aot.include_dir()}", f"-I{CUDA_INCLUDE}"]
    subprocess.run([*cmd, str(d / f"{name}.cpp"), aot.runtime_library(), "-ldl", "-o", str(so)], check=True)
    lib = ctypes.CDLL(str(so))
    fn = getattr(lib, name)
    fn.argtypes = [ctypes.c_void_p, *argtypes]
    err = getattr(lib, name + "_error")
    err.restype = ctypes.c_char_p
    return fn, err


def stream():
    return ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)


# (dtype, signature type, mantissa bits): at most three roundings to the element type
# (a, a*x, the sum) when the kernel computes in it, fewer when it computes in fp32.
DTYPES = [(torch.float32, "fp32", 24), (torch.float16, "fp16", 11), (torch.bfloat16, "bf16", 8)]


@pytest.mark.parametrize("dtype, ty, bits", DTYPES)
@pytest.mark.parametrize("block, aligned", [(1024, True), (256, False), (128, True)])
def test_axpy_over_dtypes_sizes_and_blocks(tmp_path, dtype, ty, bits, block, aligned):
    hint = ":16" if aligned else ""
    sig = f"*{ty}{hint}, *{ty}{hint}, *{ty}{hint}, fp32, i32, {block}"
    p, f, i = ctypes.c_uint64, ctypes.c_float, ctypes.c_int32
    fn, err = library(tmp_path, axpy, sig, "cdiv(n, BLOCK)", f"axpy_{ty}_{block}", [p, p, p, f, i])
    for n in (1, 17, block, block + 1, 100_003, (1 << 20) + 5):
        off = 0 if aligned else 1  # an unaligned variant takes element-offset views
        x, y = (torch.randn(n + off, device="cuda").to(dtype)[off:] for _ in range(2))
        out = torch.full((n + off,), float("nan"), device="cuda", dtype=dtype)[off:]
        a = float(np.float32(np.random.standard_normal()))
        r = fn(stream(), x.data_ptr(), y.data_ptr(), out.data_ptr(), a, n)
        assert r == 0, err().decode()
        torch.cuda.synchronize()
        ref = a * x.double() + y.double()
        tol = 3 * 2.0**-bits * (abs(a) * x.double().abs() + y.double().abs()) + 2.0**-24
        bad = (out.double() - ref).abs() > tol
        assert not bad.any(), f"n={n}: {int(bad.sum())} elements beyond the bound"


def test_misaligned_arguments_are_refused(tmp_path):
    p, f, i = ctypes.c_uint64, ctypes.c_float, ctypes.c_int32
    fn, err = library(tmp_path, axpy, AXPY_SIG, "cdiv(n, BLOCK)", "axpy_checked", [p, p, p, f, i])
    x = torch.randn(1025, device="cuda")
    out = torch.zeros_like(x)
    assert fn(stream(), x.data_ptr() + 4, x.data_ptr(), out.data_ptr(), 1.0, 1024) == 1  # CUDA_ERROR_INVALID_VALUE
    assert "x_ptr is not a multiple of 16" in err().decode()
    torch.cuda.synchronize()
    assert not out.any()


def padded(rows, cols):
    """A [rows, cols] bf16 view with rows 16-element aligned (TMA's row strides), and its stride."""
    stride = -(-cols // 16) * 16
    return torch.randn(rows, stride, device="cuda").to(torch.bfloat16)[:, :cols], stride


@pytest.mark.parametrize("bm, bn, bk, warps, stages", [(64, 64, 32, 4, 3), (128, 128, 64, 8, 3), (128, 256, 64, 8, 3)])
def test_tma_matmul_through_aot(tmp_path, bm, bn, bk, warps, stages):
    sig = f"*bf16:16, *bf16:16, *bf16:16, i32, i32, i32, i32:16, i32:16, i32:16, {bm}, {bn}, {bk}, 8"
    grid = "cdiv(M, BLOCK_SIZE_M) * cdiv(N, BLOCK_SIZE_N)"
    p, i = ctypes.c_uint64, ctypes.c_int32
    name = f"matmul_{bm}x{bn}x{bk}"
    fn, err = library(
        tmp_path, matmul_desc_kernel, sig, grid, name, [p, p, p] + [i] * 6, num_warps=warps, num_stages=stages
    )
    for M, N, K in [(300, 200, 100), (512, 512, 512), (1000, 777, 333), (129, 1031, 2048)]:
        a, sa = padded(M, K)
        b, sb = padded(K, N)
        c, sc = padded(M, N)
        c.fill_(float("nan"))
        r = fn(stream(), a.data_ptr(), b.data_ptr(), c.data_ptr(), M, N, K, sa, sb, sc)
        assert r == 0, err().decode()
        torch.cuda.synchronize()
        ref = a.double() @ b.double()
        # fp32 accumulation of exact bf16 products, then one rounding to bf16.
        tol = 2.0**-8 * ref.abs() + (K + 1) * 2.0**-23 * (a.double().abs() @ b.double().abs())
        bad = (c.double() - ref).abs() > tol
        assert not bad.any(), f"{M}x{N}x{K}: {int(bad.sum())} elements beyond the bound"
