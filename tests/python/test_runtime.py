"""The runtime's disk cache and driver loading, on a machine without a GPU."""

import multiprocessing as mp
import os
import pathlib
import re
import shutil
import subprocess

import pytest
from tilefuse import _C, gpu

R = _C.runtime


def test_cache_round_trip_and_default_dir(tmp_path, monkeypatch):
    cache = R.DiskCache(str(tmp_path))
    blob = os.urandom(100_000)
    assert cache.get("ab12") is None
    cache.put("ab12", blob)
    assert cache.get("ab12") == blob
    monkeypatch.setenv("TILEFUSE_CACHE_DIR", str(tmp_path / "x"))
    assert R.DiskCache().dir == str(tmp_path / "x")


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage"])
def test_corrupted_entry_reads_as_missing_and_is_rebuilt(tmp_path, damage):
    cache = R.DiskCache(str(tmp_path))
    blob = os.urandom(4096)
    cache.put("cafe", blob)
    path = tmp_path / "ca" / "cafe"
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[:-10])
    elif damage == "flip":
        path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    else:
        path.write_bytes(b"not a cache entry")
    assert cache.get("cafe") is None
    cache.put("cafe", blob)
    assert cache.get("cafe") == blob


def test_invalid_keys_are_refused(tmp_path):
    cache = R.DiskCache(str(tmp_path))
    for key in ("", "../etc", "a/b", "x" * 200):
        with pytest.raises(ValueError):
            cache.put(key, b"data")


def _writer(args):
    d, key, seed = args
    cache = R.DiskCache(d)
    blob = bytes([seed % 251]) * 300_000
    for _ in range(20):
        cache.put(key, blob)
        got = cache.get(key)
        # Another writer may have won the rename, but never a partial entry.
        assert got is not None and len(got) == 300_000 and len(set(got)) == 1
    return True


def test_concurrent_writers_never_leave_a_partial_entry(tmp_path):
    with mp.get_context("fork").Pool(4) as pool:
        assert all(pool.map(_writer, [(str(tmp_path), "beef", i) for i in range(8)]))
    leftovers = [p for p in (tmp_path / "be").iterdir() if p.name != "beef"]
    assert leftovers == []


def test_no_driver_is_reported_not_raised():
    if R.driver_available():
        pytest.skip("this machine has an NVIDIA driver")
    assert R.device_count() == 0
    assert "libcuda.so.1" in R.driver_unavailable_reason()
    with pytest.raises(R.DriverError, match="libcuda.so.1"):
        R.device_info(0)


def test_the_compiler_is_identified_by_its_build_id(tmp_path):
    # The disk cache keys kernels by the compiler library's GNU build ID (what readelf
    # prints); a file without one is hashed instead.
    lib = pathlib.Path(gpu.__file__).with_name("libtilefuse_compiler.so")
    if not lib.exists():
        lib = pathlib.Path(_C.__file__)
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("needs readelf")
    notes = subprocess.run([readelf, "-n", str(lib)], capture_output=True, text=True, check=True).stdout
    want = re.search(r"Build ID: ([0-9a-f]+)", notes)
    assert want and gpu.build_id(str(lib)) == want[1]
    assert gpu._compiler_fingerprint() == want[1]
    not_elf = tmp_path / "lib.so"
    not_elf.write_bytes(b"\x7fELF\x01\x01" + bytes(100))  # 32-bit: not read
    assert gpu.build_id(str(not_elf)) is None
    truncated = tmp_path / "short.so"
    truncated.write_bytes(lib.read_bytes()[:40])
    assert gpu.build_id(str(truncated)) is None


def test_a_compiler_without_build_id_is_identified_by_its_contents(monkeypatch):
    import hashlib

    lib = pathlib.Path(gpu.__file__).with_name("libtilefuse_compiler.so")
    if not lib.exists():
        lib = pathlib.Path(_C.__file__)
    monkeypatch.setattr(gpu, "build_id", lambda path: None)
    monkeypatch.setattr(gpu, "_compiler_id", None)
    assert gpu._compiler_fingerprint() == hashlib.blake2b(lib.read_bytes(), digest_size=16).hexdigest()
