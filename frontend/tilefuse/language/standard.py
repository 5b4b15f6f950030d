"""Triton's small standard-library names: tl.swizzle2d, tl.softmax, tl.add, the
functional forms of tensor-descriptor loads and stores, tl.constexpr_function and
TRITON_MAX_TENSOR_NUMEL. Written with the tile builtins, as Triton writes them."""

from __future__ import annotations

from . import core
from .core import _K, _binary_builtin, _unwrap, builtin

# Triton's bound on a tile's element count (its frontend checks it; tilefuse's verifier
# has its own limits, so kernels that assert against this constant keep working).
TRITON_MAX_TENSOR_NUMEL = core.constexpr(1048576)


def constexpr_function(fn):
    """Triton's @tl.constexpr_function: a Python function that kernels call on
    compile-time values at compile time (the code generator calls it)."""
    fn.__tilefuse_constexpr_function__ = True
    return fn


@builtin
def swizzle2d(i, j, size_i, size_j, size_g, _builder=None):
    """Triton's swizzle2d: (i, j) of a size_i x size_j grid renumbered so that groups of
    size_g rows are walked column by column (the L2-friendly matmul program order)."""
    b = _builder

    def op(kind, x, y):
        x, y = _unwrap(x), _unwrap(y)
        if not isinstance(x, core.tensor) and not isinstance(y, core.tensor):
            return {_K.Add: x + y, _K.Sub: x - y, _K.Mul: x * y, _K.Div: x // y, _K.Rem: x % y}[kind]
        return _binary_builtin(kind, x, y, b)

    ij = op(_K.Add, op(_K.Mul, i, size_j), j)
    size_gj = op(_K.Mul, size_g, size_j)
    off_i = op(_K.Mul, op(_K.Div, ij, size_gj), size_g)
    rows = op(_K.Sub, size_i, off_i)
    size_g = core.minimum(rows, size_g, _builder=b) if isinstance(_unwrap(rows), core.tensor) else min(rows, size_g)
    ij = op(_K.Rem, ij, size_gj)
    return op(_K.Add, off_i, op(_K.Rem, ij, size_g)), op(_K.Div, ij, size_g)


@builtin
def softmax(x, dim=None, keep_dims=False, ieee_rounding=False, _builder=None):
    """Triton's tl.softmax: exp(x - max) / sum along dim (0 when None), the division
    correctly rounded (tilefuse's fdiv always is)."""
    b = _builder
    d = 0 if _unwrap(dim) is None else int(_unwrap(dim))
    x = core.to_tensor(x, b)
    z = _binary_builtin(_K.Sub, x, core.max(x, d, keep_dims=True, _builder=b), b)
    num = core.exp(z, _builder=b)
    den = core.sum(num, d, keep_dims=True, _builder=b)
    if den.dtype != num.dtype:  # sum accumulates narrow floats in fp32
        den = core.cast(den, num.dtype, _builder=b)
    from .math import fdiv

    return fdiv(num, den, ieee_rounding, _builder=b)


@builtin
def add(x, y, sanitize_overflow=True, _builder=None):
    """x + y (Triton's sanitize_overflow checks only in its debug mode; tilefuse wraps)."""
    return _binary_builtin(_K.Add, x, y, _builder)


@builtin
def load_tensor_descriptor(desc, offsets, _builder=None):
    return desc.load(offsets, _builder=_builder)


@builtin
def store_tensor_descriptor(desc, offsets, value, _builder=None):
    return desc.store(offsets, value, _builder=_builder)
