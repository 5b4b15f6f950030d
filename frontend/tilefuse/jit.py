"""@jit: specialization, compilation to tile IR, caching and launch."""

from __future__ import annotations

import ast
import contextlib
import contextvars
import functools
import hashlib
import inspect
import itertools
import os
import textwrap
from typing import NamedTuple

import numpy as np

from . import _C, gpu, prebuilt
from .arrays import DLPackArg, array_arg, is_dlpack, is_torch_tensor
from .codegen import CodeGenerator, FunctionSource, call_leaves, call_rebuild, call_structure
from .defaults import NUM_STAGES, NUM_WARPS
from .errors import CompilationError, KernelRuntimeError, LaunchError, bare
from .language import core as tl

_ir = _C.ir
_D = _ir.DType
_S = _C.specialize

try:
    from numpy.lib.array_utils import byte_bounds as _byte_bounds
except ImportError:  # numpy < 2
    _byte_bounds = np.byte_bounds


class Param(NamedTuple):
    """One parameter of a specialization: a constant `value`, or a runtime argument with
    its specialization `spec` (a _C.specialize.ArgSpec)."""

    name: str
    value: object = None
    spec: object = None


class TensorWrapper:
    """triton.reinterpret's result: `base`'s memory (a torch tensor or numpy array) read as
    `dtype`, a tl.dtype of the same width (e.g. the bytes of a uint8 tensor as float8e4b15,
    a type torch lacks). Kernels take it as a pointer to `dtype`."""

    def __init__(self, base, dtype):
        dtype = tl._unwrap(dtype)
        if not isinstance(dtype, tl.dtype) or dtype.is_ptr():
            raise TypeError(f"reinterpret takes a tl dtype, got {dtype!r}")
        size = base.itemsize if isinstance(base, np.ndarray) else base.element_size()
        if dtype.primitive_bitwidth != 8 * size:
            raise TypeError(
                f"reinterpret: {dtype!r} is {dtype.primitive_bitwidth} bits, the array's elements {8 * size}"
            )
        self.base, self.dtype = base, dtype
        self.shape, self.device = tuple(base.shape), getattr(base, "device", "cpu")

    def data_ptr(self):
        return self.base.ctypes.data if isinstance(self.base, np.ndarray) else self.base.data_ptr()

    def stride(self, *args):
        return self.base.stride(*args)

    def element_size(self):
        return self.dtype.primitive_bitwidth // 8

    def numel(self):
        return int(np.prod(self.shape))

    def __repr__(self):
        return f"TensorWrapper[{self.dtype!r}]({self.base!r})"


def reinterpret(tensor, dtype):
    """Triton's triton.reinterpret: `tensor`'s memory read as `dtype` by kernels; the
    wrapper itself when dtype is the base's own torch/numpy dtype."""
    base = tensor.base if isinstance(tensor, TensorWrapper) else tensor
    if not isinstance(tl._unwrap(dtype), tl.dtype):
        return base  # a torch or numpy dtype: the base (the tensor as it is)
    return TensorWrapper(base, dtype)


def _flatten(bound: dict, constexprs) -> tuple[dict, dict]:
    """Tuple arguments (Triton 3.x passes tuples of tensors and scalars, nested) as one
    argument per leaf, named "t.0", "t.1.0", ...; and the tuples' structure, to rebuild them
    in the kernel. Constexpr parameters keep their tuples whole."""
    # A loop, not a recursive closure: that would be a reference cycle holding `flat`, every
    # launch's arguments (device tensors) alive until the cyclic garbage collector ran.
    flat, tuples = {}, {}
    todo = list(reversed(bound.items()))
    while todo:
        name, v = todo.pop()
        if isinstance(v, tuple) and name.split(".")[0] not in constexprs:
            tuples[name] = (type(v), len(v))
            todo.extend(reversed([(f"{name}.{i}", x) for i, x in enumerate(v)]))
        else:
            flat[name] = v
    return flat, tuples


def _rebuild(name, tuples, scope):
    """The kernel's value of tuple argument `name` from its leaves in `scope`."""
    kind, n = tuples[name]
    parts = [
        _rebuild(f"{name}.{i}", tuples, scope) if f"{name}.{i}" in tuples else scope[f"{name}.{i}"] for i in range(n)
    ]
    return kind._make(parts) if hasattr(kind, "_fields") else tuple(parts)


_UPDATES = itertools.count()


def _is_constexpr_param(p: inspect.Parameter) -> bool:
    a = p.annotation
    if a is tl.constexpr:
        return True
    return isinstance(a, str) and a.split(".")[-1] == "constexpr"


class CompiledKernel:
    """One specialization of a kernel: its module and every stage as text."""

    def __init__(self, name: str, module, asm: dict, signature: list):
        self.name = name
        self.module = module
        self.asm = asm
        self.signature = signature
        self.loaded = {}  # (device, num_warps, num_stages, debug) -> runtime.LoadedKernel
        self.debug_checks = {}  # (arch, num_warps, num_stages) -> gpu.lower's "checks" of a debug build


class _Compiler:
    """Compiles one kernel specialization; generates device functions on demand."""

    def __init__(self, module, builder, debug=None):
        self.module = module
        self.b = builder
        self.funcs = {}
        self.debug = debug  # the kernel's: debug=False compiles its device_asserts (and its callees') away

    def call_device_function(self, gen, fn, args, kwargs, node):
        try:
            bound = fn.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise gen.error(node, f"call of '{fn.__name__}': {e}") from None
        bound.apply_defaults()
        runtime, consts, key = [], {}, []
        for pname, v in bound.arguments.items():
            v = tl._unwrap(v)
            if call_leaves(v):  # a tensor, or a tuple / block pointer holding tensors
                runtime.append((pname, v))
                key.append(f"{pname}:{call_structure(v)}")
            else:
                consts[pname] = v
                key.append(f"{pname}={v!r}")
        digest = hashlib.sha1("|".join(key).encode()).hexdigest()[:10]
        mangled = f"{fn.__name__}__{digest}"
        if mangled not in self.funcs:
            self.funcs[mangled] = None  # marks recursion in progress
            block = self.b.insertion_block()
            flat = [t for _, v in runtime for t in call_leaves(v)]
            func = self.b.create_func(mangled, [t.type for t in flat], [], False)
            if fn.noinline:
                func.set_bool_attr("noinline", True)
            scope = dict(consts)
            args = iter(func.region(0).args)
            for pname, v in runtime:
                scope[pname] = call_rebuild(v, args)
                if isinstance(v, tl.tensor):
                    scope[pname].handle.name = pname
            sub = CodeGenerator(fn, fn.source, self.module, self.b, scope, fn.fn.__globals__, self)
            sub.visit_body(fn.source.tree.body)
            returned = sub.returned or []
            flat_ret = [t for v in returned for t in call_leaves(v)]
            self.b.ret([t.handle for t in flat_ret])
            func.set_func_results([t.type for t in flat_ret])
            self.funcs[mangled] = returned  # the structure of its results
            self.b.set_insertion_point_to_end(block)
            line, col = gen.src.pos(node)
            self.b.set_loc(gen.src.file, line, col)
        elif self.funcs[mangled] is None:
            raise gen.error(node, f"recursive call of '{fn.__name__}' is not supported")
        handles = iter(self.b.call(mangled, [t.handle for _, v in runtime for t in call_leaves(v)]))
        results = [call_rebuild(v, handles) for v in self.funcs[mangled]]
        if not results:
            return None
        return results[0] if len(results) == 1 else tuple(results)


class JITFunction(_C.launcher.Launcher):
    """A kernel or device function written in the tile language. `kernel[grid]` is C
    (_C.launcher.Launcher): once the first GPU launch made the fast path (`_cfast`), a grid
    of ints gets a C++ callable, and a repeated launch of a seen specialization runs no
    Python code; other grids go to `_subscript`."""

    __tilefuse_jit__ = True

    def __init__(self, fn, *, do_not_specialize=(), noinline=False, debug=None):
        if debug not in (None, True, False):
            raise TypeError(f"@jit(debug=...) takes True, False or None, got {debug!r}")
        self.fn = fn
        self.debug = debug
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self.signature = inspect.signature(fn)
        self.params = list(self.signature.parameters.values())
        self.constexprs = {p.name for p in self.params if _is_constexpr_param(p)}
        self.do_not_specialize = set(do_not_specialize)
        self.noinline = noinline
        self.cache: dict = {}
        self._source = None
        self._names = [p.name for p in self.params]
        self._cfast = None  # the C++ launch fast path, made at the first GPU launch

    @property
    def source(self) -> FunctionSource:
        if self._source is None:
            try:
                raw = inspect.getsource(self.fn)
            except OSError:
                raise CompilationError(
                    f"cannot read the source of '{self.__name__}': kernels must be defined "
                    "in a file (not in exec'd strings or an interactive prompt)"
                ) from None
            indent = len(raw) - len(raw.lstrip(" \t"))
            text = textwrap.dedent(raw)
            tree = ast.parse(text).body[0]
            file = inspect.getsourcefile(self.fn) or f"<{self.__name__}>"
            first = self.fn.__code__.co_firstlineno
            if not os.path.exists(file):
                # Diagnostics quote source lines from the file; without one, from this text.
                _ir.register_source(file, text, first)
            self._source = FunctionSource(tree, file, first, indent, text)
        return self._source

    @property
    def src(self) -> str:
        """The kernel's source text, dedented (Triton's JITFunction.src)."""
        return "\n".join(self.source.lines) + "\n"

    def _unsafe_update_src(self, new_src: str) -> None:
        """Triton's: the kernel compiles from `new_src` from now on (same parameters and
        globals); its diagnostics quote the new text. Triton's test harness patches kernels so."""
        text = textwrap.dedent(new_src)
        tree = next((n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)), None)
        if tree is None:
            raise ValueError(f"{self.__name__}: the new source defines no function")
        file = f"<{self.__name__}: updated source {next(_UPDATES)}>"
        _ir.register_source(file, text, 1)
        self._source = FunctionSource(tree, file, 1, 0, text)
        self.cache.clear()
        self._cfast = None  # its remembered launches ran the old code

    def __call__(self, *args, **kwargs):
        raise RuntimeError(
            f"launch the kernel with {self.__name__}[grid](...); " "call it directly only from inside another kernel"
        )

    def _subscript(self, grid):
        """kernel[grid] for what the C subscript leaves: a callable grid, a grid not of 1 to 3
        ints (the full path converts or rejects it), any grid before the fast path exists."""
        if callable(grid):
            return lambda *args, **kwargs: self.run(*args, grid=grid, **kwargs)
        return functools.partial(self._launch_full, grid)

    def _launch_full(self, grid, *args, num_warps=NUM_WARPS, num_stages=NUM_STAGES, **kwargs):
        return self.run(*args, grid=grid, num_warps=num_warps, num_stages=num_stages, **kwargs)

    def __repr__(self):
        return f"JITFunction({self.fn.__module__}:{self.fn.__qualname__})"

    # --- specialization ---

    def _bind(self, args, kwargs) -> dict:
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise LaunchError(f"{self.__name__}: {e}") from None
        bound.apply_defaults()
        return dict(bound.arguments)

    def _specialize(self, bound: dict, maxnreg=None):
        """The cache key, a Param per parameter (per leaf of a tuple argument) and the
        tuples' structure. Runtime arguments are specialized by the rules of
        tilefuse._C.specialize, which the C++ fast path keys launches by. A register cap
        (maxnreg) is part of the compiled kernel, so of its key ("@": no parameter's name)."""
        bound, tuples = _flatten(bound, self.constexprs)
        params, key = [], [(name, f"tuple{n}") for name, (_, n) in tuples.items()]
        if maxnreg is not None:
            key.append(("@maxnreg", str(maxnreg)))
        for name, v in bound.items():
            if name in self.constexprs or v is None or isinstance(v, (tl.dtype, str)):
                v = tl._unwrap(v)
                params.append(Param(name, value=v))
                key.append((name, repr(v)))
                continue
            if isinstance(v, TensorWrapper):
                array = (v.dtype.ir, array_arg(name, v.base)[1])
            else:
                array = array_arg(name, v)
            if array is not None:
                spec = _S.pointer(*array)
            else:
                try:
                    spec = _S.scalar(v, name not in self.do_not_specialize)
                except OverflowError:
                    raise LaunchError(f"argument '{name}': integer {v} does not fit in 64 bits") from None
                if spec is None:
                    raise LaunchError(f"argument '{name}': cannot pass a {type(v).__name__} to a kernel")
            params.append(Param(name, value=1) if spec.kind == _S.ArgSpec.Kind.one else Param(name, spec=spec))
            key.append((name, spec.code))
        return tuple(key), params, tuples

    def _compile(self, params, tuples=None, maxnreg=None) -> CompiledKernel:
        try:
            return self._generate(params, tuples or {}, maxnreg)
        except CompilationError as e:
            # The error shows the kernel's line; the code generator's frames would only bury it.
            raise e.with_traceback(None) from e.__cause__

    def _generate(self, params, tuples, maxnreg) -> CompiledKernel:
        module = _ir.Module()
        b = _ir.Builder(module)
        src = self.source
        line, col = src.pos(src.tree)
        b.set_loc(src.file, line, col)
        args = [p for p in params if p.spec is not None]
        func = b.create_func(self.__name__, [p.spec.type for p in args], [], True)
        hinted = [i for i, p in enumerate(args) if p.spec.divisible]
        if hinted:
            func.set_int_list_attr("aligned16", hinted)
        if maxnreg is not None:
            func.set_int_attr("maxnreg", maxnreg)
        scope = {p.name: tl.constexpr(p.value) for p in params if p.spec is None}
        names = [_ir_name(p.name) for p in args]
        for clash in {n for n in names if names.count(n) > 1}:
            raise CompilationError(
                f"{self.__name__}: parameters {[p.name for p in args if _ir_name(p.name) == clash]} are all "
                f"named {clash!r} in the kernel (a tuple's leaf 'a.0' becomes 'a_0'): rename one"
            )
        for p, a, n in zip(args, func.region(0).args, names):
            a.name = n
            scope[p.name] = tl.tensor(a)
        for name in tuples:
            if "." not in name:
                scope[name] = _rebuild(name, tuples, scope)
        gen = CodeGenerator(self, src, module, b, scope, self.fn.__globals__, _Compiler(module, b, self.debug))
        gen.is_kernel = True
        gen.visit_body(src.tree.body)
        b.set_insertion_point_to_end(func.region(0))
        b.set_loc(src.file, line, col)
        b.ret([])
        try:
            module.verify()
            tile_raw = module.to_text()
            _C.passes.run_pipeline(module)
        except _C.UserError as e:
            raise CompilationError(e.message, e.file, e.line, e.col) from bare(e)
        asm = {"tile_raw": tile_raw, "tile": module.to_text()}
        return CompiledKernel(self.__name__, module, asm, [(p.name, str(p.spec.type)) for p in args])

    def compile(self, *args, **kwargs) -> CompiledKernel:
        """Compiles (or fetches from the cache) the specialization for these arguments."""
        kwargs.pop("num_warps", None)
        kwargs.pop("num_stages", None)
        maxnreg = _check_maxnreg(self.__name__, kwargs.pop("maxnreg", None))
        key, params, tuples = self._specialize(self._bind(args, kwargs), maxnreg)
        kernel = self.cache.get(key)
        if kernel is None:
            kernel = self.cache[key] = self._compile(params, tuples, maxnreg)
        return kernel

    # --- launch ---

    def run(
        self,
        *args,
        grid,
        num_warps=NUM_WARPS,
        num_stages=NUM_STAGES,
        num_ctas=1,
        maxnreg=None,
        launch_cooperative_grid=False,
        **kwargs,
    ):
        if num_ctas != 1:
            raise LaunchError(f"{self.__name__}: num_ctas={num_ctas}: thread-block clusters are not supported (only 1)")
        cooperative = bool(tl._unwrap(launch_cooperative_grid))
        maxnreg = _check_maxnreg(self.__name__, maxnreg)
        bound = self._bind(args, kwargs)
        key, params, tuples = self._specialize(bound, maxnreg)
        kernel = self.cache.get(key)
        if kernel is None:
            # A GPU launch of a prebuilt specialization generates no IR (tilefuse.prebuilt).
            found = (
                prebuilt.kernel(self, key, params) if not tuples and select_backend(bound.values()) == "cuda" else None
            )
            kernel = self.cache[key] = found or self._compile(params, tuples, maxnreg)
        g = grid(dict(bound, num_warps=num_warps, num_stages=num_stages)) if callable(grid) else grid
        g = _check_grid(self.__name__, g)
        flat = {
            n: v.base if isinstance(v, TensorWrapper) else v for n, v in _flatten(bound, self.constexprs)[0].items()
        }
        # The fast path knows neither tuples nor wrappers: those launches stay on this path.
        plain = not tuples and all(flat[n] is bound[n] for n in bound)
        if select_backend(flat.values()) == "cuda":
            # The launch spec names parameters as the kernel does: a tuple's leaf "a.0" is "a_0".
            by_ir_name = {_ir_name(n): v for n, v in flat.items()} if tuples else flat
            loaded = gpu.launch(kernel, by_ir_name, g, num_warps, num_stages, cooperative)
            if gpu.debug_mode():
                self._cfast = None  # every debug launch checks its record: none on the fast path
            elif not callable(grid) and plain and not cooperative:  # the fast path launches plainly
                fast = self._fast_path()
                fast.add_tensor_types(list({type(v) for v in bound.values() if is_torch_tensor(v)}))
                opts = dict(num_warps=num_warps, num_stages=num_stages, maxnreg=maxnreg)
                fast.remember(grid, args, dict(kwargs, **opts), loaded, kernel)
        else:
            programs = g[0] * g[1] * g[2]
            if cooperative and programs > 1:
                raise LaunchError(
                    f"{self.__name__}: launch_cooperative_grid=True with {programs} programs: the "
                    "interpreter runs programs one after another, so they are never resident at once (a grid-wide "
                    "barrier would wait forever); run it on the GPU, or with one program"
                )
            _launch_interp(kernel, params, flat, g)
        return kernel

    def _fast_path(self):
        if self._cfast is None:
            defaults = {p.name: p.default for p in self.params if p.default is not inspect.Parameter.empty}
            self._cfast = _C.launcher.FastPath(
                self._names,
                [n in self.constexprs for n in self._names],
                [n not in self.do_not_specialize for n in self._names],
                defaults,
                gpu.stream_function(),
                self.__name__,
                LaunchError,
                NUM_WARPS,
                NUM_STAGES,
            )
        return self._cfast

    def warmup(
        self, *args, grid=None, target=None, num_warps=NUM_WARPS, num_stages=NUM_STAGES, **kwargs
    ) -> CompiledKernel:
        """Compiles for `target` (e.g. "sm_90a"; default: $TILEFUSE_TARGET, else GPU 0, else sm_90a) without
        launching; works without a GPU. The result exposes asm["tile"], ["gpu"] (the GPU stage the
        lowering reads: layouts in the types), ["llir"], ["ptx"]."""
        kernel = self.compile(*args, **kwargs)
        if target is None:
            target = gpu.default_target()
        low = gpu.lower(kernel, target, num_warps, num_stages)
        kernel.asm["gpu"], kernel.asm["llir"], kernel.asm["ptx"] = low["gpu"], low["llir"], low["ptx"]
        return kernel


def _ir_name(name: str) -> str:
    """A parameter's name in the kernel (IR values and the launch spec): tuple leaves'
    dotted names ("ptrs.1.0") with underscores."""
    return name.replace(".", "_")


def is_register_cap(maxnreg) -> bool:
    """Whether `maxnreg` is a register cap PTX can state: an int in [1, 255] (PTX .maxnreg)."""
    return not isinstance(maxnreg, bool) and isinstance(maxnreg, (int, np.integer)) and 1 <= maxnreg <= 255


def _check_maxnreg(name: str, maxnreg):
    """Triton's launch option: at most `maxnreg` registers per thread, or None."""
    if maxnreg is None:
        return None
    if not is_register_cap(maxnreg):
        raise LaunchError(f"{name}: maxnreg must be an int in [1, 255] (registers per thread), got {maxnreg!r}")
    return int(maxnreg)


def select_backend(values) -> str:
    """TILEFUSE_BACKEND=interp|cuda picks; by default cuda when a GPU is visible.
    numpy arguments always run on the interpreter."""
    env = os.environ.get("TILEFUSE_BACKEND", "")
    if env not in ("", "interp", "cuda"):
        raise LaunchError(f"TILEFUSE_BACKEND must be 'interp' or 'cuda', got {env!r}")
    if any(isinstance(v, np.ndarray) for v in values) or env == "interp":
        return "interp"
    if any(is_torch_tensor(v) and str(getattr(v, "device", "cpu")) == "cpu" for v in values):
        return "interp"
    if any(is_dlpack(v) and not DLPackArg("?", v).on_gpu for v in values):
        return "interp"
    if env == "cuda":
        if _device_count() == 0:
            raise LaunchError(f"TILEFUSE_BACKEND=cuda but no GPU is usable: {_C.runtime.driver_unavailable_reason()}")
        return "cuda"
    return "cuda" if _device_count() > 0 else "interp"


@functools.lru_cache(maxsize=1)
def _device_count() -> int:
    # Asked once per process: a GPU does not appear or vanish while it runs.
    return _C.runtime.device_count()


# numpy arrays that kernels launched on the interpreter may reach through addresses
# computed from another argument (see interp_buffers).
_interp_extra = contextvars.ContextVar("tilefuse_interp_buffers", default=())


@contextlib.contextmanager
def interp_buffers(*arrays: np.ndarray):
    """Inside the block, the interpreter's bounds checks also accept accesses to `arrays`:
    memory a kernel addresses by offsets from another argument's pointer (e.g. a list of
    per-expert weights, each at an element offset from the first). No effect on the GPU."""
    token = _interp_extra.set(_interp_extra.get() + arrays)
    try:
        yield
    finally:
        _interp_extra.reset(token)


# CUDA's grid limits, for both backends: a grid past them would fail to launch on the GPU
# and run for hours on the interpreter.
GRID_LIMITS = (2**31 - 1, 65535, 65535)


def _check_grid(name, grid) -> tuple[int, int, int]:
    g = tuple(tl._unwrap(x) for x in (grid if isinstance(grid, (tuple, list)) else (grid,)))
    if not 1 <= len(g) <= 3 or not all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in g):
        raise LaunchError(f"{name}: grid must be 1 to 3 non-negative integers, got {grid!r}")
    g = tuple(int(x) for x in g) + (1,) * (3 - len(g))
    for axis, (x, limit) in enumerate(zip(g, GRID_LIMITS)):
        if not 0 <= x <= limit:
            raise LaunchError(f"{name}: grid dimension {axis} is {x}; it must be in [0, {limit}] (CUDA's limit)")
    return g


def _launch_interp(kernel: CompiledKernel, params, bound, grid):
    I = _C.interp  # noqa: E741
    args, buffers = [], []
    for i, a in enumerate(_interp_extra.get()):
        lo, hi = _byte_bounds(a)
        buffers.append(I.Buffer(lo, hi - lo, f"interp_buffers[{i}]"))
    for p in params:
        if p.spec is None:
            continue
        name, t = p.name, p.spec.type
        v = bound[name]
        if t.is_ptr:
            read_only = False
            if isinstance(v, np.ndarray):
                lo, hi = _byte_bounds(v)
                read_only = not v.flags.writeable  # also np.frombuffer of bytes, read-only memmaps
                args.append(I.Arg.ptr(v.ctypes.data))
            elif is_dlpack(v):
                info = DLPackArg(name, v)
                if info.on_gpu:
                    raise LaunchError(f"argument '{name}' is GPU memory; the interpreter needs host memory")
                lo, hi = info.low, info.low + info.nbytes
                args.append(I.Arg.ptr(info.ptr))
            else:
                if str(v.device) != "cpu":
                    raise LaunchError(f"argument '{name}' is on {v.device}; the interpreter needs host memory")
                lo = v.data_ptr()
                hi = lo + v.untyped_storage().nbytes() - v.storage_offset() * v.element_size()
                args.append(I.Arg.ptr(lo))
            buffers.append(I.Buffer(lo, hi - lo, name, read_only))
        elif t.elem in (_D.f32, _D.f64):
            args.append(I.Arg.float(float(v)))
        else:
            i = int(v)
            args.append(I.Arg.int(i - 2**64 if i >= 2**63 else i))  # a u64 as its bits
    try:
        I.launch(kernel.module, kernel.name, grid, args, buffers)
    except _C.UserError as e:
        raise KernelRuntimeError(e.message, e.file, e.line, e.col) from None


def jit(fn=None, *, do_not_specialize=(), noinline=False, debug=None):
    """Decorator: `@tilefuse.jit` or `@tilefuse.jit(do_not_specialize=("n",))`. debug=False
    drops the kernel's tl.device_assert checks (Triton's default); None and True keep them."""

    def wrap(f):
        return JITFunction(f, do_not_specialize=do_not_specialize, noinline=noinline, debug=debug)

    return wrap(fn) if fn is not None else wrap
