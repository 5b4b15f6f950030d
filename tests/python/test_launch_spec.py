"""The typed launch spec without a GPU: what the lowering puts in it, the disk-cache
entry that stores it as JSON with named keys, and that the entry round-trips."""

import json

import ml_dtypes
import numpy as np
import pytest
from tilefuse import _C, gpu

from kernels_dsl.tutorials import vector_add
from kernels_dsl.tutorials.matmul_desc import matmul_desc_kernel

R = _C.runtime
x = np.zeros(1024, np.float32)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEFUSE_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_the_spec_names_parameters_options_and_resources():
    k = vector_add.add_kernel.compile(x, x, x, 1000, BLOCK_SIZE=256)
    spec = gpu.lower(k, "sm_90a", 8, 2, keep_ir=False)["spec"]
    assert (spec.kernel, spec.arch, spec.num_warps, spec.num_stages, spec.num_threads) == (k.name, "sm_90a", 8, 2, 256)
    assert [(p.name, p.kind) for p in spec.params] == [
        ("x_ptr", R.ParamKind.ptr),
        ("y_ptr", R.ParamKind.ptr),
        ("output_ptr", R.ParamKind.ptr),
        ("n_elements", R.ParamKind.i32),
    ]
    assert spec.tensor_maps == [] and spec.shared_bytes >= 0


def test_the_disk_cache_entry_holds_the_spec_as_json_and_round_trips(cache_dir, monkeypatch):
    bf = np.zeros((64, 64), ml_dtypes.bfloat16)
    tiles = dict(BLOCK_SIZE_M=128, BLOCK_SIZE_N=128, BLOCK_SIZE_K=64, GROUP_SIZE_M=8)
    k = matmul_desc_kernel.compile(bf, bf, bf, 4096, 4096, 4096, 4096, 4096, 4096, **tiles)
    entry = gpu.binary(k, "sm_90a", 8, 3)
    spec = entry.spec
    assert len(spec.tensor_maps) == 3 and spec.shared_bytes > 0
    text = spec.to_json()
    d = json.loads(text)
    keys = {"kernel", "arch", "num_warps", "num_stages", "num_threads", "shared_bytes", "params", "tensor_maps"}
    assert set(d) == keys
    assert d["params"][3] == {"name": "M", "kind": "i32"}
    assert d["tensor_maps"][0]["sizes"] == [
        {"param": 3, "value": 0, "factor": -1},
        {"param": 5, "value": 0, "factor": -1},
    ]
    assert set(d["tensor_maps"][0]) == {"base", "elem_bytes", "sizes", "strides", "box", "swizzle_bytes", "where"}
    assert R.LaunchSpec.from_json(text) == spec

    # The stored bytes hold that JSON; a second lookup reads the entry instead of compiling.
    (path,) = [p for p in cache_dir.rglob("*") if p.is_file() and not p.name.endswith("-hints")]  # the kernel entry
    assert text.encode() in path.read_bytes()
    monkeypatch.setattr(gpu, "lower", lambda *a, **kw: pytest.fail("compiled again"))
    again = gpu.binary(k, "sm_90a", 8, 3)
    assert again.spec == spec and again.ptx == entry.ptx and again.image == entry.image


def test_a_damaged_entry_is_rebuilt(cache_dir):
    k = vector_add.add_kernel.compile(x, x, x, 1000, BLOCK_SIZE=256)
    spec = gpu.binary(k, "sm_90a", 4, 3).spec
    (path,) = [p for p in cache_dir.rglob("*") if p.is_file() and not p.name.endswith("-hints")]  # the kernel entry
    key = path.name
    R.DiskCache(str(cache_dir)).put(key, b"TFK1" + bytes(16) + b"{not json")
    assert R.DiskCache(str(cache_dir)).get_kernel(key) is None
    assert gpu.binary(k, "sm_90a", 4, 3).spec == spec
    assert R.DiskCache(str(cache_dir)).get_kernel(key).spec == spec


def test_malformed_spec_json_is_refused():
    with pytest.raises(ValueError, match="missing keys"):
        R.LaunchSpec.from_json('{"kernel": "k"}')
