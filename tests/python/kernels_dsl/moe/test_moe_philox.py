"""kernels_dsl/moe/philox.py: Philox4x32-10 on the interpreter against Random123's
known-answer vectors (tests/kat_vectors, the three `philox4x32 10` lines) and against an
independent numpy implementation on random counters and keys."""

import numpy as np
import tilefuse as tf
import tilefuse.language as tl

from kernels_dsl.moe.philox import philox4x32_10
from tests.python.moe import golden_quant as G

# counter[4], key[2] -> result[4]
KAT = [
    ([0, 0, 0, 0], [0, 0], [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
    ([0xFFFFFFFF] * 4, [0xFFFFFFFF] * 2, [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
    (
        [0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344],
        [0xA4093822, 0x299F31D0],
        [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1],
    ),
]


@tf.jit
def philox_kernel(c_ptr, k_ptr, out_ptr, N: tl.constexpr):
    # Words travel as int32 (uint32 bit patterns); the generator takes them as int64.
    i = tl.arange(0, N)
    c0 = tl.load(c_ptr + i * 4).to(tl.int64) & 0xFFFFFFFF
    c1 = tl.load(c_ptr + i * 4 + 1).to(tl.int64) & 0xFFFFFFFF
    c2 = tl.load(c_ptr + i * 4 + 2).to(tl.int64) & 0xFFFFFFFF
    c3 = tl.load(c_ptr + i * 4 + 3).to(tl.int64) & 0xFFFFFFFF
    k0 = tl.load(k_ptr + i * 2).to(tl.int64) & 0xFFFFFFFF
    k1 = tl.load(k_ptr + i * 2 + 1).to(tl.int64) & 0xFFFFFFFF
    r0, r1, r2, r3 = philox4x32_10(c0, c1, c2, c3, k0, k1)
    tl.store(out_ptr + i * 4, r0.to(tl.int32))
    tl.store(out_ptr + i * 4 + 1, r1.to(tl.int32))
    tl.store(out_ptr + i * 4 + 2, r2.to(tl.int32))
    tl.store(out_ptr + i * 4 + 3, r3.to(tl.int32))


def run(ctr, key):
    ctr, key = np.asarray(ctr, np.uint32), np.asarray(key, np.uint32)
    out = np.zeros(ctr.shape, np.int32)
    philox_kernel[(1,)](ctr.view(np.int32), key.view(np.int32), out, N=ctr.shape[0])
    return out.view(np.uint32)


def test_known_answers():
    got = run([c for c, _, _ in KAT] + [KAT[0][0]], [k for _, k, _ in KAT] + [KAT[0][1]])
    np.testing.assert_array_equal(got, np.array([r for _, _, r in KAT] + [KAT[0][2]], np.uint32))


def test_random_counters_and_keys():
    rng = np.random.default_rng(11)
    ctr = rng.integers(0, 2**32, (64, 4), dtype=np.uint64)
    key = rng.integers(0, 2**32, (64, 2), dtype=np.uint64)
    want = np.stack(G.philox4x32_10(ctr.T, key.T), 1).astype(np.uint32)
    np.testing.assert_array_equal(run(ctr, key), want)
    # The golden reproduces the known answers too, so both sides follow Random123.
    for c, k, r in KAT:
        np.testing.assert_array_equal(np.array(G.philox4x32_10(np.array(c)[:, None], np.array(k)[:, None]))[:, 0], r)
