"""TILEFUSE_DEBUG=1 on the CPU: the debug build's PTX checks each access (hidden extent
parameters, the error record), it has no TMA, pipelining or vector accesses, it has its own
cache key, the launcher's buffer extents of views and offsets, and its report reads as the
interpreter's bounds check. The planted out-of-bounds launches are in
tests/gpu/test_debug_mode_gpu.py."""

import inspect
import json
import os
import re
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
import tilefuse as tf
import tilefuse.language as tl
from tilefuse import gpu

from kernels_dsl.tutorials.matmul_desc import matmul_desc_kernel
from tests.ptxas import assert_assembles
from tests.python import test_launch_path

fake_driver = test_launch_path.fake_driver  # the stand-in libcuda.so.1, built once

rng = np.random.default_rng()


@tf.jit
def shifted_copy(x_ptr, y_ptr, n, shift, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs + shift, mask=offs < n)
    tl.store(y_ptr + offs, x * 2.0, mask=offs < n)
    tl.atomic_add(y_ptr + n - 1, 1.0)


@tf.jit
def loop_carried(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    ptrs = x_ptr + tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for _ in range(0, n, BLOCK):
        acc += tl.load(ptrs)
        ptrs += BLOCK
    tl.store(y_ptr + tl.arange(0, BLOCK), acc)


@tf.jit
def through_int(x_ptr, y_ptr, BLOCK: tl.constexpr):
    addr = x_ptr.to(tl.int64, bitcast=True) + 4 * tl.arange(0, BLOCK)  # an address from an integer
    tl.store(y_ptr + tl.arange(0, BLOCK), tl.load(addr.to(tl.pointer_type(tl.float32), bitcast=True)))


def _lower(kernel, args, consts, debug, arch="sm_90a", warps=4, stages=3):
    return gpu.lower(kernel.compile(*args, **consts), arch, warps, stages, debug=debug)


def _line(fn, text):
    """The line of the kernel source that contains `text`."""
    lines, first = inspect.getsourcelines(fn.fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


F32 = np.zeros(64, np.float32)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_debug_ptx_checks_each_access_and_assembles(arch, tmp_path):
    plain = _lower(shifted_copy, (F32, F32, 64, 0), {"BLOCK": 128}, False, arch)
    low = _lower(shifted_copy, (F32, F32, 64, 0), {"BLOCK": 128}, True, arch)
    names = [p.name for p in low["spec"].params]
    assert names == ["x_ptr", "y_ptr", "n", "shift", "__extent_x_ptr", "__extent_y_ptr", "__debug_record"]
    assert [p.name for p in plain["spec"].params] == names[:4]
    # The load, the store and the atomic, at their lines, each against its own argument.
    got = [(c[1], c[3], c[4], c[5], c[6]) for c in low["checks"]]
    assert got == [
        (_line(shifted_copy, "tl.load"), "load", 0, 4, [128]),
        (_line(shifted_copy, "tl.store"), "store", 1, 4, [128]),
        (_line(shifted_copy, "tl.atomic_add"), "atomic_add", 1, 4, []),
    ]
    assert plain["checks"] == [] and "atom.global.cas" not in plain["ptx"]
    # The record is claimed by one compare-and-swap per checked access (inlined).
    assert low["ptx"].count("atom.global.cas.b64") == 3
    assert re.search(r"\.param \.u64 shifted_copy_param_6", low["ptx"])  # the record's address
    assert_assembles(low["ptx"], arch, tmp_path)


def test_debug_build_has_no_tma_pipelining_or_vector_accesses(tmp_path):
    bf = np.zeros((64, 64), ml_dtypes.bfloat16)
    args = (bf, bf, bf, 4096, 4096, 4096, 4096, 4096, 4096)
    mm = dict(BLOCK_SIZE_M=128, BLOCK_SIZE_N=128, BLOCK_SIZE_K=64, GROUP_SIZE_M=8)
    plain = _lower(matmul_desc_kernel, args, mm, False, warps=8, stages=4)
    low = _lower(matmul_desc_kernel, args, mm, True, warps=8, stages=4)
    assert len(plain["spec"].tensor_maps) == 3 and "cp.async.bulk.tensor" in plain["ptx"]
    assert low["spec"].tensor_maps == [] and "cp.async" not in low["ptx"]
    assert [c[3] for c in low["checks"]] == ["descriptor load", "descriptor load", "descriptor store"]
    assert "wgmma.mma_async" in low["ptx"]  # dots keep the tensor cores
    vec = _lower(shifted_copy, (F32, F32, 64, 0), {"BLOCK": 1024}, False)["ptx"]
    dbg = _lower(shifted_copy, (F32, F32, 64, 0), {"BLOCK": 1024}, True)["ptx"]
    assert "ld.global.v4.f32" in vec and ".v4." not in dbg and ".v2." not in dbg
    assert_assembles(low["ptx"], "sm_90a", tmp_path)


def test_loop_carried_pointers_are_checked_and_others_say_why_not():
    low = _lower(loop_carried, (F32, F32, 256), {"BLOCK": 64}, True)
    assert [(c[3], c[4]) for c in low["checks"]] == [("load", 0), ("store", 1)]
    low = _lower(through_int, (F32, F32), {"BLOCK": 64}, True)
    assert [(c[3], c[4]) for c in low["checks"]] == [("store", 1)]
    why = [h[3] for h in low["hints"] if "TILEFUSE_DEBUG" in h[3]]
    assert why == ["TILEFUSE_DEBUG: this access is not bounds-checked: its pointer does not derive from one argument"]


def test_debug_mode_is_part_of_the_cache_key(monkeypatch, tmp_path):
    monkeypatch.setenv("TILEFUSE_CACHE_DIR", str(tmp_path))
    kernel = shifted_copy.compile(F32, F32, 64, 0, BLOCK=128)
    assert gpu._cache_key(kernel, "sm_90a", 4, 3, True) != gpu._cache_key(kernel, "sm_90a", 4, 3, False)
    plain, _ = gpu.build(kernel, "sm_90a", 4, 3)
    monkeypatch.setenv("TILEFUSE_DEBUG", "1")
    debug, _ = gpu.build(kernel, "sm_90a", 4, 3)
    assert "__debug_record" not in [p.name for p in plain.spec.params]
    assert "__debug_record" in [p.name for p in debug.spec.params]
    checks = kernel.debug_checks.pop(("sm_90a", 4, 3))
    again, _ = gpu.build(kernel, "sm_90a", 4, 3)  # from the disk cache: the checks come with it
    assert again.ptx == debug.ptx and kernel.debug_checks[("sm_90a", 4, 3)] == checks


def test_extent_of_numpy_views_slices_and_offsets():
    base = rng.standard_normal(1000).astype(np.float32)
    end = base.ctypes.data + base.nbytes
    for view in (base, base[10:], base[10:500], base[::3], base.reshape(10, 100)[3:, 2:], base[999:]):
        assert gpu.buffer_extent("x", view, view.ctypes.data) == end - view.ctypes.data
    # Reversed: the extent runs from the first element's address to the end of the buffer.
    rev = base[::-1]
    assert gpu.buffer_extent("x", rev, rev.ctypes.data) == 4


def test_extent_of_torch_views_slices_and_offsets():
    torch = pytest.importorskip("torch")
    base = torch.randn(1000)
    end = base.data_ptr() + 4000
    for view in (base, base[10:], base[10:500], base[::3], base.view(10, 100)[3:, 2:], base.as_strided([5], [1], 7)):
        assert gpu.buffer_extent("x", view, view.data_ptr()) == end - view.data_ptr()


@pytest.mark.parametrize("shift", [1000, -1, -37])
def test_the_report_reads_as_the_interpreters(shift):
    """The same planted access on the interpreter and in the debug record's words."""
    n = 1000
    x, y = rng.standard_normal(n).astype(np.float32), np.zeros(n, np.float32)
    with pytest.raises(tf.KernelRuntimeError) as e:
        shifted_copy[(8,)](x, y, n, shift, BLOCK=128)
    kernel = shifted_copy.compile(x, y, n, shift, BLOCK=128)
    check = gpu.lower(kernel, "sm_90a", 4, 3, debug=True)["checks"][0]
    # The first violating program and lane the interpreter meets: program 0 for negative
    # shifts (lane 0), the program holding element n - shift for positive ones.
    pid, lane = ((n - shift) // 128, (n - shift) % 128) if shift > 0 else (0, 0)
    words = [1, 0, pid, 0, 0, lane, pid * 128 + lane + shift, 4 * n]
    assert e.value.message == gpu.debug_message(check, words, ["x_ptr", "y_ptr", "n", "shift"])
    assert (e.value.file, e.value.line) == (check[0], check[1])
    assert f"index {pid * 128 + lane + shift} of 'x_ptr', which holds {n} elements" in e.value.message


def test_two_dimensional_elements_and_programs_in_the_report():
    check = [None, 0, 0, "store", 1, 2, [16, 32]]
    msg = gpu.debug_message(check, [1, 0, 3, 5, 0, 16 * 32 - 1, -4, 200], ["a", "b"])
    assert msg == "out-of-bounds store at element [15, 31]: index -4 of 'b', which holds 100 elements (program 3, 5, 0)"


LAUNCH = r"""
import json, sys
import tilefuse as tf
from tests.python.test_debug_mode import shifted_copy

exec(open("tests/python/test_launch_path.py").read().split("SCRIPT = r\"\"\"")[1].split("@tf.jit")[0])


class Storage:
    def __init__(self, ptr, nbytes):
        self.ptr, self.bytes = ptr, nbytes

    def data_ptr(self):
        return self.ptr

    def nbytes(self):
        return self.bytes


class Viewed(Tensor):  # a view 256 bytes into a storage of 4096
    def untyped_storage(self):
        return Storage(self.ptr - 256, 4096)


Viewed.__module__ = "torch.stand_in"

x, y = Tensor(0x10000), Viewed(0x20100)
try:
    shifted_copy[(4,)](x, y, 1000, int(sys.argv[1]), BLOCK=256)
    print(json.dumps("ok"))
except tf.KernelRuntimeError as e:
    print(json.dumps([e.message, e.line]))
"""


def test_debug_launches_pass_extents_and_read_the_record(fake_driver, tmp_path):
    """Through the stand-in driver (device memory is host memory; its allocation spans
    [0, 1 GiB)): the hidden parameters of each launch, and a record the 'kernel' filled."""
    script, log = tmp_path / "launch.py", tmp_path / "launches.log"
    script.write_text(LAUNCH)
    env = dict(
        os.environ,
        LD_LIBRARY_PATH=str(fake_driver),
        FAKE_CUDA_LOG=str(log),
        TILEFUSE_TARGET="sm_90a",  # PTX, which the stand-in reads the parameters from
        TILEFUSE_DEBUG="1",
        TILEFUSE_CACHE_DIR=str(tmp_path / "cache"),
        PYTHONPATH=os.pathsep.join([str(test_launch_path.ROOT / "frontend"), str(test_launch_path.ROOT)]),
    )
    run = lambda shift, **extra: subprocess.run(  # noqa: E731
        [sys.executable, str(script), str(shift)], capture_output=True, text=True, env=dict(env, **extra),
        cwd=test_launch_path.ROOT,
    )  # fmt: skip
    r = run(5)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.splitlines()[-1]) == "ok"
    (line,) = log.read_text().splitlines()
    words = line.split()
    # x, y, n, shift, then the extents: the driver's allocation for x, the storage for y.
    assert words[3:9] == ["8:65536", "8:131328", "4:1000", "4:5", f"8:{2**30 - 0x10000}", f"8:{4096 - 256}"]
    assert words[9].startswith("8:") and int(words[9][2:]) != 0  # the record
    r = run(-3, FAKE_CUDA_VIOLATION="1,1,3,0,0,17,-1")
    assert r.returncode == 0, r.stderr
    message, at = json.loads(r.stdout.splitlines()[-1])
    assert (
        message
        == "out-of-bounds store at element [17]: index -1 of 'y_ptr', which holds 960 elements (program 3, 0, 0)"
    )
    assert at == _line(shifted_copy, "tl.store")
