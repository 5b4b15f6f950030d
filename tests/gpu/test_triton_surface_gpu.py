"""Triton surface pieces on the GPU (issue 16): tuple kernel arguments of torch CUDA
tensors and scalars (each leaf a kernel argument; launches with tuples stay off the C
fast path, so repeated launches are checked), triton.reinterpret of CUDA memory as
float8e4b15 (fp8 abs by bits, a dot on its f16 values), and ternaries on a runtime scalar
that run one branch. Exact references (integers, bit patterns, products exact in float64)."""

import numpy as np
import pytest
import tilefuse as tf
import tilefuse.language as tl

from tests.shared_kernels import k_tuples

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]


@pytest.mark.parametrize("seed", range(3))
def test_tuple_arguments_gpu(seed):
    # Failed on the H200 (2026-12-01) with a KeyError: the launch spec names a leaf "ptrs_0",
    # the full path looked it up as "ptrs.0" (fixed: jit._ir_name).
    rng = np.random.default_rng(seed + 11)
    n = int(rng.integers(1, 5000))
    x, y, z = (rng.integers(-1000, 1000, n).astype(np.int32) for _ in range(3))
    dx, dy, dz = (torch.from_numpy(a).cuda() for a in (x, y, z))
    for _ in range(2):  # the second launch of the same specialization too
        a, b = (int(v) for v in rng.integers(-50, 50, 2))
        out = torch.zeros(n, dtype=torch.int32, device="cuda")
        k_tuples[(tf.cdiv(n, 256),)]((dx, (dy, dz)), (a, b), out, n, BLOCK=256)
        np.testing.assert_array_equal(out.cpu().numpy(), x * a + y * b + z)


@tf.jit
def k_abs(x_ptr, z_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(z_ptr + offs, tl.abs(tl.load(x_ptr + offs)))


def test_e4b15_abs_gpu():
    bits = torch.from_numpy(np.random.default_rng(5).permutation(256).astype(np.uint8)).cuda()
    out = torch.zeros(256, dtype=torch.uint8, device="cuda")
    k_abs[(1,)](tf.reinterpret(bits, tl.float8e4b15), tf.reinterpret(out, tl.float8e4b15), BLOCK=256)
    np.testing.assert_array_equal(out.cpu().numpy(), bits.cpu().numpy() & 0x7F)


def e4b15_values(b: np.ndarray) -> np.ndarray:
    b = b.astype(np.uint16)
    return (((b & 0x80) << 8) | ((b & 0x7F) << 7)).astype(np.uint16).view(np.float16).astype(np.float64)


@tf.jit
def k_dot(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    m, n, k = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + m[:, None] * K + k[None, :])
    b = tl.load(b_ptr + k[:, None] * N + n[None, :])
    tl.store(c_ptr + m[:, None] * N + n[None, :], tl.dot(a, b))


@pytest.mark.parametrize("shape", [(64, 64, 64), (128, 64, 128)])
def test_e4b15_dot_gpu(shape):
    m, n, k = shape
    rng = np.random.default_rng(m + n + k)
    a = rng.integers(0, 256, (m, k)).astype(np.uint8)
    b = rng.integers(0, 256, (k, n)).astype(np.uint8)
    c = torch.zeros((m, n), dtype=torch.float32, device="cuda")
    da, db = (tf.reinterpret(torch.from_numpy(x).cuda(), tl.float8e4b15) for x in (a, b))
    k_dot[(1,)](da, db, c, m, n, k, num_warps=4)
    ref = e4b15_values(a) @ e4b15_values(b)
    # Products of f16 values are exact in f32; the tensor cores' sums may truncate (one ulp
    # per step, not half): twice the K-step rounding bound.
    bound = 2 * k * np.finfo(np.float32).eps * (np.abs(e4b15_values(a)) @ np.abs(e4b15_values(b)))
    err = np.abs(c.cpu().numpy().astype(np.float64) - ref)
    assert (err <= bound).all(), f"max error {err.max():.3g}"


@tf.jit
def k_ternary(c_ptr, a_ptr, out_ptr, hits_ptr):
    pid = tl.program_id(0)
    c = tl.load(c_ptr + pid)
    tl.store(hits_ptr + 2 * pid, 1) if c > 0 else tl.store(hits_ptr + 2 * pid + 1, 1)
    tl.store(out_ptr + pid, tl.load(a_ptr + pid) if c > 0 else 0.5)


def test_ternary_one_branch_gpu():
    rng = np.random.default_rng(3)
    n = 1000
    c = rng.integers(-5, 5, n).astype(np.int32)
    a = rng.standard_normal(n).astype(np.float32)
    out = torch.zeros(n, dtype=torch.float32, device="cuda")
    hits = torch.zeros((n, 2), dtype=torch.int32, device="cuda")
    k_ternary[(n,)](torch.from_numpy(c).cuda(), torch.from_numpy(a).cuda(), out, hits)
    np.testing.assert_array_equal(out.cpu().numpy(), np.where(c > 0, a, np.float32(0.5)))
    np.testing.assert_array_equal(hits.cpu().numpy(), np.stack([c > 0, c <= 0], 1).astype(np.int32))
