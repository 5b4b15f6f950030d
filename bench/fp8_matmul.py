"""fp8 e4m3 matmul on wgmma (K-major operands, fp32 promotion every 128 of K) against
torch._scaled_mm at 4096^3, bf16 output: with pointers (cp.async) and with tensor
descriptors (TMA). python3 bench/fp8_matmul.py"""

import tilefuse as tf
import tilefuse.language as tl
import torch
import triton


@tf.jit
def fp8_matmul(a_ptr, bt_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    # A is [M, K] and B is given transposed, [N, K]: both K-major, as fp8 wgmma wants them.
    pid = tl.program_id(0)
    pid_m, pid_n = pid // tl.cdiv(N, BN), pid % tl.cdiv(N, BN)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * K + rk[None, :]
    b_ptrs = bt_ptr + rn[:, None] * K + rk[None, :]
    acc = tl.zeros((BM, BN), tl.float32)
    for _ in range(0, tl.cdiv(K, BK)):
        acc = tl.dot(tl.load(a_ptrs), tl.trans(tl.load(b_ptrs)), acc)
        a_ptrs += BK
        b_ptrs += BK
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16))


@tf.jit
def fp8_matmul_desc(a_ptr, bt_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, [M, K], [K, 1], [BM, BK])
    b_desc = tl.make_tensor_descriptor(bt_ptr, [N, K], [K, 1], [BN, BK])
    c_desc = tl.make_tensor_descriptor(c_ptr, [M, N], [N, 1], [BM, BN])
    pid = tl.program_id(0)
    pid_m, pid_n = pid // tl.cdiv(N, BN), pid % tl.cdiv(N, BN)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        acc = tl.dot(a_desc.load([pid_m * BM, k * BK]), tl.trans(b_desc.load([pid_n * BN, k * BK])), acc)
    c_desc.store([pid_m * BM, pid_n * BN], acc.to(tl.bfloat16))


def main():
    n = 4096
    a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
    bt = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    one = torch.tensor(1.0, device="cuda")
    ref = torch._scaled_mm(a, bt.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    flop = 2 * n**3
    ms = triton.testing.do_bench(
        lambda: torch._scaled_mm(a, bt.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16), return_mode="median"
    )
    print(f"torch._scaled_mm: {flop / ms / 1e9:.1f} TFLOP/s")
    configs = [(128, 256, 128, 8, 3), (128, 128, 128, 8, 4), (128, 256, 64, 8, 4), (128, 128, 128, 4, 4)]
    for kernel in (fp8_matmul, fp8_matmul_desc):
        for bm, bn, bk, w, st in configs:
            grid = ((n // bm) * (n // bn),)
            kw = dict(BM=bm, BN=bn, BK=bk, num_warps=w, num_stages=st)
            c.zero_()
            try:
                ms = triton.testing.do_bench(
                    lambda kernel=kernel, grid=grid, kw=kw: kernel[grid](a, bt, c, n, n, n, **kw),
                    return_mode="median",
                )
            except tf.LaunchError as e:
                print(f"{kernel.__name__} {bm}x{bn}x{bk} w{w} s{st}: {e}")
                continue
            err = (c.float() - ref.float()).abs().max().item()
            tflops = flop / ms / 1e9
            print(f"{kernel.__name__} {bm}x{bn}x{bk} w{w} s{st}: {tflops:.1f} TFLOP/s (max |diff| vs torch {err:.3g})")


if __name__ == "__main__":
    main()
