"""Hostile input becomes a clear error (or the right result), never a crash, a hang or
silent garbage: each case here crashed, hung or misbehaved before (issue [10])."""

import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import ml_dtypes
import numpy as np
import pytest
import tilefuse as tf
import tilefuse.language as tl
from tilefuse import _C
from tilefuse.errors import CompilationError, KernelRuntimeError, LaunchError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@tf.jit
def add_one(x_ptr, o_ptr, N: tl.constexpr):
    o = tl.arange(0, N)
    tl.store(o_ptr + o, tl.load(x_ptr + o) + 1)


@tf.jit
def store_one(o_ptr):
    tl.store(o_ptr, 1)


def _read_only_outputs(tmp_path):
    o = np.zeros(16, np.float32)
    o.setflags(write=False)
    path = tmp_path / "m.bin"
    np.arange(16, dtype=np.float32).tofile(path)
    return {"writeable=False": o, "frombuffer(bytes)": np.frombuffer(bytes(64), np.float32),
            "read-only memmap": np.memmap(path, np.float32, mode="r")}  # fmt: skip


def test_stores_into_read_only_arrays_are_refused(tmp_path):
    x = np.random.default_rng(1).standard_normal(16).astype(np.float32)
    for what, out in _read_only_outputs(tmp_path).items():
        before = np.array(out)
        with pytest.raises(KernelRuntimeError, match="into 'o_ptr', which is read-only") as e:
            add_one[(1,)](x, out, N=16)
        assert e.value.line is not None, what
        assert np.array_equal(np.asarray(out), before), what
    out = np.zeros(16, np.float32)
    add_one[(1,)](x.copy(), out, N=16)  # reading a read-only input is fine
    ro = x.copy()
    ro.setflags(write=False)
    add_one[(1,)](ro, out, N=16)
    assert np.array_equal(out, x + np.float32(1))


@tf.jit
def huge_zeros(o_ptr, M: tl.constexpr, N: tl.constexpr):
    z = tl.zeros((M, N), tl.float32)
    tl.store(o_ptr, tl.sum(tl.sum(z, 0), 0))


@pytest.mark.parametrize("m, n", [(2048, 1024), (1 << 20, 1 << 20), (1 << 32, 1 << 32)])
def test_tiles_past_the_maximum_numel_are_compile_errors(m, n):
    with pytest.raises(CompilationError, match=r"exceeds the maximum tensor numel \(1048576 elements\)"):
        huge_zeros[(1,)](np.zeros(1, np.float32), M=m, N=n)


@tf.jit
def wide_arange(o_ptr, END: tl.constexpr):
    tl.store(o_ptr, tl.sum(tl.arange(0, END), 0))


def test_arange_past_int32_is_a_compile_error():
    with pytest.raises(CompilationError, match="arange's arguments must be within int32"):
        wide_arange[(1,)](np.zeros(1, np.int32), END=1 << 33)


@tf.jit
def full_of(o_ptr, V: tl.constexpr):
    tl.store(o_ptr + tl.arange(0, 2), tl.full((2,), V, tl.int32))


def test_full_with_a_value_outside_the_type_is_an_error():
    for v in (2**63, 2**32, -(2**31) - 1, 2**70):
        with pytest.raises(CompilationError, match=f"tl.full: {v} does not fit in tl.int32"):
            full_of[(1,)](np.zeros(2, np.int32), V=v)
    out = np.zeros(2, np.int32)
    full_of[(1,)](out, V=0xFFFFFFFF)  # the type's bits: -1
    assert out.tolist() == [-1, -1]


@pytest.mark.parametrize(
    "grid, words",
    [
        ((2**63,), "grid dimension 0 is 9223372036854775808; it must be in [0, 2147483647]"),
        ((2**31,), "grid dimension 0 is 2147483648"),
        ((1, 65536), "grid dimension 1 is 65536; it must be in [0, 65535]"),
        ((1, 1, 70000), "grid dimension 2 is 70000"),
        ((-1,), "grid dimension 0 is -1"),
        ((1.5,), "grid must be 1 to 3 non-negative integers"),
        ((1, 1, 1, 1), "grid must be 1 to 3 non-negative integers"),
    ],
)
def test_grids_past_cudas_limits_are_launch_errors(grid, words):
    with pytest.raises(LaunchError, match=re.escape(words)):
        store_one[grid](np.zeros(1, np.int32))


def test_grid_at_the_limit_of_axis_1_runs():
    out = np.zeros(1, np.int32)
    store_one[(1, 65535)](out)
    assert out[0] == 1


def test_ctrl_c_stops_a_long_interpreter_launch():
    src = textwrap.dedent(
        """
        import numpy as np
        from tests.python.test_hostile_input import store_one
        print("started", flush=True)
        try:
            store_one[(2**31 - 1,)](np.zeros(1, np.int32))
        except KeyboardInterrupt:
            print("interrupted", flush=True)
        """
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "frontend"), ROOT]))
    p = subprocess.Popen([sys.executable, "-c", src], stdout=subprocess.PIPE, text=True, env=env)
    assert p.stdout.readline().strip() == "started"
    time.sleep(1.5)  # compiled and running programs by now
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=30)
    assert "interrupted" in out and p.returncode == 0


@tf.jit
def cast_to(x_ptr, o_ptr, N: tl.constexpr):
    o = tl.arange(0, N)
    tl.store(o_ptr + o, tl.load(x_ptr + o).to(o_ptr.dtype.element_ty))


@pytest.mark.parametrize("src, dst", [(ml_dtypes.bfloat16, np.float16), (np.float16, ml_dtypes.bfloat16)])
def test_casts_between_bf16_and_f16(src, dst):
    """Rounded once (bf16 -> f32 is exact): the interpreter against numpy's f32 route, and
    the GPU lowering (an invalid fpext before) for sm_90a and sm_80."""
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(256) * np.exp2(rng.integers(-20, 16, 256))).astype(np.float32).astype(src)
    out = np.zeros(256, dst)
    cast_to[(1,)](x, out, N=256)
    want = x.astype(np.float32).astype(dst)
    assert np.array_equal(out.view(np.uint16), want.view(np.uint16))
    for arch in ("sm_90a", "sm_80"):
        ptx = cast_to.warmup(x, out, N=256, grid=(1,), target=arch).asm["ptx"]
        assert "cvt" in ptx


@tf.jit
def caret_after_wide_chars(o_ptr):
    ñandú = 1
    tl.store(o_ptr, ñandú + undefined_name)  # noqa: F821


def test_caret_column_counts_characters_not_bytes():
    with pytest.raises(CompilationError) as e:
        caret_after_wide_chars[(1,)](np.zeros(1, np.int32))
    line = "    tl.store(o_ptr, ñandú + undefined_name)  # noqa: F821"
    assert e.value.col == line.index("undefined_name") + 1
    caret = str(e.value).splitlines()[-1]
    assert caret.index("^") == line.index("undefined_name")


class _NotDLPack:
    def __init__(self, ret):
        self.ret = ret

    def __dlpack__(self, stream=None):
        if isinstance(self.ret, Exception):
            raise self.ret
        return self.ret

    def __dlpack_device__(self):
        return (1, 0)


@pytest.mark.parametrize(
    "ret, words", [(5, "returned int, not a DLPack capsule"), (RuntimeError("no"), "raised RuntimeError: no")]
)
def test_a_bogus_dlpack_producer_is_a_launch_error(ret, words):
    with pytest.raises(LaunchError, match=f"argument 'o_ptr': .*{words}"):
        store_one[(1,)](_NotDLPack(ret))


def test_ir_nested_past_the_limit_is_a_parse_error():
    def nested(n):
        opening = "  if %c {\n" * n
        closing = "  yield\n  } {\n  yield\n  }\n" * n
        return "func @k(%c: i1) {kernel = true} {\n" + opening + closing + "  return\n}\n"

    _C.ir.Module.parse(nested(200))
    for n in (300, 16000):
        with pytest.raises(_C.UserError, match="regions are nested more than 256 deep"):
            _C.ir.Module.parse(nested(n))


def test_ir_text_that_is_not_utf8_is_a_parse_error():
    with pytest.raises(_C.UserError, match="expected an op") as e:
        _C.ir.Module.parse(b"func @k() {\n \xff\xfe }")
    assert "\ufffd" in str(e.value)


def _entry_path(cache_dir, key):
    return os.path.join(cache_dir, key[:2], key)


def test_a_cache_entry_that_is_a_fifo_is_a_miss(tmp_path):
    import threading

    key = "ab" + "0" * 62
    os.makedirs(os.path.dirname(_entry_path(tmp_path, key)))
    os.mkfifo(_entry_path(tmp_path, key))
    got = []
    t = threading.Thread(target=lambda: got.append(_C.runtime.DiskCache(str(tmp_path)).get(key)), daemon=True)
    t.start()
    t.join(timeout=10)
    assert not t.is_alive() and got == [None]


def _compiled_store_one():
    return store_one.compile(np.zeros(1, np.int32))


def test_a_cache_dir_that_cannot_be_written_compiles_without_it(tmp_path, monkeypatch):
    from tilefuse import gpu

    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("TILEFUSE_CACHE_DIR", str(blocker))
    monkeypatch.setattr(gpu, "_cache_warned", set())
    with pytest.warns(UserWarning, match="cannot write the kernel cache in .*a_file.*compiling without it"):
        entry, hints = gpu.build(_compiled_store_one(), "sm_90a", 4, 3)
    assert ".entry store_one" in entry.ptx and hints == []


def test_unreadable_cached_hints_are_a_miss(tmp_path, monkeypatch):
    from tilefuse import gpu

    monkeypatch.setenv("TILEFUSE_CACHE_DIR", str(tmp_path))
    kernel = _compiled_store_one()
    gpu.build(kernel, "sm_90a", 4, 3)
    key = gpu._cache_key(kernel, "sm_90a", 4, 3)
    for bad in (b'{"a": 1}', b"[1, 2]", b"\xff not json"):
        _C.runtime.DiskCache(str(tmp_path)).put(key + "-hints", bad)  # a valid checksum, a bad payload
        entry, hints = gpu.build(kernel, "sm_90a", 4, 3)
        assert hints == [] and ".entry store_one" in entry.ptx


@tf.jit
def sum_steps(acc_2, o_ptr, N: tl.constexpr):
    acc = tl.load(o_ptr)
    for _ in tl.static_range(N):
        acc += acc_2
    tl.store(o_ptr, acc)


def test_many_values_of_one_name_print_in_order():
    """The printer's suffixes for a repeated name hint (linear since it remembers the last
    suffix per hint; 10,000 unrolled steps took 8 s): acc, acc_1, ... skipping taken names."""
    out = np.array([3], np.int32)
    k = sum_steps[(1,)](5, out, N=6)
    assert out[0] == 33
    defined = [line.split(" = ")[0].strip() for line in k.asm["tile"].splitlines() if " = add" in line]
    assert defined == ["%acc_1", "%acc_3", "%acc_4", "%acc_5", "%acc_6", "%acc_7"]
