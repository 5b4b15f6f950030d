"""Prebuilt kernels: specializations compiled when the wheel was built (scripts/prebuild.py:
the MoE library's kernels for sm_90a at the configs its host code picks for GroupedMLP's
shapes), shipped in tilefuse/prebuilt/ as a read-only kernel cache (<arch>/: the disk
cache's entries, launch spec + PTX + cubin) with index.json.

A GPU launch whose specialization is not in memory yet asks `kernel` first: a hit is
served by the runtime alone (no IR is generated, nothing is lowered or assembled); a
config or target that is not prebuilt compiles as usual. The index holds an identity (the
version, the compiler library's build ID, a hash of every .py file of tilefuse and
kernels_dsl): prebuilt kernels of other sources or another compiler are never used, so an
edited kernel compiles again. TILEFUSE_PREBUILT=0 turns the lookup off;
TILEFUSE_PREBUILT_DIR points it at another folder (scripts/prebuild.py --out).
"""

from __future__ import annotations

import hashlib
import json
import os

from . import _C, defaults, gpu

_state = None  # (index or None, why not), read once


def directory() -> str:
    return os.environ.get("TILEFUSE_PREBUILT_DIR") or os.path.join(os.path.dirname(__file__), "prebuilt")


def _sources():
    """(relative path, absolute path) of every .py file of tilefuse and kernels_dsl."""
    import kernels_dsl

    for top in (os.path.dirname(__file__), os.path.dirname(kernels_dsl.__file__)):
        base = os.path.dirname(top)
        for root, dirs, files in os.walk(top):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for f in sorted(files):
                if f.endswith(".py"):
                    path = os.path.join(root, f)
                    yield os.path.relpath(path, base), path


def identity() -> str:
    """What prebuilt kernels must have been built from to be used here."""
    h = hashlib.sha256(f"{defaults.__version__}\n{gpu._compiler_fingerprint()}\n".encode())
    for rel, path in _sources():
        with open(path, "rb") as f:
            h.update(rel.encode() + b"\0" + hashlib.sha256(f.read()).digest())
    return h.hexdigest()


def spec_key(fn, key) -> str:
    """A kernel's specialization (jit's cache key), independent of config and target."""
    return hashlib.sha256(f"{fn.fn.__module__}:{fn.fn.__qualname__}\n{key!r}".encode()).hexdigest()


def entry_key(spec: str, arch: str, num_warps: int, num_stages: int) -> str:
    return hashlib.sha256(f"{spec}\n{arch}\n{num_warps}\n{num_stages}".encode()).hexdigest()


def _load():
    if os.environ.get("TILEFUSE_PREBUILT") == "0":
        return None, "TILEFUSE_PREBUILT=0"
    path = os.path.join(directory(), "index.json")
    try:
        with open(path) as f:
            index = json.load(f)
    except FileNotFoundError:
        return None, f"no prebuilt kernels ({path} is absent)"
    except (OSError, ValueError) as e:
        return None, f"{path} is unreadable ({e})"
    if not isinstance(index, dict) or index.get("identity") != identity():
        return None, f"{path} was built from other sources or by another compiler than this package's"
    return index, ""


def index():
    """(the index, or None, and why not)."""
    global _state
    if _state is None:
        _state = _load()
    return _state


def reset():
    """Forget the index read (after changing TILEFUSE_PREBUILT_DIR or the folder)."""
    global _state
    _state = None


def entry(spec: str, arch: str, num_warps: int, num_stages: int):
    """The runtime.CachedKernel prebuilt for this specialization, target and config, or None."""
    idx, _ = index()
    key = entry_key(spec, arch, num_warps, num_stages)
    if idx is None or key not in idx["kernels"]:
        return None
    return _C.runtime.DiskCache(os.path.join(directory(), arch), 0).get_kernel(key)


class _LazyAsm(dict):
    """asm of a prebuilt kernel: "ptx" when loaded; any other stage compiles it first."""

    def __init__(self, full):
        super().__init__()
        self._full = full

    def __missing__(self, stage):
        for k, v in self._full().asm.items():
            self.setdefault(k, v)
        return self[stage]


class PrebuiltKernel:
    """A specialization that is prebuilt for some target and config: what jit's cache holds
    in place of a CompiledKernel. gpu.binary asks `prebuilt(arch, num_warps, num_stages)`
    first; the module (and every asm stage but the PTX) is compiled only when asked for."""

    def __init__(self, fn, spec: str, params):
        self.name = fn.__name__
        self.signature = [(p.name, str(p.spec.type)) for p in params if p.spec is not None]
        self.loaded = {}
        self.asm = _LazyAsm(self._full)
        self._fn, self._spec, self._params, self._compiled = fn, spec, params, None

    def _full(self):
        if self._compiled is None:
            self._compiled = self._fn._compile(self._params)
        return self._compiled

    @property
    def module(self):
        return self._full().module

    def prebuilt(self, arch: str, num_warps: int, num_stages: int):
        return entry(self._spec, arch, num_warps, num_stages)


def kernel(fn, key, params):
    """A PrebuiltKernel for jit function `fn`'s specialization `key`, or None when the
    index has no entry for it."""
    idx, _ = index()
    if idx is None:
        return None
    spec = spec_key(fn, key)
    return PrebuiltKernel(fn, spec, params) if spec in idx["specs"] else None
