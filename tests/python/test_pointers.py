"""int64 <-> pointer conversions (issue 16 part 7) on the interpreter, against exact
references: Triton's grouped GEMM tutorial (operand addresses loaded as int64), pointer
round trips, tl.pointer_type of every dtype, bitcast=True, and the errors Triton gives."""

import re

import ml_dtypes
import numpy as np
import pytest
import tilefuse as tf
import tilefuse.language as tl

from tests.pointer_kernels import (
    bitcast_values,
    grouped_matmul_kernel,
    load_through_address,
    pointer_casts,
    pointer_round_trip,
)


@pytest.fixture
def rng(request):
    return np.random.default_rng(abs(hash(request.node.name)) % 2**32)


def grouped_gemm(groups, block=(32, 32, 32), num_sm=4):
    """Runs the tutorial's kernel on the interpreter; groups are (a, b) fp16 pairs."""
    cs = [np.zeros((a.shape[0], b.shape[1]), np.float16) for a, b in groups]
    addr = lambda arrs: np.array([x.ctypes.data for x in arrs], np.int64)  # noqa: E731
    sizes = np.array([[a.shape[0], b.shape[1], a.shape[1]] for a, b in groups], np.int32).ravel()
    lds = np.array([[a.shape[1], b.shape[1], b.shape[1]] for a, b in groups], np.int32).ravel()
    arrays = [x for a, b in groups for x in (a, b)] + cs
    with tf.jit_module.interp_buffers(*arrays):
        grouped_matmul_kernel[(num_sm,)](
            addr([a for a, _ in groups]),
            addr([b for _, b in groups]),
            addr(cs),
            sizes,
            lds,
            len(groups),
            NUM_SM=num_sm,
            BLOCK_SIZE_M=block[0],
            BLOCK_SIZE_N=block[1],
            BLOCK_SIZE_K=block[2],
        )
    return cs


def fp16_matmul_bound(a, b, ref):
    # fp32 accumulation (K products, each exact in fp32) then one rounding to fp16.
    k = a.shape[1]
    return 2.0**-11 * np.abs(ref) + k * 2.0**-24 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))


@pytest.mark.parametrize("seed", [0, 1])
def test_grouped_gemm_tutorial(seed):
    rng = np.random.default_rng(seed)
    shapes = [(64, 32, 96), (32, 64, 32), (96, 96, 64)][: 2 + seed]
    groups = [
        (rng.standard_normal((m, k)).astype(np.float16), rng.standard_normal((k, n)).astype(np.float16))
        for m, n, k in shapes
    ]
    for (a, b), c in zip(groups, grouped_gemm(groups)):
        ref = a.astype(np.float64) @ b.astype(np.float64)
        err = np.abs(c.astype(np.float64) - ref)
        assert (err <= fp16_matmul_bound(a, b, ref)).all(), err.max()


def test_pointer_round_trip(rng):
    x = rng.standard_normal(64).astype(np.float32)
    addr, y = np.zeros(64, np.int64), np.zeros(64, np.float32)
    pointer_round_trip[(1,)](x, addr, y, N=64)
    np.testing.assert_array_equal(addr, x.ctypes.data + 4 * np.arange(64))
    np.testing.assert_array_equal(y, x * 2)


def test_pointer_casts():
    x = np.zeros(8, np.float32)
    out, flags, small = np.zeros(4, np.int64), np.zeros(1, np.int32), np.array([-1], np.int32)
    pointer_casts[(1,)](x, out, flags, small)
    base = x.ctypes.data
    assert list(out[:3]) == [base, base, base + 12]
    assert out[3] == 2**32 - 1  # zero-extended, as LLVM's inttoptr (Triton)
    assert flags[0] == 1


DTYPES = [
    (np.int8, tl.int8),
    (np.int16, tl.int16),
    (np.int32, tl.int32),
    (np.int64, tl.int64),
    (np.uint8, tl.uint8),
    (np.uint16, tl.uint16),
    (np.uint32, tl.uint32),
    (np.uint64, tl.uint64),
    (np.float16, tl.float16),
    (ml_dtypes.bfloat16, tl.bfloat16),
    (np.float32, tl.float32),
    (np.float64, tl.float64),
    (ml_dtypes.float8_e4m3fn, tl.float8e4nv),
    (ml_dtypes.float8_e5m2, tl.float8e5),
    (np.bool_, tl.int1),
]


def random_bits(rng, dtype, n):
    """n values of dtype from random bit patterns (finite for floats)."""
    d = np.dtype(dtype)
    if d == np.bool_:
        return rng.integers(0, 2, n).astype(np.bool_)
    raw = rng.integers(0, 256, n * d.itemsize, dtype=np.uint8).view(d)
    if d.kind in "fV" or d.name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        with np.errstate(invalid="ignore"):
            as_f = raw.astype(np.float64)
        raw = np.where(np.isfinite(as_f), raw, np.zeros_like(raw))
    return raw


@pytest.mark.parametrize("np_dtype, dtype", DTYPES, ids=[d.name for _, d in DTYPES])
def test_pointer_type_of_every_dtype(np_dtype, dtype, rng):
    x = random_bits(rng, np_dtype, 32)
    y = np.zeros_like(x)
    with tf.jit_module.interp_buffers(x):
        load_through_address[(1,)](np.array([x.ctypes.data], np.int64), y, D=dtype, N=32)
    np.testing.assert_array_equal(y.view(np.uint8), x.view(np.uint8))


BITCASTS = [
    (np.float32, np.int32, tl.int32),
    (np.float32, np.uint32, tl.uint32),
    (np.int32, np.float32, tl.float32),
    (np.float16, np.int16, tl.int16),
    (ml_dtypes.bfloat16, np.uint16, tl.uint16),
    (np.float64, np.int64, tl.int64),
    (np.int8, ml_dtypes.float8_e4m3fn, tl.float8e4nv),
]


@pytest.mark.parametrize("src, dst, to", BITCASTS, ids=[f"{np.dtype(s).name}-{t.name}" for s, _, t in BITCASTS])
def test_bitcast_keeps_the_bits(src, dst, to, rng):
    x = random_bits(rng, src, 64)
    if np.dtype(dst).kind == "f":
        # Finite in the destination too: the interpreter holds floats as doubles, which quiets
        # a signalling NaN (int32 0x7f8xxxxx comes back with bit 22 set).
        with np.errstate(invalid="ignore"):
            x = np.where(np.isfinite(x.view(dst).astype(np.float64)), x, np.zeros_like(x))
    y = np.zeros(64, dst)
    bitcast_values[(1,)](x, y, TO=to, N=64)
    np.testing.assert_array_equal(y.view(np.uint8), x.view(np.uint8))


@tf.jit
def bad_cast(x_ptr, out_ptr, WHAT: tl.constexpr):
    if WHAT == "ptr_to_i32":
        tl.store(out_ptr, x_ptr.to(tl.int32))
    elif WHAT == "float_to_ptr":
        tl.store(out_ptr, tl.load(x_ptr).to(tl.pointer_type(tl.float32)).to(tl.int64))
    else:
        tl.store(out_ptr, x_ptr.to(tl.float32))


@pytest.mark.parametrize(
    "what, words",
    [
        ("ptr_to_i32", "a pointer converts to tl.int64"),
        ("float_to_ptr", "only integers (addresses) convert to pointers"),
        ("ptr_to_f32", "a pointer converts to tl.int64"),
    ],
)
def test_bad_pointer_casts_name_the_line(what, words):
    with pytest.raises(tf.CompilationError, match=re.escape(words)) as e:
        bad_cast[(1,)](np.zeros(1, np.float32), np.zeros(1, np.int64), WHAT=what)
    assert e.value.file == __file__ and ".to(" in e.value.source_line


def test_pointer_type_refuses_pointers_to_pointers():
    with pytest.raises(TypeError, match="pointers to pointers"):
        tl.pointer_type(tl.pointer_type(tl.float16))
    assert tl.pointer_type(tl.float16).element_ty == tl.float16


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_pointer_kernels_assemble(arch, tmp_path):
    from tests.ptxas import assert_assembles

    x = np.zeros(64, np.float32)
    k = pointer_round_trip.warmup(x, np.zeros(64, np.int64), x, N=64, grid=(1,), target=arch)
    # Addresses from integers are global memory: ld.global, not generic loads.
    assert "ld.global.f32" in k.asm["ptx"] and "\tld.f32" not in k.asm["ptx"]
    assert_assembles(k.asm["ptx"], arch, tmp_path)
    k = pointer_casts.warmup(
        x, np.zeros(4, np.int64), np.zeros(1, np.int32), np.zeros(1, np.int32), grid=(1,), target=arch
    )
    assert_assembles(k.asm["ptx"], arch, tmp_path)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("block", [(64, 64, 32), (128, 128, 32)])
def test_grouped_gemm_assembles(arch, block, tmp_path):
    from tests.ptxas import assert_assembles

    i64, i32 = np.zeros(4, np.int64), np.zeros(12, np.int32)
    kw = dict(NUM_SM=132, BLOCK_SIZE_M=block[0], BLOCK_SIZE_N=block[1], BLOCK_SIZE_K=block[2])
    k = grouped_matmul_kernel.warmup(i64, i64, i64, i32, i32, 3, grid=(1,), target=arch, **kw)
    ptx = k.asm["ptx"]
    assert ("wgmma.mma_async" if arch == "sm_90a" else "mma.sync") in ptx
    assert_assembles(ptx, arch, tmp_path)
