"""Philox random numbers (tl.philox, randint4x, rand, randn, ...) on the interpreter.

1. tl.philox_impl against Random123's known-answer vectors for philox4x32-10 (counter and
   key all zeros, all ones, and the digits of pi) and against a numpy Philox4x32-10 written
   from the published round function, on random counters and keys;
2. the streams against Triton's formulas (tests/unsigned_kernels.triton_streams) for
   seeds and offsets on both sides of 2^31 and 2^32, int32 and int64 offsets: the integers
   and uniforms bit for bit; normals within 4 ulp of float32 (log, sqrt, cos and sin
   rounded once each in the reference, in the kernel by the backend's math);
3. statistics: uniforms in [0, 1) with mean 1/2 and variance 1/12, normals with mean 0 and
   variance 1, each within 5 standard errors over 2^16 samples.
"""

import numpy as np
import pytest
import tilefuse as tf
import tilefuse.language as tl

from tests.unsigned_kernels import (
    STREAM_NAMES,
    f32_ulps,
    philox4x32,
    philox4x64,
    philox_kat,
    philox_seeded,
    random_streams,
    triton_streams,
)

KAT = [  # Random123 kat_vectors: counter[4], key[2] -> philox4x32-10 output[4]
    ([0, 0, 0, 0], [0, 0], [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
    ([0xFFFFFFFF] * 4, [0xFFFFFFFF] * 2, [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
    (
        [0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344],
        [0xA4093822, 0x299F31D0],
        [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1],
    ),
]


def test_philox_known_answers():
    n = 4
    c = np.array([KAT[i % 3][0] for i in range(n)], np.uint32)
    k = np.array([KAT[i % 3][1] for i in range(n)], np.uint32)
    out = np.zeros((n, 4), np.uint32)
    philox_kat[(1,)](c, k, out, N=n)
    np.testing.assert_array_equal(out, np.array([KAT[i % 3][2] for i in range(n)], np.uint32))
    # The numpy reference the stream tests use gives the same answers.
    ref = philox4x32(list(c.T), list(k.T))
    np.testing.assert_array_equal(np.stack(ref, axis=1), out)


KAT64 = [  # Random123 kat_vectors: philox4x64-10
    ([0] * 4, [0, 0], [0x16554D9ECA36314C, 0xDB20FE9D672D0FDC, 0xD7E772CEE186176B, 0x7E68B68AEC7BA23B]),
    (
        [2**64 - 1] * 4,
        [2**64 - 1] * 2,
        [0x87B092C3013FE90B, 0x438C3C67BE8D0224, 0x9CC7D7C69CD777B6, 0xA09CAEBF594F0BA0],
    ),
    (
        [0x243F6A8885A308D3, 0x13198A2E03707344, 0xA4093822299F31D0, 0x082EFA98EC4E6C89],
        [0x452821E638D01377, 0xBE5466CF34E90C6C],
        [0xA528F45403E61D95, 0x38C72DBD566E9788, 0xA5A1610E72FD18B5, 0x57BD43B5E52B7FE6],
    ),
]


def test_philox4x64_known_answers():
    c = np.array([v[0] for v in KAT64] + [KAT64[0][0]], np.uint64)
    k = np.array([v[1] for v in KAT64] + [KAT64[0][1]], np.uint64)
    out = np.zeros((4, 4), np.uint64)
    philox_kat[(1,)](c, k, out, N=4)
    np.testing.assert_array_equal(out, np.array([v[2] for v in KAT64] + [KAT64[0][2]], np.uint64))
    for row, (ci, ki, want) in zip(out, KAT64):
        assert philox4x64(ci, ki) == want == [int(v) for v in row]


@pytest.mark.parametrize("seed", [0, 5, 2**32 + 3, 2**63 + 1, -7])
@pytest.mark.parametrize("bits", [32, 64])
def test_philox_keyed_by_a_seed(seed, bits):
    # 32-bit counters: the key is the seed's (low, high) halves; 64-bit: (seed, 0).
    rng = np.random.default_rng()
    d = np.uint32 if bits == 32 else np.uint64
    c = rng.integers(0, 2**bits, (64, 4), dtype=d)
    out = np.zeros((64, 4), d)
    philox_seeded[(1,)](c, out, seed, N=64)
    s = seed % 2**64
    if bits == 32:
        want = np.stack(philox4x32(list(c.T), [np.full(64, s & 0xFFFFFFFF), np.full(64, s >> 32)]), axis=1)
    else:
        want = np.array([philox4x64([int(v) for v in row], [s, 0]) for row in c], np.uint64)
    np.testing.assert_array_equal(out, want)


def test_philox_random_counters_and_keys():
    rng = np.random.default_rng()
    n = 256
    c = rng.integers(0, 2**32, (n, 4), dtype=np.uint32)
    k = rng.integers(0, 2**32, (n, 2), dtype=np.uint32)
    out = np.zeros((n, 4), np.uint32)
    philox_kat[(1,)](c, k, out, N=n)
    np.testing.assert_array_equal(out, np.stack(philox4x32(list(c.T), list(k.T)), axis=1))


def run_streams(seed, base, wide, n=256):
    out = np.zeros((len(STREAM_NAMES), n), np.uint32)
    random_streams[(1,)](out, seed, base, WIDE=wide, N=n)
    return {name: out[j] for j, name in enumerate(STREAM_NAMES)}


def check_streams(got, seed, offsets):
    want = triton_streams(seed, offsets)
    for name in STREAM_NAMES:
        g, w = got[name], want[name]
        if name.startswith("n") or name == "randn":
            d = f32_ulps(g.view(np.float32), w)
            assert d.max() <= 4, f"{name}: {d.max()} ulp at offset {offsets[d.argmax()]}"
        else:
            np.testing.assert_array_equal(g, w.view(np.uint32), err_msg=name)


SEEDS = [0, 1, 12345, 2**31 - 1, 2**31 + 5, 2**32 + 7, 2**63 + 11, -3]


@pytest.mark.parametrize("seed", SEEDS)
def test_streams_int32_offsets(seed):
    rng = np.random.default_rng()
    base = int(rng.integers(0, 2**31 - 256))
    got = run_streams(seed, base, wide=False)
    check_streams(got, seed, base + np.arange(256, dtype=np.int32))


@pytest.mark.parametrize("base", [0, 2**31 - 100, 2**32 - 100, 3 * 2**40 + 17, -(2**33) - 50])
def test_streams_int64_offsets(base):
    # The offset's high 32 bits are the second counter word (Triton's randint4x).
    seed = int(np.random.default_rng().integers(0, 2**63))
    got = run_streams(seed, base, wide=True)
    check_streams(got, seed, base + np.arange(256, dtype=np.int64))


def test_seeds_and_offsets_change_the_stream():
    a = run_streams(7, 0, wide=False)["i0"]
    assert (a != run_streams(8, 0, wide=False)["i0"]).mean() > 0.99
    assert (a[1:] != run_streams(7, 1, wide=False)["i0"][:-1]).sum() == 0  # offsets shift the stream
    assert (run_streams(7, 0, wide=False)["i0"] == a).all()  # deterministic


@tf.jit
def sample(seed, u_ptr, n_ptr, N: tl.constexpr):
    offs = tl.program_id(0) * N + tl.arange(0, N)
    tl.store(u_ptr + offs, tl.rand(seed, offs))
    tl.store(n_ptr + offs, tl.randn(seed, offs))


def test_statistics():
    n, block = 2**16, 1024
    u, z = np.zeros(n, np.float32), np.zeros(n, np.float32)
    sample[(n // block,)](int(np.random.default_rng().integers(0, 2**62)), u, z, N=block)
    assert u.min() >= 0 and u.max() < 1
    se = 5 / np.sqrt(n)
    assert abs(u.mean() - 0.5) < se * np.sqrt(1 / 12)
    assert abs(u.var() - 1 / 12) < se * np.sqrt(1 / 180)  # var of (U - 1/2)^2 is 1/180
    assert abs(z.mean()) < se
    assert abs(z.var() - 1) < se * np.sqrt(2)
    assert np.isfinite(z).all()


def test_umulhi():
    @tf.jit
    def k(x_ptr, y_ptr, out_ptr, N: tl.constexpr):
        r = tl.arange(0, N)
        tl.store(out_ptr + r, tl.umulhi(tl.load(x_ptr + r), tl.load(y_ptr + r)))

    rng = np.random.default_rng()
    x = rng.integers(-(2**31), 2**31, 64, dtype=np.int64).astype(np.int32)
    y = rng.integers(-(2**31), 2**31, 64, dtype=np.int64).astype(np.int32)
    x[:2], y[:2] = [-1, 2**31 - 1], [-1, -(2**31)]
    out = np.zeros(64, np.int32)
    k[(1,)](x, y, out, N=64)
    want = (x.view(np.uint32).astype(np.uint64) * y.view(np.uint32).astype(np.uint64)) >> np.uint64(32)
    np.testing.assert_array_equal(out.view(np.uint32), want.astype(np.uint32))
