"""The library's grouped GEMMs in SASS, at every config the host launches (the default and
the tuned table's): the wgmma groups are HGMMA (bf16) or QGMMA (fp8) instructions and no
instruction touches local memory (LDL / STL: spills). Needs ptxas and cuobjdump (the GPU
machine's CUDA toolkit); marked gpu so that it runs there with the others."""

import os
import shutil
import subprocess

import pytest

from tests.python.moe import test_grouped_gemm_ptx as g

pytestmark = pytest.mark.gpu
CUOBJDUMP = shutil.which("cuobjdump") or "/usr/local/cuda/bin/cuobjdump"
needs = pytest.mark.skipif(not os.path.exists(CUOBJDUMP) or not os.path.exists(g.PTXAS), reason="needs cuobjdump")


@needs
@pytest.mark.parametrize("call,cfg", g.host_config_cases(), ids=g.case_id)
def test_sass_is_on_gmma_without_local_memory(monkeypatch, tmp_path, call, cfg):
    for name, ptx in g.gemm_ptx(monkeypatch, call, cfg):
        src, cubin = tmp_path / f"{name}.ptx", tmp_path / f"{name}.cubin"
        src.write_text(ptx)
        subprocess.run([g.PTXAS, "-arch=sm_90a", str(src), "-o", str(cubin)], check=True)
        sass = subprocess.run([CUOBJDUMP, "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
        mma = "QGMMA" if "fp8" in call or "mxfp8" in call else "HGMMA"
        assert mma in sass, (name, call)
        local = [ln.strip() for ln in sass.splitlines() if " LDL" in ln or " STL" in ln]
        assert not local, (name, call, local[:3])
