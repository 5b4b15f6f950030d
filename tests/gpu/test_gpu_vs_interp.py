"""The GPU backend against the interpreter: the same kernels, the same inputs.

Elementwise ops and conversions must agree bit for bit (libdevice math within a
few ulp); dot products and reductions within an fp32 reordering tolerance.
"""

import numpy as np
import pytest
import tilefuse as tf
import tilefuse.language as tl

from kernels_dsl.tutorials import layernorm, matmul, softmax, vector_add
from tests.gpu.dot8_case import run_dot8
from tests.shared_kernels import dot8, noinline_calls, wrapped_copy

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]

try:
    import ml_dtypes
except ImportError:  # pragma: no cover - ml_dtypes ships with the GPU image
    ml_dtypes = None


def to_numpy(t):
    if t.dtype == torch.bfloat16:
        return t.cpu().view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    if t.dtype == torch.float8_e4m3fn:
        return t.cpu().view(torch.int8).numpy().view(ml_dtypes.float8_e4m3fn)
    return t.cpu().numpy()


def both(kernel, grid, tensors, *scalars, **constexprs):
    """Runs kernel on the GPU (torch tensors) and the interpreter (numpy copies);
    returns the pairs of every tensor argument after the launch."""
    host = [to_numpy(t).copy() for t in tensors]
    kernel[grid](*tensors, *scalars, **constexprs)
    torch.cuda.synchronize()
    kernel[grid](*host, *scalars, **constexprs)
    return [(to_numpy(t), h) for t, h in zip(tensors, host)]


@tf.jit
def ew_kernel(x_ptr, y_ptr, out_f32, out_bf16, out_f16, out_e4m3, out_i32, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=1.0)
    y = tl.load(y_ptr + offs, mask=m, other=1.0)
    r = tl.fma(x, y, x / y) - tl.sqrt(tl.abs(x)) * tl.maximum(x, y) + tl.where(x > y, x, -y)
    tl.store(out_f32 + offs, r, mask=m)
    tl.store(out_bf16 + offs, r.to(tl.bfloat16), mask=m)
    tl.store(out_f16 + offs, (r * 100.0).to(tl.float16), mask=m)
    tl.store(out_e4m3 + offs, (r * 64.0).to(tl.float8e4nv), mask=m)
    xi = (x * 1000.0).to(tl.int32)
    tl.store(out_i32 + offs, (xi * 7 + (xi >> 3)) ^ (xi // 5) % 11, mask=m)


def test_elementwise_and_casts_are_bit_exact():
    n = 10007
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(n, device="cuda", generator=g) * 4
    y = torch.randn(n, device="cuda", generator=g) * 4 + 0.5
    outs = [
        torch.full((n,), float("nan"), device="cuda", dtype=d) for d in (torch.float32, torch.bfloat16, torch.float16)
    ]
    outs.append(torch.zeros(n, device="cuda", dtype=torch.float8_e4m3fn))
    outs.append(torch.full((n,), -7, device="cuda", dtype=torch.int32))
    pairs = both(ew_kernel, (tf.cdiv(n, 256),), [x, y, *outs], n, BLOCK=256)
    for gpu, cpu in pairs:
        assert gpu.tobytes() == cpu.tobytes() or np.array_equal(gpu.view(np.uint8), cpu.view(np.uint8))


@tf.jit
def math_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.5)
    tl.store(out_ptr + 0 * n + offs, tl.exp(x), mask=m)
    tl.store(out_ptr + 1 * n + offs, tl.log(tl.abs(x) + 1e-3), mask=m)
    tl.store(out_ptr + 2 * n + offs, tl.tanh(x), mask=m)
    tl.store(out_ptr + 3 * n + offs, tl.erf(x), mask=m)
    tl.store(out_ptr + 4 * n + offs, tl.sigmoid(x), mask=m)
    tl.store(out_ptr + 5 * n + offs, tl.exp2(x) * tl.rsqrt(tl.abs(x) + 1.0), mask=m)


def test_math_within_ulps():
    n = 4096
    x = (torch.rand(n, device="cuda") - 0.5) * 16
    out = torch.empty(6 * n, device="cuda")
    (gpu, _), (got, ref) = both(math_kernel, (tf.cdiv(n, 128),), [x, out], n, BLOCK=128)
    # libdevice vs the host's libm, both on fp32 inputs: a few fp32 ulps.
    np.testing.assert_allclose(got, ref, rtol=4 * 2**-23 * 8, atol=1e-6)


@pytest.mark.parametrize("n", [1, 97, 4096 + 3])
def test_vector_add(n):
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.full((n,), float("nan"), device="cuda")
    pairs = both(vector_add.add_kernel, (tf.cdiv(n, 1024),), [x, y, out], n, BLOCK_SIZE=1024)
    assert np.array_equal(pairs[2][0], pairs[2][1])
    np.testing.assert_array_equal(pairs[2][0], (x + y).cpu().numpy())


@pytest.mark.parametrize("shape", [(1, 1), (37, 100), (128, 781)])
def test_softmax(shape):
    x = torch.randn(*shape, device="cuda")
    out = torch.full_like(x, float("nan"))
    block = tf.next_power_of_2(shape[1])
    pairs = both(softmax.softmax_kernel, (shape[0],), [out, x], x.stride(0), out.stride(0), shape[1], BLOCK_SIZE=block)
    np.testing.assert_allclose(pairs[0][0], pairs[0][1], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(pairs[0][0], torch.softmax(x.double(), 1).cpu().numpy(), rtol=1e-5, atol=1e-7)


# bf16/f16 tilings cover wgmma with 32-, 64- and 128-byte swizzles, several K blocks,
# warpgroups split along M and along N, and several N blocks per instruction.
@pytest.mark.parametrize(
    "tiles",
    [(64, 64, 32, 4), (128, 128, 32, 8), (128, 128, 64, 4), (128, 256, 64, 8), (64, 32, 16, 4), (64, 128, 128, 8)],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("mnk", [(64, 64, 64), (100, 77, 50), (256, 192, 128)])
def test_matmul(mnk, dtype, tiles):
    m, n, k = mnk
    bm, bn, bk, warps = tiles
    a = torch.randn(m, k, device="cuda").to(dtype)
    b = torch.randn(k, n, device="cuda").to(dtype)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
    grid = (tf.cdiv(m, bm) * tf.cdiv(n, bn),)
    args = (m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    meta = dict(BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=8, ACTIVATION="")
    host = [to_numpy(t).copy() for t in (a, b, c)]
    matmul.matmul_kernel[grid](a, b, c, *args, num_warps=warps, **meta)  # bf16/f16: wgmma on sm_90a
    torch.cuda.synchronize()
    matmul.matmul_kernel[grid](*host, *args, **meta)
    ref = (a.double() @ b.double()).cpu().numpy()
    got = to_numpy(c).astype(np.float64)
    # fp32 accumulation over K terms in a different order; for 16-bit outputs the final rounding
    # dominates, and two results rounded independently can be one ulp apart (2^-7 bf16, 2^-10 f16).
    tol = {torch.bfloat16: 2**-7, torch.float16: 2**-10}.get(dtype, k * 2**-23 * 4)
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * np.sqrt(k))
    np.testing.assert_allclose(got, host[2].astype(np.float64), rtol=tol, atol=tol * np.sqrt(k))


@pytest.mark.parametrize("stages", [1, 2, 3, 4])
@pytest.mark.parametrize("mnk", [(256, 192, 208), (128, 256, 64), (192, 128, 1024)])
def test_matmul_pipelined(mnk, stages):
    # K = 208: a masked K tail; K = 64: fewer iterations than stages (the prologue's
    # copies past the end are predicated off); 1 stage: no pipelining.
    m, n, k = mnk
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    b = torch.randn(k, n, device="cuda").to(torch.bfloat16)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    args = (m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    meta = dict(BLOCK_SIZE_M=128, BLOCK_SIZE_N=128, BLOCK_SIZE_K=64, GROUP_SIZE_M=8, ACTIVATION="")
    kernel = matmul.matmul_kernel.warmup(a, b, c, *args, grid=(1,), num_warps=8, num_stages=stages, **meta)
    assert ("cp.async" in kernel.asm["ptx"]) == (stages > 1)
    matmul.matmul_kernel[(tf.cdiv(m, 128) * tf.cdiv(n, 128),)](a, b, c, *args, num_warps=8, num_stages=stages, **meta)
    ref = (a.double() @ b.double()).cpu().numpy()
    np.testing.assert_allclose(to_numpy(c).astype(np.float64), ref, rtol=2**-7, atol=2**-7 * np.sqrt(k))


def test_hinted_vector_accesses():
    x = torch.randint(-1000, 1000, (8192,), device="cuda", dtype=torch.int32)
    y = torch.zeros_like(x)
    assert "ld.global.v4" in wrapped_copy.warmup(x, y, 4096, 2048, HINT=True, BLOCK=1024, grid=(4,)).asm["ptx"]
    wrapped_copy[(4,)](x, y, 4096, 2048, HINT=True, BLOCK=1024)
    idx = (2048 + torch.arange(4096, device="cuda")) % 4096
    torch.testing.assert_close(y[idx], x[idx] * 3)
    assert int(y[4096:].abs().sum()) == 0


def test_noinline_calls():
    # The callee (dot + reduction, two results) is called twice in a loop; the GPU
    # lowers it as a function of its own.
    n = 64
    x = torch.randn(n, n, device="cuda").to(torch.bfloat16)
    w = torch.randn(n, n, device="cuda").to(torch.bfloat16)
    y = torch.full((n, n), float("nan"), device="cuda")
    s = torch.full((n,), float("nan"), device="cuda")
    kernel = noinline_calls[(1,)](x, w, y, s, N=n)
    assert ".func" in noinline_calls.warmup(x, w, y, s, N=n, grid=(1,)).asm["ptx"]
    ref = x.double() @ w.double()
    torch.testing.assert_close(y.double(), ref, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(s.double(), 2 * ref.sum(1), rtol=1e-4, atol=1e-2)
    assert kernel is not None


@pytest.mark.parametrize("bt", [False, True])
@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2, torch.int8])
@pytest.mark.parametrize(
    "shape", [(128, 128, 256, 64, 8), (64, 256, 128, 128, 4), (32, 64, 128, 64, 4), (16, 32, 64, 32, 2)]
)
def test_dot_on_8bit_tensor_cores(dtype, bt, shape):
    # wgmma k32 with K-major operands: B staged transposed from registers (bt False) or
    # copied K-major by the pipeline (bt True); below 64 rows, mma.sync m16n8k32.
    m, n, k, bk, warps = shape
    ptx = run_dot8(dtype, m, n, k, bk, bt, warps)
    if m >= 64:
        assert "wgmma.mma_async" in ptx and (("cp.async" in ptx) == bt)
    else:
        assert "mma.sync.aligned.m16n8k32" in ptx


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(
    "shape", [(16, 16, 64, 32, 4), (32, 64, 128, 64, 4), (16, 16, 32, 16, 8), (32, 128, 64, 32, 2)]
)
def test_small_dots_keep_the_mma_layout(dtype, shape):
    # Below wgmma's 64 rows: mma.sync m16n8k16 with the accumulator in registers across
    # the K loop (more tiles than warps, fewer: replicated warps). Products are exact in
    # fp32; sums of K terms in another order differ by a few fp32 ulps of the sum of |products|.
    m, n, k, bk, warps = shape
    a = torch.randn(m, k, device="cuda").to(dtype)
    b = torch.randn(k, n, device="cuda").to(dtype)
    c = torch.full((m, n), float("nan"), device="cuda")
    kw = dict(M=m, N=n, K=k, BK=bk, BT=False)
    ptx = dot8.warmup(a, b, c, grid=(1,), num_warps=warps, **kw).asm["ptx"]
    assert "mma.sync.aligned.m16n8k16" in ptx and "wgmma" not in ptx
    dot8[(1,)](a, b, c, num_warps=warps, **kw)
    ref = a.double() @ b.double()
    scale = a.double().abs() @ b.double().abs()
    assert ((c.double() - ref).abs() / scale).max().item() <= k * 2**-24


def test_layernorm_forward():
    m, n = 64, 1000
    x = torch.randn(m, n, device="cuda")
    w, b = torch.rand(n, device="cuda"), torch.randn(n, device="cuda")
    y = torch.full_like(x, float("nan"))
    mean, rstd = torch.empty(m, device="cuda"), torch.empty(m, device="cuda")
    pairs = both(layernorm._layer_norm_fwd_fused, (m,), [x, y, w, b, mean, rstd], x.stride(0), n, 1e-5, BLOCK_SIZE=1024)
    ref = torch.nn.functional.layer_norm(x.double(), (n,), w.double(), b.double(), 1e-5).cpu().numpy()
    np.testing.assert_allclose(pairs[1][0], ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(pairs[1][0], pairs[1][1], rtol=1e-4, atol=1e-5)


@tf.jit
def control_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    i = 0
    while i < n:
        v = tl.load(x_ptr + i * BLOCK + offs)
        if i % 2 == 0:
            acc += v
        else:
            acc = tl.maximum(acc, v)
        i += 1
    for j in range(3):
        acc = acc * 0.5 + j
    tl.store(out_ptr + offs, acc)
    tl.store(out_ptr + BLOCK + tl.arange(0, 2), tl.join(tl.sum(acc, 0), tl.max(acc, 0)))


def test_control_flow_and_reductions():
    x = torch.randn(5 * 128, device="cuda")
    out = torch.full((130,), float("nan"), device="cuda")
    pairs = both(control_kernel, (1,), [x, out], 5, BLOCK=128)
    np.testing.assert_allclose(pairs[1][0], pairs[1][1], rtol=1e-5, atol=1e-5)


@tf.jit
def reduce_kernel(x_ptr, out_ptr, R: tl.constexpr, C: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :])
    tl.store(out_ptr + tl.arange(0, C), tl.sum(x, axis=0))
    tl.store(out_ptr + C + tl.arange(0, R), tl.max(x, axis=1))
    tl.store(out_ptr + C + R + tl.arange(0, R), tl.argmax(x, axis=1).to(tl.float32))
    xt = tl.trans(x)
    tl.store(out_ptr + C + 2 * R + tl.arange(0, C)[:, None] * R + tl.arange(0, R)[None, :], xt)


def test_reductions_and_transpose():
    x = torch.randn(32, 64, device="cuda")
    out = torch.full((64 + 32 + 32 + 64 * 32,), float("nan"), device="cuda")
    pairs = both(reduce_kernel, (1,), [x, out], R=32, C=64)
    np.testing.assert_allclose(pairs[1][0], pairs[1][1], rtol=1e-5, atol=1e-5)


@tf.jit
def desc_kernel(x_ptr, y_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    d_in = tl.make_tensor_descriptor(x_ptr, [M, N], [N, 1], [BM, BN])
    d_out = tl.make_tensor_descriptor(y_ptr, [M, N], [N, 1], [BM, BN])
    pm, pn = tl.program_id(0) * BM, tl.program_id(1) * BN
    d_out.store([pm, pn], d_in.load([pm, pn]) * 2.0 + 1.0)


def test_tensor_descriptors_clip_at_the_edges():
    m, n = 70, 45
    x = torch.randn(m, n, device="cuda")
    y = torch.full_like(x, float("nan"))
    pairs = both(desc_kernel, (tf.cdiv(m, 32), tf.cdiv(n, 16)), [x, y], m, n, BM=32, BN=16)
    assert np.array_equal(pairs[1][0], pairs[1][1])
    np.testing.assert_array_equal(pairs[1][0], (x * 2 + 1).cpu().numpy())


class _RawDeviceArray:
    """Device memory seen only through __cuda_array_interface__."""

    def __init__(self, ptr, n):
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": (n,), "typestr": "<f4", "version": 3}


def test_cuda_array_interface_and_launch_errors():
    x = torch.randn(64, device="cuda")
    out = torch.full_like(x, float("nan"))
    vector_add.add_kernel[(1,)](_RawDeviceArray(x.data_ptr(), 64), x, out, 64, BLOCK_SIZE=64)
    torch.cuda.synchronize()
    assert torch.equal(out, x + x)
    with pytest.raises(tf.LaunchError, match="misaligned"):
        vector_add.add_kernel[(1,)](_RawDeviceArray(x.data_ptr() + 2, 16), x, out, 16, BLOCK_SIZE=16)
    with pytest.raises(tf.LaunchError, match="cuda:0"):
        vector_add.add_kernel[(1,)](x.cpu(), x, out, 16, BLOCK_SIZE=16)


@tf.jit
def full_reduce_kernel(x_ptr, i_ptr, out_f, out_i, N: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N))
    i = tl.load(i_ptr + tl.arange(0, N))
    tl.store(
        out_f + tl.arange(0, 4), tl.join(tl.join(tl.sum(x, 0), tl.max(x, 0)), tl.join(tl.min(x, 0), 0.0)).reshape(4)
    )
    tl.store(out_i + tl.arange(0, 4), tl.join(tl.join(tl.sum(i, 0), tl.max(i, 0)), tl.join(tl.min(i, 0), 0)).reshape(4))


@pytest.mark.parametrize("n", [16, 128, 2048])
@pytest.mark.parametrize("num_warps", [1, 4, 8])
def test_whole_tile_reductions(n, num_warps):
    x = torch.randn(n, device="cuda")
    i = torch.randint(-1000, 1000, (n,), device="cuda", dtype=torch.int32)
    out_f = torch.full((4,), float("nan"), device="cuda")
    out_i = torch.full((4,), -1, device="cuda", dtype=torch.int32)
    full_reduce_kernel[(1,)](x, i, out_f, out_i, N=n, num_warps=num_warps)
    torch.cuda.synchronize()
    xd = x.double()
    # join(join(s, mx), join(mn, 0)) is [[s, mn], [mx, 0]]: flattened s, mn, mx, 0.
    want = torch.stack([xd.sum(), xd.min(), xd.max(), xd.new_zeros(())]).cpu().numpy()
    np.testing.assert_allclose(out_f.cpu().numpy(), want, rtol=1e-5, atol=1e-5 * np.sqrt(n))
    np.testing.assert_array_equal(out_i.cpu().numpy(), [int(i.sum()), int(i.min()), int(i.max()), 0])


@tf.jit
def axis_reduce_kernel(x_ptr, i_ptr, out_mx, out_mn, out_i, R: tl.constexpr, C: tl.constexpr, AXIS: tl.constexpr):
    # AXIS 0 / 1 reduces along that axis, 2 over the whole tile as [1, R * C] (a quantizer's
    # block amax); each result broadcasts back over x.
    offs = tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :]
    x = tl.load(x_ptr + offs)
    i = tl.load(i_ptr + offs)
    if AXIS == 2:
        mx = tl.reshape(tl.broadcast_to(tl.max(tl.reshape(x, (1, R * C)), axis=1, keep_dims=True), (1, R)), (R, 1))
        mn = tl.reshape(tl.broadcast_to(tl.min(tl.reshape(x, (1, R * C)), axis=1, keep_dims=True), (1, R)), (R, 1))
        s = tl.reshape(tl.broadcast_to(tl.sum(tl.reshape(i, (1, R * C)), axis=1, keep_dims=True), (1, R)), (R, 1))
        im = tl.reshape(tl.broadcast_to(tl.max(tl.reshape(i, (1, R * C)), axis=1, keep_dims=True), (1, R)), (R, 1))
    else:
        mx = tl.max(x, axis=AXIS, keep_dims=True)
        mn = tl.min(x, axis=AXIS, keep_dims=True)
        s = tl.sum(i, axis=AXIS, keep_dims=True)
        im = tl.max(i, axis=AXIS, keep_dims=True)
    tl.store(out_mx + offs, x - mx)
    tl.store(out_mn + offs, x - mn)
    tl.store(out_i + offs, s - im + i)


@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("num_warps", [1, 4, 8])
@pytest.mark.parametrize("shape", [(4, 1024), (64, 256), (128, 128), (256, 8)])
def test_reductions_whose_axis_the_warps_split(shape, num_warps, axis):
    # Max, min and int32 sums combine across lanes and then warps (one shared-memory
    # exchange): exact, so bit for bit numpy's.
    r, c = shape
    x = torch.randn(r, c, device="cuda")
    i = torch.randint(-1000, 1000, (r, c), device="cuda", dtype=torch.int32)
    outs = [torch.full_like(x, float("nan")), torch.full_like(x, float("nan")), torch.full_like(i, -7)]
    axis_reduce_kernel[(1,)](x, i, *outs, R=r, C=c, AXIS=axis, num_warps=num_warps)
    torch.cuda.synchronize()
    xn, inn = x.cpu().numpy(), i.cpu().numpy().astype(np.int64)
    ax = None if axis == 2 else axis
    want_i = inn.sum(axis=ax, keepdims=True) - inn.max(axis=ax, keepdims=True) + inn
    np.testing.assert_array_equal(outs[0].cpu().numpy(), xn - xn.max(axis=ax, keepdims=True))
    np.testing.assert_array_equal(outs[1].cpu().numpy(), xn - xn.min(axis=ax, keepdims=True))
    np.testing.assert_array_equal(outs[2].cpu().numpy(), want_i.astype(np.int32))


@tf.jit
def print_kernel(x_ptr, BLOCK: tl.constexpr):
    tl.device_print("x=", tl.load(x_ptr + tl.arange(0, BLOCK)))


def test_device_print(capfd):
    x = torch.arange(4, device="cuda", dtype=torch.float32) + 0.5
    print_kernel[(1,)](x, BLOCK=4)
    torch.cuda.synchronize()
    out = capfd.readouterr().out
    for i in range(4):
        assert f"pid (0, 0, 0) idx ({i}) x={i + 0.5:f}" in out


ASSERT_SCRIPT = """
import torch
import tilefuse as tf
import tilefuse.language as tl

@tf.jit
def check(x_ptr, BLOCK: tl.constexpr):
    tl.device_assert(tl.load(x_ptr + tl.arange(0, BLOCK)) > 0, "x must be positive")

x = torch.tensor([1.0, 2.0, -3.0, 4.0], device="cuda")
check[(1,)](x, BLOCK=4)
torch.cuda.synchronize()
"""


def test_device_assert_stops_the_kernel(tmp_path):
    import os
    import subprocess
    import sys

    script = tmp_path / "assert_kernel.py"
    script.write_text(ASSERT_SCRIPT)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=dict(os.environ), timeout=120)
    assert r.returncode != 0
    assert "x must be positive" in r.stdout + r.stderr
    assert "assert" in (r.stdout + r.stderr).lower()


def test_repeated_launches_take_the_fast_path_correctly():
    # The second and later launches of one specialization go through the packed fast path.
    for n in (1000, 1000, 1000, 2000):
        x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        out = torch.full((n,), float("nan"), device="cuda")
        vector_add.add_kernel[(tf.cdiv(n, 256),)](x, y, out, n, BLOCK_SIZE=256)
        torch.cuda.synchronize()
        assert torch.equal(out, x + y)
    assert len(vector_add.add_kernel._cfast) >= 1
    other = torch.randn(1000, device="cuda")[1:]  # misaligned by 4 bytes: a new key, checked again
    out = torch.full((999,), float("nan"), device="cuda")
    vector_add.add_kernel[(4,)](other, other, out, 999, BLOCK_SIZE=256)
    torch.cuda.synchronize()
    assert torch.equal(out, other + other)
    # kernel[grid] is one C++ callable per grid; grids it cannot parse (a list, numpy
    # ints, a negative size) go to the full path, which converts or rejects them.
    assert vector_add.add_kernel[(4,)] is vector_add.add_kernel[(4,)]
    for grid in ([4], (np.int64(4),), 4):
        out.fill_(float("nan"))
        vector_add.add_kernel[grid](other, other, out, 999, BLOCK_SIZE=256)
        torch.cuda.synchronize()
        assert torch.equal(out, other + other), grid
    with pytest.raises(tf.LaunchError, match="grid"):
        vector_add.add_kernel[(-1,)](other, other, out, 999, BLOCK_SIZE=256)


@tf.jit
def _axpy(x_ptr, y_ptr, out_ptr, n, alpha, stride, BLOCK: tl.constexpr = 256):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, alpha * tl.load(x_ptr + offs * stride, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


def test_fast_path_keys_every_argument():
    # The C++ fast path must tell apart every argument difference that changes the compiled
    # kernel or its checks: int classes (1 is a constant, multiples of 16), dtypes, keyword vs
    # positional arguments, defaults, num_warps, the grid; and leave errors to the full path.
    x = torch.randn(4096, device="cuda")
    y = torch.randn(4096, device="cuda")
    for n, stride, alpha, kw in [
        (1000, 1, 2.0, {}),
        (1000, 1, 2.0, {}),
        (1024, 2, -1.5, {}),
        (1024, 2, 0.5, {"BLOCK": 128}),
        (999, 3, 3.0, {"num_warps": 8}),
        (999, 3, 3.0, {}),
    ]:
        out = torch.full((n,), float("nan"), device="cuda")
        grid = (tf.cdiv(n, kw.get("BLOCK", 256)),)
        _axpy[grid](x, y, out, n, alpha=alpha, stride=stride, **kw)
        torch.cuda.synchronize()
        torch.testing.assert_close(out, alpha * x[: n * stride : stride] + y[:n])
    assert len(_axpy._cfast) >= 4
    with pytest.raises(tf.LaunchError):
        _axpy[(1,)](x, y, x, 10)  # missing arguments: the full path names them
    half = torch.randn(4096, device="cuda", dtype=torch.float16)
    out = torch.full((100,), float("nan"), device="cuda", dtype=torch.float16)
    _axpy[(1,)](half, half, out, 100, 1.0, 1)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, half[:100] + half[:100])


class _OnlyDLPack:
    def __init__(self, t):
        self._t = t

    def __dlpack__(self, stream=None):
        return self._t.__dlpack__()

    def __dlpack_device__(self):
        return self._t.__dlpack_device__()


def test_dlpack_arguments_on_the_gpu():
    n = 3000
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.full((n,), float("nan"), device="cuda")
    vector_add.add_kernel[(tf.cdiv(n, 1024),)](_OnlyDLPack(x), _OnlyDLPack(y), _OnlyDLPack(out), n, BLOCK_SIZE=1024)
    torch.cuda.synchronize()
    assert torch.equal(out, x + y)


def _rounding_inputs(rng):
    raw = rng.integers(0, 2**32, 8192, dtype=np.uint64).astype(np.uint32).view(np.float32)  # every exponent, NaN, inf
    scaled = (rng.standard_normal(8192) * 10.0 ** rng.uniform(-9, 6, 8192)).astype(np.float32)
    bits = rng.integers(0, 2**32, 4096, dtype=np.uint64).astype(np.uint32)
    ties = np.concatenate(
        [
            (bits & ~np.uint32(0xFFFF)) | np.uint32(0x8000),  # bf16 midpoints
            (bits & ~np.uint32(0x1FFF)) | np.uint32(0x1000),
        ]
    ).view(np.float32)  # f16 midpoints
    special = np.array(
        [
            0.0,
            -0.0,
            np.inf,
            -np.inf,
            np.nan,
            448.0,
            464.0,
            57344.0,
            6.0,
            5.0,
            0.25,
            0.75,
            65504.0,
            65520.0,
            2.0**-127,
            1.5 * 2.0**-127,
            2.0**-149,
            3.0 * 2.0**-127,
        ],
        np.float32,
    )
    return np.concatenate([raw, scaled, ties, special, -special])


ROUND_CASES = [
    (to, mode)
    for to in (tl.bfloat16, tl.float16, tl.float8e4nv, tl.float8e5, tl.float4e2m1, tl.float8e8m0)
    for mode in ("rne", "rtz", "ru", "rs")
]


@pytest.mark.parametrize("to, mode", ROUND_CASES, ids=[f"{t.name}-{m}" for t, m in ROUND_CASES])
def test_rounded_casts_match_the_interpreter_bit_for_bit(to, mode):
    from kernels_dsl import convert

    rng = np.random.default_rng()
    x = _rounding_inputs(rng)
    n = x.size
    rbits = rng.integers(-(2**31), 2**31, n, dtype=np.int64).astype(np.int32)
    code, back = np.full(n, -1, np.int16), np.full(n, np.nan, np.float32)
    convert.convert_kernel[(tf.cdiv(n, 256),)](x, rbits, code, back, n, TO=to, MODE=mode, BLOCK=256)
    gx, gb = torch.from_numpy(x).cuda(), torch.from_numpy(rbits).cuda()
    gcode = torch.full((n,), -1, dtype=torch.int16, device="cuda")
    gback = torch.full((n,), float("nan"), device="cuda")
    convert.convert_kernel[(tf.cdiv(n, 256),)](gx, gb, gcode, gback, n, TO=to, MODE=mode, BLOCK=256)
    torch.cuda.synchronize()
    got, gotback = gcode.cpu().numpy(), gback.cpu().numpy()
    # NaN sign and payload are not specified (the GPU writes canonical NaNs): NaN inputs
    # must give NaN (0 for f4e2m1, which has none); every other input the same bits.
    nan = np.isnan(x)
    bad = np.nonzero((got != code) & ~nan)[0]
    assert bad.size == 0, f"{bad.size} codes differ, e.g. x={x[bad[:5]]!r}: gpu {got[bad[:5]]} interp {code[bad[:5]]}"
    np.testing.assert_array_equal(gotback[~nan].view(np.int32), back[~nan].view(np.int32))
    np.testing.assert_array_equal(np.isnan(gotback[nan]), np.isnan(back[nan]))
    assert to == tl.float4e2m1 or np.isnan(gotback[nan]).all()


@tf.jit
def wide_cast_kernel(x_ptr, out_ptr, n, TO: tl.constexpr, MODE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    y = tl.load(x_ptr + offs, mask=m, other=0).to(TO, rounding=MODE)
    tl.store(out_ptr + offs, y.to(tl.float32), mask=m)  # exact: every target fits in f32


def _wide_inputs(rng, src):
    if src == np.float64:
        raw = rng.integers(0, 2**63, 20000, dtype=np.int64).view(np.float64)
        scaled = rng.standard_normal(20000) * np.exp2(rng.integers(-140, 130, 20000))
        ties = (rng.standard_normal(4000).astype(np.float32).astype(np.float64)) * (1 + 2.0**-24)
        special = np.array(
            [0.0, -0.0, np.inf, -np.inf, np.nan, 2.0**-149, 2.0**-150, 3.4028235e38, 3.5e38, 1e300, -1e-300]
        )
        x = np.concatenate([raw, -raw, scaled, ties, special])
    else:
        info = np.iinfo(src)
        x = np.concatenate(
            [
                rng.integers(info.min, info.max, 20000, dtype=np.int64, endpoint=True),
                rng.integers(-(2**25), 2**25, 20000),
                [0, 1, -1, info.min, info.max, 2**24 + 1, -(2**24) - 1],
            ]
        ).astype(src)
    return x


WIDE_CASTS = [
    (to, mode) for to in (tl.float32, tl.bfloat16, tl.float16, tl.float8e4nv, tl.float8e8m0) for mode in ("rtz", "ru")
] + [(tl.float8e8m0, "rne")]


@pytest.mark.parametrize("src", [np.float64, np.int64, np.int32])
@pytest.mark.parametrize("to, mode", WIDE_CASTS, ids=[f"{t.name}-{m}" for t, m in WIDE_CASTS])
def test_rounded_casts_from_f64_and_ints(src, to, mode):
    rng = np.random.default_rng()
    x = _wide_inputs(rng, src)
    n = x.size
    out = np.full(n, np.nan, np.float32)
    wide_cast_kernel[(tf.cdiv(n, 256),)](x, out, n, TO=to, MODE=mode, BLOCK=256)
    gout = torch.full((n,), float("nan"), device="cuda")
    wide_cast_kernel[(tf.cdiv(n, 256),)](torch.from_numpy(x).cuda(), gout, n, TO=to, MODE=mode, BLOCK=256)
    got = gout.cpu().numpy()
    nan = np.isnan(out)
    assert (np.isnan(got) == nan).all()
    bad = np.nonzero(got[~nan].view(np.int32) != out[~nan].view(np.int32))[0]
    assert (
        bad.size == 0
    ), f"{bad.size} differ, e.g. x={x[~nan][bad[:4]]!r}: gpu {got[~nan][bad[:4]]} interp {out[~nan][bad[:4]]}"


@tf.jit
def dot_scaled_kernel(
    a_ptr, as_ptr, b_ptr, bs_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, FMT: tl.constexpr
):
    KP: tl.constexpr = K // 2 if FMT == "e2m1" else K  # e2m1 comes packed two per byte along K
    KS: tl.constexpr = K // 32
    rm, rn = tl.arange(0, M), tl.arange(0, N)
    a = tl.load(a_ptr + rm[:, None] * KP + tl.arange(0, KP)[None, :])
    b = tl.load(b_ptr + tl.arange(0, KP)[:, None] * N + rn[None, :])
    sa = tl.load(as_ptr + rm[:, None] * KS + tl.arange(0, KS)[None, :])
    sb = tl.load(bs_ptr + rn[:, None] * KS + tl.arange(0, KS)[None, :])
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], tl.dot_scaled(a, sa, FMT, b, sb, FMT))


@pytest.mark.parametrize("shape", [(32, 64, 128, 4), (128, 64, 128, 4), (64, 128, 256, 8)])
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2", "e2m1"])
def test_dot_scaled(fmt, shape):
    # M = 32 runs the fp32 FMA path; M a multiple of 64 runs fp8 wgmma (e4m3, e5m2),
    # or bf16 wgmma on the dequantized operands (e2m1: exact products, fp32 sums).
    rng = np.random.default_rng()
    m, n, k, warps = shape
    if fmt == "e2m1":
        a = rng.integers(-128, 128, (m, k // 2), dtype=np.int64).astype(np.int8)
        b = rng.integers(-128, 128, (k // 2, n), dtype=np.int64).astype(np.int8)
    else:
        t = ml_dtypes.float8_e4m3fn if fmt == "e4m3" else ml_dtypes.float8_e5m2
        a = rng.standard_normal((m, k)).astype(t).view(np.int8)
        b = rng.standard_normal((k, n)).astype(t).view(np.int8)
    sa = rng.integers(120, 135, (m, k // 32), dtype=np.int64).astype(np.int8)
    sb = rng.integers(120, 135, (n, k // 32), dtype=np.int64).astype(np.int8)
    out = np.full((m, n), np.nan, np.float32)
    dot_scaled_kernel[(1,)](a, sa, b, sb, out, M=m, N=n, K=k, FMT=fmt)
    dev = [torch.from_numpy(v).cuda() for v in (a, sa, b, sb)]
    gout = torch.full((m, n), float("nan"), device="cuda")
    dot_scaled_kernel[(1,)](*dev, gout, M=m, N=n, K=k, FMT=fmt, num_warps=warps)
    torch.cuda.synchronize()
    ptx = dot_scaled_kernel.warmup(*dev, gout, M=m, N=n, K=k, FMT=fmt, num_warps=warps, grid=(1,)).asm["ptx"]
    assert ("wgmma.mma_async" in ptx) == (m % 64 == 0)
    got = gout.cpu().numpy().astype(np.float64)
    # Products of the dequantized operands are exact in fp32; only the K-term sums round,
    # in a different order on each side: |difference| <= 2 K 2^-24 (|A| @ |B|). The fp8
    # tensor cores add each 32-wide block with fewer bits (2^-9, as for the other fp8 dots).
    A, B = _dequantize(a, sa, fmt, k_axis=1), _dequantize(b, sb, fmt, k_axis=0)
    rel = 2**-9 if fmt != "e2m1" and m % 64 == 0 else 2 * k * 2.0**-24
    bound = rel * (np.abs(A) @ np.abs(B))
    assert np.isfinite(got).all()
    assert (np.abs(got - out) <= bound).all()
    assert (np.abs(got - A @ B) <= bound).all()


_E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])


def _dequantize(codes, scales, fmt, k_axis):
    """float64 values of an operand: element times 2^(scale - 127) of its 32-wide K block."""
    if fmt == "e2m1":
        u = codes.view(np.uint8)
        pairs = np.stack([_E2M1[u & 15], _E2M1[u >> 4]], axis=-1 if k_axis == 1 else 1)
        v = pairs.reshape(codes.shape[0], -1) if k_axis == 1 else pairs.reshape(-1, codes.shape[1])
    else:
        v = codes.view(ml_dtypes.float8_e4m3fn if fmt == "e4m3" else ml_dtypes.float8_e5m2).astype(np.float64)
    s = np.exp2(scales.view(np.uint8).astype(np.float64) - 127)
    s = np.repeat(s, 32, axis=1)  # [rows of A or columns of B, K]
    return v * s if k_axis == 1 else v * s.T
