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
from tests.gpu.pair_checks import check_grouped_pair, check_matmul_pair, grouped_operands

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
    kernels = [(matmul_ws_kernel, dict(GROUPS=config[5])), (matmul_persistent_kernel, {})]
    check_matmul_pair(kernels, shape, config[:5], grid, shape[0] * shape[1] + shape[2] + grid)


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
    x, dy, w, s = grouped_operands(splits, len(splits) + 10 * dgrad)
    outs = []
    for ws in (tiles[5], 0):
        cfg = moe.GemmConfig(*tiles[:5], True, ws)
        outs.append(moe.grouped_gemm_dgrad(dy, w, s, config=cfg) if dgrad else moe.grouped_gemm(x, w, s, config=cfg))
    check_grouped_pair(outs, splits, dy if dgrad else x, w, dgrad)


def test_a_ring_that_leaves_no_room_for_the_epilogue_is_a_launch_error():
    # Specialized, the ring stays live while the consumers store (4 x 48 KiB + the 64 KiB
    # epilogue tile > 227 KiB); the plain persistent kernel reuses the ring's bytes.
    a = torch.randn(256, 256, device="cuda").to(torch.bfloat16)
    c = torch.empty(256, 256, device="cuda", dtype=torch.bfloat16)
    args = (a, a, c, 256, 256, 256)
    matmul_persistent_kernel[(2,)](*args, BM=128, BN=256, BK=64, num_warps=8, num_stages=4)
    with pytest.raises(tf.LaunchError, match="shared memory with num_warps=8, num_stages=4"):
        matmul_ws_kernel[(2,)](*args, BM=128, BN=256, BK=64, num_warps=8, num_stages=4)
