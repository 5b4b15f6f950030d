"""Triton's block pointers: tl.make_block_ptr, tl.advance, and tl.load / tl.store through
them with boundary_check and padding_option.

A block pointer is a frontend value (base, shape, strides, offsets; block_shape and order
are compile-time) that a load or store turns into a tile of pointers
base + sum_d (offsets[d] + arange(block_shape[d])) * strides[d] and, for the checked
dims, the mask 0 <= index < shape[d]. That is the representation the GPU backend is
fastest on for every block pointer Triton allows: the pointer tile reaches the same
contiguity analysis, vectorized accesses and cp.async K-loop pipelines as a kernel
written with pointers, whatever its base (often computed in the kernel, as in attention
kernels), strides (any order) and padding. A tensor descriptor instead goes to TMA only
for a kernel-argument base, a last stride of constant 1 and zero padding; kernels that
want TMA write tl.make_tensor_descriptor. Inside loops and ifs the code generator
carries the tensors of a block pointer (_flatten / _unflatten) like named tensors.
"""

from __future__ import annotations

from . import core

_b = core.builtin


class block_ptr:
    """A block of `block_shape` elements at `offsets` of a tensor of `shape` and `strides`
    (in elements) in global memory at `base`."""

    def __init__(self, base, shape, strides, offsets, block_shape, order):
        self.base, self.shape, self.strides, self.offsets = base, shape, strides, offsets
        self.block_shape, self.order = block_shape, order

    # Loops and ifs carry only the offsets (what tl.advance changes): base, shape and
    # strides stay the values defined before, so a stride of constant 1 stays visible to
    # the GPU backend's contiguity analysis inside the loop.
    def _static(self):
        return (tuple(self.block_shape), tuple(self.order), self.base, *self.shape, *self.strides)

    def _flatten(self) -> list:
        return list(self.offsets)

    def _unflatten(self, ts):
        return block_ptr(self.base, self.shape, self.strides, list(ts), self.block_shape, self.order)

    # A device function call passes all of its tensors.
    def _tensors(self) -> list:
        return [self.base, *self.shape, *self.strides, *self.offsets]

    def _with_tensors(self, ts):
        r = len(self.block_shape)
        return block_ptr(ts[0], ts[1 : 1 + r], ts[1 + r : 1 + 2 * r], ts[1 + 2 * r :], self.block_shape, self.order)

    @property
    def dtype(self):
        return self.base.dtype

    def __repr__(self):
        return f"block_ptr<{self.base.dtype!r}, block_shape={list(self.block_shape)}, order={list(self.order)}>"

    def advance(self, offsets, _builder=None):
        return advance(self, offsets, _builder=_builder)


def _ints(what, values, dt, b, rank=None) -> list:
    values = core._unwrap(values)
    if not isinstance(values, (tuple, list)):
        raise TypeError(f"make_block_ptr's {what} must be a tuple, got {values!r}")
    if rank is not None and len(values) != rank:
        raise ValueError(f"Expected {what} to have the same length as block_shape ({rank}), got {len(values)}")
    out = []
    for v in values:
        t = core.to_tensor(v, b)
        if t.shape or not t.dtype.is_int() or t.type.is_ptr:
            raise TypeError(f"make_block_ptr's {what} must be integer scalars, got {t!r}")
        out.append(t if t.dtype == dt else core.cast(t, dt, _builder=b))
    return out


@_b
def make_block_ptr(base, shape, strides, offsets, block_shape, order, _builder=None):
    """Triton's tl.make_block_ptr: shape and strides become int64, offsets int32."""
    b = _builder
    p = core.to_tensor(base, b)
    if not p.type.is_ptr or p.shape:
        raise TypeError(f"make_block_ptr's base must be a scalar pointer, got {p!r}")
    if p.dtype.element_ty == core.int1:  # as Triton: booleans are bytes in memory
        p = core.cast(p, core.pointer_type(core.int8), _builder=b)
    blk = core._shape_arg([block_shape])
    rank = len(blk)
    order = [int(core._unwrap(o)) for o in core._unwrap(order)]
    if sorted(order) != list(range(rank)):
        raise ValueError(f"Expected a permutation of (0, 1, ..., len(order)-1) in order, got {order}")
    return block_ptr(
        p,
        _ints("shape", shape, core.int64, b, rank),
        _ints("strides", strides, core.int64, b, rank),
        _ints("offsets", offsets, core.int32, b, rank),
        blk,
        order,
    )


@_b
def advance(base, offsets, _builder=None):
    """The block pointer moved by `offsets` (elements, per dim)."""
    if not isinstance(base, block_ptr):
        raise TypeError(f"tl.advance takes a block pointer (tl.make_block_ptr), got {base!r}")
    delta = _ints("offsets", offsets, core.int32, _builder, len(base.block_shape))
    offs = [core._binary_builtin(core._K.Add, o, d, _builder) for o, d in zip(base.offsets, delta)]
    return block_ptr(base.base, base.shape, base.strides, offs, base.block_shape, base.order)


def _boundary_check(boundary_check, rank) -> list[int]:
    bc = core._unwrap(boundary_check)
    if bc is None:
        return []
    dims = [int(core._unwrap(d)) for d in (bc if isinstance(bc, (tuple, list)) else [bc])]
    for d in dims:
        if not 0 <= d < rank:
            raise ValueError(f"boundary_check dim {d} is out of range for a block of rank {rank}")
    if len(set(dims)) != len(dims):
        raise ValueError(f"boundary_check has duplicate dims: {dims}")
    return sorted(dims)


def _pointers_and_mask(bp: block_ptr, checked, b):
    """The block's tile of pointers and, when dims are checked, its in-bounds mask."""
    rank = len(bp.block_shape)
    ptrs, mask = bp.base, None
    for d, size in enumerate(bp.block_shape):
        idx = core.cast(bp.offsets[d], core.int64, _builder=b)
        idx = core._binary_builtin(
            core._K.Add, idx, core.cast(core.arange(0, size, _builder=b), core.int64, _builder=b), b
        )
        for a in range(rank):
            if a != d:
                idx = core.expand_dims(idx, a, _builder=b)
        step = core._binary_builtin(core._K.Mul, idx, bp.strides[d], b)
        ptrs = core.tensor(b.binary(core._K.Add, ptrs.handle, step.handle))
        if d in checked:
            inside = core._binary_builtin(
                core._K.And,
                core.tensor(b.cmp("ge", idx.handle, core.to_tensor(0, b, like=idx).handle)),
                core.tensor(b.cmp("lt", idx.handle, bp.shape[d].handle)),
                b,
            )
            mask = inside if mask is None else core._binary_builtin(core._K.And, mask, inside, b)
    ptrs = core.broadcast_to(ptrs, *bp.block_shape, _builder=b)
    return ptrs, (None if mask is None else core.broadcast_to(mask, *bp.block_shape, _builder=b))


def load(bp: block_ptr, mask, other, boundary_check, padding_option, b, hints):
    if core._unwrap(mask) is not None or core._unwrap(other) is not None:
        raise ValueError("`mask` and `other` arguments cannot be specified for loading block pointers")
    elem = bp.dtype.element_ty
    padding = core._unwrap(padding_option) or ""
    if padding not in ("", "zero", "nan"):
        raise ValueError(f"padding_option must be 'zero' or 'nan', got {padding!r}")
    if padding == "nan" and elem.is_int():
        raise ValueError("Padding option `nan` is not supported for integer block pointers")
    ptrs, m = _pointers_and_mask(bp, _boundary_check(boundary_check, len(bp.block_shape)), b)
    if m is None:
        return core.tensor(b.load(ptrs.handle, None, None, **hints))
    fill = core.full(bp.block_shape, float("nan") if padding == "nan" else 0, elem, _builder=b)
    return core.tensor(b.load(ptrs.handle, m.handle, fill.handle, **hints))


def store(bp: block_ptr, value, mask, boundary_check, b, hints):
    if core._unwrap(mask) is not None:
        raise ValueError("`mask` and `other` arguments cannot be specified for loading block pointers")
    elem = bp.dtype.element_ty
    value = core._unwrap(value)
    v = (
        core.to_tensor(value, b)
        if isinstance(value, core.tensor)
        else core.full(bp.block_shape, value, elem, _builder=b)
    )
    if not v.shape:
        v = core.broadcast_to(v, *bp.block_shape, _builder=b)
    if v.shape != list(bp.block_shape):
        raise ValueError(f"Block shape({list(bp.block_shape)}) and value shape({v.shape}) mismatch")
    if v.dtype != elem:
        raise ValueError(f"Block element type({elem!r}) and value element type({v.dtype!r}) mismatch")
    ptrs, m = _pointers_and_mask(bp, _boundary_check(boundary_check, len(bp.block_shape)), b)
    b.store(ptrs.handle, v.handle, None if m is None else m.handle, **hints)
