"""Philox4x32-10 (Salmon et al., SC'11; Random123's `philox4x32_R(10, ctr, key)`) as a
device function: the counter-based generator behind the MoE library's stochastic rounding.

The four counter words and two key words are int64 tensors holding uint32 values
(tilefuse has no unsigned types): a 32x32-bit product fits the 64-bit wrapping multiply,
its high word is `p >> 32` masked back to 32 bits.
"""

import tilefuse as tf
import tilefuse.language as tl

M32 = 0xFFFFFFFF
ROUND_A = 0xD2511F53  # multiplies counter word 0
ROUND_B = 0xCD9E8D57  # multiplies counter word 2
KEY_A = 0x9E3779B9  # the key schedule's increments (golden ratio, sqrt(3) - 1)
KEY_B = 0xBB67AE85


@tf.jit
def philox4x32_10(c0, c1, c2, c3, k0, k1):
    for _ in tl.static_range(10):
        p0 = c0 * ROUND_A
        p1 = c2 * ROUND_B
        n0 = ((p1 >> 32) & M32) ^ c1 ^ k0
        n2 = ((p0 >> 32) & M32) ^ c3 ^ k1
        c1 = p1 & M32
        c3 = p0 & M32
        c0 = n0
        c2 = n2
        k0 = (k0 + KEY_A) & M32
        k1 = (k1 + KEY_B) & M32
    return c0, c1, c2, c3
