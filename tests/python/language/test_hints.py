"""tl.multiple_of and tl.max_contiguous: facts for the GPU backend's vectorizer. They
leave values unchanged (checked on the interpreter), reach the IR as `hint` ops, make the
GPU lowering use 16-byte accesses where the analysis alone cannot, and reject values that
are not positive integers."""

import numpy as np
import pytest
import tilefuse as tf
import tilefuse.language as tl

from tests.shared_kernels import wrapped_copy


@pytest.mark.parametrize("hint", [False, True])
def test_hints_leave_values_unchanged(hint):
    rng = np.random.default_rng()
    x = rng.integers(-1000, 1000, 512).astype(np.int32)
    y = np.zeros_like(x)
    wrapped_copy[(4,)](x, y, 512, 1024, HINT=hint, BLOCK=128)
    np.testing.assert_array_equal(y, x * 3)


def test_hints_reach_the_ir_and_vectorize_the_gpu_code():
    # 1024 elements over 128 threads: runs of 8 per thread, two 16-byte accesses each.
    x = np.zeros(4096, np.float32)
    plain = wrapped_copy.warmup(x, x, 4096, 2048, HINT=False, BLOCK=1024, grid=(4,), target="sm_90a")
    hinted = wrapped_copy.warmup(x, x, 4096, 2048, HINT=True, BLOCK=1024, grid=(4,), target="sm_90a")
    assert "hint" not in plain.asm["tile"]
    assert "divisibility = [1024]" in hinted.asm["tile"] and "contiguity = [1024]" in hinted.asm["tile"]
    assert "ld.global.v4" not in plain.asm["ptx"] and "st.global.v4" not in plain.asm["ptx"]
    assert "ld.global.v4" in hinted.asm["ptx"] and "st.global.v4" in hinted.asm["ptx"]


@tf.jit
def k_bad_hint(x_ptr, V: tl.constexpr):
    offs = tl.multiple_of(tl.arange(0, 16), V)
    tl.store(x_ptr + offs, offs)


@pytest.mark.parametrize("v", [0, -4, 2.5])
def test_bad_hint_values_are_rejected_at_the_call(v):
    x = np.zeros(16, np.int32)
    with pytest.raises(tf.CompilationError, match="multiple_of takes positive integers") as info:
        k_bad_hint[(1,)](x, V=v)
    assert "offs = tl.multiple_of" in str(info.value)


def test_non_power_of_two_hints_keep_their_power_of_two_part():
    x = np.zeros(16, np.int32)
    k = k_bad_hint.warmup(x, V=12, grid=(1,), target="sm_90a")
    assert "divisibility = [4]" in k.asm["tile"]
