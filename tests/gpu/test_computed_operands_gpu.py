"""K loops whose dot operands are computed from what they load (converted, dequantized,
unpacked), pipelined on the GPU: their loads copied ahead into rings and read back, the
operands stored for wgmma into two alternating stages. Every tile config of a sweep
against a float64 reference; each must pipeline (cp.async in its PTX)."""

import itertools

import numpy as np
import pytest
import tilefuse as tf

from tests.shared_kernels import computed_dot_loop, fp4_dot_loop

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]

# Tile configs: BM, BN, BK, warps, stages.
CONFIGS = list(itertools.product([64, 128], [64, 128], [64, 128], [4, 8], [2, 3, 4]))


def ids(c):
    return "x".join(map(str, c[:3])) + f"-w{c[3]}-s{c[4]}"


SMEM = 232448  # bytes of shared memory a block may have on sm_90a


def computed_smem(bm, bn, bk, stages, which):
    """The shared memory of computed_dot_loop's pipeline: a ring of `stages` for each load
    (A f16 or bf16, B fp8 or bf16) and two stages of bf16 for each computed operand."""
    a, b = bm * bk * 2, bk * bn * (1 if "b" in which else 2)
    stored = 2 * 2 * (bm * bk * ("a" in which) + bk * bn * ("b" in which))
    return stages * (a + b) + stored


def check(got, ref, bound, k):
    # fp32 sums of exact products (bf16 x bf16): within k·2^-23 of the sum of |products|.
    err = np.abs(got - ref)
    tol = k * 2.0**-23 * bound
    assert (err <= tol).all(), f"max error {err.max()} at {np.unravel_index(err.argmax(), err.shape)}"


@pytest.mark.parametrize("cfg", CONFIGS, ids=ids)
@pytest.mark.parametrize("which", ["a", "b", "ab"])
def test_computed_operands(cfg, which):
    bm, bn, bk, warps, stages = cfg
    m, n, k = 200, 184, 4 * bk
    g = torch.Generator(device="cuda").manual_seed(CONFIGS.index(cfg) * 3 + len(which))
    a = torch.randn(m, k, device="cuda", generator=g).to(torch.float16 if "a" in which else torch.bfloat16)
    # B's rows 16-byte aligned (192 elements apart), its last tile ragged (N = 184).
    bp = torch.randn(k, 192, device="cuda", generator=g).to(torch.float8_e4m3fn if "b" in which else torch.bfloat16)
    b = bp[:, :n]
    c = torch.full((m, n), float("nan"), device="cuda")
    meta = dict(A_COMPUTED="a" in which, B_COMPUTED="b" in which, BM=bm, BN=bn, BK=bk)
    args = (a, bp, c, m, n, k, 192)
    if computed_smem(bm, bn, bk, stages, which) > SMEM:  # refused before it runs, saying why
        with pytest.raises(tf.LaunchError, match="bytes of shared memory"):
            computed_dot_loop[(1,)](*args, num_warps=warps, num_stages=stages, **meta)
        assert c.isnan().all()
        return
    kern = computed_dot_loop.warmup(*args, grid=(1,), num_warps=warps, num_stages=stages, **meta)
    assert "cp.async" in kern.asm["ptx"] and "wgmma.mma_async" in kern.asm["ptx"]
    computed_dot_loop[(tf.cdiv(m, bm), tf.cdiv(n, bn))](*args, num_warps=warps, num_stages=stages, **meta)
    # The operands as the dot sees them: A halved and rounded to bf16, B's fp8 values (exact in bf16).
    a64 = (a.float() * 0.5).to(torch.bfloat16).double() if "a" in which else a.double()
    b64 = b.double()
    check(c.double().cpu().numpy(), (a64 @ b64).cpu().numpy(), (a64.abs() @ b64.abs()).cpu().numpy(), k)


E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])


def fp4_operand(rng, rows, k):
    """Random e2m1 codes [rows, k] packed two per byte along k, e8m0 scales [rows, k/32]
    (2^-7 .. 2^7), and the float64 values they stand for."""
    codes = rng.integers(0, 16, size=(rows, k), dtype=np.uint8)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    scales = rng.integers(120, 135, size=(rows, k // 32), dtype=np.uint8)
    values = E2M1[codes] * np.exp2(np.repeat(scales.astype(np.float64) - 127, 32, axis=1))
    return packed, scales, values


@pytest.mark.parametrize("cfg", CONFIGS, ids=ids)
def test_fp4_dot_scaled_loop(cfg):
    bm, bn, bk, warps, stages = cfg
    m, n, k = 200, 184, 4 * bk
    rng = np.random.default_rng(list(cfg))
    ap, sa, av = fp4_operand(rng, m, k)
    bp, sb, bv = fp4_operand(rng, n, k)  # Bᵀ: [N, K] packed along K
    dev = [torch.from_numpy(x.view(np.int8)).cuda() for x in (ap, sa, bp, sb)]
    c = torch.full((m, n), float("nan"), device="cuda")
    args = (dev[0], dev[1], dev[2], dev[3], c, m, n, k, k // 32)
    meta = dict(BM=bm, BN=bn, BK=bk)
    kern = fp4_dot_loop.warmup(*args, grid=(1,), num_warps=warps, num_stages=stages, **meta)
    assert "cp.async" in kern.asm["ptx"] and "wgmma.mma_async" in kern.asm["ptx"]
    fp4_dot_loop[(tf.cdiv(m, bm), tf.cdiv(n, bn))](*args, num_warps=warps, num_stages=stages, **meta)
    check(c.double().cpu().numpy(), av @ bv.T, np.abs(av) @ np.abs(bv).T, k)
