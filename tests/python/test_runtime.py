"""The runtime's disk cache and driver loading, on a machine without a GPU."""

import multiprocessing as mp
import os

import pytest
from tilefuse import _C

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
