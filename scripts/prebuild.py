"""Prebuilt kernels (tilefuse.prebuilt): compiles the MoE library's kernels for `--arch`
(sm_90a) at the configs its host code picks for GroupedMLP's shapes (SHAPES) and writes
them as a read-only kernel cache with index.json into --out.

Which launches a GPU run makes is recorded, not listed by hand: the functional API
(mlp_forward, mlp_backward, backward_dw: what GroupedMLP calls) runs on CPU torch tensors
taken for CUDA ones, with JITFunction.run recording each launch's specialization and
config instead of running it. The host code reads no device values (split sizes stay on
the device), so these are the launches of a GPU run of the same shapes. Needs torch (CPU
is enough); without it nothing is written and the script says so (exit 0, or 1 with
--require).

  python scripts/prebuild.py --out DIR            # tilefuse as imported (PYTHONPATH=frontend:.)
  python scripts/prebuild.py --out DIR --stage BUILD   # the wheel build (CMake install step):
      # tilefuse's .py files and BUILD's freshly built libraries staged in a temporary folder
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = pathlib.Path(__file__).resolve().parents[1]
# GroupedMLP(num_experts, hidden, ffn, activation, recipe, bias), each with weights grouped
# and per expert, recompute on and off; tokens: a multiple of 16 and not (their ints
# specialize differently). NVFP4's stochastic rounding takes the backward's seed unspecialized,
# so one recording serves every seed.
RECIPES = ("bf16", "mxfp8", "fp8_block", "nvfp4")
SHAPES = [(8, 1024, 1024, "swiglu", r, bias) for r in RECIPES for bias in (False, True)]
ROWS = (4096, 4100, 65536)  # 65536: where the persistent grouped GEMM's rule picks it
# The SMs of the GPU the launches are recorded for (H100 / H200 SXM): the persistent grouped
# GEMM's rule (moe.grouped_gemm.use_persistent) compares the tile count with the SM count.
SMS = 132


def stage(build: pathlib.Path, where: pathlib.Path) -> pathlib.Path:
    """tilefuse (its .py files and the built libraries) and kernels_dsl under `where`."""
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "prebuilt")
    shutil.copytree(ROOT / "frontend" / "tilefuse", where / "tilefuse", ignore=ignore)
    shutil.copytree(ROOT / "kernels_dsl", where / "kernels_dsl", ignore=shutil.ignore_patterns("__pycache__"))
    for lib in [*build.glob("frontend/csrc/_C*.so"), build / "compiler" / "libtilefuse_compiler.so"]:
        shutil.copy2(lib, where / "tilefuse")
    return where


@contextlib.contextmanager
def recording(sms=SMS, arch="sm_90a"):
    """{(kernel, key, num_warps, num_stages): (kernel, key, params)} of the launches made
    inside, which do not run; CPU torch tensors pass for CUDA ones, on an `arch` GPU of
    `sms` SMs (the host code's tuned configs and persistent rule read both)."""
    from tilefuse.arrays import is_torch_tensor
    from tilefuse.moe import _arrays

    gg = importlib.import_module("tilefuse.moe.grouped_gemm")  # the module (moe.grouped_gemm: the function)

    jit = importlib.import_module("tilefuse.jit")  # the module (tilefuse.jit is the decorator)
    launches = {}
    kind = _arrays.kind_of

    def run(self, *args, grid, num_warps=jit.NUM_WARPS, num_stages=jit.NUM_STAGES, num_ctas=1, **kwargs):
        key, params, _ = self._specialize(self._bind(args, kwargs))
        launches.setdefault((self, key, num_warps, num_stages), params)

    def kind_of(name, a):
        if is_torch_tensor(a) and a.device.type == "cpu":
            for k, t in _arrays._TORCH.items():
                if str(a.dtype) == f"torch.{t}":
                    return k
        return kind(name, a)

    saved = jit.JITFunction.run, _arrays.kind_of, gg._sm_count, gg._arch
    jit.JITFunction.run, _arrays.kind_of, gg._sm_count, gg._arch = run, kind_of, lambda d: sms, lambda d: arch
    try:
        yield launches
    finally:
        jit.JITFunction.run, _arrays.kind_of, gg._sm_count, gg._arch = saved


def grouped_mlp_step(torch, shape, rows, grouped, recompute, seed=None):
    """One GroupedMLP training step's calls of the functional API at `shape` (seed: the
    backward's, None a fresh one)."""
    from tilefuse import moe

    g, d, n, activation, recipe, bias = shape
    n1 = 2 * n if moe.ACTIVATIONS[activation].glu else n
    bf16 = torch.bfloat16
    w1, w2 = torch.empty((g, n1, d), dtype=bf16), torch.empty((g, d, n), dtype=bf16)
    params = {"w1": w1 if grouped else list(w1), "w2": w2 if grouped else list(w2)}
    if bias:
        params |= {"b1": torch.empty((g, n1)), "b2": torch.empty((g, d))}
    cfg = moe.MLPConfig(activation=activation, recipe=recipe, bias=bias, recompute=recompute)
    x, dy = torch.empty((rows, d), dtype=bf16), torch.empty((rows, d), dtype=bf16)
    _, ctx = moe.mlp_forward(x, torch.empty(rows), torch.zeros(g, dtype=torch.int32), params, cfg)
    moe.mlp_backward(ctx, dy, seed=seed)


def launches_of(shapes=SHAPES, rows=ROWS, arch="sm_90a"):
    """The launches of a GroupedMLP step at each shape, token count and option."""
    import torch

    with recording(arch=arch) as launches:
        for shape in shapes:
            for r in rows:
                for grouped in (True, False):
                    for recompute in (False, True):
                        grouped_mlp_step(torch, shape, r, grouped, recompute)
    return launches


def write(out: pathlib.Path, arch: str, launches, jobs: int = 1):
    """Compiles `launches` ({(kernel, key, num_warps, num_stages): params}) for `arch` into
    the prebuilt folder `out` (its <arch>/ cache and index.json); returns the index."""
    from tilefuse import _C, gpu, prebuilt

    cache = _C.runtime.DiskCache(str(out / arch), 0)
    index = {"identity": prebuilt.identity(), "arch": [arch], "specs": {}, "kernels": {}}

    def compile_one(item):
        (fn, key, nw, ns), params = item
        entry, _ = gpu.build(fn._compile(params), arch, nw, ns)
        spec = prebuilt.spec_key(fn, key)
        cache.put_kernel(prebuilt.entry_key(spec, arch, nw, ns), entry)
        return spec, fn, key, nw, ns, "cubin" if entry.image[:4] == b"\x7fELF" else "ptx"

    with ThreadPoolExecutor(jobs) as pool:
        for spec, fn, key, nw, ns, image in pool.map(compile_one, launches.items()):
            name = f"{fn.fn.__module__}:{fn.fn.__qualname__}"
            index["specs"][spec] = name
            index["kernels"][prebuilt.entry_key(spec, arch, nw, ns)] = dict(
                kernel=name, key=repr(key), num_warps=nw, num_stages=ns, image=image
            )
    (out / "index.json").write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    return index


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=pathlib.Path)
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--stage", type=pathlib.Path, help="the CMake build folder: stage its libraries")
    ap.add_argument("--require", action="store_true", help="fail (exit 1) when torch is missing")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    if args.stage is not None:
        with tempfile.TemporaryDirectory() as tmp:
            where = stage(args.stage.resolve(), pathlib.Path(tmp))
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(where), os.environ.get("PYTHONPATH", "")]))
            cmd = [sys.executable, __file__, "--out", str(args.out), "--arch", args.arch, "--jobs", str(args.jobs)]
            sys.exit(subprocess.run(cmd + ["--require"] * args.require, env=env, cwd=tmp).returncode)
    try:
        import torch  # noqa: F401
    except ImportError:
        print(
            "prebuilt kernels: skipped (torch is not importable; the host code's launches are recorded on CPU tensors)"
        )
        sys.exit(1 if args.require else 0)
    with tempfile.TemporaryDirectory() as cache:
        os.environ["TILEFUSE_CACHE_DIR"] = cache  # compile everything here, not from a user cache
        if args.out.exists():
            shutil.rmtree(args.out)
        args.out.mkdir(parents=True)
        start = time.time()
        index = write(args.out, args.arch, launches_of(arch=args.arch), args.jobs)
    images = sorted({k["image"] for k in index["kernels"].values()})
    print(
        f"prebuilt kernels: {len(index['kernels'])} ({len(index['specs'])} specializations, {'/'.join(images)}) "
        f"for {args.arch} in {args.out}, {time.time() - start:.0f} s"
    )


if __name__ == "__main__":
    main()
