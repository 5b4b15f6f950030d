"""Tutorial 03c: a persistent matmul C = A Bᵀ on descriptors, its loops flattened.

One program per SM loops over the output tiles. `matmul_persistent_kernel` nests a
pipelined K loop in the loop over tiles; `matmul_flat_kernel` runs one pipelined loop
over every (tile, K step) of the program, with the epilogue under an `if` at a tile's
last step: the copies of the next tile's first steps are in flight while a tile is
stored. The compiler keeps the accumulator in the wgmma layout through the `if`, waits
for the tensor cores only in the iterations that store, and restarts the accumulator
with the wgmma's scale-d flag instead of zeroing its registers (restart-accumulators).
Both compute each tile's K steps in the same order: the same bits.
"""

import tilefuse as tf
import tilefuse.language as tl


@tf.jit
def matmul_persistent_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, [M, K], [K, 1], [BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, [N, K], [K, 1], [BN, BK])
    tiles_n = tl.cdiv(N, BN)
    for tile in range(tl.program_id(0), tl.cdiv(M, BM) * tiles_n, tl.num_programs(0)):
        _tile(a_desc, b_desc, c_ptr, tile, tiles_n, M, N, K, BM, BN, BK)


@tf.jit
def matmul_ws_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUPS: tl.constexpr = 1
):
    # matmul_persistent_kernel, warp-specialized: a producer warpgroup issues the TMA
    # copies of every tile's K steps, running ahead into the next tile while the
    # consumer warps store this one. GROUPS=2: two groups of num_warps consumer warps
    # take the tiles in turns, one storing its tile while the other's wgmma run.
    a_desc = tl.make_tensor_descriptor(a_ptr, [M, K], [K, 1], [BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, [N, K], [K, 1], [BN, BK])
    tiles_n = tl.cdiv(N, BN)
    for tile in tl.range(
        tl.program_id(0), tl.cdiv(M, BM) * tiles_n, tl.num_programs(0), warp_specialize=True, num_consumer_groups=GROUPS
    ):
        _tile(a_desc, b_desc, c_ptr, tile, tiles_n, M, N, K, BM, BN, BK)


@tf.jit
def _tile(a_desc, b_desc, c_ptr, tile, tiles_n, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    # One output tile: its K loop (pipelined), then its store.
    m0 = (tile // tiles_n) * BM
    n0 = (tile % tiles_n) * BN
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        acc = tl.dot(a_desc.load([m0, k]), tl.trans(b_desc.load([n0, k])), acc)
    _store(c_ptr, acc, m0, n0, M, N, BM, BN)


@tf.jit
def matmul_flat_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, [M, K], [K, 1], [BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, [N, K], [K, 1], [BN, BK])
    tiles_n = tl.cdiv(N, BN)
    k_tiles = tl.cdiv(K, BK)
    mine = tl.cdiv(tl.cdiv(M, BM) * tiles_n - tl.program_id(0), tl.num_programs(0))
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for it in range(0, mine * k_tiles):
        ki = it % k_tiles
        tile = tl.program_id(0) + (it // k_tiles) * tl.num_programs(0)
        m0 = (tile // tiles_n) * BM
        n0 = (tile % tiles_n) * BN
        acc = tl.dot(a_desc.load([m0, ki * BK]), tl.trans(b_desc.load([n0, ki * BK])), acc)
        if ki == k_tiles - 1:
            _store(c_ptr, acc, m0, n0, M, N, BM, BN)
            acc = tl.zeros((BM, BN), dtype=tl.float32)


@tf.jit
def _store(c_ptr, acc, m0, n0, M, N, BM: tl.constexpr, BN: tl.constexpr):
    rm = m0 + tl.arange(0, BM)
    rn = n0 + tl.arange(0, BN)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16), mask=(rm[:, None] < M) & (rn[None, :] < N))
