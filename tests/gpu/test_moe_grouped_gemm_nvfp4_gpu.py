"""The grouped GEMMs on NVFP4 operands on CUDA torch tensors (the interpreter suite:
tests/python/moe/test_grouped_gemm_nvfp4.py): forward with bias and scaled bias, dgrad on
the weights' 16 x 16 copy, wgrad on random-Hadamard columnwise copies over ragged groups,
against float64 of the dequantized operands (one rounding plus the fp32 accumulation
bound: the products are exact bf16 values), and the wgrad against float64 of the
untransformed operands by error RMS. Two tile configs; the shapes of
test_moe_grouped_gemm_gpu.py whose K and N are multiples of 16."""

import numpy as np
import pytest
from tilefuse import moe

from tests.gpu.test_moe_grouped_gemm_gpu import CASES, SENTINEL, bf16, host, prefilled
from tests.python.moe import gemm_reference as ref
from tests.python.moe.errors import assert_error_rms
from tests.python.moe.test_grouped_gemm_nvfp4 import EXTRA_TERMS, WGRAD_RMS

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]

NAMES = ["skewed", "one_owns_all", "g1", "past_the_rows"]
CONFIGS = [None, moe.GemmConfig(64, 128, 64, 4, 4)]


@pytest.fixture
def gen():
    seed = int(np.random.SeedSequence().entropy % 2**63)
    print(f"seed = {seed}")
    return torch.Generator(device="cuda").manual_seed(seed)


def setup(gen, name):
    rows, k, n, s = CASES[name]
    splits = torch.tensor(s, dtype=torch.int32, device="cuda")
    x, w = bf16(gen, rows, k), bf16(gen, len(s), n, k)
    qx, qw = moe.quantize(x, "nvfp4"), moe.quantize(w.reshape(-1, k), "nvfp4", tile2d=True)
    return rows, k, n, s, splits, qx, qw, host(moe.dequantize(qx)), host(moe.dequantize(qw)).reshape(w.shape)


@pytest.mark.parametrize("config", CONFIGS, ids=["default", "64x128x64"])
@pytest.mark.parametrize("name", NAMES)
def test_forward_and_dgrad(gen, name, config):
    rows, k, n, s, splits, qx, qw, xd, wd = setup(gen, name)
    bias = torch.randn((len(s), n), generator=gen, device="cuda")
    probs = torch.rand((rows,), generator=gen, device="cuda")
    y = moe.grouped_gemm(
        qx, qw, splits, bias, probs, out=prefilled(rows, n, "float32"), out_dtype="float32", config=config
    )
    qd = moe.quantize(bf16(gen, rows, n), "nvfp4", stochastic=True, seed=11)
    dx = moe.grouped_gemm_dgrad(qd, qw, splits, out=prefilled(rows, k, "float32"), out_dtype="float32", config=config)
    torch.cuda.synchronize()
    end = int(ref.offsets(s, rows)[-1])
    e, m = ref.forward(xd, wd, s, host(bias), host(probs))
    ref.check(host(y)[:end], e, m, k + 1 + EXTRA_TERMS, "float32", "y")
    e, m = ref.dgrad(host(moe.dequantize(qd)), wd, s)
    ref.check(host(dx)[:end], e, m, n + EXTRA_TERMS, "float32", "dx")
    assert (host(y)[end:] == SENTINEL).all() and (host(dx)[end:] == SENTINEL).all(), "pad rows were written"


@pytest.mark.parametrize("config", CONFIGS, ids=["default", "64x128x64"])
@pytest.mark.parametrize("name", ["skewed", "one_owns_all"])
def test_wgrad_rht(gen, name, config):
    """Groups from multiples of 16 rows of the copies (the MLP's padded layout)."""
    _, k, n, s, _, _, _, _, _ = setup(gen, name)
    padded = [-(-max(v, 0) // 16) * 16 for v in s]
    rows = sum(padded) + 16
    dy, x = bf16(gen, rows, n), bf16(gen, rows, k)
    keep = torch.zeros(rows, dtype=torch.bool, device="cuda")
    r = 0
    for v, p in zip(s, padded):
        keep[r : r + max(v, 0)] = True
        r += p
    dy, x = dy * keep[:, None], x * keep[:, None]
    psplits = torch.tensor(padded, dtype=torch.int32, device="cuda")
    qd = moe.quantize(dy, "nvfp4", axis=0, rht=True, stochastic=True, seed=7)
    qx = moe.quantize(x, "nvfp4", axis=0, rht=True)
    dw = moe.grouped_gemm_wgrad(qd, qx, psplits, out_dtype="float32", config=config)
    torch.cuda.synchronize()
    e, m = ref.wgrad(host(moe.dequantize(qd)), host(moe.dequantize(qx)), padded)
    ref.check(host(dw), e, m, max(padded) + EXTRA_TERMS, "float32", "dw")
    exact, _ = ref.wgrad(host(dy.float()), host(x.float()), padded)
    assert_error_rms(host(dw), exact, rms_bound=WGRAD_RMS, max_bound=8 * WGRAD_RMS, what="dw")
    assert not np.asarray(host(dw))[np.array(padded) == 0].any()
