"""The user guide's examples on a GPU: every page's python blocks, those marked ```python gpu
included (tests/python/test_docs_examples.py runs the others on the CPU)."""

import pytest

from tests.python.test_docs_examples import PAGES, blocks, run_page

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]
GPU_PAGES = [p for p in PAGES if any("gpu" in tags for tags, _ in blocks(p))]


@pytest.mark.parametrize("page", GPU_PAGES, ids=[p.name for p in GPU_PAGES])
def test_guide_examples_run_on_the_gpu(page, tmp_path):
    assert run_page(page, {"torch", "gpu"}, tmp_path)
