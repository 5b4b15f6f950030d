"""tilefuse.autotune, Config and heuristics, as Triton's: stacked over @jit, the autotuner
picks one config per key (values of the `key` arguments and every argument's dtype).

On the GPU every config is compiled first (in parallel threads: the C++ lowering and ptxas
run without the GIL) and screened: a config that does not compile, needs more shared memory
or registers than the device has, or falls back (a perf hint of a dot not on wgmma or a
loop not pipelined, or register spills) is rejected before timing and said so, the
fallbacks only while another config does not fall back. The rest are timed (do_bench:
warm-up, repeats, median, an L2 flush before each run); the best few are then timed again,
interleaved, and the choice is the best median of those re-measurements, so that one noisy
first measurement cannot win. Decisions are cached on disk (TILEFUSE_CACHE_DIR/autotune).
On the interpreter nothing is timed unless a do_bench is given: the first config that
compiles runs (with a perf_model, the one it ranks first)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import inspect
import json
import math
import os
import statistics
import sys
import tempfile
import time
import warnings

import numpy as np

from . import _C, defaults, gpu, testing
from .defaults import NUM_STAGES, NUM_WARPS
from .errors import CompilationError, LaunchError
from .jit import JITFunction, is_register_cap, select_backend

# Configs timed again after the first pass, and how many interleaved rounds.
FINALISTS = 3
ROUNDS = 3


class Config:
    """One point of the tuning space: constexpr values (`kwargs`) and launch options.
    pre_hook(nargs) runs before each launch with this config (nargs: every argument by name)."""

    def __init__(
        self,
        kwargs,
        num_warps=NUM_WARPS,
        num_stages=NUM_STAGES,
        num_ctas=1,
        maxnreg=None,
        pre_hook=None,
        ir_override=None,
    ):
        unsupported = {
            "num_ctas": num_ctas != 1,
            "ir_override": ir_override is not None,
        }
        for name, given in unsupported.items():
            if given:
                raise ValueError(f"tilefuse.Config: {name} is not supported (tilefuse has no {name} option)")
        if maxnreg is not None and not is_register_cap(maxnreg):
            raise ValueError(f"tilefuse.Config: maxnreg must be an int in [1, 255] or None, got {maxnreg!r}")
        self.kwargs = dict(kwargs)
        self.num_warps, self.num_stages = num_warps, num_stages
        self.num_ctas, self.maxnreg = 1, None if maxnreg is None else int(maxnreg)
        self.pre_hook = pre_hook

    def all_kwargs(self) -> dict:
        """The keyword arguments a launch with this config takes."""
        opts = {"num_warps": self.num_warps, "num_stages": self.num_stages}
        if self.maxnreg is not None:
            opts["maxnreg"] = self.maxnreg
        return {**self.kwargs, **opts}

    def _ident(self):
        return (tuple(self.kwargs.items()), self.num_warps, self.num_stages, self.maxnreg, self.pre_hook)

    def __eq__(self, other):
        return isinstance(other, Config) and self._ident() == other._ident()

    def __hash__(self):
        return hash(self._ident())

    def __str__(self):
        return ", ".join(
            [f"{k}: {v}" for k, v in self.kwargs.items()]
            + [f"num_warps: {self.num_warps}", f"num_stages: {self.num_stages}"]
            + ([f"maxnreg: {self.maxnreg}"] if self.maxnreg is not None else [])
        )

    def __repr__(self):
        return f"Config({self})"


class _Launchable:
    """kernel[grid](...) for the wrappers of a JITFunction, as JITFunction has it."""

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.run(*args, grid=grid, **kwargs)

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"launch the kernel with {self.base_fn.__name__}[grid](...)")


def _base_of(fn) -> JITFunction:
    while isinstance(fn, _Launchable):
        fn = fn.fn
    if not isinstance(fn, JITFunction):
        raise TypeError(f"autotune and heuristics decorate a @tilefuse.jit kernel, not {fn!r}")
    return fn


class Heuristics(_Launchable):
    """Constexpr values computed from the arguments at each launch: values[name](args) -> value."""

    def __init__(self, fn, arg_names, values):
        self.fn, self.arg_names, self.values = fn, arg_names, values
        self.base_fn = _base_of(fn)

    def apply(self, args, kwargs: dict) -> dict:
        """kwargs with the heuristic values added (each sees the arguments and the values before it)."""
        kwargs = dict(kwargs)
        for name, heur in self.values.items():
            kwargs[name] = heur({**dict(zip(self.arg_names, args)), **kwargs})
        return kwargs

    def run(self, *args, grid, **kwargs):
        kwargs = self.apply(args, dict(kwargs, grid=grid))
        del kwargs["grid"]
        return self.fn.run(*args, grid=grid, **kwargs)

    def warmup(self, *args, grid=None, **kwargs):
        kwargs = self.apply(args, dict(kwargs, grid=grid))
        del kwargs["grid"]
        return self.fn.warmup(*args, grid=grid, **kwargs)


def heuristics(values: dict):
    """@tilefuse.heuristics({"BLOCK": lambda args: ...}) over @jit (or over @autotune)."""

    def decorator(fn):
        return Heuristics(fn, _arg_names(fn), values)

    return decorator


def _arg_names(fn) -> list:
    return [p.name for p in _base_of(fn).params]


def _zero(name, x):
    if hasattr(x, "zero_"):
        x.zero_()
    elif isinstance(x, np.ndarray):
        x[...] = 0
    else:
        raise TypeError(f"autotune: reset_to_zero argument '{name}' is a {type(x).__name__}, not an array or tensor")


def _clone(name, x):
    if hasattr(x, "clone"):
        return x.clone()
    if isinstance(x, np.ndarray):
        return x.copy()
    raise TypeError(f"autotune: restore_value argument '{name}' is a {type(x).__name__}, not an array or tensor")


def _copy_into(dst, src):
    if hasattr(dst, "copy_"):
        dst.copy_(src)
    else:
        np.copyto(dst, src)


def _is_fallback(message: str) -> bool:
    """A perf hint that the kernel misses the fast path of its dots: a slower config."""
    return "not on wgmma" in message or "runs on FMAs" in message or "not pipelined" in message


def _say(message: str):
    print(f"tilefuse autotune: {message}", file=sys.stderr, flush=True)


def _source_hash(base: JITFunction) -> str:
    """The kernel's source and that of the @jit functions it names, transitively."""
    h, seen = hashlib.sha256(), set()

    def add(f: JITFunction):
        if id(f) in seen:
            return
        seen.add(id(f))
        h.update(inspect.getsource(f.fn).encode())
        for name in f.fn.__code__.co_names:
            g = f.fn.__globals__.get(name)
            if isinstance(g, JITFunction):
                add(g)

    add(base)
    return h.hexdigest()


class Autotuner(_Launchable):
    def __init__(
        self,
        fn,
        arg_names,
        configs,
        key,
        reset_to_zero=None,
        restore_value=None,
        pre_hook=None,
        post_hook=None,
        prune_configs_by=None,
        warmup=None,
        rep=None,
        use_cuda_graph=False,
        do_bench=None,
        cache_results=True,
    ):
        self.use_cuda_graph = bool(use_cuda_graph)
        self.fn, self.arg_names = fn, list(arg_names)
        self.base_fn = _base_of(fn)
        self.configs = list(configs) or [Config({})]
        if not all(isinstance(c, Config) for c in self.configs):
            raise TypeError("tilefuse.autotune: configs must be a list of tilefuse.Config")
        self.keys = list(key)
        self.reset_to_zero, self.restore_value = list(reset_to_zero or ()), list(restore_value or ())
        for what, names in (
            ("key", self.keys),
            ("reset_to_zero", self.reset_to_zero),
            ("restore_value", self.restore_value),
        ):
            unknown = [n for n in names if n not in self.arg_names]
            if unknown:
                raise ValueError(
                    f"tilefuse.autotune of {self.base_fn.__name__}: {what} names {unknown}, not arguments of the kernel"
                )
        self.pre_hook = pre_hook or self._default_pre_hook
        self.post_hook = post_hook or self._default_post_hook
        prune = dict(prune_configs_by or {})
        self.perf_model, self.top_k = prune.pop("perf_model", None), prune.pop("top_k", None)
        self.early_config_prune = prune.pop("early_config_prune", None)
        if prune:
            raise ValueError(
                "tilefuse.autotune: prune_configs_by takes perf_model, top_k and early_config_prune, "
                f"not {sorted(prune)}"
            )
        self.warmup_ms, self.rep_ms = 25 if warmup is None else warmup, 100 if rep is None else rep
        self.user_do_bench, self.cache_results = do_bench, cache_results
        self.cache = {}  # key -> Config
        self.configs_timings = {}  # Config -> [median, p20, p80] ms of the first pass
        self.remeasured = {}  # Config -> the finalists' re-measured medians
        self.rejected = {}  # Config -> why it was not timed
        self.bench_time = 0.0
        self.best_config = None
        self.nargs = None
        self.restore_copies = {}

    # --- hooks (Triton's: reset_to_zero before each run, restore_value around it) ---

    def _default_pre_hook(self, nargs, reset_only=False):
        for name in self.reset_to_zero:
            _zero(name, nargs[name])
        if not reset_only:
            self.restore_copies = {name: _clone(name, nargs[name]) for name in self.restore_value}

    def _default_post_hook(self, nargs, exception):
        for name in self.restore_value:
            _copy_into(nargs[name], self.restore_copies[name])
        self.restore_copies = {}

    # --- launch ---

    def run(self, *args, grid, **kwargs):
        self.nargs = dict(zip(self.arg_names, args))
        for c in self.configs:
            conflicts = kwargs.keys() & c.all_kwargs().keys()
            if conflicts:
                raise ValueError(
                    f"{self.base_fn.__name__}: {', '.join(sorted(conflicts))} given at the launch and by the "
                    "autotuner's configs; do not pass tuned meta-parameters"
                )
        if len(self.configs) > 1:
            named = {k: v for k, v in {**self.nargs, **kwargs}.items() if k in self.arg_names}
            backend = select_backend(named.values())
            key = [named[k] for k in self.keys if k in named]
            key += [str(v.dtype) for v in named.values() if hasattr(v, "dtype")]
            key = (*key, backend, gpu.device_of(named.values()) if backend == "cuda" else None)
            if key not in self.cache:
                self.cache[key] = self._decide(args, kwargs, grid, key, backend)
            config = self.cache[key]
        else:
            config = self.configs[0]
        self.best_config = config
        full = {**self.nargs, **kwargs, **config.all_kwargs()}
        if config.pre_hook is not None:
            config.pre_hook(full)
        try:
            return self.fn.run(*args, grid=grid, **kwargs, **config.all_kwargs())
        finally:
            self.nargs = None

    def warmup(self, *args, grid=None, **kwargs):
        """Compiles every config that pruning keeps (for the GPU: see JITFunction.warmup)."""
        self.nargs = dict(zip(self.arg_names, args))
        try:
            return [
                self.fn.warmup(*args, grid=grid, **kwargs, **c.all_kwargs())
                for c in self.prune_configs(dict(kwargs, grid=grid))
            ]
        finally:
            self.nargs = None

    def prune_configs(self, kwargs) -> list:
        """The configs early_config_prune keeps, then perf_model's top_k best (in its order);
        both see the launch's keyword arguments, grid among them, as Triton's do."""
        configs = self.configs
        if self.early_config_prune:
            configs = list(self.early_config_prune(configs, self.nargs, **kwargs))
            if not configs:
                raise ValueError(f"{self.base_fn.__name__}: early_config_prune kept no config")
        if self.perf_model:
            top_k = 10 if self.top_k is None else self.top_k  # Triton's default
            if isinstance(top_k, float) and top_k <= 1.0:
                top_k = max(1, int(len(self.configs) * top_k))
            elif not isinstance(top_k, int):
                raise TypeError("prune_configs_by's top_k must be a float <= 1.0 or an int")
            # Ranked even when none is pruned: the interpreter runs the model's first choice.
            est = {c: self.perf_model(**self.nargs, **kwargs, **c.all_kwargs()) for c in configs}
            configs = sorted(configs, key=est.get)[:top_k]
        return configs

    # --- deciding ---

    def _decide(self, args, kwargs, grid, key, backend) -> Config:
        timed = self.user_do_bench is not None or backend == "cuda"
        store = _Decisions(self, key, backend) if timed and self.cache_results else None
        if store is not None:
            cached = store.load()
            if cached is not None:
                if os.environ.get("TILEFUSE_PRINT_AUTOTUNING") == "1":
                    print(f"tilefuse autotuning of {self.base_fn.__name__}, key {key}: cached {cached} ({store.path})")
                return cached
        screened = self._screen(self.prune_configs(dict(kwargs, grid=grid)), args, kwargs, grid, backend, timed)
        if not timed or len(screened) == 1:
            choice = screened[0]
        else:
            choice = self._tune(screened, args, kwargs, grid, backend)
            self.pre_hook({**self.nargs, **kwargs, **choice.all_kwargs()}, reset_only=True)
            if os.environ.get("TILEFUSE_PRINT_AUTOTUNING") == "1":
                self._print_table(key, choice)
        if store is not None:
            store.save(choice)
        return choice

    def _launch_kwargs(self, args, kwargs, grid, config) -> dict:
        """What the JITFunction's run receives for `config` (heuristics applied), without grid."""
        meta, fn = dict(kwargs, grid=grid, **config.all_kwargs()), self.fn
        while isinstance(fn, Heuristics):
            meta, fn = fn.apply(args, meta), fn.fn
        del meta["grid"]
        return meta

    def _screen(self, configs, args, kwargs, grid, backend, all_of_them) -> list:
        """The configs that compile and fit the device, in order (without all_of_them, only the
        first: nothing is timed); the others are said and dropped."""
        kernels, reasons = {}, {}
        for c in configs:
            try:
                kernels[c] = self.base_fn.compile(*args, **self._launch_kwargs(args, kwargs, grid, c))
            except CompilationError as e:
                reasons[c] = f"does not compile: {e}"
                continue
            if not all_of_them:
                break
        if backend == "cuda":
            reasons.update(_screen_gpu(kernels, args, kwargs))
        for c, why in reasons.items():
            _say(f"{self.base_fn.__name__}: rejected {{{c}}}: {why}")
        self.rejected = reasons
        fit = [c for c in configs if c in kernels and c not in reasons]
        if not fit:
            raise LaunchError(f"{self.base_fn.__name__}: no config of the autotuner can run (reasons above)")
        return fit

    def _bench(self, args, kwargs, grid, config, backend) -> list:
        """[median, p20, p80] ms of one config (inf when it cannot launch)."""
        current = dict(kwargs, **config.all_kwargs())
        full = {**self.nargs, **current}

        def kernel_call():
            if config.pre_hook:
                config.pre_hook(full)
            self.pre_hook(full)
            try:
                self.fn.run(*args, grid=grid, **current)
            except Exception as e:
                try:
                    self.post_hook(full, exception=e)
                finally:
                    raise
            self.post_hook(full, exception=None)

        try:
            if self.user_do_bench is not None:
                t = self.user_do_bench(kernel_call, quantiles=(0.5, 0.2, 0.8))
            elif self.use_cuda_graph:
                t = testing.quantiles_of(
                    testing.measure_graph(kernel_call, self.rep_ms, backend=backend), (0.5, 0.2, 0.8)
                )
            else:
                t = testing.quantiles_of(
                    testing.measure(kernel_call, self.warmup_ms, self.rep_ms, backend=backend), (0.5, 0.2, 0.8)
                )
        except (CompilationError, LaunchError) as e:
            _say(f"{self.base_fn.__name__}: {{{config}}} failed: {e}")
            return [math.inf] * 3
        return [float(x) for x in t] if isinstance(t, (list, tuple)) else [float(t)] * 3

    def _tune(self, configs, args, kwargs, grid, backend) -> Config:
        start, n = time.perf_counter(), len(configs)
        first, name = {}, self.base_fn.__name__
        end = "\r" if sys.stderr.isatty() else "\n"
        for i, c in enumerate(configs, 1):
            first[c] = self._bench(args, kwargs, grid, c, backend)
            best = min(first, key=lambda x: first[x][0])
            print(
                f"tilefuse autotune: {name}: config {i} of {n}: {first[c][0]:.4f} ms; "
                f"best so far {{{best}}} {first[best][0]:.4f} ms",
                file=sys.stderr,
                end=end,
                flush=True,
            )
        if end == "\r":
            print(file=sys.stderr)
        ranked = [c for c in sorted(configs, key=lambda x: first[x][0]) if math.isfinite(first[c][0])]
        if not ranked:
            raise LaunchError(f"{name}: every config of the autotuner failed to launch (reasons above)")
        finalists = ranked[:FINALISTS]
        again = {c: [] for c in finalists}
        if len(finalists) > 1:
            for r in range(ROUNDS):  # each round in another order, so no config always runs first
                for c in finalists[r:] + finalists[:r]:
                    again[c].append(self._bench(args, kwargs, grid, c, backend)[0])
        choice = min(finalists, key=lambda c: statistics.median(again[c]) if again[c] else first[c][0])
        self.configs_timings, self.remeasured = first, again
        self.bench_time = time.perf_counter() - start
        return choice

    def _print_table(self, key, choice):
        print(f"tilefuse autotuning of {self.base_fn.__name__}, key {key}, {self.bench_time:.2f} s:")
        print(f"  {'median ms':>10} {'p20':>9} {'p80':>9} {'again':>9}  config")
        for c, (m, p20, p80) in sorted(self.configs_timings.items(), key=lambda kv: kv[1][0]):
            again = f"{statistics.median(self.remeasured[c]):9.4f}" if self.remeasured.get(c) else " " * 9
            print(f"  {m:10.4f} {p20:9.4f} {p80:9.4f} {again}  {c}")
        for c, why in self.rejected.items():
            print(f"  {'rejected':>10} {'':9} {'':9} {'':9}  {c}: {why.splitlines()[0]}")  # stderr has all of it
        print(f"best config: {choice}")


def _screen_gpu(kernels: dict, args, kwargs) -> dict:
    """config -> why it is rejected, for the compiled `kernels` (config -> CompiledKernel):
    ptxas errors, shared memory or registers beyond the device, fallbacks."""
    device = gpu.device_of(list(args) + list(kwargs.values()))
    _C.runtime.use_device(device)
    arch = gpu.arch_of_device(device)
    reasons, slow = {}, {}
    # One build per (kernel, num_warps, num_stages): configs differing only in their pre_hook share it.
    jobs = {(id(k), c.num_warps, c.num_stages): (k, c.num_warps, c.num_stages) for c, k in kernels.items()}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(len(jobs), os.cpu_count() or 1))) as pool:
        built = {job: pool.submit(gpu.build, k, arch, w, s) for job, (k, w, s) in jobs.items()}
    for c, k in kernels.items():
        try:
            entry, hints = built[(id(k), c.num_warps, c.num_stages)].result()
        except CompilationError as e:
            reasons[c] = f"does not compile: {e}"
            continue
        except LaunchError as e:  # no GPU of the target can launch it (gpu.check_resources)
            reasons[c] = str(e).removeprefix(f"{kernels[c].name}: ")
            continue
        try:
            loaded = gpu.load(kernels[c], device, c.num_warps, c.num_stages)  # checks shared memory
        except (LaunchError, _C.runtime.DriverError) as e:
            reasons[c] = str(e).removeprefix(f"{kernels[c].name}: ")
            continue
        res = loaded.resources()  # gpu.load checked its registers
        slow[c] = [h[3] for h in hints if _is_fallback(h[3])]
        if res.local_bytes:
            slow[c].append(f"{res.local_bytes} bytes of local memory per thread (register spills)")
    if any(not why for why in slow.values()):
        reasons.update({c: "falls back: " + "; ".join(why) for c, why in slow.items() if why})
    return reasons


class _Decisions:
    """The disk cache of one decision: TILEFUSE_CACHE_DIR/autotune/<kernel>-<hash>.json, keyed
    by the kernel's source, the key values and dtypes, the device, the compiler, the configs
    and the timing (CUDA-graph replays or not)."""

    def __init__(self, tuner: Autotuner, key, backend):
        base = tuner.base_fn
        if backend == "cuda":
            device = key[-1]
            info = _C.runtime.device_info(device)
            where = f"{info.name} {gpu.arch_of_device(device)}"
        else:
            where = "interpreter"
        self.configs = tuner.configs
        material = {
            "source": _source_hash(base),
            "key": [repr(k) for k in key[:-2]],
            "device": where,
            "compiler": [defaults.__version__, gpu._compiler_fingerprint()],
            "configs": [str(c) for c in self.configs],
        }
        if tuner.use_cuda_graph:  # timed another way: its own decision (older keys stay as they were)
            material["timing"] = "cuda_graph"
        digest = hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:40]
        self.dir = os.path.join(_C.runtime.DiskCache().dir, "autotune")
        self.path = os.path.join(self.dir, f"{base.__name__}-{digest}.json")
        self.material = material

    def load(self) -> Config | None:
        if not os.path.exists(self.path):
            return None
        try:
            with open(self.path) as f:
                d = json.load(f)
            best = d["best"]
            if (
                d["configs"] != self.material["configs"]
                or not isinstance(best, int)
                or not 0 <= best < len(self.configs)
            ):
                raise ValueError("it does not match the configs")
            with contextlib.suppress(OSError):  # recently used: the cache evicts the least recently used
                os.utime(self.path)
            return self.configs[best]
        except (OSError, ValueError, KeyError, TypeError) as e:
            warnings.warn(f"tilefuse autotune: ignoring the unreadable decision {self.path}: {e}", stacklevel=2)
            return None

    def save(self, choice: Config):
        d = dict(self.material, best=self.configs.index(choice), choice=str(choice))
        try:
            os.makedirs(self.dir, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.dir, suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                json.dump(d, f, indent=1)
            os.replace(tmp, self.path)  # atomic: a reader never sees half a file
            _C.runtime.DiskCache().evict(self.path)  # keep the cache within its bound
        except OSError as e:
            warnings.warn(f"tilefuse autotune: cannot store the decision in {self.dir}: {e}", stacklevel=2)


def autotune(
    configs,
    key,
    prune_configs_by=None,
    reset_to_zero=None,
    restore_value=None,
    pre_hook=None,
    post_hook=None,
    warmup=None,
    rep=None,
    use_cuda_graph=False,
    do_bench=None,
    cache_results=True,
):
    """@tilefuse.autotune(configs=[tilefuse.Config({...}, num_warps=, num_stages=)], key=[...])
    over @jit, with triton.autotune's arguments. Decisions are cached on disk unless
    cache_results=False; TILEFUSE_PRINT_AUTOTUNING=1 prints the table of timings and the choice."""

    def decorator(fn):
        return Autotuner(
            fn,
            _arg_names(fn),
            configs,
            key,
            reset_to_zero,
            restore_value,
            pre_hook=pre_hook,
            post_hook=post_hook,
            prune_configs_by=prune_configs_by,
            warmup=warmup,
            rep=rep,
            use_cuda_graph=use_cuda_graph,
            do_bench=do_bench,
            cache_results=cache_results,
        )

    return decorator
