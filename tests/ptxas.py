"""ptxas for the CPU tests: the PTX the lowering emits must assemble."""

import shutil
import subprocess

PTXAS = shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas"


def assert_assembles(ptx, arch, tmp_path, verbose=False):
    """ptxas accepts `ptx` for `arch`; returns its report (with -v: registers, warnings)."""
    src = tmp_path / "k.ptx"
    src.write_text(ptx)
    cmd = [PTXAS, f"-arch={arch}", *(["-v"] if verbose else []), str(src), "-o", str(tmp_path / "k.cubin")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stderr
