"""tl.cat (Triton's semantics: 1-D, can_reorder=True; tilefuse keeps the order) and
argmax / argmin / max / min with return_indices under tie_break_left, on the interpreter
against numpy on tie-heavy data (exact)."""

import ml_dtypes
import numpy as np
import pytest
import tilefuse as tf
import tilefuse.language as tl

from tests.cat_ties_kernels import arg_kernel, arg_reference, cat_kernel, tie_heavy

DTYPES = [np.int32, np.uint8, np.int64, np.float32, np.float16, ml_dtypes.bfloat16, np.float64]


@pytest.mark.parametrize("dtype", DTYPES, ids=[np.dtype(d).name for d in DTYPES])
@pytest.mark.parametrize("n", [1, 16, 128])
def test_cat(dtype, n):
    rng = np.random.default_rng(n)
    x = rng.integers(0, 100, n).astype(dtype)
    y = rng.integers(0, 100, n).astype(dtype)
    o = np.zeros(2 * n, dtype)
    cat_kernel[(1,)](x, y, o, N=n)
    np.testing.assert_array_equal(o, np.concatenate([x, y]))


@tf.jit
def bad_cat(x_ptr, WHAT: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, 16))
    if WHAT == "reorder":
        tl.cat(x, x)
    else:
        tl.cat(x, x.to(tl.float32), can_reorder=True)


@pytest.mark.parametrize(
    "what, words",
    [("reorder", "current implementation of `cat` always may reorder elements"), ("type", "two 1-D tiles of one type")],
)
def test_cat_errors(what, words):
    with pytest.raises(tf.CompilationError, match=words) as e:
        bad_cat[(1,)](np.zeros(16, np.int32), WHAT=what)
    assert e.value.file == __file__


@pytest.mark.parametrize("dtype", DTYPES, ids=[np.dtype(d).name for d in DTYPES])
@pytest.mark.parametrize("axis", [0, 1, None])
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("is_min", [False, True])
def test_arg_tie_break(dtype, axis, left, is_min):
    rng = np.random.default_rng(hash((np.dtype(dtype).name, axis, left, is_min)) % 2**32)
    r, c = 8, 16
    x = tie_heavy(rng, dtype, (r, c))
    o = np.full(2 * r * c, -1, np.int32)
    arg_kernel[(1,)](x, o, R=r, C=c, AXIS=axis, LEFT=left, MIN=is_min)
    want = np.atleast_1d(arg_reference(x.astype(np.float64), axis, left, is_min))
    k = want.size
    np.testing.assert_array_equal(o[:k], want)
    np.testing.assert_array_equal(o[r * c : r * c + k], want)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_gpu_configs_assemble(arch, tmp_path):
    from tests.ptxas import assert_assembles

    for dtype in (np.float32, ml_dtypes.bfloat16, np.uint8):
        x = np.zeros(1024, dtype)
        assert_assembles(cat_kernel.warmup(x, x, x, N=1024, grid=(1,), target=arch).asm["ptx"], arch, tmp_path)
        for axis in (0, 1, None):
            k = arg_kernel.warmup(
                np.zeros((64, 128), dtype), np.zeros(2 * 64 * 128, np.int32), R=64, C=128, AXIS=axis, LEFT=False,
                MIN=True, grid=(1,), target=arch,
            )  # fmt: skip
            assert_assembles(k.asm["ptx"], arch, tmp_path)
