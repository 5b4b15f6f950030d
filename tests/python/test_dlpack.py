"""DLPack producers as kernel arguments (host memory here; GPU memory in tests/gpu)."""

import numpy as np
import pytest
import tilefuse as tf

from kernels_dsl.tutorials import vector_add


class OnlyDLPack:
    """Exposes an array through __dlpack__ alone, as JAX or CuPy arrays do."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, stream=None):
        return self._a.__dlpack__()

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.uint8, np.uint32, np.uint64])
def test_dlpack_arguments_run_on_the_interpreter(dtype):
    rng = np.random.default_rng()
    n = 777
    if np.dtype(dtype).kind == "u":  # unsigned (DLPack code 1): values past the signed range wrap as unsigned
        x, y = (rng.integers(0, np.iinfo(dtype).max, n, dtype=dtype, endpoint=True) for _ in range(2))
    else:
        x = (rng.standard_normal(n) * 10).astype(dtype)
        y = (rng.standard_normal(n) * 10).astype(dtype)
    out = np.full(n, 7, dtype)
    k = vector_add.add_kernel[(tf.cdiv(n, 256),)](OnlyDLPack(x), OnlyDLPack(y), OnlyDLPack(out), n, BLOCK_SIZE=256)
    np.testing.assert_array_equal(out, x + y)
    names = {np.float32: "f32", np.float16: "f16", np.int32: "i32", np.uint8: "u8", np.uint32: "u32", np.uint64: "u64"}
    assert f"ptr<{names[dtype]}>" in k.asm["tile"]


def test_dlpack_views_are_bounds_checked():
    base = np.random.default_rng().standard_normal(64).astype(np.float32)
    view = base[10:20]
    out = np.zeros(64, np.float32)
    with pytest.raises(tf.KernelRuntimeError, match="out-of-bounds load"):
        vector_add.add_kernel[(1,)](OnlyDLPack(view), OnlyDLPack(view), out, 11, BLOCK_SIZE=16)


def test_unsupported_dlpack_dtype_is_named():
    a = np.zeros(4, np.complex64)
    with pytest.raises(tf.LaunchError, match="DLPack dtype code 5, 64 bits"):
        vector_add.add_kernel[(1,)](OnlyDLPack(a), OnlyDLPack(a), OnlyDLPack(a), 4, BLOCK_SIZE=4)
