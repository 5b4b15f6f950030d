"""The disk cache's bound (TILEFUSE_CACHE_MAX_BYTES, LRU eviction by mtime, which a hit
refreshes) and malformed entries with a valid checksum reading as misses."""

import json
import os
import struct
import time

import numpy as np
import pytest
import tilefuse as tf
import tilefuse.language as tl
from tilefuse import _C, gpu

R = _C.runtime
HEADER = 20  # "TFC1", the payload's length and checksum


def _path(d, key):
    return os.path.join(d, key[:2], key)


def _age(d, key, seconds_ago):
    t = time.time() - seconds_ago
    os.utime(_path(d, key), (t, t))


def _total(d):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)


def test_least_recently_used_entries_are_evicted(tmp_path):
    d = str(tmp_path)
    cache = R.DiskCache(d, max_bytes=100_000)
    blobs = {f"e{i}": os.urandom(10_000) for i in range(10)}
    for i in range(9):  # 9 x 10,020 bytes: within the bound
        cache.put(f"e{i}", blobs[f"e{i}"])
        _age(d, f"e{i}", 1000 - i)  # e0 oldest
    assert cache.get("e0") == blobs["e0"]  # a hit makes e0 the most recently used
    cache.put("e9", blobs["e9"])  # 100,200 bytes: evicts the oldest down to 90% of the bound
    present = {k for k in blobs if cache.get(k) is not None}
    assert present == {"e0", "e3", "e4", "e5", "e6", "e7", "e8", "e9"}
    assert all(cache.get(k) == blobs[k] for k in present)
    assert _total(d) == 8 * (10_000 + HEADER) <= 90_000


def test_an_entry_larger_than_the_bound_is_kept_alone(tmp_path):
    cache = R.DiskCache(str(tmp_path), max_bytes=1000)
    a, b = os.urandom(5000), os.urandom(5000)
    cache.put("aa", a)
    assert cache.get("aa") == a  # the entry just written is never evicted
    cache.put("bb", b)
    assert cache.get("aa") is None and cache.get("bb") == b


def test_evictions_count_autotune_decisions_and_drop_stale_temporaries(tmp_path):
    d = tmp_path
    cache = R.DiskCache(str(d), max_bytes=50_000)
    (d / "autotune").mkdir()
    decision = d / "autotune" / "k-1.json"
    decision.write_bytes(b"x" * 30_000)
    stale, fresh = d / "ab" / "ab.tmp.1.2.3", d / "ab" / "ac.tmp.1.2.4"
    stale.parent.mkdir()
    stale.write_bytes(b"y" * 100)
    fresh.write_bytes(b"z" * 100)
    old = time.time() - 2 * 3600
    os.utime(stale, (old, old))
    os.utime(decision, (old + 60, old + 60))
    cache.put("cd", os.urandom(30_000))  # 60,220 bytes with the decision: over the bound
    assert not decision.exists() and not stale.exists() and fresh.exists()
    assert cache.get("cd") is not None


def test_max_bytes_from_the_environment(tmp_path, monkeypatch):
    for value, want in [("123", 123), ("4K", 4096), ("3M", 3 << 20), ("2G", 2 << 30), ("0", 0), ("9" * 18, 10**18 - 1)]:
        monkeypatch.setenv("TILEFUSE_CACHE_MAX_BYTES", value)
        assert R.DiskCache(str(tmp_path)).max_bytes == want
    monkeypatch.delenv("TILEFUSE_CACHE_MAX_BYTES")
    assert R.DiskCache(str(tmp_path)).max_bytes == 1 << 30  # the default: 1 GiB
    for bad in ("-1", "1.5G", "12KB", "x", "k", "9" * 19, "99999999999G", " 12"):
        monkeypatch.setenv("TILEFUSE_CACHE_MAX_BYTES", bad)
        with pytest.raises(ValueError, match=r"TILEFUSE_CACHE_MAX_BYTES='.*' is not a byte count"):
            R.DiskCache(str(tmp_path))


def test_unbounded_cache_evicts_nothing(tmp_path):
    cache = R.DiskCache(str(tmp_path), max_bytes=0)
    for i in range(20):
        cache.put(f"k{i}", os.urandom(1000))
    assert all(cache.get(f"k{i}") is not None for i in range(20))


def _kernel_payload(spec: bytes, ptx: bytes, image: bytes, spec_len=None, ptx_len=None):
    sl = len(spec) if spec_len is None else spec_len
    pl = len(ptx) if ptx_len is None else ptx_len
    return b"TFK1" + struct.pack("<QQ", sl, pl) + spec + ptx + image


@tf.jit
def twice(x_ptr, o_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(o_ptr + offs, 2 * tl.load(x_ptr + offs))


def test_malformed_kernel_entries_with_a_valid_checksum_are_misses(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEFUSE_CACHE_DIR", str(tmp_path))
    x = np.zeros(16, np.float32)
    kernel = twice.compile(x, x, BLOCK=16)
    good, _ = gpu.build(kernel, "sm_90a", 4, 3)
    key = gpu._cache_key(kernel, "sm_90a", 4, 3)
    cache = R.DiskCache(str(tmp_path))
    raw = cache.get(key)
    spec_len, ptx_len = struct.unpack("<QQ", raw[4:20])
    spec, ptx = raw[20 : 20 + spec_len], raw[20 + spec_len : 20 + spec_len + ptx_len]
    spec_json = json.loads(spec)
    malformed = [
        b"",
        b"TFK1",
        b"TFK0" + raw[4:],
        _kernel_payload(spec, ptx, b"", spec_len=2**64 - 1),
        _kernel_payload(spec, ptx, b"", ptx_len=2**64 - 1),
        _kernel_payload(spec, ptx, b"", spec_len=len(spec) + len(ptx) + 1),
        _kernel_payload(b"{not json", ptx, b"img"),
        _kernel_payload(b"[1, 2, 3]", ptx, b"img"),
        _kernel_payload(json.dumps(dict(spec_json, params="x")).encode(), ptx, b"img"),
        _kernel_payload(spec[:-1], ptx, b"img"),
    ]
    for payload in malformed:
        cache.put(key, payload)
        assert cache.get_kernel(key) is None, payload[:40]
        entry, hints = gpu.build(kernel, "sm_90a", 4, 3)  # a miss: compiled and stored again
        assert entry.ptx == good.ptx and hints == []
        assert cache.get_kernel(key).ptx == good.ptx


BAD_HINTS = [
    b'[["f", 1, 2]]',
    b'[[null, "1", 2, "m"]]',
    b"[[null, 1, 2, 3]]",
    b'[[1, 1, 2, "m"]]',
    b'[[null, true, 2, "m"]]',
]
BAD_CHECKS = [
    b'[["f", 1, 2, "load", 0, 4]]',
    b'[[null, 1, 2, "load", "0", 4, []]]',
    b'[[null, 1, 2, "load", 0, 4, [1.5]]]',
]


@pytest.mark.parametrize(
    "hints",
    [b'{"hints": %s, "checks": []}' % h for h in BAD_HINTS]
    + [b'{"hints": [], "checks": %s}' % c for c in BAD_CHECKS]
    + [b'[[null, 1, 2, "m"]]', b'{"hints": []}'],
)
def test_malformed_hints_are_misses(tmp_path, monkeypatch, hints):
    monkeypatch.setenv("TILEFUSE_CACHE_DIR", str(tmp_path))
    x = np.zeros(16, np.float32)
    kernel = twice.compile(x, x, BLOCK=16)
    gpu.build(kernel, "sm_90a", 4, 3)
    key = gpu._cache_key(kernel, "sm_90a", 4, 3)
    R.DiskCache(str(tmp_path)).put(key + "-hints", hints)
    entry, got = gpu.build(kernel, "sm_90a", 4, 3)
    assert got == [] and ".entry twice" in entry.ptx
    assert json.loads(R.DiskCache(str(tmp_path)).get(key + "-hints")) == {"hints": [], "checks": []}  # rewritten


def test_a_directory_or_device_as_an_entry_is_a_miss(tmp_path):
    cache = R.DiskCache(str(tmp_path))
    os.makedirs(_path(tmp_path, "dd00"))
    os.makedirs(os.path.dirname(_path(tmp_path, "ee00")))
    os.symlink("/dev/zero", _path(tmp_path, "ee00"))
    assert cache.get("dd00") is None and cache.get("ee00") is None
    assert cache.get_kernel("dd00") is None and cache.get_kernel("ee00") is None
