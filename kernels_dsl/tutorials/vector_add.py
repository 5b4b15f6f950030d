"""Tutorial 01: element-wise addition of two vectors."""

import numpy as np
import tilefuse as tf
import tilefuse.language as tl


@tf.jit
def add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    # The last block runs past the end when n_elements is not a multiple of BLOCK_SIZE.
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(output_ptr + offsets, x + y, mask=mask)


def add(x: np.ndarray, y: np.ndarray, BLOCK_SIZE: int = 1024, out: np.ndarray | None = None) -> np.ndarray:
    """x + y for two 1-D arrays of one shape and dtype, as a new array (or written into
    `out`, a contiguous array like x)."""
    if x.ndim != 1 or x.shape != y.shape or x.dtype != y.dtype:
        raise ValueError(
            f"add needs two 1-D arrays of one shape and dtype, got {x.shape} {x.dtype} and {y.shape} {y.dtype}"
        )
    # The kernel indexes all three arrays with one offset, so they must be contiguous.
    x, y = np.ascontiguousarray(x), np.ascontiguousarray(y)
    output = np.empty_like(x) if out is None else out
    if output.shape != x.shape or output.dtype != x.dtype or not output.flags.c_contiguous:
        raise ValueError(f"out must be a contiguous {x.shape} {x.dtype} array")
    n = output.size
    add_kernel[lambda meta: (tf.cdiv(n, meta["BLOCK_SIZE"]),)](x, y, output, n, BLOCK_SIZE=BLOCK_SIZE)
    return output
