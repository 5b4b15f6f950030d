"""The GPU launch path without a GPU: a stand-in libcuda.so.1 (fake_cuda.c) logs every
launch, and stand-in torch tensors carry addresses. The full path (jit.run) and the C++
fast path must launch with the same grid, block, shared memory, parameter values and
tensor maps, as the kernel's launch spec lays them out, and raise the same errors."""

import functools
import gc
import json
import os
import pathlib
import shutil
import struct
import subprocess
import sys
import weakref

import numpy as np
import pytest
import tilefuse as tf
import tilefuse.language as tl

ROOT = pathlib.Path(__file__).resolve().parents[2]
CUDA_INCLUDE = pathlib.Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include"

SCRIPT = r"""
import json

import numpy as np

import tilefuse as tf
import tilefuse.language as tl
from tilefuse import gpu

from kernels_dsl.tutorials import vector_add
from tests.shared_kernels import desc_copy2, k_tuples


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


@tf.jit
def scaled(x_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * alpha, mask=offs < n)


# A stream other than the default, addresses of several PyLong digits, and keyword names
# made at run time (not interned, as call sites' are).
gpu._current_stream = lambda device: 0x7F00DEADBEE0
gpu.stream_function = lambda: gpu._current_stream
bx, bout = Tensor(0x7F1234567800), Tensor(0x7F1234567900)
kw = {"".join(["BLO", "CK"]): 64, "".join(["num_", "warps"]): 2}
attempt("big", lambda: scaled[(2,)](bx, bout, 100, 0.5, **kw))
attempt("f64", lambda: scaled[(2,)](bx, bout, 100, np.float64(0.25), **kw))  # an f64 parameter: 8 bytes
# A register cap is its own build, keyed on the fast path too; maxnreg=None is no cap.
attempt("add_r40", lambda: vector_add.add_kernel[(4,)](x, y, out, 1000, BLOCK_SIZE=256, maxnreg=40))
attempt("add_rnone", lambda: vector_add.add_kernel[(4,)](x, y, out, 1000, BLOCK_SIZE=256, maxnreg=None))
attempt("add_r300", lambda: vector_add.add_kernel[(4,)](x, y, out, 1000, BLOCK_SIZE=256, maxnreg=300), times=1)
# Cooperative launches: the driver's cooperative call, never remembered by the fast path;
# 264 programs fit the stand-in device (2 per SM x 132), 265 do not.


# Tuple arguments: one parameter per leaf, in order (never on the fast path).
attempt("tuples", lambda: k_tuples[(2,)]((x, (y, out)), (3, -5), bx, 16, BLOCK=256))
coop = dict(BLOCK_SIZE=256, launch_cooperative_grid=True)
attempt("coop", lambda: vector_add.add_kernel[(4,)](x, y, out, 1000, **coop))
attempt("coop_264", lambda: vector_add.add_kernel[(264,)](x, y, out, 1000, **coop), times=1)
attempt("coop_265", lambda: vector_add.add_kernel[(265,)](x, y, out, 1000, **coop), times=1)
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
    assert results["big"] == [["ok", "ok"], 9]
    assert results["f64"] == [["ok", "ok"], 10]
    assert results["add_r40"] == [["ok", "ok"], 11]
    assert results["add_rnone"] == [["ok", "ok"], 11]  # the first launch's entry, on the fast path
    assert results["add_r300"] == [["add_kernel: maxnreg must be an int in [1, 255]"], 11]  # cut at " ("
    assert results["tuples"] == [["ok", "ok"], 13]
    assert results["coop"] == [["ok", "ok"], 15]
    assert results["coop_264"] == [["ok"], 16]
    too_many = "add_kernel: launch_cooperative_grid: 265 programs cannot all be resident at once on fake: at most 264"
    assert results["coop_265"] == [[too_many], 17]

    add = "grid=4,1,1 block={} shared=0 8:65536 8:131072 8:196608 4:1000"
    alpha = struct.unpack("<i", struct.pack("<f", 2.5))[0]
    mixed = f"grid=2,3,1 block=128 shared=0 8:65536 1:1 4:{alpha} 8:{2**40} 4:1"
    off4 = "grid=4,1,1 block=128 shared=0 8:65540 8:131072 8:196608 4:1000"
    assert lines[:8] == [add.format(128)] * 2 + [add.format(256)] * 2 + [mixed] * 2 + [off4] * 2
    # The tensor maps follow the parameters: base, rank, innermost size, row stride in bytes.
    assert len(lines) == 23 and lines[8] == lines[9]
    assert lines[8].startswith("grid=3,2,1 block=128 shared=") and " 8:262144 8:327680 4:64 4:45 4:64 " in lines[8]
    assert " map(262144,2,45,256," in lines[8] and " map(327680,2,45,256," in lines[8]
    half = struct.unpack("<i", struct.pack("<f", 0.5))[0]
    big = f"grid=2,1,1 block=64 shared=0 8:{0x7F1234567800} 8:{0x7F1234567900} 4:100 4:{half} stream=0x7f00deadbee0"
    assert lines[10:12] == [big] * 2
    quarter = struct.unpack("<q", struct.pack("<d", 0.25))[0]
    assert lines[12:14] == [big.replace(f"4:{half}", f"8:{quarter}")] * 2
    # (the full path's launch on the stand-in stream; add_kernel's fast path holds the real one)
    assert [line.split(" stream=")[0] for line in lines[14:18]] == [add.format(128)] * 4
    tuples = f"grid=2,1,1 block=128 shared=0 8:65536 8:131072 8:196608 4:3 4:-5 8:{0x7F1234567800} 4:16"
    assert [line.split(" stream=")[0] for line in lines[18:20]] == [tuples] * 2
    coop = "coop " + add.format(128)
    assert [line.split(" stream=")[0] for line in lines[20:]] == [coop] * 2 + [coop.replace("grid=4,", "grid=264,")]


@tf.jit
def _add1(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


def test_subscript_is_c_with_one_callable_per_grid():
    # kernel[grid] is the C subscript of JITFunction's base class: the Python fallback
    # (_subscript) before the fast path exists and for grids it does not parse, else one
    # BoundLaunch per grid, however the grid is written.
    k = tf.jit(_add1.fn)
    assert isinstance(k[(1,)], functools.partial)
    k._fast_path()
    b = k[(1,)]
    assert type(b).__name__ == "BoundLaunch"
    assert k[(1,)] is b and k[1] is b and k[(1, 1, 1)] is b
    assert k[(2,)] is not b and k[(1, 2)] is not b and k[(1, 2)] is k[(1, 2, 1)]
    for grid in ([1], (np.int64(1),), (-1,), (2**32,), (1, 1, 1, 1), (), True, 1.0, lambda meta: (1,)):
        assert type(k[grid]).__name__ != "BoundLaunch", grid
    many = [k[(i,)] for i in range(100)]  # more grids than kept: made anew, one per grid while kept
    assert all(k[(i,)] is many[i] for i in range(90, 100))
    # A call the fast path does not know goes to the full path: numpy runs on the interpreter.
    x = np.random.default_rng(0).standard_normal(16).astype(np.float32)
    x0 = x.copy()
    b(x, 10, BLOCK=16)
    np.testing.assert_array_equal(x[:10], x0[:10] + np.float32(1))
    np.testing.assert_array_equal(x[10:], x0[10:])
    k._cfast = None  # the callables launched through the old fast path: gone with it
    assert isinstance(k[(1,)], functools.partial)
    with pytest.raises(TypeError, match="_cfast must be"):
        k._cfast = 3


def test_a_jit_function_and_its_callables_are_collected():
    k = tf.jit(_add1.fn)
    k._fast_path()
    b = k[(3,)]  # holds k (its fallback) while k holds it: a cycle the collector must see
    ref = weakref.ref(k)
    del k, b
    gc.collect()
    assert ref() is None
