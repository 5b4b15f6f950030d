"""Warp-specialized kernels on the GPU, with one consumer group or two taking turns
(ping-pong): the tutorial's specialized persistent matmul bit for bit its plain form
and against float64, over tile configs, consumer warps, stage counts, ragged M, N, K
(K below one step, zero-filled tails) and grids with idle programs or many tiles per
program; the library's persistent grouped GEMM (forward and dgrad)
with config.warp_specialize bit for bit without it, over ragged and empty groups."""

import pytest
import tilefuse as tf
from tilefuse import moe

from kernels_dsl.tutorials.matmul_persistent import matmul_persistent_kernel, matmul_ws_kernel

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]

# (BM, BN, BK, num_warps, num_stages, consumer groups): 2 groups take the tiles in turns.
CONFIGS = [
    (128, 256, 64, 8, 3, 1),
    (128, 128, 64, 8, 4, 1),
    (128, 128, 64, 4, 4, 1),
    (64, 128, 64, 4, 3, 1),
    (128, 128, 128, 8, 2, 1),
    (256, 128, 64, 16, 3, 1),
    (128, 128, 64, 4, 4, 2),
    (128, 128, 64, 4, 3, 2),
    (64, 256, 64, 4, 4, 2),
    (64, 128, 64, 4, 2, 2),
    (128, 128, 128, 4, 2, 2),
]


# K a multiple of 16 (TMA: 16-byte row strides; else the flag is dropped), ragged M, N, K.
SHAPES = [(1000, 520, 720), (2048, 1024, 64), (384, 2048, 4096), (300, 200, 48)]


@pytest.mark.parametrize("grid", [132, 7, 1000])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "x".join(map(str, c)))
def test_specialized_matmul(shape, config, grid):
    M, N, K = shape
    bm, bn, bk, warps, stages, groups = config
    g = torch.Generator(device="cuda").manual_seed(M * N + K + grid)
    a = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
    b = torch.randn(N, K, device="cuda", generator=g).to(torch.bfloat16)
    outs = []
    for kernel, extra in ((matmul_ws_kernel, dict(GROUPS=groups)), (matmul_persistent_kernel, {})):
        c = torch.full((M, N), 7.0, device="cuda", dtype=torch.bfloat16)
        kernel[(grid,)](a, b, c, M, N, K, BM=bm, BN=bn, BK=bk, num_warps=warps, num_stages=stages, **extra)
        outs.append(c)
    torch.cuda.synchronize()
    assert torch.equal(outs[0].view(torch.int16), outs[1].view(torch.int16))
    a64, b64 = a.double(), b.double()
    ref, mag = a64 @ b64.T, a64.abs() @ b64.abs().T
    err = (outs[0].double() - ref).abs()
    assert (err <= 2.0**-8 * ref.abs() + K * 2.0**-23 * mag).all(), err.max().item()


@pytest.mark.parametrize("dgrad", [False, True])
@pytest.mark.parametrize("splits", [[900, 0, 1500, 37, 1, 1200, 0], [4096], [1, 2, 3, 4000], [0, 0, 0, 0]])
@pytest.mark.parametrize(
    "tiles",
    [
        (128, 256, 64, 8, 3, 1),
        (128, 128, 64, 8, 3, 1),
        (128, 128, 64, 4, 4, 1),
        (128, 128, 64, 4, 4, 2),
        (64, 256, 64, 4, 4, 2),
    ],
    ids=lambda c: "x".join(map(str, c)),
)
def test_grouped_gemm_specialized(splits, dgrad, tiles):
    rows, k, n = 4096, 1024, 768
    g = torch.Generator(device="cuda").manual_seed(len(splits) + 10 * dgrad)
    x = torch.randn(rows, k, device="cuda", generator=g).to(torch.bfloat16)
    dy = torch.randn(rows, n, device="cuda", generator=g).to(torch.bfloat16)
    w = (torch.randn(len(splits), n, k, device="cuda", generator=g) * 0.05).to(torch.bfloat16)
    s = torch.tensor(splits, dtype=torch.int32, device="cuda")
    outs = []
    for ws in (tiles[5], 0):
        cfg = moe.GemmConfig(*tiles[:5], True, ws)
        outs.append(moe.grouped_gemm_dgrad(dy, w, s, config=cfg) if dgrad else moe.grouped_gemm(x, w, s, config=cfg))
    torch.cuda.synchronize()
    end = min(rows, sum(max(v, 0) for v in splits))
    assert torch.equal(outs[0][:end].view(torch.int16), outs[1][:end].view(torch.int16))
    # And against float64, group by group.
    src = dy if dgrad else x
    at = 0
    for gi, cnt in enumerate(splits):
        if cnt <= 0:
            continue
        wg = w[gi].double()
        ref = src[at : at + cnt].double() @ (wg if dgrad else wg.T)
        mag = src[at : at + cnt].double().abs() @ (wg.abs() if dgrad else wg.abs().T)
        err = (outs[0][at : at + cnt].double() - ref).abs()
        kk = src.shape[1]
        assert (err <= 2.0**-8 * ref.abs() + kk * 2.0**-23 * mag).all(), (gi, err.max().item())
        at += cnt


def test_a_ring_that_leaves_no_room_for_the_epilogue_is_a_launch_error():
    # Specialized, the ring stays live while the consumers store (4 x 48 KiB + the 64 KiB
    # epilogue tile > 227 KiB); the plain persistent kernel reuses the ring's bytes.
    a = torch.randn(256, 256, device="cuda").to(torch.bfloat16)
    c = torch.empty(256, 256, device="cuda", dtype=torch.bfloat16)
    args = (a, a, c, 256, 256, 256)
    matmul_persistent_kernel[(2,)](*args, BM=128, BN=256, BK=64, num_warps=8, num_stages=4)
    with pytest.raises(tf.LaunchError, match="shared memory with num_warps=8, num_stages=4"):
        matmul_ws_kernel[(2,)](*args, BM=128, BN=256, BK=64, num_warps=8, num_stages=4)
