"""Loops that read a wgmma group's result with other ops, on the GPU against float64:
the accumulator rescaled in its iteration (bf16 and f16, several tilings) and fp8 partial
sums into a zero accumulator scaled in their iteration or the next (insert-waits'
resultWaits; before it, ptxas had to inject the waits itself)."""

import numpy as np
import pytest

from tests import wgmma_reader_kernels as wk

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("bm,bn,bk,warps", [(128, 128, 64, 8), (64, 128, 32, 4), (128, 256, 64, 8)])
def test_rescale(dtype, bm, bn, bk, warps):
    m, n, k = 512, 512, 1024
    g = torch.Generator(device="cuda").manual_seed(bm + bn + bk)
    a = torch.randn(m, k, device="cuda", generator=g).to(dtype)
    b = torch.randn(k, n, device="cuda", generator=g).to(dtype)
    c = torch.full((m, n), float("nan"), device="cuda")
    wk.rescale_matmul[(m // bm, n // bn)](a, b, c, m, n, k, BM=bm, BN=bn, BK=bk, num_warps=warps)
    ref = wk.rescale_reference(a.double().cpu().numpy(), b.double().cpu().numpy(), bk)
    bound = 2.0**-20 * (a.double().abs() @ b.double().abs()).cpu().numpy()
    np.testing.assert_array_less(np.abs(c.cpu().numpy() - ref), bound + 1e-30)


@pytest.mark.parametrize("carry", [False, True])
@pytest.mark.parametrize("bn,bk", [(128, 128), (64, 64), (128, 32)])
def test_fp8_scaled_steps(carry, bn, bk):
    m, n, k = 256, 256, 1024
    g = torch.Generator(device="cuda").manual_seed(bn * bk + carry)
    a = torch.randn(m, k, device="cuda", generator=g).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda", generator=g).to(torch.float8_e4m3fn)
    s = 2.0 ** torch.randint(-3, 4, (k // bk,), device="cuda", generator=g).float()
    c = torch.full((m, n), float("nan"), device="cuda")
    wk.fp8_scaled_steps[(m // 128, n // bn)](a, b, s, c, m, n, k, BM=128, BN=bn, BK=bk, CARRY=carry, num_warps=8)
    a64, b64, s64 = a.double().cpu().numpy(), b.double().cpu().numpy(), s.double().cpu().numpy()
    ref = wk.fp8_scaled_reference(a64, b64, s64, bk)
    # fp8 products are exact; the tensor cores sum a step's with fewer bits than fp32
    # (2^-13 relative here, with room), then fp32 adds
    bound = 2.0**-12 * (np.abs(a64) @ np.abs(b64).T) * s64.max()
    np.testing.assert_array_less(np.abs(c.cpu().numpy() - ref), bound + 1e-30)
