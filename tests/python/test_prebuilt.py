"""tilefuse.prebuilt and scripts/prebuild.py: a prebuilt specialization is served with no
compile (no IR generated, nothing lowered), equal to what compiling gives; other configs,
targets and specializations compile as usual; an index of other sources, a missing one or
TILEFUSE_PREBUILT=0 turns the lookup off. With torch (CPU): every launch of a GroupedMLP
step at the prebuilt shapes, at a token count other than the recorded ones, is found."""

import json

import numpy as np
import pytest
import tilefuse as tf
import tilefuse.language as tl
from tilefuse import defaults, gpu, prebuilt
from tilefuse.jit import JITFunction

from scripts import prebuild


@tf.jit
def axpy(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, a * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def specialization(n):
    x = np.empty(n, np.float32)
    return axpy._specialize(axpy._bind((x, x, x, 2.0, n), dict(BLOCK=128)))[:2]


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEFUSE_PREBUILT_DIR", str(tmp_path / "prebuilt"))
    monkeypatch.setenv("TILEFUSE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TILEFUSE_PREBUILT", raising=False)
    (tmp_path / "prebuilt").mkdir()
    prebuilt.reset()
    yield tmp_path / "prebuilt"
    prebuilt.reset()


def write_axpy(folder, n=4096, config=(4, 2)):
    key, params = specialization(n)
    prebuild.write(folder, "sm_90a", {(axpy, key, *config): params})
    prebuilt.reset()
    return key, params


def no_compiling(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("compiled although the kernel is prebuilt")

    monkeypatch.setattr(JITFunction, "_compile", refuse)
    monkeypatch.setattr(gpu, "lower", refuse)


def test_prebuilt_kernel_is_served_without_compiling(folder, monkeypatch):
    key, params = write_axpy(folder)
    want = gpu.build(axpy._compile(params), "sm_90a", 4, 2)[0]
    with monkeypatch.context() as m:
        no_compiling(m)
        k = prebuilt.kernel(axpy, key, params)
        assert isinstance(k, prebuilt.PrebuiltKernel)
        got = gpu.binary(k, "sm_90a", 4, 2)
    assert got.ptx == want.ptx and got.image == want.image
    assert [p.name for p in got.spec.params] == [p.name for p in want.spec.params]
    assert got.spec.shared_bytes == want.spec.shared_bytes
    image = json.loads((folder / "index.json").read_text())["kernels"]
    assert [v["image"] for v in image.values()] == ["cubin" if gpu.ptxas_path() else "ptx"]


def test_other_configs_and_specializations_compile(folder):
    key, params = write_axpy(folder)
    k = prebuilt.kernel(axpy, key, params)
    assert k.prebuilt("sm_90a", 8, 2) is None and k.prebuilt("sm_80", 4, 2) is None
    other = gpu.binary(k, "sm_90a", 8, 2)  # compiles k's module on demand
    assert other.ptx == gpu.build(axpy._compile(params), "sm_90a", 8, 2)[0].ptx
    assert k.asm["tile"] == axpy._compile(params).asm["tile"], "the compiled stages, once asked for"
    assert prebuilt.kernel(axpy, *specialization(1001)) is None, "n % 16 != 0 is another specialization"


def test_index_of_other_sources_is_ignored(folder):
    key, params = write_axpy(folder)
    index = json.loads((folder / "index.json").read_text())
    index["identity"] = "0" * 64
    (folder / "index.json").write_text(json.dumps(index))
    prebuilt.reset()
    assert prebuilt.kernel(axpy, key, params) is None
    assert "other sources" in prebuilt.index()[1]


def test_lookup_off(folder, monkeypatch):
    key, params = write_axpy(folder)
    monkeypatch.setenv("TILEFUSE_PREBUILT", "0")
    prebuilt.reset()
    assert prebuilt.kernel(axpy, key, params) is None and prebuilt.index()[1] == "TILEFUSE_PREBUILT=0"
    monkeypatch.delenv("TILEFUSE_PREBUILT")
    (folder / "index.json").unlink()
    prebuilt.reset()
    assert prebuilt.kernel(axpy, key, params) is None and "absent" in prebuilt.index()[1]


def test_grouped_mlp_launches_are_prebuilt(folder, monkeypatch):
    """The launches of GroupedMLP steps at a prebuilt shape (bf16 and FP8-block, grouped and
    per-expert weights, recompute on and off), at 2048 and 8192 tokens (recorded: 4096
    and 65536; the persistent GEMM's rule picks per-tile at 2048, persistent at 8192), are
    all found without compiling."""
    pytest.importorskip("torch")
    shapes = [s for s in prebuild.SHAPES if not s[5] and s[4] in ("bf16", "fp8_block")]
    prebuild.write(folder, "sm_90a", prebuild.launches_of(shapes, rows=(4096, 65536)), jobs=2)
    prebuilt.reset()
    launches = prebuild.launches_of(shapes, rows=(2048, 8192))
    names = {fn.__name__ for fn, *_ in launches}
    assert {"grouped_gemm_kernel", "grouped_gemm_persistent_kernel", "check_splits"} <= names, names
    with monkeypatch.context() as m:
        no_compiling(m)
        for (fn, key, nw, ns), params in launches.items():
            k = prebuilt.kernel(fn, key, params)
            assert k is not None, f"{fn.__name__} {key} is not prebuilt"
            assert gpu.binary(k, "sm_90a", nw, ns) is not None


def test_jit_launch_takes_the_prebuilt_kernel(folder, monkeypatch):
    """A GPU launch of a prebuilt specialization reaches the runtime with the prebuilt
    kernel, generating no IR (the launch itself stubbed: no GPU here)."""
    config = (defaults.NUM_WARPS, defaults.NUM_STAGES)  # a launch's, when it names none
    key, params = write_axpy(folder, n=2048, config=config)
    jit_module = prebuild.importlib.import_module("tilefuse.jit")
    launched = []
    monkeypatch.setattr(jit_module, "select_backend", lambda values: "cuda")
    monkeypatch.setattr(gpu, "launch", lambda kernel, bound, grid, nw, ns, c=False: launched.append((kernel, nw, ns)))
    no_compiling(monkeypatch)
    x = np.empty(2048, np.float32)
    fresh = tf.jit(axpy.fn)  # an empty in-memory cache
    fresh[lambda meta: (16,)](x, x, x, 2.0, 2048, BLOCK=128)
    ((kernel, nw, ns),) = launched
    assert isinstance(kernel, prebuilt.PrebuiltKernel) and (nw, ns) == config
    assert gpu.binary(kernel, "sm_90a", *config) is not None


def test_nvfp4_launches_do_not_depend_on_the_seed():
    """NVFP4's backward at three seeds (divisible by 16, odd, past 2^32) makes the same
    launches, so the recorded set serves every seed of a training run."""
    torch = pytest.importorskip("torch")
    shape = next(s for s in prebuild.SHAPES if s[4] == "nvfp4" and not s[5])
    sets = []
    for seed in (16 * 12345, 7, 2**40 + 3):
        with prebuild.recording() as launches:
            prebuild.grouped_mlp_step(torch, shape, 4096, True, False, seed=seed)
        sets.append(set(launches))
    assert sets[0] and sets[0] == sets[1] == sets[2]
    assert "nvfp4_quantize" in {fn.__name__ for fn, *_ in sets[0]}  # the gradients' stochastic rounding
