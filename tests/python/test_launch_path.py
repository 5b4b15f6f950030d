"""The GPU launch path without a GPU: a stand-in libcuda.so.1 (fake_cuda.c) logs every
launch, and stand-in torch tensors carry addresses. The full path (jit.run) and the C++
fast path must launch with the same grid, block, shared memory, parameter values and
tensor maps, as the kernel's launch spec lays them out, and raise the same errors."""

import json
import os
import pathlib
import shutil
import struct
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CUDA_INCLUDE = pathlib.Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include"

SCRIPT = r"""
import json

import tilefuse as tf
import tilefuse.language as tl
from tilefuse import gpu

from kernels_dsl.tutorials import vector_add
from tests.shared_kernels import desc_copy2


class Device:
    type, index = "cuda", 0

    def __str__(self):
        return "cuda:0"


class Tensor:
    def __init__(self, ptr, dtype="torch.float32", size=4):
        self.ptr, self.dtype, self.size, self.device = ptr, dtype, size, Device()

    def data_ptr(self):
        return self.ptr

    def get_device(self):
        return 0

    def element_size(self):
        return self.size


Tensor.__module__ = "torch.stand_in"


@tf.jit(do_not_specialize=("m",))
def mixed(x_ptr, flag, alpha, n, m, BLOCK: tl.constexpr):
    v = tl.load(x_ptr + tl.arange(0, BLOCK))
    if flag:
        v = v * alpha
    tl.store(x_ptr + tl.arange(0, BLOCK), v + n + m)


full = []
launch = gpu.launch
gpu.launch = lambda *a, **kw: (full.append(1), launch(*a, **kw))[1]
results = {}


def attempt(name, f, times=2):
    out = []
    for _ in range(times):
        try:
            f()
            out.append("ok")
        except tf.LaunchError as e:
            out.append(str(e).split(" (")[0])
    results[name] = [out, len(full)]


x, y, out = Tensor(0x10000), Tensor(0x20000), Tensor(0x30000)
attempt("add", lambda: vector_add.add_kernel[(4,)](x, y, out, 1000, BLOCK_SIZE=256))
attempt("add_w8", lambda: vector_add.add_kernel[(4,)](x, y, out, 1000, BLOCK_SIZE=256, num_warps=8))
attempt("mixed", lambda: mixed[(2, 3)](x, True, 2.5, 2**40, 1, BLOCK=16))
attempt("off4", lambda: vector_add.add_kernel[(4,)](Tensor(0x10004), y, out, 1000, BLOCK_SIZE=256))
attempt("off2", lambda: vector_add.add_kernel[(4,)](Tensor(0x10002), y, out, 1000, BLOCK_SIZE=256))
xs, ys = Tensor(0x40000), Tensor(0x50000)
attempt("desc", lambda: desc_copy2[(3, 2)](xs, ys, 64, 45, 64, BM=32, BN=64))
attempt("desc_size0", lambda: desc_copy2[(3, 2)](xs, ys, 0, 45, 64, BM=32, BN=64))  # the same key as 64
attempt("desc_size0_run", lambda: desc_copy2.run(xs, ys, 0, 45, 64, grid=(3, 2), BM=32, BN=64), times=1)
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def fake_driver(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or not (CUDA_INCLUDE / "cuda.h").exists():
        pytest.skip("needs a C compiler and cuda.h")
    d = tmp_path_factory.mktemp("fake_cuda")
    src = pathlib.Path(__file__).with_name("fake_cuda.c")
    subprocess.run([cc, "-shared", "-fPIC", f"-I{CUDA_INCLUDE}", str(src), "-o", str(d / "libcuda.so.1")], check=True)
    return d


def test_full_and_fast_paths_launch_alike(fake_driver, tmp_path):
    script, log = tmp_path / "launches.py", tmp_path / "launches.log"
    script.write_text(SCRIPT)
    env = dict(
        os.environ,
        LD_LIBRARY_PATH=str(fake_driver),
        FAKE_CUDA_LOG=str(log),
        TILEFUSE_TARGET="sm_90a",  # the image stays PTX, which the fake driver reads parameters from
        TILEFUSE_CACHE_DIR=str(tmp_path / "cache"),
        PYTHONPATH=os.pathsep.join([str(ROOT / "frontend"), str(ROOT)]),
    )
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    results = json.loads(r.stdout.splitlines()[-1])
    lines = log.read_text().splitlines()

    # (outcomes, full-path launches so far): a repeated launch takes the fast path.
    assert results["add"] == [["ok", "ok"], 1]
    assert results["add_w8"] == [["ok", "ok"], 2]
    assert results["mixed"] == [["ok", "ok"], 3]
    assert results["off4"] == [["ok", "ok"], 4]
    misaligned = "argument 'x_ptr' is misaligned: address 0x10002 is not a multiple of 4 bytes"
    assert results["off2"] == [[misaligned, misaligned], 6]  # never remembered: the address mod 16 is keyed
    assert results["desc"] == [["ok", "ok"], 7]
    # The copy engine's checks, on the fast path (twice) and on the full path.
    errors = results["desc_size0"][0] + results["desc_size0_run"][0]
    assert len(errors) == 3 and all(e.startswith("desc_copy2: tensor descriptor at ") for e in errors)
    assert all(e.endswith("size 0 of dim 0 is out of range") for e in errors)
    assert results["desc_size0"][1] == 7 and results["desc_size0_run"][1] == 8

    add = "grid=4,1,1 block={} shared=0 8:65536 8:131072 8:196608 4:1000"
    alpha = struct.unpack("<i", struct.pack("<f", 2.5))[0]
    mixed = f"grid=2,3,1 block=128 shared=0 8:65536 1:1 4:{alpha} 8:{2**40} 4:1"
    off4 = "grid=4,1,1 block=128 shared=0 8:65540 8:131072 8:196608 4:1000"
    assert lines[:8] == [add.format(128)] * 2 + [add.format(256)] * 2 + [mixed] * 2 + [off4] * 2
    # The tensor maps follow the parameters: base, rank, innermost size, row stride in bytes.
    assert len(lines) == 10 and lines[8] == lines[9]
    assert lines[8].startswith("grid=3,2,1 block=128 shared=") and " 8:262144 8:327680 4:64 4:45 4:64 " in lines[8]
    assert " map(262144,2,45,256," in lines[8] and " map(327680,2,45,256," in lines[8]
