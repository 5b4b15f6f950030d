"""ptxas for the CPU tests: the PTX the lowering emits must assemble (and order its first
async copy after the shared accesses before it)."""

import re
import shutil
import subprocess

PTXAS = shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas"


def assert_assembles(ptx, arch, tmp_path, verbose=False):
    """ptxas accepts `ptx` for `arch` and its first async copy waits for the shared
    accesses before it (assert_first_copy_waits_for_scratch); returns ptxas's report
    (with -v: registers, warnings)."""
    assert_first_copy_waits_for_scratch(ptx)
    src = tmp_path / "k.ptx"
    src.write_text(ptx)
    cmd = [PTXAS, f"-arch={arch}", *(["-v"] if verbose else []), str(src), "-o", str(tmp_path / "k.cubin")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stderr


_SHARED_ACCESS = re.compile(r"^\s*(@%p\d+\s+)?(ld|st)\.shared")
_ASYNC_COPY = re.compile(r"^\s*(@%p\d+\s+)?cp\.async\.(cg|ca|bulk)")


def assert_first_copy_waits_for_scratch(ptx):
    """The first asynchronous copy into shared memory comes after a bar.sync that follows
    every ordinary shared access before it: conversions use the operand space as scratch
    until the pipeline claims it, and a fast thread's copy must not overwrite what a slow
    thread has yet to read there."""
    pending = None
    for n, line in enumerate(ptx.splitlines(), 1):
        if "bar.sync" in line or "barrier.sync" in line:
            pending = None
        elif _SHARED_ACCESS.match(line):
            pending = pending or n
        elif _ASYNC_COPY.match(line):
            assert (
                pending is None
            ), f"PTX line {n}: the first async copy, with no bar.sync since the shared access on line {pending}"
            return
