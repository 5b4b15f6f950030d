"""Hand-written GPU-stage IR on the GPU: a tile through a staged buffer (local_store, then
local_load in the load's layout or another one) comes back bit for bit, every swizzle."""

import numpy as np
import pytest
from tilefuse import gpu
from tilefuse.jit import CompiledKernel

from tests.staged_copy_case import READ, N, module

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]


@pytest.mark.parametrize("read", ["load", "rows"])
@pytest.mark.parametrize("swizzle", [32, 64, 128])
def test_local_load_returns_the_staged_tile(swizzle, read):
    m = module(swizzle, read=None if read == "load" else READ)
    kernel = CompiledKernel("copy_kernel", m, {"tile": m.to_text()}, [("x_ptr", "ptr<f16>"), ("y_ptr", "ptr<f16>")])
    x = torch.from_numpy(np.random.default_rng().standard_normal((N, N)).astype(np.float16)).cuda()
    y = torch.full_like(x, float("nan"))
    gpu.launch(kernel, {"x_ptr": x, "y_ptr": y}, (1, 1, 1), 4, 1)
    torch.cuda.synchronize()
    assert torch.equal(y.view(torch.int16), x.view(torch.int16))
