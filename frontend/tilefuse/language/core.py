"""The tile language: dtypes, tensors, constexpr, and the builtins kernels call.

Builtins take tensors or plain Python values and a `_builder` keyword that the
code generator supplies; they only convert arguments and call the C++ builder,
which owns type inference, promotion and broadcasting.
"""

from __future__ import annotations

import enum
import functools
import math
import operator

from .. import _C

_ir = _C.ir
_D = _ir.DType
_K = _ir.OpKind


class dtype:
    """A scalar element type (`tl.float32`) or a pointer type. `tl.dtype("fp16")` makes
    one from Triton's short name (the names of the lists below)."""

    SINT_TYPES = ["int8", "int16", "int32", "int64"]
    UINT_TYPES = ["int1", "uint8", "uint16", "uint32", "uint64"]
    FP_TYPES = ["fp8e4b15", "fp8e4nv", "fp8e4b8", "fp8e5", "fp8e5b16", "fp16", "bf16", "fp32", "fp64"]
    STANDARD_FP_TYPES = ["fp16", "bf16", "fp32", "fp64"]
    OTHER_TYPES = ["void"]

    def __init__(self, name: str, ir: _ir.DType = None):
        if ir is None:
            ir = _SHORT_NAMES.get(name)
            if ir is None:
                raise ValueError(f"tl.dtype({name!r}): tilefuse has no such type (known: {sorted(_SHORT_NAMES)})")
        self.name = name
        self.ir = ir

    def __repr__(self):
        return f"tl.{self.name}"

    def __eq__(self, other):
        return isinstance(other, dtype) and not isinstance(other, pointer_type) and other.ir == self.ir

    def __hash__(self):
        return hash(("dtype", int(self.ir)))

    @property
    def primitive_bitwidth(self) -> int:
        return _ir.bit_width(self.ir)

    def is_floating(self) -> bool:
        return not _ir.is_int(self.ir)

    def is_int(self) -> bool:
        return _ir.is_int(self.ir)

    def is_int_unsigned(self) -> bool:
        return _ir.is_unsigned(self.ir)

    def is_int_signed(self) -> bool:
        return self.is_int() and not self.is_int_unsigned()

    @property
    def int_bitwidth(self) -> int:
        return self.primitive_bitwidth

    @property
    def fp_mantissa_width(self) -> int:
        return self._fp_format()[0]

    @property
    def exponent_bias(self) -> int:
        return self._fp_format()[1]

    def _fp_format(self):
        fmt = _FP_FORMATS.get(self.ir)
        if fmt is None:
            raise AttributeError(f"{self!r} is not a floating-point type: it has no mantissa width or exponent bias")
        return fmt

    def is_bool(self) -> bool:
        return self.ir == _D.i1

    def is_ptr(self) -> bool:
        return False

    def to_ir_type(self) -> _ir.Type:
        return _ir.Type.scalar(self.ir)


class pointer_type(dtype):
    """A pointer to elements of `element_ty` in global memory."""

    def __init__(self, element_ty: dtype, address_space: int = 1, const: bool = False):
        element_ty = _unwrap(element_ty)
        if not isinstance(element_ty, dtype):
            raise TypeError(f"tl.pointer_type takes a tl dtype, got {element_ty!r}")
        if isinstance(element_ty, pointer_type):
            raise TypeError(
                "pointers to pointers are not supported: load the addresses as tl.int64 and "
                "convert them with .to(tl.pointer_type(...))"
            )
        if _unwrap(address_space) != 1:
            raise ValueError(f"only global memory pointers (address_space=1) are supported, got {address_space!r}")
        super().__init__(f"pointer_type({element_ty!r})", element_ty.ir)
        self.element_ty = element_ty

    def __eq__(self, other):
        return isinstance(other, pointer_type) and other.element_ty == self.element_ty

    def __hash__(self):
        return hash(("ptr", int(self.ir)))

    def __repr__(self):
        return f"pointer<{self.element_ty!r}>"

    def is_ptr(self) -> bool:
        return True

    def to_ir_type(self) -> _ir.Type:
        return _ir.Type.ptr(self.ir)


# Triton's short names of the types tilefuse has (tl.dtype("fp16") is tl.float16).
_SHORT_NAMES = {
    **{f"int{w}": getattr(_D, f"i{w}") for w in (1, 8, 16, 32, 64)},
    **{f"uint{w}": getattr(_D, f"u{w}") for w in (8, 16, 32, 64)},
    "fp8e4nv": _D.f8e4m3,
    "fp8e5": _D.f8e5m2,
    "fp16": _D.f16,
    "bf16": _D.bf16,
    "fp32": _D.f32,
    "fp64": _D.f64,
}

int1 = dtype("int1", _D.i1)
int8 = dtype("int8", _D.i8)
int16 = dtype("int16", _D.i16)
int32 = dtype("int32", _D.i32)
int64 = dtype("int64", _D.i64)
uint8 = dtype("uint8", _D.u8)
uint16 = dtype("uint16", _D.u16)
uint32 = dtype("uint32", _D.u32)
uint64 = dtype("uint64", _D.u64)
float16 = dtype("float16", _D.f16)
bfloat16 = dtype("bfloat16", _D.bf16)
float32 = dtype("float32", _D.f32)
float64 = dtype("float64", _D.f64)
float8e4nv = dtype("float8e4nv", _D.f8e4m3)
float8e5 = dtype("float8e5", _D.f8e5m2)
float8e8m0 = dtype("float8e8m0", _D.e8m0)
float4e2m1 = dtype("float4e2m1", _D.f4e2m1)
# Triton's float8e4b15: f16's bit pattern without the top exponent bit (bias 15, no inf or
# NaN, largest 1.875); casts to it round to f16, clamp to 1.75 and round half away.
float8e4b15 = dtype("float8e4b15", _D.f8e4b15)

_BY_IR = {
    d.ir: d
    for d in (
        int1,
        int8,
        int16,
        int32,
        int64,
        uint8,
        uint16,
        uint32,
        uint64,
        float16,
        bfloat16,
        float32,
        float64,
        float8e4nv,
        float8e5,
        float8e8m0,
        float4e2m1,
        float8e4b15,
    )
}


# (mantissa bits, exponent bias) of the float types, as Triton's dtype has them.
_FP_FORMATS = {
    _D.f8e4b15: (3, 15),
    _D.f8e4m3: (3, 7),
    _D.f8e5m2: (2, 15),
    _D.f16: (10, 15),
    _D.bf16: (7, 127),
    _D.f32: (23, 127),
    _D.f64: (52, 1023),
    _D.e8m0: (0, 127),
    _D.f4e2m1: (1, 1),
}

# Triton's canonical type names (triton._utils.type_canonicalisation_dict's values).
_CANONICAL = {
    "u1": _D.i1,
    "i1": _D.i1,
    **{f"i{w}": getattr(_D, f"i{w}") for w in (8, 16, 32, 64)},
    **{f"u{w}": getattr(_D, f"u{w}") for w in (8, 16, 32, 64)},
    "fp16": _D.f16,
    "bf16": _D.bf16,
    "fp32": _D.f32,
    "fp64": _D.f64,
    "fp8e4nv": _D.f8e4m3,
    "fp8e5": _D.f8e5m2,
}


def str_to_ty(name: str) -> dtype:
    """Triton's type from its canonical name ("fp32", "u8", "*fp16" for a pointer)."""
    if name.startswith("*"):
        return pointer_type(str_to_ty(name[1:]))
    ir = _CANONICAL.get(name)
    if ir is None:
        raise ValueError(f"str_to_ty({name!r}): tilefuse has no such type (known: {sorted(_CANONICAL)})")
    return _BY_IR[ir]


def dtype_of(t: _ir.Type) -> dtype:
    base = _BY_IR[t.elem]
    return pointer_type(base) if t.is_ptr else base


class constexpr:
    """Marks a kernel parameter as compile-time; also wraps compile-time values, which
    compare and compute like the values themselves (BLOCK == 16, BLOCK // 2)."""

    def __init__(self, value):
        self.value = value.value if isinstance(value, constexpr) else value

    def __repr__(self):
        return f"constexpr[{self.value!r}]"

    def __hash__(self):
        return hash(self.value)

    def __bool__(self):
        return bool(self.value)

    def __index__(self):
        return operator.index(self.value)

    def __int__(self):
        return int(self.value)

    def __float__(self):
        return float(self.value)

    def __neg__(self):
        return constexpr(-self.value)

    def __invert__(self):
        return constexpr(~self.value)


def _constexpr_op(fn, reflected=False):
    def method(self, other):
        if isinstance(other, tensor):
            return NotImplemented
        a, b = self.value, _unwrap(other)
        return constexpr(fn(b, a) if reflected else fn(a, b))

    return method


for _name, _fn in (
    ("eq", operator.eq),
    ("ne", operator.ne),
    ("lt", operator.lt),
    ("le", operator.le),
    ("gt", operator.gt),
    ("ge", operator.ge),
    ("add", operator.add),
    ("sub", operator.sub),
    ("mul", operator.mul),
    ("truediv", operator.truediv),
    ("floordiv", operator.floordiv),
    ("mod", operator.mod),
    ("pow", operator.pow),
    ("and", operator.and_),
    ("or", operator.or_),
    ("xor", operator.xor),
    ("lshift", operator.lshift),
    ("rshift", operator.rshift),
):
    setattr(constexpr, f"__{_name}__", _constexpr_op(_fn))
    if _name not in ("eq", "ne", "lt", "le", "gt", "ge"):
        setattr(constexpr, f"__r{_name}__", _constexpr_op(_fn, reflected=True))


def _unwrap(v):
    return v.value if isinstance(v, constexpr) else v


# Triton's name of the pointer to int32 (x.to(tl.pi32_t) of an integer: an address).
pi32_t = pointer_type(int32)


class tensor:
    """A value inside a kernel: a scalar or a tile of static shape."""

    def __init__(self, handle: _ir.Value):
        self.handle = handle

    @property
    def type(self) -> _ir.Type:
        return self.handle.type

    @property
    def dtype(self) -> dtype:
        return dtype_of(self.type)

    @property
    def shape(self) -> list[int]:
        return list(self.type.shape)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def __repr__(self):
        return f"tensor<{self.type}>"

    def __bool__(self):
        raise TypeError("a kernel tensor has no Python truth value; use tl.where or an if on a scalar")

    # Methods (called by the code generator with _builder).
    def to(self, dtype, fp_downcast_rounding=None, bitcast=False, rounding=None, rand_bits=None, _builder=None):
        return cast(self, dtype, fp_downcast_rounding, bitcast, rounding, rand_bits, _builder=_builder)

    def reshape(self, *shape, _builder=None):
        return reshape(self, *shape, _builder=_builder)

    def trans(self, *dims, _builder=None):
        return trans(self, *dims, _builder=_builder)

    def broadcast_to(self, *shape, _builder=None):
        return broadcast_to(self, *shape, _builder=_builder)

    def expand_dims(self, axis, _builder=None):
        return expand_dims(self, axis, _builder=_builder)

    def sum(self, axis=None, keep_dims=False, _builder=None):
        return sum(self, axis, keep_dims, _builder=_builder)

    def max(self, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False, _builder=None):
        return max(self, axis, return_indices, return_indices_tie_break_left, keep_dims, _builder=_builder)

    def min(self, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False, _builder=None):
        return min(self, axis, return_indices, return_indices_tie_break_left, keep_dims, _builder=_builder)

    def argmax(self, axis, tie_break_left=True, keep_dims=False, _builder=None):
        return argmax(self, axis, tie_break_left, keep_dims, _builder=_builder)

    def argmin(self, axis, tie_break_left=True, keep_dims=False, _builder=None):
        return argmin(self, axis, tie_break_left, keep_dims, _builder=_builder)

    def split(self, _builder=None):
        return split(self, _builder=_builder)

    def permute(self, *dims, _builder=None):
        return permute(self, *dims, _builder=_builder)

    def view(self, *shape, _builder=None):
        return view(self, *shape, _builder=_builder)

    def cast(self, dtype, fp_downcast_rounding=None, bitcast=False, _builder=None):
        return cast(self, dtype, fp_downcast_rounding, bitcast, _builder=_builder)

    def ravel(self, can_reorder=False, _builder=None):
        return ravel(self, can_reorder, _builder=_builder)

    def abs(self, _builder=None):
        return abs(self, _builder=_builder)

    def sigmoid(self, _builder=None):
        return sigmoid(self, _builder=_builder)

    def item(self, _builder=None):
        """The element of a one-element tile (or a scalar itself) as a scalar."""
        if self.numel != 1:
            raise ValueError(f"item() needs a tile of one element, got shape {self.shape}")
        if not self.shape:
            return self
        # The max of the one element is the element (i1 too), on every backend.
        return max(reshape(self, [1], _builder=_builder), 0, _builder=_builder)

    def __getattr__(self, name):
        if name == "T":
            raise AttributeError("x.T is handled by the code generator")
        raise AttributeError(f"tensor has no attribute '{name}'")


TENSOR_METHODS = {
    "to",
    "reshape",
    "trans",
    "broadcast_to",
    "expand_dims",
    "sum",
    "max",
    "min",
    "argmax",
    "argmin",
    "split",
    "permute",
    "view",
    "cast",
    "ravel",
    "abs",
    "sigmoid",
    "item",
}


def builtin(fn):
    """Marks a function callable inside kernels; the code generator passes _builder."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if kwargs.get("_builder") is None:
            raise RuntimeError(f"tl.{fn.__name__} can only be called inside a @tilefuse.jit kernel")
        return fn(*args, **kwargs)

    wrapper.__tilefuse_builtin__ = True
    return wrapper


# --- conversions of Python values ---


def _int_type(v: int) -> dtype:
    # Triton's types of integer literals: the first of int32, uint32, int64, uint64 that holds v.
    for d, lo, hi in ((int32, -(2**31), 2**31), (uint32, 0, 2**32), (int64, -(2**63), 2**63), (uint64, 0, 2**64)):
        if lo <= v < hi:
            return d
    raise ValueError(f"integer constant {v} does not fit in 64 bits")


def to_tensor(v, b, like: tensor | None = None) -> tensor:
    """A tensor for `v`. A Python scalar next to a tensor `like` takes like's dtype
    where that keeps its value (Triton's weak typing of literals)."""
    v = _unwrap(v)
    if isinstance(v, tensor):
        return v
    if isinstance(v, bool):
        return tensor(b.const_int(int(v), int1.to_ir_type()))
    if isinstance(v, int):
        if like is not None and not like.type.is_ptr and not like.type.is_desc and like.dtype != int1:
            d = like.dtype
            if d.is_floating() or _fits(v, d):
                return _const(v, d, b)
            if d.is_int_unsigned() and isinstance(like, tensor):  # Triton's errors for binary operations
                if v < 0:
                    raise ValueError(
                        "Cannot perform a binary operation between an unsigned tensor and a negative scalar. "
                        "Perform a explicit cast on one of them."
                    )
                raise ValueError(f"Scalar {v} is out of range for type {d!r}")
            if d.is_int() and -(2**63) <= v < 2**63:  # beside a signed tensor: widened to int64
                return _const(v, int64, b)
        return _const(v, _int_type(v), b)
    if isinstance(v, float):
        d = like.dtype if like is not None and not like.type.is_ptr and like.dtype.is_floating() else float32
        if d in (float8e4nv, float8e5, float8e8m0, float4e2m1, float8e4b15):
            d = float32
        return _const(v, d, b)
    raise TypeError(f"cannot use a value of type {type(v).__name__} in a kernel")


def to_tensors(a, b, builder) -> tuple[tensor, tensor]:
    """Both operands as tensors; a Python scalar beside a tensor takes its dtype where
    that keeps its value (see to_tensor)."""
    a, b = _unwrap(a), _unwrap(b)
    if not isinstance(a, tensor) and isinstance(b, tensor):
        return to_tensor(a, builder, like=b), b
    at = to_tensor(a, builder)
    return at, to_tensor(b, builder, like=at)


def _fits(v: int, d: dtype) -> bool:
    bits = d.primitive_bitwidth
    if d.is_int_unsigned():
        return 0 <= v < 2**bits
    return -(2 ** (bits - 1)) <= v < 2 ** (bits - 1)


def _const(v, d: dtype, b):
    t = d.to_ir_type()
    if d.is_floating():
        return tensor(b.const_float(float(v), t))
    v = int(v)
    return tensor(b.const_int(v - 2**64 if v >= 2**63 else v, t))  # a u64 beyond int64 as its bits


def _dtype_arg(d) -> dtype:
    d = _unwrap(d)
    if not isinstance(d, dtype):
        raise TypeError(f"expected a tl dtype, got {d!r}")
    return d


def _shape_arg(shape) -> list[int]:
    if len(shape) == 1 and isinstance(_unwrap(shape[0]), (list, tuple)):  # one shape, maybe a constexpr tuple
        shape = _unwrap(shape[0])
    shape = [_unwrap(s) for s in shape]
    for s in shape:
        if not isinstance(_unwrap(s), int):
            raise TypeError(f"shapes must be compile-time integers, got {s!r}")
    return [int(_unwrap(s)) for s in shape]


# --- builtins ---


def _grid_axis(what, axis) -> int:
    axis = int(_unwrap(axis))
    if not 0 <= axis <= 2:
        raise ValueError(f"{what} axis must be 0, 1, or 2 but got {axis}")  # Triton's words
    return axis


@builtin
def program_id(axis, _builder=None):
    return tensor(_builder.program_id(_grid_axis("program_id", axis)))


@builtin
def num_programs(axis, _builder=None):
    return tensor(_builder.num_programs(_grid_axis("num_programs", axis)))


@builtin
def arange(start, end, _builder=None):
    bounds = [_unwrap(start), _unwrap(end)]
    for name, v in zip(("start", "end"), bounds):
        if not isinstance(v, int) or isinstance(v, bool):
            what = f"a runtime {v.dtype!r} value" if isinstance(v, tensor) else repr(v)
            raise TypeError(
                f"arange's arguments must be of type tl.constexpr: its {name} is {what}; "
                "pass it as a tl.constexpr kernel parameter or a literal"
            )
    return tensor(_builder.arange(*bounds))


@builtin
def full(shape, value, dtype, _builder=None):
    d = _dtype_arg(dtype)
    shape = _shape_arg([shape])
    value = _unwrap(value)
    if isinstance(value, tensor):  # a runtime scalar is converted and splatted
        if value.shape:
            raise ValueError(f"tl.full needs a scalar value, got a tile of shape {value.shape}")
        v = value if value.dtype == d else cast(value, d, _builder=_builder)
        return tensor(_builder.splat(v.handle, shape)) if shape else v
    if d.is_int() and isinstance(value, int):  # exact beyond 2**53
        width = d.primitive_bitwidth
        if not -(2 ** (width - 1)) <= value < 2**width:  # as a signed value or as the type's bits
            raise ValueError(f"tl.full: {value} does not fit in {d} (nor as its {width} bits)")
        bits = value - 2**64 if value >= 2**63 else value  # a u64 beyond int64 as its bits
        return tensor(_builder.const_int(bits, _ir.Type.tile(d.ir, shape)))
    return tensor(_builder.full(shape, float(value), d.ir))


@builtin
def assume(cond, _builder=None):
    """A fact for the optimizer (Triton's llvm.assume). Checked to be a boolean; the
    compiler does not use it yet, and a false assumption is not detected."""
    c = to_tensor(cond, _builder)
    if c.type.is_ptr or c.dtype != int1:
        raise TypeError(f"tl.assume needs a boolean condition, got {c.type}")


@builtin
def zeros(shape, dtype, _builder=None):
    return full(shape, 0, dtype, _builder=_builder)


@builtin
def zeros_like(input, _builder=None):
    return full(input.shape, 0, input.dtype, _builder=_builder)


@builtin
def load(
    pointer,
    mask=None,
    other=None,
    boundary_check=None,
    padding_option="",
    cache_modifier="",
    eviction_policy="",
    volatile=False,
    _builder=None,
):
    # Cache and eviction hints change no result: the interpreter ignores them, the GPU puts
    # them in the ld instruction.
    from . import block_ptr

    hints = _memory_hints(cache_modifier, eviction_policy, _LOAD_CACHE)
    if _unwrap(volatile):
        if hints:
            raise ValueError("a volatile load takes no cache_modifier or eviction_policy (PTX's ld.volatile has none)")
        hints["volatile"] = True
    if isinstance(_unwrap(pointer), block_ptr.block_ptr):
        return block_ptr.load(_unwrap(pointer), mask, other, boundary_check, padding_option, _builder, hints)
    mask, other = _unwrap(mask), _unwrap(other)
    m = to_tensor(mask, _builder).handle if mask is not None else None
    o = None
    if other is not None:
        o = to_tensor(other, _builder, like=_PointeeProxy(to_tensor(pointer, _builder))).handle
    return tensor(_builder.load(to_tensor(pointer, _builder).handle, m, o, **hints))


_LOAD_CACHE = (".ca", ".cg", ".cv")
_STORE_CACHE = (".wb", ".cg", ".cs", ".wt")


def _memory_hints(cache_modifier, eviction_policy, allowed) -> dict:
    """Builder keywords of Triton's cache_modifier / eviction_policy, refused in its words."""
    cache, evict = _unwrap(cache_modifier) or "", _unwrap(eviction_policy) or ""
    if cache and cache not in allowed:
        raise ValueError(f"Cache modifier {cache} not supported (one of {', '.join(allowed)})")
    if evict and evict not in ("evict_first", "evict_last"):
        raise ValueError(f"Eviction policy {evict} not supported (evict_first or evict_last)")
    if cache and evict:
        raise ValueError(
            f"cache_modifier {cache} and eviction_policy {evict} cannot be combined (PTX takes one or the other)"
        )
    return {"cache": cache[1:]} if cache else {"evict": evict} if evict else {}


class _PointeeProxy:
    """Stands for 'a value of the pointer's element type' in weak typing."""

    def __init__(self, p: tensor):
        self.type = _ir.Type.scalar(p.type.elem)

    @property
    def dtype(self):
        return dtype_of(self.type)


@builtin
def store(pointer, value, mask=None, boundary_check=None, cache_modifier="", eviction_policy="", _builder=None):
    from . import block_ptr

    hints = _memory_hints(cache_modifier, eviction_policy, _STORE_CACHE)
    if isinstance(_unwrap(pointer), block_ptr.block_ptr):
        return block_ptr.store(_unwrap(pointer), value, mask, boundary_check, _builder, hints)
    p = to_tensor(pointer, _builder)
    v = to_tensor(value, _builder, like=_PointeeProxy(p))
    if v.type.is_ptr and p.type.is_ptr and p.dtype.element_ty in (int64, uint64):
        v = cast(v, p.dtype.element_ty, _builder=_builder)  # addresses stored as 64-bit integers, as Triton
    mask = _unwrap(mask)
    m = to_tensor(mask, _builder).handle if mask is not None else None
    _builder.store(p.handle, v.handle, m, **hints)


_ATOMIC_SEMS = ("acq_rel", "acquire", "release", "relaxed")
_ATOMIC_SCOPES = ("gpu", "cta", "sys")


def _check_sem_scope(sem, scope):
    # Triton's defaults: acq_rel at gpu scope.
    sem, scope = _unwrap(sem), _unwrap(scope)
    if sem is not None and sem not in _ATOMIC_SEMS:
        raise ValueError(f"atomic sem must be one of {', '.join(_ATOMIC_SEMS)}, got {sem!r}")
    if scope is not None and scope not in _ATOMIC_SCOPES:
        raise ValueError(f"atomic scope must be one of {', '.join(_ATOMIC_SCOPES)}, got {scope!r}")
    return sem or "acq_rel", scope or "gpu"


def _check_atomic_type(p: tensor, op: str):
    # Triton's refusals, in its words (its tests match them).
    if not p.type.is_ptr:
        return
    d = p.dtype.element_ty
    if op == "cas":
        if d.primitive_bitwidth not in (16, 32, 64):
            raise ValueError("atomic_cas only supports elements with width {16, 32, 64}")
        return
    if d in (float16, bfloat16) and op != "add":
        raise ValueError(f"atomic_{op} does not support {'fp16' if d == float16 else 'bf16'}")
    if d.is_int() and d.primitive_bitwidth < 32:
        raise ValueError(f"atomic_{op} does not support {d.name}")


_ATOMIC_NAMES = {
    _K.AtomicAdd: "add",
    _K.AtomicMax: "max",
    _K.AtomicMin: "min",
    _K.AtomicXchg: "xchg",
    _K.AtomicAnd: "and",
    _K.AtomicOr: "or",
    _K.AtomicXor: "xor",
}


def _atomic(kind, pointer, val, mask, sem, scope, b):
    sem, scope = _check_sem_scope(sem, scope)
    p = to_tensor(pointer, b)
    _check_atomic_type(p, _ATOMIC_NAMES[kind])
    v = to_tensor(val, b, like=_PointeeProxy(p))
    mask = _unwrap(mask)
    m = to_tensor(mask, b).handle if mask is not None else None
    return tensor(b.atomic(kind, p.handle, v.handle, m, sem, scope))


@builtin
def atomic_add(pointer, val, mask=None, sem=None, scope=None, _builder=None):
    return _atomic(_K.AtomicAdd, pointer, val, mask, sem, scope, _builder)


@builtin
def atomic_max(pointer, val, mask=None, sem=None, scope=None, _builder=None):
    return _atomic(_K.AtomicMax, pointer, val, mask, sem, scope, _builder)


@builtin
def atomic_min(pointer, val, mask=None, sem=None, scope=None, _builder=None):
    return _atomic(_K.AtomicMin, pointer, val, mask, sem, scope, _builder)


@builtin
def atomic_xchg(pointer, val, mask=None, sem=None, scope=None, _builder=None):
    return _atomic(_K.AtomicXchg, pointer, val, mask, sem, scope, _builder)


@builtin
def atomic_and(pointer, val, mask=None, sem=None, scope=None, _builder=None):
    return _atomic(_K.AtomicAnd, pointer, val, mask, sem, scope, _builder)


@builtin
def atomic_or(pointer, val, mask=None, sem=None, scope=None, _builder=None):
    return _atomic(_K.AtomicOr, pointer, val, mask, sem, scope, _builder)


@builtin
def atomic_xor(pointer, val, mask=None, sem=None, scope=None, _builder=None):
    return _atomic(_K.AtomicXor, pointer, val, mask, sem, scope, _builder)


@builtin
def atomic_cas(pointer, cmp, val, sem=None, scope=None, _builder=None):
    sem, scope = _check_sem_scope(sem, scope)
    p = to_tensor(pointer, _builder)
    _check_atomic_type(p, "cas")
    c = to_tensor(cmp, _builder, like=_PointeeProxy(p))
    v = to_tensor(val, _builder, like=_PointeeProxy(p))
    return tensor(_builder.atomic_cas(p.handle, c.handle, v.handle, sem, scope))


@builtin
def debug_barrier(_builder=None):
    _builder.debug_barrier()


@builtin
def where(condition, x, y, _builder=None):
    xt, yt = to_tensors(x, y, _builder)
    return tensor(_builder.select(to_tensor(condition, _builder).handle, xt.handle, yt.handle))


def _binary_builtin(kind, a, b, builder):
    at, bt = to_tensors(a, b, builder)
    return tensor(builder.binary(kind, at.handle, bt.handle))


class PropagateNan(enum.Enum):
    """Whether tl.minimum / tl.maximum / tl.clamp return NaN when an operand is NaN (ALL)
    or the other operand (NONE, the default: IEEE minNum / maxNum)."""

    NONE = 0
    ALL = 0xFFFF


def _nan_through(r, sources, propagate_nan, b):
    """r, with the NaN of the first NaN source in its place when propagate_nan is ALL."""
    p = _unwrap(propagate_nan)
    if p is None or p == PropagateNan.NONE:
        return r
    if p != PropagateNan.ALL:
        raise ValueError(f"propagate_nan must be tl.PropagateNan.ALL or NONE, got {p!r}")
    if not r.dtype.is_floating():
        return r
    for x in reversed(sources):
        x = to_tensor(x, b, like=r)
        isnan = tensor(b.cmp("ne", x.handle, x.handle))
        r = where(isnan, x, r, _builder=b)
    return r


@builtin
def minimum(x, y, propagate_nan=PropagateNan.NONE, _builder=None):
    return _nan_through(_binary_builtin(_K.Min, x, y, _builder), [x, y], propagate_nan, _builder)


@builtin
def maximum(x, y, propagate_nan=PropagateNan.NONE, _builder=None):
    return _nan_through(_binary_builtin(_K.Max, x, y, _builder), [x, y], propagate_nan, _builder)


@builtin
def umulhi(x, y, _builder=None):
    """The high half of the unsigned product of two integers (of their common type's width)."""
    return _binary_builtin(_K.Umulhi, x, y, _builder)


@builtin
def clamp(x, min, max, propagate_nan=PropagateNan.NONE, _builder=None):
    # As in Triton, ALL propagates a NaN of x; a NaN bound gives an undefined result.
    r = _binary_builtin(_K.Min, _binary_builtin(_K.Max, x, min, _builder), max, _builder)
    return _nan_through(r, [x], propagate_nan, _builder)


def _unary(kind):
    def fn(x, _builder=None):
        return tensor(_builder.unary(kind, to_tensor(x, _builder).handle))

    return fn


exp = builtin(_unary(_K.Exp))
exp2 = builtin(_unary(_K.Exp2))
log = builtin(_unary(_K.Log))
log2 = builtin(_unary(_K.Log2))
sqrt = builtin(_unary(_K.Sqrt))
rsqrt = builtin(_unary(_K.Rsqrt))
tanh = builtin(_unary(_K.Tanh))
erf = builtin(_unary(_K.Erf))
sin = builtin(_unary(_K.Sin))
cos = builtin(_unary(_K.Cos))
floor = builtin(_unary(_K.Floor))
ceil = builtin(_unary(_K.Ceil))
_abs = _unary(_K.Abs)


@builtin
def abs(x, _builder=None):
    t = to_tensor(x, _builder)
    if t.dtype in (float8e4b15, float8e4nv, float8e5):  # storage types: |x| is x without its sign bit
        bits = cast(t, uint8, bitcast=True, _builder=_builder)
        mask = to_tensor(0x7F, _builder, like=bits)
        return cast(tensor(_builder.binary(_K.And, bits.handle, mask.handle)), t.dtype, bitcast=True, _builder=_builder)
    return _abs(t, _builder=_builder)


for _name, _f in (
    ("exp", exp),
    ("exp2", exp2),
    ("log", log),
    ("log2", log2),
    ("sqrt", sqrt),
    ("rsqrt", rsqrt),
    ("tanh", tanh),
    ("erf", erf),
    ("sin", sin),
    ("cos", cos),
    ("floor", floor),
    ("ceil", ceil),
    ("abs", abs),
):
    _f.__name__ = _f.__qualname__ = _name


@builtin
def sigmoid(x, _builder=None):
    # 1 / (1 + exp(-x)), in the input's float type.
    xt = to_tensor(x, _builder)
    if xt.dtype.is_int():
        xt = cast(xt, float32, _builder=_builder)
    e = tensor(_builder.unary(_K.Exp, _builder.neg(xt.handle)))
    one = to_tensor(1.0, _builder, like=xt)
    return tensor(_builder.binary(_K.Div, one.handle, _builder.binary(_K.Add, one.handle, e.handle)))


@builtin
def fma(x, y, z, _builder=None):
    xs = [to_tensor(v, _builder) for v in (x, y, z)]
    return tensor(_builder.fma(*(t.handle for t in xs)))


@builtin
def cdiv(x, div, _builder=None):
    x, div = _unwrap(x), _unwrap(div)
    if not isinstance(x, tensor) and not isinstance(div, tensor):
        return (x + div - 1) // div
    xt = to_tensor(x, _builder)
    dt = to_tensor(div, _builder, like=xt)
    one = to_tensor(1, _builder, like=xt)
    num = _builder.binary(_K.Sub, _builder.binary(_K.Add, xt.handle, dt.handle), one.handle)
    return tensor(_builder.binary(_K.Div, num, dt.handle))


@builtin
def cast(input, dtype, fp_downcast_rounding=None, bitcast=False, rounding=None, rand_bits=None, _builder=None):
    d = _dtype_arg(dtype)
    x = to_tensor(input, _builder)
    if isinstance(d, pointer_type) or x.type.is_ptr:  # bitcast or not, as Triton
        return _pointer_cast(x, d, _builder)
    if _unwrap(bitcast):
        return tensor(_builder.bitcast(x.handle, d.to_ir_type()))
    mode = _unwrap(rounding) or _unwrap(fp_downcast_rounding) or "rne"
    mode = {"rtne": "rne"}.get(mode, mode)
    rb = to_tensor(rand_bits, _builder).handle if _unwrap(rand_bits) is not None else None
    if rb is not None and mode == "rne":
        mode = "rs"
    return tensor(_builder.cast(x.handle, d.ir, mode, rb))


_UNSIGNED = {8: uint8, 16: uint16, 32: uint32, 64: uint64}


def _pointer_cast(x: tensor, d: dtype, b) -> tensor:
    """Triton's casts with pointers: pointer to pointer keeps the address; an integer becomes
    a pointer zero-extended to 64 bits (inttoptr); a pointer becomes an int64 / uint64
    (ptrtoint) or an int1 (address != 0)."""
    if x.type.is_ptr and isinstance(d, pointer_type):
        return tensor(b.bitcast(x.handle, d.to_ir_type()))
    if isinstance(d, pointer_type):
        if not x.dtype.is_int() or x.dtype == int1:
            raise TypeError(f"cannot cast {x.dtype!r} to {d!r}: only integers (addresses) convert to pointers")
        bits = x.dtype.primitive_bitwidth
        if bits < 64:  # zero-extend, as LLVM's inttoptr does
            x = cast(tensor(b.bitcast(x.handle, _UNSIGNED[bits].to_ir_type())), uint64, _builder=b)
        return tensor(b.bitcast(x.handle, d.to_ir_type()))
    if d == int1:
        addr = tensor(b.bitcast(x.handle, int64.to_ir_type()))
        return tensor(b.cmp("ne", addr.handle, to_tensor(0, b, like=addr).handle))
    if d not in (int64, uint64):
        raise TypeError(f"cannot cast {x.dtype!r} to {d!r}: a pointer converts to tl.int64, tl.uint64 or tl.int1")
    return tensor(b.bitcast(x.handle, d.to_ir_type()))


@builtin
def reshape(input, *shape, can_reorder=False, _builder=None):
    return tensor(_builder.reshape(to_tensor(input, _builder).handle, _shape_arg(shape)))


@builtin
def ravel(x, can_reorder=False, _builder=None):
    t = to_tensor(x, _builder)
    return reshape(t, t.numel, _builder=_builder)


@builtin
def view(input, *shape, _builder=None):
    return reshape(input, *shape, _builder=_builder)


@builtin
def trans(input, *dims, _builder=None):
    return tensor(_builder.trans(to_tensor(input, _builder).handle, _shape_arg(dims) if dims else []))


@builtin
def permute(input, *dims, _builder=None):
    return trans(input, *dims, _builder=_builder)


@builtin
def broadcast_to(input, *shape, _builder=None):
    return tensor(_builder.broadcast_to(to_tensor(input, _builder).handle, _shape_arg(shape)))


@builtin
def broadcast(input, other, _builder=None):
    a, b = _builder.broadcast_pair(to_tensor(input, _builder).handle, to_tensor(other, _builder).handle)
    return tensor(a), tensor(b)


@builtin
def expand_dims(input, axis, _builder=None):
    x = to_tensor(input, _builder)
    axes = _unwrap(axis)
    axes = [int(_unwrap(a)) for a in (axes if isinstance(axes, (list, tuple)) else [axes])]
    # As Triton: negative axes count from the end of the result's dims.
    ndim = len(x.shape) + len(axes)
    for a in axes:
        if not -ndim <= a < ndim:
            raise ValueError(f"invalid axis {a}. Expected {-ndim} <= axis < {ndim}")
    axes = [a % ndim for a in axes]
    if len(set(axes)) != len(axes):
        raise ValueError(f"expand_dims received duplicate axes, normalized axes = {axes}")
    h = x.handle
    for a in sorted(axes):
        h = _builder.expand_dims(h, a)
    return tensor(h)


@builtin
def join(a, b, _builder=None):
    return tensor(_builder.join(to_tensor(a, _builder).handle, to_tensor(b, _builder).handle))


@builtin
def split(a, _builder=None):
    lo, hi = _builder.split(to_tensor(a, _builder).handle)
    return tensor(lo), tensor(hi)


def _reduce(kind, input, axis, keep_dims, b):
    x = to_tensor(input, b)
    axis = _unwrap(axis)
    if axis is None:
        flat = b.reshape(x.handle, [x.numel]) if len(x.shape) > 1 else x.handle
        r = b.reduce(kind, flat, 0)
        if _unwrap(keep_dims):
            for _ in x.shape:
                r = b.expand_dims(r, 0)
        return tensor(r)
    axis = int(axis)
    r = b.reduce(kind, x.handle, axis)
    if _unwrap(keep_dims):
        r = b.expand_dims(r, axis % len(x.shape))
    return tensor(r)


@builtin
def sum(input, axis=None, keep_dims=False, dtype=None, _builder=None):
    x = to_tensor(input, _builder)
    d = _unwrap(dtype)
    if d is not None:
        x = cast(x, d, _builder=_builder)
    elif x.dtype in (float16, bfloat16):
        x = cast(x, float32, _builder=_builder)  # accumulate narrow floats in fp32, as Triton does
    return _reduce(_K.ReduceSum, x, axis, keep_dims, _builder)


@builtin
def max(input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False, _builder=None):
    if _unwrap(return_indices):
        return (
            _reduce(_K.ReduceMax, input, axis, keep_dims, _builder),
            argmax(input, axis, return_indices_tie_break_left, keep_dims, _builder=_builder),
        )
    return _reduce(_K.ReduceMax, input, axis, keep_dims, _builder)


@builtin
def min(input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False, _builder=None):
    if _unwrap(return_indices):
        return (
            _reduce(_K.ReduceMin, input, axis, keep_dims, _builder),
            argmin(input, axis, return_indices_tie_break_left, keep_dims, _builder=_builder),
        )
    return _reduce(_K.ReduceMin, input, axis, keep_dims, _builder)


@builtin
def argmin(input, axis, tie_break_left=True, keep_dims=False, _builder=None):
    # The first minimum of x is the first maximum of an order-reversing map: -x for
    # floats, ~x (= -x - 1, no overflow) for integers.
    x = to_tensor(input, _builder)
    if x.dtype.is_floating():
        flipped = _builder.neg(x.handle)
    else:
        ones = 2**x.dtype.primitive_bitwidth - 1 if x.dtype.is_int_unsigned() else -1
        flipped = _builder.binary(_K.Xor, x.handle, to_tensor(ones, _builder, like=x).handle)
    return argmax(tensor(flipped), axis, tie_break_left, keep_dims, _builder=_builder)


@builtin
def argmax(input, axis, tie_break_left=True, keep_dims=False, _builder=None):
    if _unwrap(tie_break_left):
        return _reduce(_K.Argmax, input, axis, keep_dims, _builder)
    # The last maximum: n - 1 - (the first maximum of x reversed along the axis).
    from .combine import flip

    x = to_tensor(input, _builder)
    axis = _unwrap(axis)
    rank = len(x.shape)
    if axis is None:
        x = reshape(x, x.numel, _builder=_builder)
    a = 0 if axis is None else int(axis) % rank
    first = _reduce(_K.Argmax, flip(x, a, _builder=_builder), a, False, _builder)
    r = _binary_builtin(_K.Sub, x.shape[a] - 1, first, _builder)
    if _unwrap(keep_dims):
        for ax in [0] * rank if axis is None else [a]:
            r = expand_dims(r, ax, _builder=_builder)
    return r


@builtin
def dot(
    input,
    other,
    acc=None,
    input_precision=None,
    allow_tf32=None,
    max_num_imprecise_acc=None,
    out_dtype=float32,
    _builder=None,
):
    """Triton's tl.dot: 2-D [M, K] x [K, N] or 3-D [B, M, K] x [B, K, N] (one 2-D dot per
    batch index). input_precision ("ieee", "tf32", "tf32x3"; allow_tf32=True is "tf32")
    applies to f32 operands; the default is "ieee" (f32 products, on FMAs on the GPU); tf32
    dots round the operands to tf32 and run on tf32 tensor cores (mma.sync) where the tile
    allows. out_dtype=float16 accumulates f16 and fp8
    products in f16. max_num_imprecise_acc is accepted and checked; fp8 products
    accumulate in f32 (the GPU's wgmma accumulator over the whole K loop)."""
    a, b = to_tensor(input, _builder), to_tensor(other, _builder)
    # float8e4b15 values are f16 values (its bits are f16's without the top exponent bit):
    # its products run on f16 operands, exactly converted.
    a, b = (cast(x, float16, _builder=_builder) if x.dtype == float8e4b15 else x for x in (a, b))
    precision, allow_tf32 = _unwrap(input_precision), _unwrap(allow_tf32)
    if precision is not None and allow_tf32 is not None:
        raise ValueError("Only one of input_precision and allow_tf32 can be specified")
    if precision is None:
        precision = "tf32" if allow_tf32 else "ieee"
    if precision not in ("ieee", "tf32", "tf32x3"):
        raise ValueError(f"input_precision must be one of ('ieee', 'tf32', 'tf32x3'), got {precision!r}")
    imprecise = _unwrap(max_num_imprecise_acc)
    if imprecise is not None and (not isinstance(imprecise, int) or isinstance(imprecise, bool) or imprecise < 0):
        raise TypeError(f"max_num_imprecise_acc must be a non-negative int or None, got {imprecise!r}")
    acc = _unwrap(acc)
    acc = to_tensor(acc, _builder).handle if acc is not None else None
    return tensor(_builder.dot(a.handle, b.handle, acc, precision, _dtype_arg(out_dtype).ir))


_SCALED_FORMATS = {"e4m3": float8e4nv, "e5m2": float8e5, "e2m1": float4e2m1}


def _scaled_operand(x, fmt, k_axis, b):
    """fp8 operands pass through; e2m1 comes packed two per int8 along K (low nibble first)."""
    fmt = _unwrap(fmt)
    if fmt not in _SCALED_FORMATS:
        raise ValueError(f"dot_scaled format must be one of {sorted(_SCALED_FORMATS)}, got {fmt!r}")
    t = to_tensor(x, b)
    want = _SCALED_FORMATS[fmt]
    if fmt != "e2m1":
        return t if t.dtype == want else cast(t, want, bitcast=True, _builder=b)
    if t.dtype != int8:
        raise TypeError(f"dot_scaled 'e2m1' operands are packed int8 tiles, got {t.dtype!r}")
    h = t.handle
    if k_axis == 0:
        h = b.trans(h, [])
    mask = to_tensor(15, b, like=tensor(h)).handle
    lo = b.bitcast(b.binary(_K.And, h, mask), float4e2m1.to_ir_type())
    hi = b.bitcast(
        b.binary(_K.And, b.binary(_K.Shr, h, to_tensor(4, b, like=tensor(h)).handle), mask), float4e2m1.to_ir_type()
    )
    j = b.join(lo, hi)
    shape = list(j.type.shape)
    h = b.reshape(j, [shape[0], shape[1] * 2])
    if k_axis == 0:
        h = b.trans(h, [])
    return tensor(h)


@builtin
def dot_scaled(
    lhs, lhs_scale, lhs_format, rhs, rhs_scale, rhs_format, acc=None, fast_math=False, out_dtype=float32, _builder=None
):
    a = _scaled_operand(lhs, lhs_format, 1, _builder)
    bb = _scaled_operand(rhs, rhs_format, 0, _builder)
    sa = cast(to_tensor(lhs_scale, _builder), float8e8m0, bitcast=True, _builder=_builder)
    sb = cast(to_tensor(rhs_scale, _builder), float8e8m0, bitcast=True, _builder=_builder)
    acc = _unwrap(acc)
    h = _builder.dot_scaled(
        a.handle, sa.handle, bb.handle, sb.handle, to_tensor(acc, _builder).handle if acc is not None else None
    )
    return tensor(h)


def _hint_values(values, what):
    values = _unwrap(values)
    values = [_unwrap(v) for v in values] if isinstance(values, (list, tuple)) else [values]
    for v in values:
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise TypeError(f"{what} takes positive integers, got {v!r}")
    # The compiler reasons in powers of two: keep the largest one dividing each value.
    return [v & -v for v in values]


@builtin
def multiple_of(input, values, _builder=None):
    """Asserts that the elements of `input` (per dimension, the first of each contiguous
    run) are multiples of `values`; the GPU backend vectorizes accesses with it."""
    x = to_tensor(input, _builder)
    return tensor(_builder.hint(x.handle, _hint_values(values, "multiple_of"), []))


@builtin
def max_contiguous(input, values, _builder=None):
    """Asserts that `input` runs in steps of 1 over aligned runs of `values` elements per
    dimension; the GPU backend vectorizes accesses with it."""
    x = to_tensor(input, _builder)
    return tensor(_builder.hint(x.handle, [], _hint_values(values, "max_contiguous")))


@builtin
def device_print(prefix, *args, hex=False, _builder=None):
    _builder.print(str(_unwrap(prefix)), [to_tensor(a, _builder).handle for a in args])


@builtin
def device_assert(cond, msg="", _builder=None):
    _builder.assert_true(to_tensor(cond, _builder).handle, str(_unwrap(msg)))


class tensor_descriptor:
    """A tensor in global memory described by base, sizes and strides, read and
    written in blocks of `block_shape` (lowered to TMA on sm_90a). Elements
    outside the tensor read as zero and are not written."""

    def __init__(self, handle, block_shape):
        self.handle = handle
        self.block_shape = block_shape

    # A device function call passes the descriptor as one argument.
    def _tensors(self) -> list:
        return [tensor(self.handle)]

    def _with_tensors(self, ts):
        return tensor_descriptor(ts[0].handle, self.block_shape)

    def __repr__(self):
        return f"tensor_descriptor<block_shape={list(self.block_shape)}>"

    def load(self, offsets, _builder=None):
        offs = [to_tensor(o, _builder).handle for o in offsets]
        return tensor(_builder.desc_load(self.handle, offs))

    def store(self, offsets, value, _builder=None):
        offs = [to_tensor(o, _builder).handle for o in offsets]
        v = to_tensor(value, _builder)
        _builder.desc_store(self.handle, v.handle, offs)


DESCRIPTOR_METHODS = {"load", "store"}


@builtin
def make_tensor_descriptor(base, shape, strides, block_shape, _builder=None):
    p = to_tensor(base, _builder)
    sizes = [to_tensor(s, _builder).handle for s in _unwrap(shape)]
    strd = [to_tensor(s, _builder).handle for s in _unwrap(strides)]
    blk = _shape_arg([block_shape])
    return tensor_descriptor(_builder.make_desc(p.handle, sizes, strd, blk), blk)


class static_range:
    """A loop unrolled at compile time: `for i in tl.static_range(4)`."""

    def __init__(self, arg1, arg2=None, step=1):
        self.start, self.end = (0, arg1) if arg2 is None else (arg1, arg2)
        self.step = step


class range:  # noqa: A001 - Triton's name
    """A loop the compiler keeps as a loop: `for i in tl.range(lo, hi, step)`.
    `num_stages`, `loop_unroll_factor` and `flatten` are accepted for Triton's sake and
    unused. `warp_specialize=True` (sm_90a) runs the kernel on warp-specialized warps: the
    TMA copies of the pipelined loops in or below this loop on a producer warpgroup, all
    else on the kernel's num_warps. `num_consumer_groups=2` with it: two groups of
    num_warps consumer warps take this loop's iterations in turns (ping-pong: one's
    epilogue runs while the other's wgmma do). docs/guide/kernels.md."""

    def __init__(
        self,
        arg1,
        arg2=None,
        step=None,
        num_stages=None,
        loop_unroll_factor=None,
        flatten=False,
        warp_specialize=False,
        num_consumer_groups=1,
    ):
        self.start, self.end = (0, arg1) if arg2 is None else (arg1, arg2)
        self.step = 1 if step is None else step
        self.warp_specialize = warp_specialize
        self.num_consumer_groups = num_consumer_groups


def static_assert(cond, msg=""):
    """Checked while compiling; handled by the code generator."""
    raise RuntimeError("tl.static_assert can only be used inside a @tilefuse.jit kernel")


def static_print(*values):
    """Prints while compiling; handled by the code generator."""
    raise RuntimeError("tl.static_print can only be used inside a @tilefuse.jit kernel")
