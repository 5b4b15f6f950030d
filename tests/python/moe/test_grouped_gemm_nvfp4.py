"""moe.grouped_gemm / _dgrad / _wgrad on NVFP4 operands (kernels_dsl/moe/gemm_nvfp4.py) on
the interpreter: the register dequantization's exactness (every E2M1 code times every
E4M3 scale is a bf16 value: exhaustive), the GEMMs against float64 of the dequantized
operands with the fp32-accumulation bound (several tiles, partial tiles, empty experts,
the last too, one expert owning every row, G = 1, pad rows, bias and scaled bias), the
wgrad on random-Hadamard copies against float64 of the untransformed operands (the
transform cancels in dyᵀx) and on groups starting on any row, the 16 x 16 weight copy
serving the dgrad, bad input, and the kernels' sm_90a PTX (pipelined K loops on bf16
wgmma, no perf hint)."""

import os

import ml_dtypes
import numpy as np
import pytest
from tilefuse import gpu, moe

from tests.ptxas import PTXAS, assert_assembles
from tests.python.moe import gemm_reference as ref
from tests.python.moe import golden_quant as golden
from tests.python.moe.errors import assert_error_rms, error_stats
from tests.python.moe.test_grouped_gemm import SMALL, bf16, check_rows, prefilled

BF16 = ml_dtypes.bfloat16
# (rows, K, N, splits): K and N multiples of 16 (NVFP4 blocks), partial 32-tiles.
NV_CASES = {
    "several": (150, 96, 80, [40, 0, 61, 33, 0]),
    "one_owns_all": (100, 64, 48, [0, 100, 0]),
    "g1": (90, 112, 48, [77]),
    "past_the_rows": (100, 48, 48, [60, 70, 50]),
}
# Terms of the fp32 bound beyond K: the reference's dequantized elements (one fp32 rounding
# each, 2 per product) and the epilogue's two divisions by the tensor scales.
EXTRA_TERMS = 4
# Per-element error RMS of one NVFP4 quantization of Gaussian data, relative to its RMS:
# E2M1 has one mantissa bit; a block scaled to amax 6 is rounded on steps of 0.5, 1 and 2
# (RMS step/sqrt(12)), 0.095 measured (RNE). A dot of two such operands over independent
# tokens: sqrt(2) times that, 0.135 (measured 0.132, and 0.135 with RHT). Stochastic
# rounding doubles a quantization's error variance (0.137 measured): with dy's copy
# stochastic, sqrt(0.137² + 0.095²) = 0.167. Bound: 1.5 times that.
WGRAD_RMS = 0.25


def test_register_dequantization_is_exact_in_bf16():
    """q·sb for all 16 E2M1 codes and all 256 E4M3 scale codes: a bf16 value (or NaN)."""
    q = np.array([golden.decode("e2m1", c) for c in range(16)])
    sb = np.array([golden.decode("e4m3", c) for c in range(256)])
    p = q[:, None] * sb[None, :]
    finite = np.isfinite(p)
    assert np.array_equal(p[finite], p[finite].astype(BF16).astype(np.float64))
    assert np.isnan(p[~finite]).all() and (~finite).sum() == 2 * 16  # the two NaN scale codes


def nv_inputs(rng, name, tile2d=True):
    rows, k, n, splits = NV_CASES[name]
    x, w = bf16(rng, rows, k), bf16(rng, len(splits), n, k)
    x[: rows // 3] *= 2.0**-12  # blocks of very different scales
    qx, qw = moe.quantize(x, "nvfp4"), moe.quantize(w.reshape(-1, k), "nvfp4", tile2d=tile2d)
    return rows, k, n, np.array(splits, np.int32), qx, qw, moe.dequantize(qx), moe.dequantize(qw).reshape(w.shape)


@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("name", NV_CASES)
def test_forward(rng, name, out_dtype):
    rows, k, n, splits, qx, qw, xd, wd = nv_inputs(rng, name)
    y = moe.grouped_gemm(qx, qw, splits, out=prefilled((rows, n), out_dtype), out_dtype=out_dtype, config=SMALL)
    check_rows(y, *ref.forward(xd, wd, splits), k + EXTRA_TERMS, splits, out_dtype, "y")


@pytest.mark.parametrize("scaled", [False, True])
def test_forward_bias(rng, scaled):
    rows, k, n, splits, qx, qw, xd, wd = nv_inputs(rng, "several", tile2d=False)
    bias = rng.standard_normal((len(splits), n)).astype(np.float32)
    probs = rng.random(rows).astype(np.float32) if scaled else None
    y = moe.grouped_gemm(qx, qw, splits, bias, probs, out=prefilled((rows, n), "float32"), out_dtype="float32")
    check_rows(y, *ref.forward(xd, wd, splits, bias, probs), k + 1 + EXTRA_TERMS, splits, "float32", "y")


@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("name", NV_CASES)
def test_dgrad(rng, name, out_dtype):
    """dx = dy w on the weights' rowwise 16 x 16 copy, read along its columns."""
    rows, k, n, splits, _, qw, _, wd = nv_inputs(rng, name)
    qd = moe.quantize(bf16(rng, rows, n), "nvfp4", stochastic=True, seed=int(rng.integers(2**63)))
    dx = moe.grouped_gemm_dgrad(qd, qw, splits, out=prefilled((rows, k), out_dtype), out_dtype=out_dtype, config=SMALL)
    check_rows(dx, *ref.dgrad(moe.dequantize(qd), wd, splits), n + EXTRA_TERMS, splits, out_dtype, "dx")


def test_weight_tiles_are_one_copy_for_both_directions(rng):
    """A 16 x 16 tile's codes and scale do not depend on the direction of quantization:
    the columnwise copy is the rowwise one transposed (what lets the dgrad read it)."""
    w = bf16(rng, 96, 64)
    row, col = moe.quantize(w, "nvfp4", tile2d=True), moe.quantize(w, "nvfp4", axis=0, tile2d=True)
    assert np.array_equal(moe.dequantize(row).view(np.uint32), moe.dequantize(col).view(np.uint32))


def padded_group_rows(rng, sizes, width):
    """([RP, width] with the groups' rows from multiples of 16, zeros between and 16 pad
    rows past them, the padded sizes): the MLP's columnwise layout."""
    padded = [-(-s // 16) * 16 for s in sizes]
    a = np.zeros((sum(padded) + 16, width), BF16)
    r = 0
    for s, p in zip(sizes, padded):
        a[r : r + s] = rng.standard_normal((s, width))
        r += p
    return a, np.array(padded, np.int32)


@pytest.mark.parametrize("rht", [False, True])
@pytest.mark.parametrize("sizes", [[40, 0, 61, 33, 0], [0, 100, 0], [77]])
def test_wgrad(rng, sizes, rht):
    """dw_g = dy_gᵀ x_g from columnwise copies (ragged K over each group's rows): against
    float64 of the dequantized copies with the fp32 bound, and against float64 of the
    operands before quantization by error RMS: with RHT the copies hold transformed
    values, and only the transform's cancellation brings them back to dyᵀx."""
    n, k = 48, 80
    dy, psplits = padded_group_rows(rng, sizes, n)
    x, _ = padded_group_rows(rng, sizes, k)
    qd = moe.quantize(dy, "nvfp4", axis=0, rht=rht, stochastic=True, seed=int(rng.integers(2**63)))
    qx = moe.quantize(x, "nvfp4", axis=0, rht=rht)
    for out_dtype in ("bfloat16", "float32"):
        dw = moe.grouped_gemm_wgrad(qd, qx, psplits, out_dtype=out_dtype, config=SMALL)
        want, mag = ref.wgrad(moe.dequantize(qd), moe.dequantize(qx), psplits)
        terms = max(psplits) + EXTRA_TERMS
        ref.check(dw, want, mag, terms, out_dtype, "dw")
        exact, _ = ref.wgrad(dy, x, psplits)
        stats = error_stats(dw, exact)
        print(f"rht={rht} {out_dtype}: against the unquantized operands {stats}")
        assert_error_rms(dw, exact, rms_bound=WGRAD_RMS, max_bound=8 * WGRAD_RMS, what="dw")
        empty = np.array(psplits) == 0
        assert not np.asarray(dw, np.float64)[empty].any(), "an empty expert's dw is not 0"


def test_wgrad_groups_start_anywhere(rng):
    """Without RHT a group may start and end on any row, odd ones too: its K loop starts at
    the 16-row block holding its first row and zeroes the rows of the neighbouring groups
    that the block's loads bring in."""
    sizes = np.array([7, 1, 16, 17, 31, 50, 0], np.int32)  # ends 7, 8, 24, 41, 72, 122 of 128 rows
    qd = moe.quantize(bf16(rng, 128, 48), "nvfp4", axis=0, stochastic=True, seed=int(rng.integers(2**63)))
    qx = moe.quantize(bf16(rng, 128, 80), "nvfp4", axis=0)
    want, mag = ref.wgrad(moe.dequantize(qd), moe.dequantize(qx), sizes)
    for config in (SMALL, moe.GemmConfig(16, 16, 16, 4, 2)):
        dw = moe.grouped_gemm_wgrad(qd, qx, sizes, out_dtype="float32", config=config)
        ref.check(dw, want, mag, max(sizes) + EXTRA_TERMS, "float32", "dw")


def test_hadamard_is_orthogonal():
    """diag(signs)·H16/4 (golden_quant's, written from the spec) times its transpose is I."""
    m = golden.rht(np.eye(16, dtype=np.float32)).astype(np.float64)
    assert np.array_equal(m @ m.T, np.eye(16))


def test_bad_input(rng):
    x, w = bf16(rng, 64, 64), bf16(rng, 2, 32, 64)
    qx, qw = moe.quantize(x, "nvfp4"), moe.quantize(w.reshape(-1, 64), "nvfp4", tile2d=True)
    splits = np.array([30, 34], np.int32)
    bad = [
        (lambda: moe.grouped_gemm(qx, moe.quantize(w.reshape(-1, 64), "nvfp4", axis=0), splits), "rowwise NVFP4"),
        (lambda: moe.grouped_gemm(qx, moe.quantize(w.reshape(-1, 64), "mxfp8"), splits), "w must be a rowwise NVFP4"),
        (lambda: moe.grouped_gemm(moe.quantize(x, "mxfp8"), qw, splits), "x must be a rowwise NVFP4"),
        (lambda: moe.grouped_gemm(qx, qw, np.array([30, 34, 0], np.int32)), "G = 3 and K = 64"),
        (lambda: moe.grouped_gemm_dgrad(qx, qw, splits), "G = 2 and N = 64"),
        (lambda: moe.grouped_gemm_wgrad(qx, qx, splits), "dy must be a columnwise"),
        (lambda: moe.grouped_gemm_wgrad(*(moe.quantize(bf16(rng, r, 32), "nvfp4", axis=0) for r in (64, 48)), splits),
         "x has 48 rows but dy has 64"),
    ]  # fmt: skip
    for call, text in bad:
        with pytest.raises(ValueError, match=text):
            call()


class Recorder:
    """Stands in for a kernel: records each launch instead of running it."""

    def __init__(self, kernel, seen):
        self.kernel, self.seen = kernel, seen

    def __getitem__(self, grid):
        return lambda *args, **meta: self.seen.append((self.kernel, args, meta))


@pytest.mark.skipif(not os.path.exists(PTXAS), reason="needs ptxas")
def test_kernels_lower_for_sm90_on_wgmma(monkeypatch, tmp_path, rng):
    from kernels_dsl.moe import gemm_nvfp4 as kernels

    seen = []
    for name in ("grouped_gemm_nvfp4_kernel", "grouped_wgrad_nvfp4_kernel"):
        monkeypatch.setattr(kernels, name, Recorder(getattr(kernels, name), seen))
    r, k, n, g = 256, 256, 256, 2
    splits = np.array([96, 128], np.int32)
    qx, qd = moe.quantize(bf16(rng, r, k), "nvfp4"), moe.quantize(bf16(rng, r, n), "nvfp4", stochastic=True)
    qw = moe.quantize(bf16(rng, g * n, k), "nvfp4", tile2d=True)
    cols = [moe.quantize(bf16(rng, r, c), "nvfp4", axis=0, rht=True) for c in (n, k)]
    cfg = moe.GemmConfig()
    moe.grouped_gemm(qx, qw, splits, config=cfg)
    moe.grouped_gemm_dgrad(qd, qw, splits, config=cfg)
    moe.grouped_gemm_wgrad(*cols, splits, config=cfg)
    assert len(seen) == 3
    for kernel, args, meta in seen:
        warps, stages = meta.pop("num_warps"), meta.pop("num_stages")
        low = gpu.lower(kernel.compile(*args, **meta), "sm_90a", warps, stages, keep_ir=False)
        # TILEFUSE_PERF_HINTS clean: the K loops pipeline, the packed codes copied ahead in
        # 16-byte runs, the scales in 4-byte runs (rows of K/2 and K/16 bytes, aligned at
        # these shapes), both read back and dequantized for bf16 wgmma.
        assert low["hints"] == [], (kernel.__name__, low["hints"])
        assert "cp.async.cg.shared.global" in low["ptx"] and "cp.async.ca.shared.global" in low["ptx"]
        assert_assembles(low["ptx"], "sm_90a", tmp_path)
        assert f"wgmma.mma_async.sync.aligned.m64n{cfg.block_n}k16.f32.bf16.bf16" in low["ptx"]
