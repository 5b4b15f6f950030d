"""One fp8 or int8 dot on the GPU (tests.shared_kernels.dot8) against torch: shared by
the GPU tests and the older-target runs (tests/gpu/test_older_targets.py)."""

from tests.shared_kernels import dot8


def run_dot8(dtype, m, n, k, bk, bt, warps):
    """Runs dot8 on random operands (B given as [N, K] when bt), checks C, returns the PTX.

    int8 is exact. fp8 products are exact, but the tensor cores add them with fewer bits
    than fp32 (the wgmma lowering moves each 128 of K into fp32): bench/fp8_error.py
    measured at most 2.6e-4 of the sum of |products| over 80 random dots on the H200; the
    bound is 2^-10 (9.8e-4), far below one fp8 ulp (2^-3)."""
    import torch  # imported here: test modules import this file before skipping without torch

    if dtype == torch.int8:
        a = torch.randint(-128, 128, (m, k), device="cuda", dtype=torch.int8)
        b = torch.randint(-128, 128, (k, n), device="cuda", dtype=torch.int8)
        c = torch.zeros(m, n, device="cuda", dtype=torch.int32)
    else:
        a = torch.randn(m, k, device="cuda").to(dtype)
        b = torch.randn(k, n, device="cuda").to(dtype)
        c = torch.full((m, n), float("nan"), device="cuda")
    bin_ = b.t().contiguous() if bt else b
    kw = dict(M=m, N=n, K=k, BK=bk, BT=bt)
    ptx = dot8.warmup(a, bin_, c, grid=(1,), num_warps=warps, **kw).asm["ptx"]
    dot8[(1,)](a, bin_, c, num_warps=warps, **kw)
    if dtype == torch.int8:  # torch has no int64 matmul on the GPU
        assert torch.equal(c.cpu().long(), a.cpu().long() @ b.cpu().long())
        return ptx
    ref = a.double() @ b.double()
    scale = a.double().abs() @ b.double().abs()
    ratio = ((c.double() - ref).abs() / scale).max().item()
    assert ratio <= 2**-10, f"max error {ratio:.3g} of the sum of |products|"
    return ptx
