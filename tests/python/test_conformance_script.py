"""scripts/conformance/run_test_core.py on a small stand-in of a Triton checkout (a
test_core.py whose tests run tilefuse kernels through the `triton` alias, and the two
helper files it loads): counts, the `interpreter` mark, failure causes, -n shards and the
deterministic stratified --sample."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "conformance" / "run_test_core.py"

TEST_CORE = """
import numpy as np
import pytest
import triton
import triton.language as tl


@triton.jit
def add_one(x_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) + 1)


@pytest.mark.interpreter
@pytest.mark.parametrize("seed", range(40))
def test_add(seed, device):
    x = np.random.default_rng(seed).integers(-100, 100, 16).astype(np.int32)
    want = x + 1
    add_one[(1,)](x, 16)
    np.testing.assert_array_equal(x, want)


@pytest.mark.interpreter
@pytest.mark.parametrize("i", range(10))
def test_some_fail(i, device):
    assert i != 3, "three"


def test_not_marked(device):
    raise AssertionError("runs only with --all")
"""


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    root = tmp_path_factory.mktemp("triton")
    lang = root / "python" / "test" / "unit" / "language"
    lang.mkdir(parents=True)
    (lang / "test_core.py").write_text(textwrap.dedent(TEST_CORE))
    helpers = root / "python" / "triton"
    helpers.mkdir()
    (helpers / "_utils.py").write_text("type_canonicalisation_dict = {}\n")
    (helpers / "_internal_testing.py").write_text("def is_interpreter():\n    return True\n")
    return lang / "test_core.py"


def run(test_core, tmp_path, *args):
    out = tmp_path / "summary.json"
    cmd = [sys.executable, str(SCRIPT), str(test_core), "--quiet", "--json", str(out), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(out.read_text())


def test_counts_and_causes(checkout, tmp_path):
    s = run(checkout, tmp_path)
    assert s["counts"] == {"passed": 49, "failed": 1}
    assert s["causes"] == {"AssertionError: three": ["test_core.py::test_some_fail[3]"]}
    assert len(s["tests"]) == 50 and "test_core.py::test_not_marked" not in s["tests"]


def test_shards_and_sample(checkout, tmp_path):
    whole = run(checkout, tmp_path, "-n", "3")
    assert whole["counts"] == {"passed": 49, "failed": 1}  # the shards cover every test once
    a = run(checkout, tmp_path, "--sample", "10")
    b = run(checkout, tmp_path, "--sample", "10", "-n", "2")
    assert a["tests"] == b["tests"]  # the same subset however it is sharded
    chosen = [t.split("::")[1].split("[")[0] for t in a["tests"]]
    # Stratified: each test function keeps its share (40 and 10 of 50 tests).
    assert chosen.count("test_add") == 8 and chosen.count("test_some_fail") == 2


def test_flat_copy(checkout, tmp_path):
    """test_core.py travels with the two helpers beside it."""
    flat = tmp_path / "flat"
    flat.mkdir()
    for f in (checkout, *(checkout.parents[3] / "triton").iterdir()):
        (flat / f.name).write_text(f.read_text())
    assert run(flat / "test_core.py", tmp_path, "-k", "test_add")["counts"] == {"passed": 40}
    (flat / "_utils.py").unlink()
    proc = subprocess.run([sys.executable, str(SCRIPT), str(flat / "test_core.py")], capture_output=True, text=True)
    assert proc.returncode != 0 and "_internal_testing.py and _utils.py not found" in proc.stderr
