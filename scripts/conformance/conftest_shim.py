"""conftest.py of a conformance run (run_test_core.py copies it next to Triton's test_core.py):
`triton` and `triton.*` are tilefuse's modules, plus the few runtime names Triton's tests
and triton/_internal_testing.py import; every test's outcome goes to $CONFORMANCE_RESULTS."""

import builtins
import importlib
import importlib.abc
import importlib.util
import itertools
import json
import linecache
import os
import signal
import sys
import types
from pathlib import Path

import pytest
import tilefuse
import tilefuse.language as tl
import torch
from tilefuse.errors import TilefuseError

_INTERNAL_TESTING = Path(os.environ["CONFORMANCE_INTERNAL_TESTING"])
_RESULTS = Path(os.environ["CONFORMANCE_RESULTS"])
_TIMEOUT = int(os.environ.get("CONFORMANCE_TIMEOUT", "0"))

# A view of the same bytes where torch has the dtype; tilefuse reads the torch dtype.
_TORCH_VIEW = {
    "int1": torch.bool,
    "uint8": torch.uint8,
    "uint16": torch.uint16,
    "uint32": torch.uint32,
    "uint64": torch.uint64,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "float8e4nv": torch.float8_e4m3fn,
    "float8e5": torch.float8_e5m2,
}


class TensorWrapper:
    """Triton's wrapper of a tensor whose bytes hold a dtype torch does not have."""

    def __init__(self, base, dtype):
        self.dtype, self.base, self.data, self.device, self.shape = dtype, base, base.data, base.device, base.shape

    def data_ptr(self):
        return self.base.data_ptr()

    def stride(self, *args):
        return self.base.stride(*args)

    def element_size(self):
        return self.base.element_size()

    def cpu(self):
        return TensorWrapper(self.base.cpu(), self.dtype)

    def copy_(self, other):
        self.base.copy_(other.base)

    def clone(self):
        return TensorWrapper(self.base.clone(), self.dtype)

    def to(self, device):
        return TensorWrapper(self.base.to(device), self.dtype)

    def new_empty(self, sizes):
        return TensorWrapper(self.base.new_empty(sizes), self.dtype)


def reinterpret(tensor, dtype):
    base = tensor.base if isinstance(tensor, TensorWrapper) else tensor
    view = _TORCH_VIEW.get(getattr(dtype, "name", None))
    if view is not None and base.element_size() == torch.empty((), dtype=view).element_size():
        return base.view(view)
    return TensorWrapper(base, dtype)


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _module(name, **attrs):
    m = types.ModuleType(name)
    m.__dict__.update(attrs)
    m.__path__ = []
    sys.modules[name] = m
    return m


class _Driver:
    """Interpreter mode: _internal_testing never asks the driver for a target."""

    def get_current_target(self):
        return None


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """`import triton.X` is `import tilefuse.X` for every X not shimmed here."""

    def find_spec(self, fullname, path, target=None):
        if not fullname.startswith("triton.") or fullname in sys.modules:
            return None
        try:
            importlib.import_module("tilefuse." + fullname[len("triton.") :])
        except ImportError:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        return sys.modules["tilefuse." + spec.name[len("triton.") :]]

    def exec_module(self, module):
        pass


def _install():
    triton = _module("triton", **{k: v for k, v in vars(tilefuse).items() if not k.startswith("__")})
    triton.__getattr__ = lambda name: getattr(tilefuse, name)
    triton.TritonError = TilefuseError
    triton.TensorWrapper, triton.reinterpret = TensorWrapper, reinterpret
    triton.knobs = _module("triton.knobs", language=types.SimpleNamespace(default_fp_fusion=True))
    sys.modules["triton.language"] = tl
    for name, mod in list(sys.modules.items()):
        if name.startswith("tilefuse.language."):
            sys.modules["triton" + name[len("tilefuse") :]] = mod
    utils = _load("triton._utils", _INTERNAL_TESTING.parent / "_utils.py")
    runtime = _module("triton.runtime", driver=types.SimpleNamespace(active=_Driver()))
    runtime.errors = _module("triton.runtime.errors", InterpreterError=TilefuseError)
    runtime.jit = _module(
        "triton.runtime.jit",
        TensorWrapper=TensorWrapper,
        reinterpret=reinterpret,
        JITFunction=tilefuse.JITFunction,
        type_canonicalisation_dict=utils.type_canonicalisation_dict,
    )
    triton.runtime = runtime
    sys.meta_path.insert(0, _Alias())
    triton._internal_testing = _load("triton._internal_testing", _INTERNAL_TESTING)


class _Missing:
    """What `tl.NAME` is while the tests are collected, for a NAME tilefuse lacks: a
    parametrize list naming it must not stop the whole file from collecting."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"<tl.{self.name}: not in tilefuse.language>"


_install()

_exec = builtins.exec
_exec_count = itertools.count()


def _exec_with_source(source, *args, **kwargs):
    """exec of a string whose functions keep their source: Triton's patch_kernel execs
    kernel text in interpreter mode, and tilefuse compiles kernels from their source."""
    if isinstance(source, str):
        name = f"<conformance-exec-{next(_exec_count)}>"
        linecache.cache[name] = (len(source), None, source.splitlines(True), name)
        source = compile(source, name, "exec")
    return _exec(source, *args, **kwargs)


builtins.exec = _exec_with_source


def _missing(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _Missing(name)


tl.__getattr__ = _missing


def pytest_addoption(parser):
    parser.addoption("--device", action="store", default="cpu")


def pytest_configure(config):
    config.addinivalue_line("markers", "interpreter: indicate whether interpreter supports the test")


@pytest.fixture
def device(request):
    return request.config.getoption("--device")


@pytest.fixture
def with_allocator():
    # tilefuse needs no global scratch allocator.
    yield


def _write(rec):
    with _RESULTS.open("a") as f:
        f.write(json.dumps(rec) + "\n")


def _done():
    if not _RESULTS.exists():
        return set()
    recs = (json.loads(line) for line in _RESULTS.read_text().splitlines() if line.strip())
    return {r["nodeid"] for r in recs if r["kind"] == "result"}


def pytest_collection_finish(session):
    # From here on a missing name is an AttributeError again, as in a user's kernel.
    del tl.__getattr__


def pytest_collection_modifyitems(config, items):
    # After a crash the run restarts: tests that have a result are not run again.
    done = _done()
    if done:
        keep = [i for i in items if i.nodeid not in done]
        config.hook.pytest_deselected(items=[i for i in items if i.nodeid in done])
        items[:] = keep


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout(f"Timeout: the test ran over {_TIMEOUT} s")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _write({"kind": "start", "nodeid": item.nodeid})
    if _TIMEOUT:
        signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(_TIMEOUT)
    try:
        yield
    finally:
        signal.alarm(0)


_outcome = {}


def pytest_runtest_logreport(report):
    cur = _outcome.setdefault(report.nodeid, ["passed", ""])
    if report.skipped:
        cur[0] = "xfailed" if hasattr(report, "wasxfail") else "skipped"
    elif report.failed:
        cur[0] = "failed" if report.when == "call" else "error"
        crash = getattr(report.longrepr, "reprcrash", None)
        msg = crash.message if crash is not None else str(report.longrepr)
        cur[1] = cur[1] or (msg.strip().splitlines() or [""])[0]
    if report.when == "teardown":
        _write({"kind": "result", "nodeid": report.nodeid, "outcome": cur[0], "cause": cur[1]})
