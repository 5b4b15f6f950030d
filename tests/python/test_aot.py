"""tilefuse.aot without a GPU: the signature and grid grammars and their errors, the files
it writes, the header compiling as C and C++, the example building against the runtime
library (examples/aot), and the launch function run against the stand-in driver
(fake_cuda.c): the grid it computes, the argument values and tensor maps it passes, and the
errors it returns. tests/gpu/test_aot_gpu.py runs the kernels on a GPU."""

import ctypes
import json
import os
import pathlib
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest
import tilefuse.language as tl
from tilefuse import _C, aot, gpu
from tilefuse.jit import GRID_LIMITS

from examples.aot.axpy import axpy
from kernels_dsl.tutorials.matmul_desc import matmul_desc_kernel

ROOT = pathlib.Path(__file__).resolve().parents[2]
CUDA_INCLUDE = pathlib.Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include"
AXPY_SIG = "*fp32:16, *fp32:16, *fp32:16, fp32, i32, 1024"
MATMUL_SIG = "*bf16:16, *bf16:16, *bf16:16, i32, i32, i32, i32:16, i32:16, i32:16, 64, 64, 32, 8"
MATMUL_GRID = "cdiv(M, BLOCK_SIZE_M) * cdiv(N, BLOCK_SIZE_N)"
_K = _C.specialize.ArgSpec.Kind


def needs_toolchain():
    if shutil.which("g++") is None or not (CUDA_INCLUDE / "cuda.h").exists():
        pytest.skip("needs g++ and cuda.h")
    if not os.path.exists(aot.runtime_library()):
        pytest.skip("needs the runtime library (make build)")


def test_signature_items_take_the_jit_specializations():
    items = aot.parse_signature(axpy, AXPY_SIG)
    x, _, _, a, n, block = (i.param for i in items)
    assert x.spec.kind == _K.ptr and x.spec.dtype == _C.ir.DType.f32 and x.spec.divisible
    assert a.spec.kind == _K.scalar and a.spec.dtype == _C.ir.DType.f32
    assert n.spec.dtype == _C.ir.DType.i32 and not n.spec.divisible
    assert block.spec is None and block.value == 1024
    items = aot.parse_signature(axpy, "*bf16, *f16, *fp8e4nv, fp64, u64:16, 256")
    assert [str(i.param.spec.type) for i in items[:5]] == ["ptr<bf16>", "ptr<f16>", "ptr<f8e4m3>", "f64", "u64"]
    assert not items[0].param.spec.divisible and items[4].param.spec.divisible
    assert aot.parse_signature(axpy, "*i8, *i8, *i8, 0.5, 7, tl.int8")[5].param.value == tl.int8


@pytest.mark.parametrize(
    "signature, message",
    [
        ("*fp32, *fp32, *fp32, fp32, i32", "no item for parameter 'BLOCK'"),
        ("*fp32, *fp32, *fp32, fp32, i32, 64, 1", "has 7 items; axpy has 6 parameters"),
        ("*fp32, *fp32, *fp32, fp32, i32, i32", "'BLOCK' is a constexpr and takes a value"),
        ("*fp33, *fp32, *fp32, fp32, i32, 64", "unknown type 'fp33'"),
        ("*fp32, *fp32, *fp32, fp32:16, i32, 64", "':16' applies to integers only"),
        ("*fp32, *fp32, *fp32, fp32, i32:8, 64", "the only hint is ':16'"),
        ("*fp32, *fp32, *fp32, float, i32, 64", "unknown type 'float'"),
        ("*fp32, *fp32, *fp32, fp32, i32, tl.int33", "tl has no dtype 'int33'"),
    ],
)
def test_bad_signatures_say_what_is_wrong(signature, message):
    with pytest.raises(aot.AotError, match=message):
        aot.parse_signature(axpy, signature)


@pytest.mark.parametrize(
    "grid, message",
    [
        ("n / 1024", "'/' is ambiguous"),
        ("cdiv(m, 64)", "'m' is not an integer parameter"),
        ("cdiv(a, 64)", "'a' is not an integer parameter"),
        ("n, 1, 1, 1", "1 to 3 dimensions, got 4"),
        ("n ** 2", "'n \\*\\* 2' is not"),
        ("cdiv(n)", "cdiv takes two arguments"),
        ("n +", "grid 'n \\+'"),
    ],
)
def test_bad_grids_say_what_is_wrong(grid, message):
    with pytest.raises(aot.AotError, match=message):
        aot.grid_to_c(grid, {"n"}, {"BLOCK": 64})


def test_kernel_references_are_checked(tmp_path):
    with pytest.raises(aot.AotError, match="expected path/to/file.py:kernel_name"):
        aot.load_kernel("axpy.py")
    with pytest.raises(aot.AotError, match="no file"):
        aot.load_kernel(str(tmp_path / "missing.py") + ":k")
    with pytest.raises(aot.AotError, match="is a module, not a @tilefuse.jit kernel"):
        aot.load_kernel(str(ROOT / "examples/aot/axpy.py") + ":tl")
    assert aot.load_kernel(str(ROOT / "examples/aot/axpy.py") + ":axpy").__name__ == "axpy"


def test_names_the_generated_cpp_reserves_are_refused(tmp_path):
    src = tmp_path / "clash.py"
    src.write_text(
        "import tilefuse as tf\nimport tilefuse.language as tl\n\n\n@tf.jit\ndef k(stream, default):\n"
        "    tl.store(stream + tl.arange(0, 16), default)\n"
    )
    kernel = aot.load_kernel(f"{src}:k")
    with pytest.raises(aot.AotError, match="parameter 'stream' of k is reserved"):
        aot.compile_kernel(kernel, "*fp32, fp32", "1")
    with pytest.raises(aot.AotError, match="'delete' cannot name the C function"):
        aot.compile_kernel(axpy, AXPY_SIG, "1", name="delete")


def run_cli(*args, cwd=ROOT):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "frontend"), str(ROOT)]))
    return subprocess.run(
        [sys.executable, "-m", "tilefuse.aot", *args], capture_output=True, text=True, cwd=cwd, env=env
    )


def test_cli_writes_header_source_ptx_and_cubin(tmp_path):
    r = run_cli("examples/aot/axpy.py:axpy", "-s", AXPY_SIG, "-g", "cdiv(n, BLOCK)", "-o", str(tmp_path))
    assert r.returncode == 0, r.stderr
    header = (tmp_path / "axpy.h").read_text()
    assert (
        "CUresult axpy(CUstream stream, CUdeviceptr x_ptr, CUdeviceptr y_ptr, CUdeviceptr out_ptr, float a, int32_t n);"
        in header
    )
    assert f"// signature: {AXPY_SIG}" in header
    ptx = (tmp_path / "axpy.ptx").read_text()
    assert ".entry axpy(" in ptx and ".target sm_90a" in ptx
    if gpu.ptxas_path():
        cubin = (tmp_path / "axpy.cubin").read_bytes()
        assert cubin[:4] == b"\x7fELF" and "image: cubin" in header
    r = run_cli("examples/aot/axpy.py:axpy", "-s", AXPY_SIG, "-g", "n / 2", "-o", str(tmp_path))
    assert r.returncode == 1 and "error: grid: '/' is ambiguous" in r.stderr
    r = run_cli("examples/aot/axpy.py:axpy", "-s", AXPY_SIG, "-o", str(tmp_path))
    assert r.returncode == 2 and "--signature and --grid are required" in r.stderr
    r = run_cli("--print-include-dir")
    assert (pathlib.Path(r.stdout.strip()) / "tilefuse/runtime/Launch.h").exists()


def test_kernel_errors_point_at_the_kernel_line(tmp_path):
    src = tmp_path / "bad.py"
    src.write_text(
        "import tilefuse as tf\nimport tilefuse.language as tl\n\n\n@tf.jit\ndef bad(x_ptr, BLOCK: tl.constexpr):\n"
        "    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)\n"
    )
    r = run_cli(f"{src}:bad", "-s", "*fp32, 48", "-g", "1", "-o", str(tmp_path))
    assert r.returncode == 1 and f"{src}:7" in r.stderr and "power of two" in r.stderr, r.stderr


def generate(tmp_path, kernel, signature, grid, image="ptx", **kw):
    out = aot.compile_kernel(kernel, signature, grid, image=image, **kw)
    for name, data in out.files.items():
        (tmp_path / name).write_bytes(data if isinstance(data, bytes) else data.encode())
    return out


@pytest.mark.parametrize("lang", ["c", "c++"])
def test_the_header_compiles_as_c_and_cpp(tmp_path, lang):
    needs_toolchain()
    generate(tmp_path, axpy, "*fp16, *bf16, *fp32:16, fp64, u64:16, 128", "cdiv(n, BLOCK), 2", name="axpy_mixed")
    use = tmp_path / ("use.c" if lang == "c" else "use.cpp")
    use.write_text(
        '#include "axpy_mixed.h"\n'
        "CUresult call(CUstream s, CUdeviceptr p, double a, uint64_t n) { return axpy_mixed(s, p, p, p, a, n); }\n"
    )
    cc = "gcc" if lang == "c" else "g++"
    flags = ["-std=c11"] if lang == "c" else ["-std=c++17"]
    r = subprocess.run(
        [cc, *flags, "-Wall", "-Werror", "-fsyntax-only", f"-I{tmp_path}", f"-I{CUDA_INCLUDE}", str(use)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr


def test_the_example_builds_against_the_runtime_library(tmp_path):
    needs_toolchain()
    if shutil.which("cmake") is None:
        pytest.skip("needs cmake")
    (tmp_path / "aot").mkdir()
    generate(tmp_path / "aot", axpy, AXPY_SIG, "cdiv(n, BLOCK)", image="auto")
    build = tmp_path / "build"
    configure = [
        "cmake",
        "-S",
        str(ROOT / "examples/aot"),
        "-B",
        str(build),
        f"-DTILEFUSE_AOT_DIR={tmp_path / 'aot'}",
        f"-DTILEFUSE_INCLUDE_DIR={aot.include_dir()}",
        f"-DTILEFUSE_RUNTIME_LIBRARY={aot.runtime_library()}",
    ]
    for cmd in (configure, ["cmake", "--build", str(build)]):
        r = subprocess.run(cmd, capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
    assert (build / "axpy_example").exists()


CALLER = r"""
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
name, calls = sys.argv[2], json.loads(sys.argv[3])
fn, err = getattr(lib, name), getattr(lib, name + "_error")
err.restype = ctypes.c_char_p
kinds = {"p": ctypes.c_uint64, "f": ctypes.c_float, "i": ctypes.c_int32}
fn.argtypes = [ctypes.c_void_p] + [kinds[k] for k in sys.argv[4]]
print(json.dumps([[fn(*c), err().decode()] for c in calls]))
"""


@pytest.fixture(scope="module")
def fake_driver(tmp_path_factory):
    if shutil.which("gcc") is None or not (CUDA_INCLUDE / "cuda.h").exists():
        pytest.skip("needs gcc and cuda.h")
    d = tmp_path_factory.mktemp("fake_cuda")
    src = pathlib.Path(__file__).with_name("fake_cuda.c")
    subprocess.run(
        ["gcc", "-shared", "-fPIC", f"-I{CUDA_INCLUDE}", str(src), "-o", str(d / "libcuda.so.1")], check=True
    )
    return d


def launch_library(tmp_path, kernel, signature, grid, name, **kw):
    """The generated launch function built into a shared library (the image stays PTX, which
    the stand-in driver reads the parameter sizes from)."""
    needs_toolchain()
    generate(tmp_path, kernel, signature, grid, name=name, **kw)
    lib = tmp_path / f"lib{name}.so"
    cmd = ["g++", "-std=c++20", "-shared", "-fPIC", f"-I{tmp_path}", f"-I{aot.include_dir()}", f"-I{CUDA_INCLUDE}"]
    cmd += [str(tmp_path / f"{name}.cpp"), aot.runtime_library(), "-ldl", "-o", str(lib)]
    subprocess.run(cmd, check=True)
    return lib


def call(lib, name, kinds, calls, driver_dir, log):
    env = dict(os.environ, FAKE_CUDA_LOG=str(log))
    env.pop("LD_LIBRARY_PATH", None)
    if driver_dir is not None:
        env["LD_LIBRARY_PATH"] = str(driver_dir)
    r = subprocess.run(
        [sys.executable, "-c", CALLER, str(lib), name, json.dumps(calls), kinds],
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    launches = log.read_text().splitlines() if log.exists() else []
    return json.loads(r.stdout), launches


def f32_bits(v):
    return struct.unpack("<i", struct.pack("<f", v))[0]


def test_the_launch_function_passes_grid_and_arguments(fake_driver, tmp_path):
    lib = launch_library(tmp_path, axpy, AXPY_SIG, "cdiv(n, BLOCK)", "axpy", num_warps=8)
    rng = np.random.default_rng()
    n = int(rng.integers(1, 1 << 24))
    x, y, out = (int(v) << 4 for v in rng.integers(1 << 20, 1 << 40, 3))
    a = float(np.float32(rng.standard_normal()))
    calls = [
        [0x5000, x, y, out, a, n],
        [None, x + 4, y, out, a, n],  # breaks *fp32:16
        [None, x, y, out, a, -1023],  # cdiv(-1023, 1024) = 0: an empty grid launches nothing
        [None, x, y, out, a, -2000],  # cdiv(-2000, 1024) = -1 (floor)
    ]
    results, launches = call(lib, "axpy", "pppfi", calls, fake_driver, tmp_path / "log")
    assert results[0] == [0, ""]
    grid = -(-n // 1024)
    assert launches == [f"grid={grid},1,1 block=256 shared=0 8:{x} 8:{y} 8:{out} 4:{f32_bits(a)} 4:{n} stream=0x5000"]
    assert results[1] == [1, "axpy: x_ptr is not a multiple of 16, as its signature item '*fp32:16' requires"]
    assert results[2] == [0, ""]
    assert results[3] == [1, "axpy: grid dimension 0 is -1; it must be in [0, 2147483647] (CUDA's limit)"]


def test_the_launch_function_checks_the_grid_against_jits_limits(fake_driver, tmp_path):
    lib = launch_library(tmp_path, axpy, AXPY_SIG, "(1, n, 1)", "axpy")
    x, y, out = 1 << 20, 2 << 20, 3 << 20
    limit = GRID_LIMITS[1]
    calls = [[0, x, y, out, 1.0, limit], [0, x, y, out, 1.0, limit + 1]]
    results, launches = call(lib, "axpy", "pppfi", calls, fake_driver, tmp_path / "log")
    assert results[0] == [0, ""] and len(launches) == 1 and launches[0].startswith(f"grid=1,{limit},1 ")
    assert results[1] == [1, f"axpy: grid dimension 1 is {limit + 1}; it must be in [0, {limit}] (CUDA's limit)"]


def test_the_launch_function_encodes_tensor_maps(fake_driver, tmp_path):
    lib = launch_library(tmp_path, matmul_desc_kernel, MATMUL_SIG, MATMUL_GRID, "matmul_bf16", num_warps=4)
    M, N, K = 300, 200, 100
    a, b, c = 1 << 20, 2 << 20, 3 << 20
    results, launches = call(
        lib, "matmul_bf16", "pppiiiiii", [[0, a, b, c, M, N, K, 112, 208, 208]], fake_driver, tmp_path / "log"
    )
    assert results == [[0, ""]]
    (line,) = launches
    grid = -(-M // 64) * -(-N // 64)
    assert line.startswith(f"grid={grid},1,1 block=128 "), line
    # One map per descriptor after the parameters: base, rank, innermost size, row stride in bytes, box.
    for m in (f"map({a},2,{K},224,32)", f"map({b},2,{N},416,64)", f"map({c},2,{N},416,64)"):
        assert m in line, line
    results, _ = call(
        lib, "matmul_bf16", "pppiiiiii", [[0, a, b, c, M, N, K, 120, 208, 208]], fake_driver, tmp_path / "log2"
    )
    assert results[0][0] == 1 and "stride_am is not a multiple of 16" in results[0][1]


def test_without_a_driver_the_launch_function_returns_an_error(tmp_path):
    lib = launch_library(tmp_path, axpy, AXPY_SIG, "cdiv(n, BLOCK)", "axpy")
    try:
        ctypes.CDLL("libcuda.so.1")
        pytest.skip("this machine has a libcuda.so.1")
    except OSError:
        pass
    results, launches = call(lib, "axpy", "pppfi", [[0, 16, 32, 48, 1.0, 10]], None, tmp_path / "log")
    assert results[0][0] == 999 and "libcuda.so.1" in results[0][1]  # CUDA_ERROR_UNKNOWN: no call failed
    assert launches == []
