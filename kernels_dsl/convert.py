"""Elementwise dtype conversion with an explicit rounding mode (rne, rtz, ru, or
stochastic with caller-supplied random bits), storing the target's bit codes.

The kernel stores codes rather than values so callers can hold formats numpy has no
dtype for (f4e2m1 codes, e8m0 codes) and compare conversions bit for bit.
"""

import tilefuse as tf
import tilefuse.language as tl


@tf.jit
def convert_kernel(x_ptr, bits_ptr, code_ptr, back_ptr, n, TO: tl.constexpr, MODE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    if MODE == "rs":
        y = x.to(TO, rounding="rs", rand_bits=tl.load(bits_ptr + offs, mask=m, other=0))
    else:
        y = x.to(TO, rounding=MODE)
    # Codes of 16-bit formats go out as int16, the 8- and 4-bit ones as int8.
    if TO.primitive_bitwidth == 16:
        tl.store(code_ptr + offs, y.to(tl.int16, bitcast=True), mask=m)
    else:
        tl.store(code_ptr + offs, y.to(tl.int8, bitcast=True).to(tl.int16), mask=m)
    tl.store(back_ptr + offs, y.to(tl.float32), mask=m)
