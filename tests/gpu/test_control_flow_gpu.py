"""break, continue, early return and short-circuiting on the GPU against the
interpreter, exactly (tests/control_cases.py), on several random inputs."""

import numpy as np
import pytest

from tests.control_cases import CASES

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_exits_gpu_vs_interpreter(case, seed):
    rng = np.random.default_rng(seed * 104729 + 3)
    grid, arrays, scalars, constexprs = case.make(rng)
    dev = [torch.from_numpy(a.copy()).cuda() for a in arrays]
    case.kernel[grid](*arrays, *scalars, **constexprs)
    case.kernel[grid](*dev, *scalars, **constexprs)
    torch.cuda.synchronize()
    for k, (d, h) in enumerate(zip(dev, arrays)):
        np.testing.assert_array_equal(d.cpu().numpy(), h, err_msg=f"{case.name}: array {k}")
