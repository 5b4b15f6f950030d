"""The unsigned-integer and random-number kernels (tests/unsigned_kernels.py) lower to PTX
that ptxas accepts for sm_90a and sm_80, with the unsigned instructions: so a lowering of
these ops that emits invalid or signed PTX fails on a machine without a GPU."""

import shutil

import ml_dtypes
import numpy as np
import pytest
import tilefuse.language as tl

from tests.ptxas import PTXAS, assert_assembles
from tests.unsigned_kernels import BINARY_OPS, N, binary, compare, convert, philox_kat, random_streams, reduce_all

pytestmark = pytest.mark.skipif(not shutil.which("ptxas") and not shutil.os.path.exists(PTXAS), reason="needs ptxas")

# The PTX each op must use on unsigned operands (signed ones would be div.s32, shr.s32, ...).
UNSIGNED_PTX = {
    "floordiv": "div.u",
    "mod": "rem.u",
    "shr": "shr.u",
    "min": "min.u",
    "max": "max.u",
    "umulhi": "mul.hi.u",
}


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("d", [np.uint8, np.uint32, np.uint64])
@pytest.mark.parametrize("op", BINARY_OPS)
def test_binary_ops_assemble(op, d, arch, tmp_path):
    a = np.zeros(N, d)
    k = binary.warmup(a, a, a, grid=(1,), target=arch, OP=op, N=N)
    assert_assembles(k.asm["ptx"], arch, tmp_path)
    if op in UNSIGNED_PTX and d != np.uint8:  # u8 computes in 16/32-bit registers
        assert UNSIGNED_PTX[op] in k.asm["ptx"], op


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_other_kernels_assemble(arch, tmp_path):
    u32, u64, f32 = np.zeros(N, np.uint32), np.zeros(N, np.uint64), np.zeros(N, np.float32)
    kernels = [
        compare.warmup(u32, u32, np.zeros(N, np.bool_), grid=(1,), target=arch, OP="lt", N=N),
        convert.warmup(u64, f32, grid=(1,), target=arch, TO=tl.float32, N=N),
        convert.warmup(u64, f32, grid=(1,), target=arch, TO=tl.float32, N=N, ROUND="rtz"),
        convert.warmup(u64, np.zeros(N, np.float64), grid=(1,), target=arch, TO=tl.float64, N=N, ROUND="rtz"),
        convert.warmup(f32, u32, grid=(1,), target=arch, TO=tl.uint32, N=N),
        reduce_all.warmup(u32, np.zeros(5, np.uint64), grid=(1,), target=arch, N=N),
        philox_kat.warmup(u32, u32, u32, grid=(1,), target=arch, N=N),
        random_streams.warmup(np.zeros(15 * N, np.uint32), 7, 2**40, grid=(1,), target=arch, WIDE=True, N=N),
    ]
    for k in kernels:
        assert_assembles(k.asm["ptx"], arch, tmp_path)
    assert "setp.lt.u32" in kernels[0].asm["ptx"]
    assert "cvt.rz.f64.u64" in kernels[3].asm["ptx"]
    assert any(c in kernels[4].asm["ptx"] for c in ("cvt.rzi.sat.u32.f32", "cvt.rzi.u32.f32"))


@pytest.mark.parametrize("src", [np.float64, np.int64, np.uint64, np.uint32])
def test_bf16_casts_round_once_on_sm80(src, tmp_path):
    # sm_80 has no cvt.rn.bf16 from these; a detour through f32 would round twice. The one
    # rounding is rint in f64 (cvt.rni.f64.f64) of the exact value; what follows is exact.
    out = np.zeros(N, ml_dtypes.bfloat16)
    k = convert.warmup(np.zeros(N, src), out, grid=(1,), target="sm_80", TO=tl.bfloat16, N=N)
    assert_assembles(k.asm["ptx"], "sm_80", tmp_path)
    assert "cvt.rni.f64.f64" in k.asm["ptx"]
