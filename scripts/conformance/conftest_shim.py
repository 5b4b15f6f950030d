"""conftest.py of a conformance run (run_test_core.py copies it next to Triton's test_core.py):
`triton` and `triton.*` are tilefuse's modules, plus the few runtime names Triton's tests
and triton/_internal_testing.py import; every test's outcome goes to $CONFORMANCE_RESULTS."""

import builtins
import collections
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
import zlib
from pathlib import Path

import pytest
import tilefuse
import tilefuse.language as tl
from tilefuse.errors import TilefuseError

_INTERNAL_TESTING = Path(os.environ["CONFORMANCE_INTERNAL_TESTING"])
_RESULTS = Path(os.environ["CONFORMANCE_RESULTS"])
_TIMEOUT = int(os.environ.get("CONFORMANCE_TIMEOUT", "0"))
_SAMPLE = int(os.environ.get("CONFORMANCE_SAMPLE", "0"))
_SHARD = os.environ.get("CONFORMANCE_SHARD", "0/1")


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


class _Target(types.SimpleNamespace):
    """Triton's GPUTarget: backend, arch (the compute capability as an int), warp_size."""


class _Utils:
    def get_device_properties(self, device):
        import torch

        p = torch.cuda.get_device_properties(device)
        shared = getattr(p, "shared_memory_per_block_optin", 0)
        return {"max_shared_mem": shared, "multiprocessor_count": p.multi_processor_count}


class _Driver:
    """The target of the GPU the tests run on (--device cuda); the interpreter never asks."""

    utils = _Utils()

    def get_current_device(self):
        import torch

        return torch.cuda.current_device()

    def get_current_target(self):
        import torch  # here: Triton's tests import it anyway, a shim's own test need not

        if not torch.cuda.is_available():
            return None
        major, minor = torch.cuda.get_device_capability()
        return _Target(backend="cuda", arch=10 * major + minor, warp_size=32)


class _Ptxas:
    @property
    def version(self):
        """ "major.minor" of the ptxas tilefuse runs (_internal_testing's TMA check)."""
        import re
        import subprocess

        from tilefuse import gpu

        exe = gpu.ptxas_path()
        text = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout if exe else ""
        found = re.search(r"release (\d+\.\d+)", text)
        return found.group(1) if found else "0.0"


class _Nvidia(types.SimpleNamespace):
    ptxas = _Ptxas()


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
    triton.knobs = _module("triton.knobs", language=types.SimpleNamespace(default_fp_fusion=True), nvidia=_Nvidia())
    sys.modules["triton.language"] = tl
    for name, mod in list(sys.modules.items()):
        if name.startswith("tilefuse.language."):
            sys.modules["triton" + name[len("tilefuse") :]] = mod
    utils = _load("triton._utils", _INTERNAL_TESTING.parent / "_utils.py")
    runtime = _module("triton.runtime", driver=types.SimpleNamespace(active=_Driver()))
    runtime.errors = _module("triton.runtime.errors", InterpreterError=TilefuseError)
    runtime.jit = _module(
        "triton.runtime.jit",
        TensorWrapper=tilefuse.TensorWrapper,
        reinterpret=tilefuse.reinterpret,
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


def _init_cuda_first():
    """torch initializes CUDA lazily, then runs queued calls that look `triton` up
    (importlib.util.find_spec fails on the shim, which has no __spec__): on the GPU,
    initialize it before the shim exists, and drop the real triton it may have imported."""
    if os.environ.get("TILEFUSE_BACKEND") != "cuda":
        return
    import torch

    torch.cuda.init()
    for name in [n for n in sys.modules if n == "triton" or n.startswith("triton.")]:
        del sys.modules[name]


_init_cuda_first()
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


def _hash(nodeid):
    return zlib.crc32(nodeid.encode())


def _sample(items, k):
    """About k of `items`, stratified by test function: each keeps its share (at least one),
    the ids of smallest hash, so that every run and shard picks the same ones."""
    groups = collections.defaultdict(list)
    for it in items:
        groups[it.nodeid.split("[")[0]].append(it)
    keep = set()
    for group in groups.values():
        n = max(1, round(k * len(group) / len(items)))
        keep.update(it.nodeid for it in sorted(group, key=lambda it: _hash(it.nodeid))[:n])
    return keep


@pytest.hookimpl(trylast=True)  # after -m and -k deselected theirs
def pytest_collection_modifyitems(config, items):
    keep = {it.nodeid for it in items}
    if _SAMPLE and _SAMPLE < len(items):
        keep = _sample(items, _SAMPLE)
    shard, shards = map(int, _SHARD.split("/"))
    keep = {i for i in keep if _hash(i) % shards == shard}
    # After a crash the run restarts: tests that have a result are not run again.
    keep -= _done()
    config.hook.pytest_deselected(items=[i for i in items if i.nodeid not in keep])
    items[:] = [i for i in items if i.nodeid in keep]


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
