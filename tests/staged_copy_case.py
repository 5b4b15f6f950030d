"""A kernel in hand-written GPU-stage IR for local_store / local_load (shared by the CPU
and GPU tests): a 64x64 f16 tile loaded in the load's layout, stored into a staged
buffer of the given swizzle, read back in the load's layout or in another one (READ:
each thread 32 consecutive columns of one row) and stored to y, through pointers
converted to that layout."""

import numpy as np
import tilefuse as tf
import tilefuse.language as tl

_C = tf._C
N = 64
READ = "#blocked<reg=[1, 2, 4, 8, 16], lane=[32, 64, 128, 256, 512], warp=[1024, 2048]>"


@tf.jit
def copy_kernel(x_ptr, y_ptr, N: tl.constexpr):
    r = tl.arange(0, N)
    tile = r[:, None] * N + r[None, :]
    tl.store(y_ptr + tile, tl.load(x_ptr + tile))


def module(swizzle, read=READ):
    """The GPU-stage module: copy_kernel's, with the tile going through shared memory and
    read back in layout `read` (None: the load's)."""
    a = np.zeros((N, N), np.float16)
    text = copy_kernel.warmup(a, a, grid=(1,), target="sm_90a", num_warps=4, N=N).asm["gpu"]
    if read is None:
        read = text[text.index("%10 = load") :].split("xf16, ", 1)[1].split(">>", 1)[0] + ">"
    buf = f"smem<{N}x{N}xf16, #shared<swizzle={swizzle}, rows={N}, cols={N}, eb=2, stages=1>>"
    staged = f"""  %buf = smem_alloc {{smem_at = 0}} : {buf}
  %s0 = constant {{value = 0}} : i32
  local_store %buf, %s0, %10
  barrier
  %11 = local_load %buf, %s0 : tile<{N}x{N}xf16, {read}>
  %12 = convert_layout %7 : tile<{N}x{N}xptr<f16>, {read}>
  store %12, %11
"""
    if read in text.split("%10 = load", 1)[1].split("\n", 1)[0]:
        convert = f"  %12 = convert_layout %7 : tile<{N}x{N}xptr<f16>, {read}>\n"
        staged = staged.replace(convert, "").replace("%12", "%7")
    assert "  store %7, %10\n" in text and "num_warps = 4}" in text
    text = text.replace("  store %7, %10\n", staged)
    text = text.replace("num_warps = 4}", f"num_warps = 4, smem_staged = {N * N * 2}}}")
    m = _C.ir.Module.parse(text)
    m.verify()
    return m
