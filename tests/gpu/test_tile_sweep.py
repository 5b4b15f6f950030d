"""Tile configs of the tutorial matmuls (pointers and descriptors) against a float64
reference, with partial tiles on every axis: every config computes the right result
or is refused with a clear error, none is silently wrong. Covers warpgroups split
along M and along N, every swizzle width, cp.async and TMA pipelines."""

import itertools

import pytest
import tilefuse as tf

from kernels_dsl.tutorials import matmul
from kernels_dsl.tutorials.matmul_desc import matmul_desc_kernel

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]

# Not a multiple of any tile on M, N or K; strides stay multiples of 16 elements (TMA).
M, N, K = 200, 176, 208
CONFIGS = list(itertools.product((64, 128), (16, 32, 64, 128, 256), (32, 64), (4, 8), (2, 3, 4)))
DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "e4m3": torch.float8_e4m3fn}


def operands(dtype):
    g = torch.Generator(device="cuda").manual_seed(hash(dtype) % 2**31)
    a = torch.randn(M, K, device="cuda", generator=g).to(dtype)
    b = torch.randn(K, N, device="cuda", generator=g).to(dtype)
    # fp8 dots write fp32 (an fp8 result would hide errors under its own rounding).
    c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float32 if dtype.itemsize == 1 else dtype)
    return a, b, c


def check(a, b, c):
    ref = a.double() @ b.double()
    bound = a.double().abs() @ b.double().abs()
    got = c.double()
    if a.dtype.itemsize == 1:
        # fp8 tensor cores add products with fewer bits than fp32 (at most 2^-10 of the
        # sum of |products| measured, bench/RESULTS.md).
        tol = 2**-9 * bound
    else:
        # fp32 accumulation, then one rounding to bf16 (2^-8 relative) or f16 (2^-11).
        u = 2**-8 if a.dtype == torch.bfloat16 else 2**-11
        tol = u * ref.abs() + 2**-20 * bound
    bad = ~((got - ref).abs() <= tol)
    assert not bad.any(), f"{int(bad.sum())} of {bad.numel()} elements wrong, first at {bad.nonzero()[0].tolist()}"


def launch(kind, cfg, a, b, c):
    bm, bn, bk, warps, stages = cfg
    meta = dict(BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=8)
    grid = (tf.cdiv(M, bm) * tf.cdiv(N, bn),)
    if kind == "ptr":
        args = (M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
        matmul.matmul_kernel[grid](a, b, c, *args, ACTIVATION="", num_warps=warps, num_stages=stages, **meta)
    else:
        args = (M, N, K, a.stride(0), b.stride(0), c.stride(0))
        matmul_desc_kernel[grid](a, b, c, *args, num_warps=warps, num_stages=stages, **meta)


@pytest.mark.parametrize("kind", ["ptr", "desc"])
@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_tile_configs(kind, dtype):
    a, b, c = operands(DTYPES[dtype])
    wrong, refused = [], []
    for cfg in CONFIGS:
        c.fill_(float("nan"))
        try:
            launch(kind, cfg, a, b, c)
            torch.cuda.synchronize()
        except (tf.CompilationError, tf.LaunchError) as e:
            refused.append((cfg, str(e).splitlines()[0]))
            continue
        try:
            check(a, b, c)
        except AssertionError as e:
            wrong.append((cfg, str(e)))
    assert not wrong, f"{len(wrong)} of {len(CONFIGS)} configs wrong:\n" + "\n".join(map(str, wrong))
    # The only refusals: tiles whose stages do not fit in shared memory, said so.
    for cfg, msg in refused:
        assert "shared memory" in msg, (cfg, msg)
    print(f"{kind} {dtype}: {len(CONFIGS) - len(refused)} configs right, {len(refused)} refused")
