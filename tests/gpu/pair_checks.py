"""Two kernels on the same bf16 operands, bit for bit each other and within the float64
bound (the bf16 rounding of the output, 2^-8 relative, plus K fp32 additions, K·2^-23 of
the sum of |products|): shared by the GPU tests of kernels that must not change a bit of
another's results (flattened loops, warp specialization)."""


def check_matmul_pair(kernels, shape, tiles, grid, seed):
    """Runs each (kernel, extra constexprs) of `kernels` (the tutorials' persistent matmul
    signature) at tiles (BM, BN, BK, num_warps, num_stages) on one grid; checks them."""
    import torch  # imported here: test modules import this file before skipping without torch

    M, N, K = shape
    bm, bn, bk, warps, stages = tiles
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
    b = torch.randn(N, K, device="cuda", generator=g).to(torch.bfloat16)
    outs = []
    for kernel, extra in kernels:
        c = torch.full((M, N), 7.0, device="cuda", dtype=torch.bfloat16)
        kernel[(grid,)](a, b, c, M, N, K, BM=bm, BN=bn, BK=bk, num_warps=warps, num_stages=stages, **extra)
        outs.append(c)
    torch.cuda.synchronize()
    assert torch.equal(outs[0].view(torch.int16), outs[1].view(torch.int16))
    _within_float64(outs[0], a, b.T, "c")


def grouped_operands(splits, seed):
    """x [4096, 1024], dy [4096, 768], w [G, 768, 1024] bf16 and the splits on the GPU."""
    import torch

    rows, k, n = 4096, 1024, 768
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(rows, k, device="cuda", generator=g).to(torch.bfloat16)
    dy = torch.randn(rows, n, device="cuda", generator=g).to(torch.bfloat16)
    w = (torch.randn(len(splits), n, k, device="cuda", generator=g) * 0.05).to(torch.bfloat16)
    return x, dy, w, torch.tensor(splits, dtype=torch.int32, device="cuda")


def check_grouped_pair(outs, splits, src, w, dgrad):
    """Two grouped GEMM results (src = x, or dy for the dgrad) over the rows the splits
    cover: the same bits, and group by group within the float64 bound."""
    import torch

    torch.cuda.synchronize()
    end = min(src.shape[0], sum(max(v, 0) for v in splits))
    assert torch.equal(outs[0][:end].view(torch.int16), outs[1][:end].view(torch.int16))
    at = 0
    for gi, cnt in enumerate(splits):
        if cnt <= 0:
            continue
        _within_float64(outs[0][at : at + cnt], src[at : at + cnt], w[gi] if dgrad else w[gi].T, f"group {gi}")
        at += cnt


def _within_float64(got, a, b, what):
    a64, b64 = a.double(), b.double()
    ref, mag = a64 @ b64, a64.abs() @ b64.abs()
    err = (got.double() - ref).abs()
    assert (err <= 2.0**-8 * ref.abs() + a.shape[1] * 2.0**-23 * mag).all(), (what, err.max().item())
