"""Reductions and scans with a combine function, and the tile ops Triton's standard
library builds on them or on shape ops: tl.reduce, tl.associative_scan, tl.cumsum,
tl.cumprod, tl.reduce_or, tl.xor_sum, tl.sort, tl.flip, tl.interleave, tl.gather, tl.histogram.

The combine function (a @jit function or a tl builtin) is generated into the region of
one `reduce` or `scan` op: it takes (acc..., x...) scalars and returns the combined
values. The order is fixed (Ops.def): reduce folds left to right along the axis; scan is
inclusive and sequential along the axis, from the end with reverse=True, where acc holds
the combination of the later elements. The GPU may split long lines into runs: the same
result for an associative combine_fn (as Triton requires), within rounding for floats.
"""

from __future__ import annotations

from .core import (
    _K,
    TENSOR_METHODS,
    _unwrap,
    bfloat16,
    builtin,
    cast,
    float32,
    int1,
    int32,
    join,
    reshape,
    tensor,
    to_tensor,
    trans,
    where,
)


def _calls_jit(fn):
    """Marks a builtin whose combine function the code generator must be able to call."""
    fn.__tilefuse_calls_jit__ = True
    return fn


def _call_combine(combine_fn, args, b, gen):
    combine_fn = _unwrap(combine_fn)
    if getattr(combine_fn, "__tilefuse_jit__", False):
        if gen is None:
            raise RuntimeError("a @jit combine_fn can only be called inside a @tilefuse.jit kernel")
        return gen.call_jit(combine_fn, args)
    if getattr(combine_fn, "__tilefuse_builtin__", False):
        return combine_fn(*args, _builder=b)
    raise TypeError(f"combine_fn must be a @tilefuse.jit function or a tl builtin, got {combine_fn!r}")


def _as_tuple(input):
    input = _unwrap(input)
    return (tuple(input), True) if isinstance(input, (tuple, list)) else ((input,), False)


def _combine(kind, inputs, axis, combine_fn, reverse, b, gen):
    """One reduce/scan op over `inputs` (tensors of one shape) with combine_fn's body."""
    op = b.create_combine(kind, [t.handle for t in inputs], axis, reverse)
    block = b.insertion_block()
    region = op.region(0)
    b.set_insertion_point_to_end(region)
    try:
        results = _call_combine(combine_fn, [tensor(a) for a in region.args], b, gen)
        results, _ = _as_tuple(results)
        name = getattr(combine_fn, "__name__", repr(combine_fn))
        if len(results) != len(inputs):
            raise TypeError(f"combine_fn '{name}' returns {len(results)} values for {len(inputs)} inputs")
        handles = []
        for i, (r, x) in enumerate(zip(results, inputs)):
            r = to_tensor(r, b, like=x)
            if r.shape or r.dtype != x.dtype:
                raise TypeError(
                    f"combine_fn '{name}' returns {r.type} as value #{i}; it must return a scalar of "
                    f"the input's dtype {x.dtype!r}"
                )
            handles.append(r.handle)
        b.combine_yield(handles)
    finally:
        b.set_insertion_point_to_end(block)
    return [tensor(r) for r in op.results]


@_calls_jit
@builtin
def reduce(input, axis, combine_fn, keep_dims=False, _builder=None, _generator=None):
    """Reduces `input` (a tensor or a tuple of tensors of one shape) along `axis` (None:
    all elements) with combine_fn(acc..., x...) -> combined values."""
    b = _builder
    inputs, is_tuple = _as_tuple(input)
    inputs = [to_tensor(x, b) for x in inputs]
    axis = _unwrap(axis)
    shape = inputs[0].shape
    if axis is None:
        inputs = [tensor(b.reshape(x.handle, [x.numel])) for x in inputs] if len(shape) != 1 else inputs
        axis_n = 0
    else:
        axis_n = int(axis)
    out = _combine(_K.Reduce, inputs, axis_n, combine_fn, False, b, _generator)
    if _unwrap(keep_dims):
        axes = range(len(shape)) if axis is None else [axis_n % len(shape)]
        for a in axes:
            out = [tensor(b.expand_dims(r.handle, a)) for r in out]
    return tuple(out) if is_tuple else out[0]


@_calls_jit
@builtin
def associative_scan(input, axis, combine_fn, reverse=False, _builder=None, _generator=None):
    """The inclusive scan of `input` (a tensor or a tuple of tensors of one shape) along
    `axis` with combine_fn(acc..., x...) -> combined values; from the end with reverse."""
    inputs, is_tuple = _as_tuple(input)
    inputs = [to_tensor(x, _builder) for x in inputs]
    axis = _unwrap(axis)
    if not isinstance(axis, int):
        raise TypeError(f"associative_scan needs an integer axis, got {axis!r}")
    out = _combine(_K.Scan, inputs, axis, combine_fn, bool(_unwrap(reverse)), _builder, _generator)
    return tuple(out) if is_tuple else out[0]


@builtin
def _sum_combine(a, b, _builder=None):
    return tensor(_builder.binary(_K.Add, a.handle, b.handle))


@builtin
def _prod_combine(a, b, _builder=None):
    return tensor(_builder.binary(_K.Mul, a.handle, b.handle))


@builtin
def _or_combine(a, b, _builder=None):
    return tensor(_builder.binary(_K.Or, a.handle, b.handle))


@builtin
def _xor_combine(a, b, _builder=None):
    return tensor(_builder.binary(_K.Xor, a.handle, b.handle))


def _int_reduce(name, combine, input, axis, keep_dims, b):
    x = to_tensor(input, b)
    if not x.dtype.is_int():
        raise TypeError(f"tl.{name} needs integers, got {x.dtype!r}")
    return reduce(x, axis, combine, keep_dims, _builder=b)


@builtin
def reduce_or(input, axis, keep_dims=False, _builder=None):
    return _int_reduce("reduce_or", _or_combine, input, axis, keep_dims, _builder)


@builtin
def xor_sum(input, axis=None, keep_dims=False, _builder=None):
    return _int_reduce("xor_sum", _xor_combine, input, axis, keep_dims, _builder)


def _scan_input(input, dtype, b, promote_ints):
    x = to_tensor(input, b)
    d = _unwrap(dtype)
    if d is not None:
        return cast(x, d, _builder=b)
    if x.dtype == bfloat16:
        return cast(x, float32, _builder=b)
    if promote_ints and x.dtype.is_int() and x.dtype.primitive_bitwidth < 32:
        return cast(x, int32, _builder=b)  # small integers sum in int32, as Triton's _pick_sum_dtype
    return x


@builtin
def cumsum(input, axis=0, reverse=False, dtype=None, _builder=None):
    x = _scan_input(input, dtype, _builder, True)
    return associative_scan(x, axis, _sum_combine, reverse, _builder=_builder)


@builtin
def cumprod(input, axis=0, reverse=False, _builder=None):
    x = _scan_input(input, None, _builder, False)
    return associative_scan(x, axis, _prod_combine, reverse, _builder=_builder)


# --- shape ops (Triton's standard library) ---


def _log2(n: int, what: str) -> int:
    if n < 1 or n & (n - 1):
        raise ValueError(f"{what} must be a power of two, got {n}")
    return n.bit_length() - 1


def _last_dim(x, dim, what):
    dim = _unwrap(dim)
    rank = len(x.shape)
    if rank == 0:
        raise ValueError(f"tl.{what} needs a tile, got a scalar")
    d = rank - 1 if dim is None else int(dim) % rank
    if d != rank - 1:
        raise ValueError(f"tl.{what} works along the last dimension ({rank - 1}) only, got dim={dim}")
    return d


def _pairs(x, j, b):
    """The flat tile x split into the pairs of elements whose flat indices differ in bit j:
    (low, high), each of shape [numel / 2^(j+1), 2^j]."""
    n = x.numel
    y = b.reshape(x.handle, [n >> (j + 1), 2, 1 << j])
    lo, hi = b.split(b.trans(y, [0, 2, 1]))
    return tensor(lo), tensor(hi)


def _unpairs(lo, hi, n, b):
    return tensor(b.reshape(b.trans(b.join(lo.handle, hi.handle), [0, 2, 1]), [n]))


def _compare_and_swap(x, j, desc_bit, descending, b):
    """Orders each pair of x (flat) along bit j ascending, or descending where the bit
    `desc_bit` of the flat index is set (or everywhere with desc_bit None and descending),
    with Triton's compare: swap when (left > right) ^ descending."""
    lo, hi = _pairs(x, j, b)
    cond = tensor(b.cmp("gt", lo.handle, hi.handle))
    if desc_bit is not None:
        rows = lo.shape[0]
        # Bit desc_bit (> j) of the flat index lies in the row index, at bit desc_bit - j - 1.
        r = tensor(b.arange(0, rows))
        bit = b.binary(
            _K.And,
            b.binary(_K.Shr, r.handle, b.const_int(desc_bit - j - 1, int32.to_ir_type())),
            b.const_int(1, int32.to_ir_type()),
        )
        mask = b.cmp("ne", b.expand_dims(bit, 1), b.const_int(0, int32.to_ir_type()))
        cond = tensor(b.binary(_K.Xor, cond.handle, mask))
    elif descending:
        cond = tensor(b.binary(_K.Xor, cond.handle, b.const_int(1, int1.to_ir_type())))
    new_lo = where(cond, hi, lo, _builder=b)
    new_hi = where(cond, lo, hi, _builder=b)
    return _unpairs(new_lo, new_hi, x.numel, b)


@builtin
def sort(x, dim=None, descending=False, _builder=None):
    """Sorts along the last dimension with Triton's bitonic network (so NaNs land where
    Triton's do: a comparison with NaN never swaps)."""
    b = _builder
    x = to_tensor(x, b)
    d = _last_dim(x, dim, "sort")
    k = _log2(x.shape[d], "the sorted dimension")
    _log2(x.numel, "the number of elements")
    y = tensor(b.reshape(x.handle, [x.numel])) if len(x.shape) != 1 else x
    desc = bool(_unwrap(descending))
    for stage in range(1, k + 1):
        for j in reversed(range(stage)):
            y = _compare_and_swap(y, j, stage if stage < k else None, desc, b)
    return reshape(y, *x.shape, _builder=b) if len(x.shape) != 1 else y


@builtin
def flip(x, dim=None, _builder=None):
    """Reverses x along `dim` (the last by default)."""
    b = _builder
    x = to_tensor(x, b)
    rank = len(x.shape)
    if rank == 0:
        raise ValueError("tl.flip needs a tile, got a scalar")
    d = rank - 1 if _unwrap(dim) is None else int(_unwrap(dim)) % rank
    n = x.shape[d]
    idx = b.binary(_K.Sub, b.const_int(n - 1, int32.to_ir_type()), b.arange(0, n))
    for a in range(rank):
        if a != d:
            idx = b.expand_dims(idx, a)
    return tensor(b.gather(x.handle, b.broadcast_to(idx, x.shape), d))


@builtin
def cat(input, other, can_reorder=False, _builder=None):
    """Triton's tl.cat of two 1-D tiles of one type. Triton may reorder the elements (it
    demands can_reorder=True); tilefuse returns them in order, input then other, one of
    the orders Triton allows."""
    if not _unwrap(can_reorder):
        raise ValueError("current implementation of `cat` always may reorder elements")
    x, y = to_tensor(input, _builder), to_tensor(other, _builder)
    if len(x.shape) != 1 or x.type != y.type:
        raise ValueError(f"tl.cat needs two 1-D tiles of one type, got {x.type} and {y.type}")
    c = join(x, y, _builder=_builder)  # [n, 2]: column 0 is input, column 1 other
    return reshape(trans(c, _builder=_builder), 2 * x.shape[0], _builder=_builder)


@builtin
def interleave(a, b, _builder=None):
    """The elements of a and b alternating along the last dimension."""
    c = join(a, b, _builder=_builder)
    if len(c.shape) == 1:
        return c
    return reshape(c, *(c.shape[:-2] + [2 * c.shape[-2]]), _builder=_builder)


@builtin
def gather(src, index, axis, _builder=None):
    """result[i] = src[i with i[axis] replaced by index[i]]; index has src's rank and its
    shape but along axis."""
    s, i = to_tensor(src, _builder), to_tensor(index, _builder)
    return tensor(_builder.gather(s.handle, i.handle, int(_unwrap(axis))))


@builtin
def histogram(input, num_bins, mask=None, _builder=None):
    """Counts (int32) of the values 0 .. num_bins - 1 in a 1-D integer tile; other
    values, and elements where mask is false, are not counted."""
    x = to_tensor(input, _builder)
    mask = _unwrap(mask)
    m = to_tensor(mask, _builder).handle if mask is not None else None
    return tensor(_builder.histogram(x.handle, int(_unwrap(num_bins)), m))


def _as_method(fn):
    def method(self, *args, _builder=None, **kwargs):
        return fn(self, *args, _builder=_builder, **kwargs)

    method.__name__ = fn.__name__
    if getattr(fn, "__tilefuse_calls_jit__", False):
        method.__tilefuse_calls_jit__ = True
    return method


# Tensor methods, as Triton's tensor has them (x.cumsum(0), x.sort(), ...).
for _fn in (reduce, associative_scan, cumsum, cumprod, sort, flip, histogram, gather, reduce_or, xor_sum):
    setattr(tensor, _fn.__name__, _as_method(_fn))
    TENSOR_METHODS.add(_fn.__name__)
