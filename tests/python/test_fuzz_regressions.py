"""Each input a fuzz target found (tests/fuzz/regressions/<target>/) as a test: parsed,
verified and run through the pipeline (and, for fuzz_lower's, lowered to sm_90a), it must
end in the UserError its `// expect: REGEX` line names, or compile when that line is absent.
Under make test-asan these run on the instrumented library, where the crash was found."""

import pathlib
import re

import pytest
from tilefuse import _C

REGRESSIONS = pathlib.Path(__file__).resolve().parents[1] / "fuzz" / "regressions"
CASES = sorted(REGRESSIONS.glob("*/*"))


def _compile(target: str, text: str):
    m = _C.ir.Module.parse(text, "<regression>")
    m.verify()
    _C.passes.run_pipeline(m)
    if target == "lower":
        for name in re.findall(r"^func @([^(\s]+)\(", str(m), re.M):
            _C.lower.compile(m, name, "sm_90a", 4, 3, keep_ir=False)


@pytest.mark.parametrize("path", CASES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fuzz_regression(path):
    data = path.read_bytes()
    expect = re.search(rb"^// expect: (.*)$", data, re.M)
    text = data.decode("utf-8", "replace")
    if expect is None:
        _compile(path.parent.name, text)
    else:
        with pytest.raises(_C.UserError, match=expect.group(1).decode()):
            _compile(path.parent.name, text)


def test_there_are_regressions():
    assert CASES, f"no inputs under {REGRESSIONS}"
