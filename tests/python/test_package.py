"""The frontend package's structure: the version and the launch defaults are defined
once, in tilefuse.defaults."""

import inspect
import pathlib

import pytest
import tilefuse as tf
from tilefuse import defaults, gpu
from tilefuse.jit import JITFunction

tomllib = pytest.importorskip("tomllib")  # Python 3.11+
regex_metadata = pytest.importorskip("scikit_build_core.metadata.regex")

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "frontend" / "tilefuse"


def test_launch_defaults_come_from_defaults():
    for fn in (JITFunction.run, JITFunction.warmup, JITFunction._launch_full):
        params = inspect.signature(fn).parameters
        assert params["num_warps"].default == defaults.NUM_WARPS, fn
        assert params["num_stages"].default == defaults.NUM_STAGES, fn
    params = inspect.signature(gpu.lower).parameters
    assert params["num_warps"].default is params["num_stages"].default is inspect.Parameter.empty


def test_the_version_is_defined_once():
    assert tf.__version__ == defaults.__version__
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"] and "version" in pyproject["project"]["dynamic"]
    source = pyproject["tool"]["scikit-build"]["metadata"]["version"]
    assert (ROOT / source["input"]).resolve() == PACKAGE / "defaults.py"
    assert regex_metadata.dynamic_metadata("version", {"input": str(ROOT / source["input"])}) == defaults.__version__
    assert "VERSION" not in (ROOT / "CMakeLists.txt").read_text().split("project(")[1].split(")")[0]
