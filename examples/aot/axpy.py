"""The kernel of the AOT example: out = a * x + y over n elements, BLOCK per program.

    python -m tilefuse.aot examples/aot/axpy.py:axpy -o build/aot \\
        --signature "*fp32:16, *fp32:16, *fp32:16, fp32, i32, 1024" --grid "cdiv(n, BLOCK)"
"""

import tilefuse as tf
import tilefuse.language as tl


@tf.jit
def axpy(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, a * x + y, mask=mask)
