"""tl.randint4x / rand / randn / rand4x / randn4x against Triton itself on the GPU: one kernel
source compiled by tilefuse and by Triton (the import replaced), the same seeds and offsets,
the outputs' bits compared. Integers and uniforms must be identical; normals too where both
use libdevice's logf, sinf and cosf (the bound below is what tilefuse's own interpreter needs)."""

import importlib.util
import os
import tempfile

import numpy as np
import pytest

from tests.unsigned_kernels import f32_ulps

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]

SOURCE = """
import tilefuse as tf
import tilefuse.language as tl


@tf.jit
def streams(out_ptr, seed, base, WIDE: tl.constexpr, N: tl.constexpr):
    r = tl.arange(0, N)
    if WIDE:
        offs = r.to(tl.int64) + base
    else:
        offs = r + base
    i0, i1, i2, i3 = tl.randint4x(seed, offs)
    u0, u1, u2, u3 = tl.rand4x(seed, offs)
    n0, n1, n2, n3 = tl.randn4x(seed, offs)
    tl.store(out_ptr + 0 * N + r, i0)
    tl.store(out_ptr + 1 * N + r, i1)
    tl.store(out_ptr + 2 * N + r, i2)
    tl.store(out_ptr + 3 * N + r, i3)
    tl.store(out_ptr + 4 * N + r, tl.randint(seed, offs))
    tl.store(out_ptr + 5 * N + r, tl.rand(seed, offs).to(tl.int32, bitcast=True))
    tl.store(out_ptr + 6 * N + r, u0.to(tl.int32, bitcast=True))
    tl.store(out_ptr + 7 * N + r, u3.to(tl.int32, bitcast=True))
    tl.store(out_ptr + 8 * N + r, tl.randn(seed, offs).to(tl.int32, bitcast=True))
    tl.store(out_ptr + 9 * N + r, n0.to(tl.int32, bitcast=True))
    tl.store(out_ptr + 10 * N + r, n1.to(tl.int32, bitcast=True))
    tl.store(out_ptr + 11 * N + r, n3.to(tl.int32, bitcast=True))
"""
NAMES = ("i0", "i1", "i2", "i3", "randint", "rand", "u0", "u3", "randn", "n0", "n1", "n3")


def _load(package: str):
    src = SOURCE.replace("import tilefuse.language", f"import {package}.language").replace(
        "import tilefuse as", f"import {package} as"
    )
    path = os.path.join(tempfile.mkdtemp(), f"random_{package}.py")
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location(f"random_{package}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.streams


@pytest.fixture(scope="module")
def kernels():
    return _load("tilefuse"), _load("triton")


def _triton_version():
    return tuple(int(p) for p in triton.__version__.split(".")[:2])


@pytest.mark.parametrize(
    "seed,base,wide",
    [
        (0, 0, False),
        (12345, 7, False),
        (2**31 + 5, 2**31 - 5000, False),
        (2**63 + 11, 0, True),
        (-3, 3 * 2**40 + 1, True),
    ],
)
def test_streams_equal_tritons(kernels, seed, base, wide):
    if wide and _triton_version() < (3, 4):
        pytest.skip("Triton before 3.4 ran 64-bit offsets through Philox4x64 (triton-lang/triton#6832)")
    n = 1024
    ours, theirs = (torch.zeros(len(NAMES) * n, dtype=torch.int32, device="cuda") for _ in range(2))
    kernels[0][(1,)](ours, seed, base, WIDE=wide, N=n)
    kernels[1][(1,)](theirs, seed, base, WIDE=wide, N=n)
    torch.cuda.synchronize()
    a, b = ours.cpu().numpy().reshape(len(NAMES), n), theirs.cpu().numpy().reshape(len(NAMES), n)
    for j, name in enumerate(NAMES):
        if name.startswith("n") or name == "randn":
            d = f32_ulps(a[j].view(np.float32), b[j].view(np.float32))
            assert d.max() <= 4, f"{name}: {d.max()} ulp from Triton's, {(d == 0).mean():.1%} identical"
        else:
            np.testing.assert_array_equal(a[j], b[j], err_msg=name)
