"""The frontend package's structure: its modules import in one direction (jit -> gpu ->
_C, no imports inside functions), and the version and the launch defaults are defined
once, in tilefuse.defaults."""

import ast
import inspect
import pathlib
import subprocess
import sys

import pytest
import tilefuse as tf
from tilefuse import defaults, gpu
from tilefuse.jit import JITFunction

tomllib = pytest.importorskip("tomllib")  # Python 3.11+
regex_metadata = pytest.importorskip("scikit_build_core.metadata.regex")

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "frontend" / "tilefuse"


def package_imports(path):
    """(module-level, function-level) sets of the package's modules that `path` imports."""
    top, inner = set(), set()

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ImportFrom) and child.level == 1:
                names = [child.module] if child.module else [a.name for a in child.names]
                (inner if in_function else top).update(n.split(".")[0] for n in names)
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    visit(ast.parse(path.read_text()), False)
    return top, inner


def test_modules_import_in_one_direction():
    graph = {}
    for path in sorted(PACKAGE.glob("*.py")):
        top, inner = package_imports(path)
        assert not inner, f"{path.name} imports {inner} inside a function"
        graph[path.stem] = top - {"_C"}
    assert "gpu" in graph["jit"] and "jit" not in graph["gpu"]

    def reaches(a, b, seen=()):
        return any(n == b or (n not in seen and reaches(n, b, (*seen, n))) for n in graph.get(a, ()))

    for m in graph:
        if m != "__init__":
            assert not reaches(m, m), f"an import cycle through {m}"
    assert not reaches("gpu", "jit") and not reaches("arrays", "jit")


def test_gpu_imports_on_its_own():
    code = "import sys, tilefuse.gpu; assert sys.modules['tilefuse.jit'].gpu is sys.modules['tilefuse.gpu']"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr


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
