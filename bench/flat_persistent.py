"""Persistent bf16 GEMM C = A Bᵀ on descriptors, two loop forms, side by side with
torch.matmul: `nested` (a loop over tiles, each with its own pipelined K loop) and
`flat` (one pipelined loop over every (tile, K step) of the program, the epilogue at a
tile's last step: the next tile's first copies are in flight during the epilogue).

    python3 bench/flat_persistent.py            # on the GPU
"""

import functools
import sys

import torch

from kernels_dsl.tutorials.matmul_persistent import matmul_flat_kernel as flat_mm
from kernels_dsl.tutorials.matmul_persistent import matmul_persistent_kernel as nested_mm


def ms(fn, reps=20):
    fn()
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for s, e in ev:
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return sorted(s.elapsed_time(e) for s, e in ev)[reps // 2]


def grouped(sms):
    """The library's persistent grouped GEMM (nested loops) beside its flattened form
    (tests/shared_kernels.py's grouped_gemm_flat_kernel),
    same tiles, PEERS.md shapes, balanced routing; bitwise equal results."""
    from tilefuse import moe

    from kernels_dsl.moe import grouped_gemm as K
    from tests.shared_kernels import grouped_gemm_flat_kernel

    nested = K.grouped_gemm_persistent_kernel
    for name, (e, rows, k, n) in {
        "qwen3_30b_fc1": (128, 65536, 2048, 1536),
        "qwen3_30b_fc2": (128, 65536, 768, 2048),
        "deepseekv3_fc1": (32, 32768, 7168, 4096),
    }.items():
        x = torch.randn(rows, k, device="cuda").to(torch.bfloat16)
        w = (torch.randn(e, n, k, device="cuda") * 0.02).to(torch.bfloat16)
        splits = torch.full((e,), rows // e, dtype=torch.int32, device="cuda")
        offs = splits.cumsum(0, dtype=torch.int32)
        flops = 2 * rows * n * k
        row = [
            name,
            f"torch {flops / ms(functools.partial(torch._grouped_mm, x, w.transpose(1, 2), offs=offs)) / 1e9:.0f}",
        ]
        cfg = moe.GemmConfig(128, 256, 64, 8, 3, True)
        call = functools.partial(moe.grouped_gemm, x, w, splits, config=cfg)
        outs = []
        for label, kern in (("nested", nested), ("flat", grouped_gemm_flat_kernel)):
            K.grouped_gemm_persistent_kernel = kern
            outs.append(call())
            row.append(f"{label} {flops / ms(call) / 1e9:.0f}")
        K.grouped_gemm_persistent_kernel = nested
        row.append("same bits" if torch.equal(outs[0].view(torch.int16), outs[1].view(torch.int16)) else "DIFFER")
        print(" | ".join(row), flush=True)


def main():
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for M, N, K in [(65536, 2048, 768), (32768, 4096, 7168)]:
        a = torch.randn(M, K, device="cuda").to(torch.bfloat16)
        b = torch.randn(N, K, device="cuda").to(torch.bfloat16)
        ref = (a.float() @ b.float().T).to(torch.bfloat16)
        flops = 2 * M * N * K
        row = [f"{M}x{N}x{K}", f"torch {flops / ms(lambda a=a, b=b: a @ b.T) / 1e9:.0f}"]
        for name, k in (("nested", nested_mm), ("flat", flat_mm)):
            for bm, bn, bk, w, s in ((128, 256, 64, 8, 3),):
                c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)

                def run(k=k, a=a, b=b, c=c, M=M, N=N, K=K, bm=bm, bn=bn, bk=bk, w=w, s=s):
                    k[(sms,)](a, b, c, M, N, K, BM=bm, BN=bn, BK=bk, num_warps=w, num_stages=s)

                run()
                err = (c.float() - ref.float()).abs().max().item() / ref.float().abs().max().item()
                t = ms(run)
                row.append(f"{name} {bm}x{bn}x{bk}s{s} {flops / t / 1e9:.0f}{'' if err < 2e-2 else f' BAD {err:.2e}'}")
        print(" | ".join(row), flush=True)
    grouped(sms)
    return 0


if __name__ == "__main__":
    sys.exit(main())
