"""tl.math: Triton's math functions, plus the libdevice functions under their Triton
names (tl.math held those before Triton 3). On the GPU transcendental functions call
libdevice; the interpreter computes them in float64 and rounds once to the dtype, so
the two agree within libdevice's ulp bounds (tests/python/language/test_math.py lists
them). Integer inputs compute in float32; float16/bfloat16 compute in float32 and round."""

from __future__ import annotations

from . import core
from .core import (  # noqa: F401 - re-exported under tl.math
    _K,
    abs,
    builtin,
    ceil,
    erf,
    exp,
    exp2,
    floor,
    fma,
    log,
    log2,
    rsqrt,
    sqrt,
    tanh,
    tensor,
    to_tensor,
    to_tensors,
)


def _named(name, fn):
    fn.__name__ = fn.__qualname__ = name
    return builtin(fn)


def _unary(name, kind):
    return _named(name, core._unary(kind))


def _binary(name, kind):
    def fn(x, y, _builder=None):
        return core._binary_builtin(kind, x, y, _builder)

    return _named(name, fn)


def _float_binary(name, kind):
    """Div and Rem are integer ops on integers; these math names always divide floats."""

    def fn(x, y, _builder=None):
        a, b = to_tensors(x, y, _builder)
        if not a.type.is_ptr and a.dtype.is_int() and b.dtype.is_int():
            a, b = (core.cast(t, core.float32, _builder=_builder) for t in (a, b))
        return tensor(_builder.binary(kind, a.handle, b.handle))

    return _named(name, fn)


sin = _unary("sin", _K.Sin)
cos = _unary("cos", _K.Cos)
tan = _unary("tan", _K.Tan)
asin = _unary("asin", _K.Asin)
acos = _unary("acos", _K.Acos)
atan = _unary("atan", _K.Atan)
sinh = _unary("sinh", _K.Sinh)
cosh = _unary("cosh", _K.Cosh)
asinh = _unary("asinh", _K.Asinh)
acosh = _unary("acosh", _K.Acosh)
atanh = _unary("atanh", _K.Atanh)
erfc = _unary("erfc", _K.Erfc)
exp10 = _unary("exp10", _K.Exp10)
expm1 = _unary("expm1", _K.Expm1)
log10 = _unary("log10", _K.Log10)
log1p = _unary("log1p", _K.Log1p)
cbrt = _unary("cbrt", _K.Cbrt)
trunc = _unary("trunc", _K.Trunc)
round = _unary("round", _K.Round)  # noqa: A001 - libdevice's name; halves away from zero
rint = _unary("rint", _K.Rint)  # halves to even
nearbyint = _unary("nearbyint", _K.Rint)
sqrt_rn = _unary("sqrt_rn", _K.Sqrt)  # tl.sqrt is correctly rounded already
fabs = _unary("fabs", _K.Abs)

atan2 = _binary("atan2", _K.Atan2)
pow = _binary("pow", _K.Pow)  # noqa: A001 - libdevice's name
hypot = _binary("hypot", _K.Hypot)
copysign = _binary("copysign", _K.Copysign)
fmin = _binary("fmin", _K.Min)  # the non-NaN operand when one is NaN, as fminf
fmax = _binary("fmax", _K.Max)
add_rn = _binary("add_rn", _K.Add)
sub_rn = _binary("sub_rn", _K.Sub)
mul_rn = _binary("mul_rn", _K.Mul)
div_rn = _float_binary("div_rn", _K.Div)
fmod = _float_binary("fmod", _K.Rem)
fma_rn = _named("fma_rn", lambda x, y, z, _builder=None: fma(x, y, z, _builder=_builder))


@builtin
def fdiv(x, y, ieee_rounding=False, _builder=None):
    """x / y, correctly rounded on both backends (Triton's default is a faster approximation)."""
    return div_rn(x, y, _builder=_builder)


@builtin
def rcp_rn(x, _builder=None):
    return div_rn(1.0, _as_float(x, _builder), _builder=_builder)


def _as_float(x, b) -> tensor:
    t = to_tensor(x, b)
    if t.type.is_ptr:
        raise TypeError(f"math functions need numbers, got {t.type}")
    return core.cast(t, core.float32, _builder=b) if t.dtype.is_int() else t


# Classification: exact compositions of comparisons and bit tests.


@builtin
def isnan(x, _builder=None):
    t = _as_float(x, _builder)
    return tensor(_builder.cmp("ne", t.handle, t.handle))


@builtin
def isinf(x, _builder=None):
    t = _as_float(x, _builder)
    inf = to_tensor(float("inf"), _builder, like=t)
    return tensor(_builder.cmp("eq", _builder.unary(_K.Abs, t.handle), inf.handle))


@builtin
def isfinited(x, _builder=None):
    t = _as_float(x, _builder)
    inf = to_tensor(float("inf"), _builder, like=t)
    return tensor(_builder.cmp("lt", _builder.unary(_K.Abs, t.handle), inf.handle))


finitef = isfinited


@builtin
def signbit(x, _builder=None):
    """The sign bit as an int32 (0 or 1), set for -0.0 and negative NaNs too."""
    t = _as_float(x, _builder)
    ints = {16: core.int16, 32: core.int32, 64: core.int64}
    width = t.dtype.primitive_bitwidth
    if width not in ints:
        raise TypeError(f"signbit needs a float16, bfloat16, float32 or float64 value, got {t.dtype!r}")
    bits = _builder.bitcast(t.handle, ints[width].to_ir_type())
    neg = _builder.cmp("lt", bits, to_tensor(0, _builder, like=tensor(bits)).handle)
    return core.cast(tensor(neg), core.int32, _builder=_builder)


# Triton's math functions that are tensor methods too (x.exp(), x.sin(), ...).
for _f in (exp, exp2, log, log2, cos, sin, sqrt, sqrt_rn, rsqrt, erf, floor, ceil):
    setattr(tensor, _f.__name__, lambda self, _builder=None, _f=_f: _f(self, _builder=_builder))
    core.TENSOR_METHODS.add(_f.__name__)


@builtin
def fdim(x, y, _builder=None):
    """x - y where x > y, else +0; NaN when either is NaN (x + y carries it)."""
    a, b = (_as_float(v, _builder) for v in to_tensors(x, y, _builder))
    diff = core.where(
        tensor(_builder.cmp("gt", a.handle, b.handle)), sub_rn(a, b, _builder=_builder), 0.0, _builder=_builder
    )
    nan = tensor(_builder.binary(_K.Or, isnan(a, _builder=_builder).handle, isnan(b, _builder=_builder).handle))
    return core.where(nan, add_rn(a, b, _builder=_builder), diff, _builder=_builder)


# libdevice's conversions and reinterpretations, as casts.


@builtin
def saturatef(x, _builder=None):
    """x clamped to [0, 1]; NaN gives 0 (fmax returns the non-NaN operand)."""
    return fmin(fmax(_as_float(x, _builder), 0.0, _builder=_builder), 1.0, _builder=_builder)


@builtin
def llrint(x, _builder=None):
    return core.cast(rint(x, _builder=_builder), core.int64, _builder=_builder)


@builtin
def llround(x, _builder=None):
    return core.cast(round(x, _builder=_builder), core.int64, _builder=_builder)


@builtin
def double2float_rn(x, _builder=None):
    return core.cast(x, core.float32, _builder=_builder)


@builtin
def double2float_rz(x, _builder=None):
    return core.cast(x, core.float32, rounding="rtz", _builder=_builder)


def _reinterpret(name, to):
    def fn(x, _builder=None):
        return core.cast(x, to, bitcast=True, _builder=_builder)

    return _named(name, fn)


float_as_int = _reinterpret("float_as_int", core.int32)
int_as_float = _reinterpret("int_as_float", core.float32)
double_as_longlong = _reinterpret("double_as_longlong", core.int64)
longlong_as_double = _reinterpret("longlong_as_double", core.float64)
