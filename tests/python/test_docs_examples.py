"""Every ```python block of the user guide (docs/guide/*.md) runs: a page's blocks in order
as one script (a file: kernels need their source), in a fresh process in an empty folder,
on the interpreter. Blocks marked ```python torch need torch (skipped without it, as in CI);
blocks marked ```python gpu run in tests/gpu/test_docs_examples_gpu.py."""

import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guide"
FENCE = re.compile(r"^```python([^\n]*)\n(.*?)^```", re.S | re.M)
TAGS = {"torch", "gpu"}
PAGES = sorted(GUIDE.glob("*.md"))


def blocks(page):
    """[(tags, code)] of a page's python blocks."""
    found = [(set(tags.split()), code) for tags, code in FENCE.findall(page.read_text())]
    for tags, _ in found:
        assert tags <= TAGS, f"{page.name}: unknown block tags {tags - TAGS}"
    return found


def run_page(page, allowed, where):
    """Runs the page's blocks whose tags are all allowed; False when there are none."""
    code = "\n\n".join(c for tags, c in blocks(page) if tags <= allowed)
    if not code:
        return False
    script = where / f"guide_{page.stem}.py"
    script.write_text(code)
    # The tilefuse this test imported (frontend/ here, a staged package on the GPU machine).
    pkg = pathlib.Path(importlib.util.find_spec("tilefuse").origin).parents[1]
    path = os.pathsep.join([str(pkg), str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path, TILEFUSE_CACHE_DIR=str(where / "cache"))
    r = subprocess.run([sys.executable, script.name], cwd=where, env=env, capture_output=True, text=True)
    assert r.returncode == 0, f"docs/guide/{page.name}:\n{r.stdout}\n{r.stderr}"
    return True


def test_the_guide_has_pages_with_examples():
    assert {p.name for p in PAGES} >= {"README.md", "kernels.md", "interpreter.md", "autotuning.md", "moe.md", "aot.md"}
    index = (GUIDE / "README.md").read_text()
    for p in PAGES:
        assert p.name == "README.md" or f"({p.name})" in index, f"README.md does not link {p.name}"
    assert sum(len(blocks(p)) for p in PAGES) >= 15


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_guide_examples_run(page, tmp_path):
    allowed = {"torch"} if importlib.util.find_spec("torch") else set()
    if not run_page(page, allowed, tmp_path):
        pytest.skip(f"{page.name}: no example runs here")
