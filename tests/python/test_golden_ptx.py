"""The PTX of the tutorials and kernels_dsl/convert.py equals the checked-in golden
files (tests/python/golden/ptx_cases.py). A difference is either a regression or an
intended change of code generation: then `make golden-ptx` and review the diff."""

import difflib

import pytest

from tests.python.golden import ptx_cases


@pytest.mark.parametrize("name,arch", ptx_cases.pairs())
def test_ptx_matches_golden(name, arch):
    p = ptx_cases.path(name, arch)
    assert p.exists(), f"no golden file {p.name}: run `make golden-ptx`"
    want, got = p.read_text(), ptx_cases.emit(name, arch)
    if got != want:
        diff = difflib.unified_diff(want.splitlines(), got.splitlines(), "golden", "now", lineterm="", n=2)
        pytest.fail(f"{p.name} differs (run `make golden-ptx` if intended):\n" + "\n".join(list(diff)[:60]))


def test_every_golden_file_has_a_case():
    known = {ptx_cases.path(n, a).name for n, a in ptx_cases.pairs()}
    assert {p.name for p in ptx_cases.DIR.glob("*.ptx")} == known
