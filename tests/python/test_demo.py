"""`python -m tilefuse.demo` (what `make run` shows) runs and prints the IR and a small error."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_demo_runs_and_prints_ir_and_error():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "frontend"), str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    for var in ("TILEFUSE_DUMP", "TILEFUSE_TIME_PASSES", "TILEFUSE_BACKEND"):
        env.pop(var, None)
    proc = subprocess.run(
        [sys.executable, "-m", "tilefuse.demo"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert out.count("func @softmax_rows(") == 2  # before and after the pass pipeline
    assert "// tile IR from the frontend" in out and "// after the pass pipeline" in out
    for op in ("program_id", "arange", "load", "reduce_max", "exp", "reduce_sum", "store"):
        assert re.search(rf"\b{op}\b", out), op
    m = re.search(r"max \|error\| vs float64 = ([0-9.eE+-]+)", out)
    assert m, out
    assert float(m.group(1)) < 1e-6
    # The MoE MLP's forward and backward (tilefuse/moe/demo.py), each recipe checked there.
    # NVFP4's out: E2M1 quantizations of x, W1, y and W2 (about 0.08 measured).
    for recipe, bound in (("bf16", 2.0**-4), ("mxfp8", 2.0**-4), ("nvfp4", 2.0**-2)):
        m = re.search(rf"moe MLP {recipe} .*\n +error RMS / RMS vs float64: out ([0-9.e+-]+), dx", out)
        assert m and float(m.group(1)) < bound, out
