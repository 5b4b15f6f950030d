"""Tutorial 02: fused row-wise softmax, one program per row.

The whole row lives in one tile, so the input is read once and the output written
once, instead of the several passes an unfused max / exp / sum / divide needs.
"""

import numpy as np
import tilefuse as tf
import tilefuse.language as tl


@tf.jit
def softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    row_idx = tl.program_id(0)
    col_offsets = tl.arange(0, BLOCK_SIZE)
    mask = col_offsets < n_cols
    # -inf padding leaves the max unchanged and contributes exp(-inf) = 0 to the sum.
    row = tl.load(input_ptr + row_idx * input_row_stride + col_offsets, mask=mask, other=-float("inf"))
    # Narrow inputs (bf16, f16) are computed in f32; the store rounds to the output type.
    row = row.to(tl.float32)
    # Subtracting the max keeps exp from overflowing; softmax is invariant to the shift.
    numerator = tl.exp(row - tl.max(row, axis=0))
    softmax_output = numerator / tl.sum(numerator, axis=0)
    tl.store(output_ptr + row_idx * output_row_stride + col_offsets, softmax_output, mask=mask)


def _row_stride(a: np.ndarray) -> int:
    if a.ndim != 2 or (a.shape[1] > 1 and a.strides[1] != a.itemsize):
        raise ValueError(f"softmax needs 2-D arrays with contiguous rows, got shape {a.shape} strides {a.strides}")
    return a.strides[0] // a.itemsize


def softmax(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Softmax over the last axis of a 2-D array, as a new array of x's dtype (or written
    into `out`). Rows may be strided (e.g. a column slice of a wider array)."""
    x_stride = _row_stride(x)
    n_rows, n_cols = x.shape
    y = np.empty_like(x, order="C") if out is None else out
    if y.shape != x.shape or y.dtype != x.dtype:
        raise ValueError(f"out must be a {x.shape} {x.dtype} array, got {y.shape} {y.dtype}")
    # Tile sizes are powers of two; the row is padded up to the next one and masked.
    BLOCK_SIZE = tf.next_power_of_2(n_cols)
    softmax_kernel[(n_rows,)](y, x, x_stride, _row_stride(y), n_cols, BLOCK_SIZE=BLOCK_SIZE)
    return y
