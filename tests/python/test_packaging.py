"""Packaging: the build requirements pinned once, the editable install of `make build`
importing tilefuse and kernels_dsl from anywhere, and (under `make test-wheel`, which sets
TILEFUSE_WHEEL_TEST to the folder holding the wheel) the wheel installed into a fresh venv
outside the source tree: what it ships and kernels running from it on the interpreter."""

import os
import pathlib
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = pathlib.Path(__file__).resolve().parents[2]
CUDA_INCLUDE = pathlib.Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include"


def pins(lines):
    return dict(re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)", s.strip()).groups() for s in lines if "==" in s)


def test_build_requirements_are_pinned_to_what_make_builds_with():
    build = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    assert all("==" in r for r in build), build
    dev = pins(line for line in (ROOT / "requirements-dev.txt").read_text().splitlines() if not line.startswith("#"))
    for name, version in pins(build).items():
        assert dev.get(name) == version, f"pyproject pins {name}=={version}, requirements-dev.txt {dev.get(name)}"


def clean_env():
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH")}


def test_the_editable_install_imports_from_anywhere(tmp_path):
    pth = pathlib.Path(sysconfig.get_paths()["purelib"]) / "tilefuse-editable.pth"
    assert pth.exists(), f"{pth} is missing: `make build` writes it"
    frontend, root = pth.read_text().split()
    code = "import tilefuse, kernels_dsl.moe, tilefuse.moe; print(tilefuse.__file__); print(kernels_dsl.__file__)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=clean_env())
    assert r.returncode == 0, r.stderr
    tf_file, dsl_file = r.stdout.split()
    assert tf_file == os.path.join(frontend, "tilefuse", "__init__.py")
    assert dsl_file == os.path.join(root, "kernels_dsl", "__init__.py")


WHEEL_DIR = os.environ.get("TILEFUSE_WHEEL_TEST")

KERNELS = r"""
import tilefuse as tf
import tilefuse.language as tl

@tf.jit
def scale_add(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, a * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)
"""

# Runs in the fresh venv, outside the source tree: a kernel of its own and one of the DSL
# library on the interpreter against float64, and AOT from the installed package.
SMOKE = r"""
import os, sys
import numpy as np
import tilefuse as tf
import tilefuse.moe
from tilefuse import _C, aot
from kernels_dsl.tutorials.softmax import softmax
from kernels import scale_add

venv = sys.argv[1]
assert tf.__file__.startswith(venv), tf.__file__
print("driver available:", _C.runtime.driver_available())

rng = np.random.default_rng()
n = int(rng.integers(1000, 5000))
x, y = rng.standard_normal((2, n), dtype=np.float32)
a = np.float32(rng.standard_normal())
out = np.empty_like(x)
scale_add[(tf.cdiv(n, 256),)](x, y, out, a, n, BLOCK=256)
ref = np.float64(a) * x + y
# Two fp32 roundings at most: 2^-23 of |a x| + |y|.
assert np.all(np.abs(out - ref) <= 2.0**-23 * (np.abs(np.float64(a) * x) + np.abs(y))), "scale_add"

m = rng.standard_normal((17, 300)).astype(np.float32)
e = np.exp(m.astype(np.float64) - m.max(axis=1, keepdims=True))
assert np.abs(softmax(m) - e / e.sum(axis=1, keepdims=True)).max() < 1e-6, "softmax"

out_dir = os.path.join(os.getcwd(), "aot")
assert aot.main(["kernels.py:scale_add", "-s", "*fp32:16, *fp32:16, *fp32:16, fp32, i32, 256",
                 "-g", "cdiv(n, BLOCK)", "-o", out_dir, "--image", "ptx"]) == 0
from tilefuse import prebuilt
index, why = prebuilt.index()
print("prebuilt:", len(index["kernels"]) if index else why)
print(aot.include_dir()); print(aot.runtime_library())
"""


@pytest.mark.skipif(not WHEEL_DIR, reason="make test-wheel builds the wheel and sets TILEFUSE_WHEEL_TEST")
def test_wheel_installs_and_runs_outside_the_tree(tmp_path):
    (wheel,) = pathlib.Path(WHEEL_DIR).glob("tilefuse-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for shipped in (
        "tilefuse/libtilefuse_compiler.so",
        "tilefuse/lib/libtilefuse_runtime.a",
        "tilefuse/include/tilefuse/runtime/Launch.h",
        "tilefuse/aot.py",
        "kernels_dsl/moe/grouped_gemm.py",
        "kernels_dsl/tutorials/softmax.py",
        "tilefuse/moe/tuned_sm_90a.json",
    ):
        assert shipped in names, f"the wheel lacks {shipped}"
    assert any(re.fullmatch(r"tilefuse/_C\..*\.so", n) for n in names)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    subprocess.run([py, "-m", "pip", "install", "-q", str(wheel)], check=True, env=clean_env())
    work = tmp_path / "work"
    work.mkdir()
    (work / "smoke.py").write_text(SMOKE)
    (work / "kernels.py").write_text(KERNELS)
    r = subprocess.run([py, "smoke.py", str(venv)], capture_output=True, text=True, cwd=work, env=clean_env())
    assert r.returncode == 0, r.stdout + r.stderr
    include, library = r.stdout.splitlines()[-2:]
    # Prebuilt kernels (built where the build's Python has torch): used by the installed package.
    found = r.stdout.splitlines()[-3]
    if "tilefuse/prebuilt/index.json" in names:
        assert re.fullmatch(r"prebuilt: [1-9]\d*", found), found
    else:
        assert "absent" in found, found
    assert include.startswith(str(venv)) and library.startswith(str(venv)), r.stdout
    # The generated launch function compiles against the wheel's headers and links its runtime library.
    if shutil.which("g++") and (CUDA_INCLUDE / "cuda.h").exists():
        lib = work / "libscale_add.so"
        cmd = ["g++", "-std=c++20", "-shared", "-fPIC", f"-I{work / 'aot'}", f"-I{include}", f"-I{CUDA_INCLUDE}"]
        cmd += [str(work / "aot" / "scale_add.cpp"), library, "-ldl", "-Wl,--no-undefined", "-o", str(lib)]
        subprocess.run(cmd, check=True)
