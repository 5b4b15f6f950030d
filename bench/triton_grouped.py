"""The Triton peer of bench/moe_bench.py: a persistent grouped GEMM as in Triton's tutorial
08 (grouped GEMM: a grid of #SMs programs, each walking the groups in order and taking
every NUM_SM-th tile of the concatenated tile space), adapted to MoE's ragged groups:
the groups are row ranges of one x [T, K] given by device offsets (no host sync), the
weights w [E, N, K], y_g = x_g w_gᵀ. Operands through tensor descriptors (TMA), built
once per program; the store is masked to the group's rows (the next group's rows are
read into a tile's tail but never written). Within a group, GROUP_M row tiles sweep the
column tiles together (tutorial 03's L2 order). Triton 3.6 (descriptors need an allocator).
"""

import torch
import triton
import triton.language as tl

CONFIGS = [  # (BM, BN, BK, GROUP_M, warps, stages): PEERS.md's best simple configs
    (128, 256, 64, 8, 8, 3),
    (128, 128, 64, 8, 8, 4),
]


@triton.jit
def _grouped_persistent(
    x_ptr,
    w_ptr,
    y_ptr,
    offs_ptr,
    E,
    T,
    N,
    K,
    NUM_SM: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    x_desc = tl.make_tensor_descriptor(x_ptr, [T, K], [K, 1], [BM, BK])
    w_desc = tl.make_tensor_descriptor(w_ptr, [E * N, K], [K, 1], [BN, BK])
    tiles_n = tl.cdiv(N, BN)
    tile = tl.program_id(0)
    last = 0
    for g in range(E):
        start = tl.load(offs_ptr + g)
        end = tl.load(offs_ptr + g + 1)
        tiles_m = tl.cdiv(end - start, BM)
        count = tiles_m * tiles_n
        while tile >= last and tile < last + count:
            local = tile - last
            per_band = GROUP_M * tiles_n
            band_m = (local // per_band) * GROUP_M
            band = min(tiles_m - band_m, GROUP_M)
            pid_m = band_m + (local % per_band) % band
            pid_n = (local % per_band) // band
            m0 = start + pid_m * BM
            acc = tl.zeros((BM, BN), dtype=tl.float32)
            for k in range(0, K, BK):
                a = x_desc.load([m0, k])
                b = w_desc.load([g * N + pid_n * BN, k])
                acc = tl.dot(a, b.T, acc)
            rm = m0 + tl.arange(0, BM)
            rn = pid_n * BN + tl.arange(0, BN)
            ptrs = y_ptr + rm[:, None].to(tl.int64) * N + rn[None, :]
            tl.store(ptrs, acc.to(tl.bfloat16), mask=(rm[:, None] < end) & (rn[None, :] < N))
            tile += NUM_SM
        last += count


def _alloc(size, align, stream):
    return torch.empty(size, dtype=torch.int8, device="cuda")


def grouped_gemm(x, w, offsets, config, out=None):
    """y [T, N] bf16 = x_g w_gᵀ per group; offsets int32 [E + 1] on the device."""
    triton.set_allocator(_alloc)
    e, n, k = w.shape
    y = torch.empty(x.shape[0], n, device=x.device, dtype=torch.bfloat16) if out is None else out
    bm, bn, bk, group_m, warps, stages = config
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    _grouped_persistent[(sms,)](
        x,
        w,
        y,
        offsets,
        e,
        x.shape[0],
        n,
        k,
        NUM_SM=sms,
        BM=bm,
        BN=bn,
        BK=bk,
        GROUP_M=group_m,
        num_warps=warps,
        num_stages=stages,
    )
    return y
