"""`make run`: compiles an example kernel, prints its tile IR before and after the
pass pipeline, and runs it on the CPU interpreter against numpy; then the MoE MLP's
forward and backward against float64 (tilefuse/moe/demo.py)."""

import numpy as np

import tilefuse as tf
import tilefuse.language as tl
from tilefuse.moe import demo as moe_demo


@tf.jit
def softmax_rows(x_ptr, y_ptr, n_rows, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=-float("inf"))
    z = x - tl.max(x, axis=0)
    num = tl.exp(z)
    tl.store(y_ptr + row * stride + cols, num / tl.sum(num, axis=0), mask=mask)


def main():
    rng = np.random.default_rng()
    x = rng.standard_normal((37, 100)).astype(np.float32)
    y = np.full_like(x, np.nan)
    kernel = softmax_rows[(x.shape[0],)](x, y, x.shape[0], x.shape[1], x.shape[1], BLOCK=128)
    print("// tile IR from the frontend")
    print(kernel.asm["tile_raw"])
    print("// after the pass pipeline (inliner, canonicalize, cse, licm, dce)")
    print(kernel.asm["tile"])
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    ref = e / e.sum(axis=1, keepdims=True)
    err = np.abs(y - ref).max()
    print(f"softmax of a {x.shape} float32 matrix on the interpreter: max |error| vs float64 = {err:.2e}")
    if not err < 1e-6:
        raise SystemExit("demo result is wrong")
    moe_demo.main()


if __name__ == "__main__":
    main()
