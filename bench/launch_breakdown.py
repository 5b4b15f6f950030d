"""Where the host time of a tilefuse launch goes (vector add, fast path), beside
Triton's launch, repeated to show the spread. python3 bench/launch_breakdown.py"""

import time

import torch
import triton
import triton.language as ttl

from kernels_dsl.tutorials import vector_add


@triton.jit
def _triton_add(x_ptr, y_ptr, out_ptr, n, BLOCK: ttl.constexpr):
    offs = ttl.program_id(0) * BLOCK + ttl.arange(0, BLOCK)
    mask = offs < n
    ttl.store(out_ptr + offs, ttl.load(x_ptr + offs, mask=mask) + ttl.load(y_ptr + offs, mask=mask), mask=mask)


def per_call_us(fn, iters=5000):
    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(iters):
        fn()
    dt = time.perf_counter() - t
    torch.cuda.synchronize()
    return dt / iters * 1e6


def main():
    n = 4096
    x, y, out = (torch.randn(n, device="cuda") for _ in range(3))
    k = vector_add.add_kernel
    k[(4,)](x, y, out, n, BLOCK_SIZE=1024)
    bound = k[(4,)]  # the C++ callable kernel[grid] returns once the fast path exists
    parts = {
        "tilefuse launch": lambda: k[(4,)](x, y, out, n, BLOCK_SIZE=1024),
        "triton launch": lambda: _triton_add[(4,)](x, y, out, n, BLOCK=1024),
        "  C++ call alone (kernel[grid] held)": lambda: bound(x, y, out, n, BLOCK_SIZE=1024),
    }
    for rep in range(3):
        print(f"round {rep}: " + ", ".join(f"{name.strip()} {per_call_us(fn):.2f}" for name, fn in parts.items()))


if __name__ == "__main__":
    main()
