"""How far fp8 wgmma dots (fp32 promotion every 128 of K) land from float64, relative to
the sum of |products|, over random inputs: the basis of the fp8 tolerance in tests/gpu.
python3 bench/fp8_error.py"""

import torch

from tests.shared_kernels import dot8


def main():
    worst = 0.0
    for m, n, k, bk, warps in [(128, 128, 256, 64, 8), (64, 256, 128, 128, 4)]:
        for bt in (False, True):
            for _ in range(20):
                a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
                b = torch.randn(k, n, device="cuda").to(torch.float8_e4m3fn)
                c = torch.empty(m, n, device="cuda")
                dot8[(1,)](a, b.t().contiguous() if bt else b, c, M=m, N=n, K=k, BK=bk, BT=bt, num_warps=warps)
                ref = a.double() @ b.double()
                ratio = ((c.double() - ref).abs() / (a.double().abs() @ b.double().abs())).max().item()
                worst = max(worst, ratio)
    print(f"worst |error| / sum|products| over 80 dots: {worst:.3g} (2^-12 = {2**-12:.3g}, 2^-10 = {2**-10:.3g})")


if __name__ == "__main__":
    main()
