"""Counter-based random numbers: Philox4x32-10 (Salmon et al., SC'11) with Triton's
streams. The same seed and offsets give Triton's bits: the seed splits into two uint32
key halves (low, high), an offset's low and high 32 bits are the first two counter words,
and the uint -> float conversions and Box-Muller transform are Triton's formulas.

Written with the tile builtins (each call below is one builder call), so both backends
run the same IR.
"""

from __future__ import annotations

from .. import _C
from .core import (
    _const,
    _unwrap,
    builtin,
    cast,
    int32,
    int64,
    log,
    maximum,
    sqrt,
    tensor,
    to_tensor,
    to_tensors,
    uint32,
    uint64,
    umulhi,
    where,
)
from .core import cos as _cos
from .core import sin as _sin

_K = _C.ir.OpKind

N_ROUNDS_DEFAULT = 10
# Philox's Weyl key increments and round multipliers, for 32- and 64-bit words.
_PHILOX = {
    32: dict(key_a=0x9E3779B9, key_b=0xBB67AE85, round_a=0xD2511F53, round_b=0xCD9E8D57),
    64: dict(
        key_a=0x9E3779B97F4A7C15, key_b=0xBB67AE8584CAA73B, round_a=0xD2E7470EE14C6C93, round_b=0xCA5A826395121157
    ),
}


def _bin(kind, a, c, b) -> tensor:
    x, y = to_tensors(a, c, b)
    return tensor(b.binary(kind, x.handle, y.handle))


@builtin
def philox_impl(c0, c1, c2, c3, k0, k1, n_rounds=N_ROUNDS_DEFAULT, _builder=None):
    """`n_rounds` Philox rounds of the counter (c0, c1, c2, c3) under the key (k0, k1),
    all uint32 (Philox4x32) or all uint64 (Philox4x64)."""
    b = _builder
    c0, c1, c2, c3, k0, k1 = (to_tensor(v, b) for v in (c0, c1, c2, c3, k0, k1))
    d = c0.dtype
    if d not in (uint32, uint64):
        raise TypeError(f"philox_impl needs uint32 or uint64 counters, got {d!r}")
    p = _PHILOX[d.primitive_bitwidth]
    ra, rb = _const(p["round_a"], d, b), _const(p["round_b"], d, b)
    ka, kb = _const(p["key_a"], d, b), _const(p["key_b"], d, b)
    for _ in range(int(_unwrap(n_rounds))):
        _c0, _c2 = c0, c2
        c0 = _bin(_K.Xor, _bin(_K.Xor, umulhi(rb, _c2, _builder=b), c1, b), k0, b)
        c2 = _bin(_K.Xor, _bin(_K.Xor, umulhi(ra, _c0, _builder=b), c3, b), k1, b)
        c1 = _bin(_K.Mul, rb, _c2, b)
        c3 = _bin(_K.Mul, ra, _c0, b)
        k0 = _bin(_K.Add, k0, ka, b)
        k1 = _bin(_K.Add, k1, kb, b)
    return c0, c1, c2, c3


@builtin
def philox(seed, c0, c1, c2, c3, n_rounds=N_ROUNDS_DEFAULT, _builder=None):
    """Philox of the counter (c0..c3) keyed by the integer `seed`: for 32-bit counters the
    key is the seed's low and high halves; 64-bit counters take the seed whole."""
    b = _builder
    s = to_tensor(seed, b)
    if not s.dtype.is_int():
        raise TypeError(f"philox's seed must be an integer, got {s.dtype!r}")
    s = cast(s, uint64, _builder=b)
    cs = [to_tensor(c, b) for c in (c0, c1, c2, c3)]
    bits = cs[0].dtype.primitive_bitwidth
    if bits == 32:
        d = uint32
        hi = cast(_bin(_K.And, _bin(_K.Shr, s, 32, b), 0xFFFFFFFF, b), uint32, _builder=b)
        lo = cast(_bin(_K.And, s, 0xFFFFFFFF, b), uint32, _builder=b)
    elif bits == 64:
        d, hi, lo = uint64, _const(0, uint64, b), s
    else:
        raise TypeError(f"philox needs 32- or 64-bit counters, got {cs[0].dtype!r}")
    cs = [cast(c, d, bitcast=True, _builder=b) for c in cs]
    return philox_impl(*cs, lo, hi, n_rounds, _builder=b)


@builtin
def randint4x(seed, offset, n_rounds=N_ROUNDS_DEFAULT, _builder=None):
    """Four blocks of random uint32 for a seed and a block of integer offsets; a 64-bit
    offset fills the first two counter words with its low and high halves."""
    b = _builder
    off = to_tensor(offset, b)
    lo = cast(off, uint32, _builder=b)
    zero = _bin(_K.Mul, lo, 0, b)
    hi = cast(_bin(_K.Shr, off, 32, b), uint32, _builder=b) if off.dtype.primitive_bitwidth > 32 else zero
    return philox(seed, lo, hi, zero, zero, n_rounds, _builder=b)


@builtin
def randint(seed, offset, n_rounds=N_ROUNDS_DEFAULT, _builder=None):
    """A block of random uint32: the first block of randint4x."""
    return randint4x(seed, offset, n_rounds, _builder=_builder)[0]


@builtin
def uint_to_uniform_float(x, _builder=None):
    """Random 32- or 64-bit integers as float32 in [0, 1): |x| (one's complement for
    negatives) times the largest scale that keeps the maximum below 1."""
    b = _builder
    x = to_tensor(x, b)
    if x.dtype.primitive_bitwidth == 32 and x.dtype.is_int():
        x, scale = cast(x, int32, bitcast=True, _builder=b), 4.6566127342e-10
    elif x.dtype.primitive_bitwidth == 64 and x.dtype.is_int():
        x, scale = cast(x, int64, bitcast=True, _builder=b), 1.0842020432385337e-19
    else:
        raise TypeError(f"uint_to_uniform_float needs 32- or 64-bit integers, got {x.dtype!r}")
    neg = tensor(b.cmp("lt", x.handle, to_tensor(0, b, like=x).handle))
    x = where(neg, _bin(_K.Sub, tensor(b.neg(x.handle)), 1, b), x, _builder=b)
    return _bin(_K.Mul, x, scale, b)


@builtin
def rand(seed, offset, n_rounds=N_ROUNDS_DEFAULT, _builder=None):
    """A block of float32 uniform in [0, 1)."""
    return uint_to_uniform_float(randint(seed, offset, n_rounds, _builder=_builder), _builder=_builder)


@builtin
def rand4x(seed, offsets, n_rounds=N_ROUNDS_DEFAULT, _builder=None):
    """Four blocks of float32 uniform in [0, 1)."""
    return tuple(
        uint_to_uniform_float(i, _builder=_builder) for i in randint4x(seed, offsets, n_rounds, _builder=_builder)
    )


@builtin
def pair_uniform_to_normal(u1, u2, _builder=None):
    """Box-Muller: two uniform blocks to two standard normal blocks."""
    b = _builder
    u1 = maximum(1.0e-7, to_tensor(u1, b), _builder=b)
    th = _bin(_K.Mul, 6.283185307179586, to_tensor(u2, b), b)
    r = sqrt(_bin(_K.Mul, -2.0, log(u1, _builder=b), b), _builder=b)
    return _bin(_K.Mul, r, _cos(th, _builder=b), b), _bin(_K.Mul, r, _sin(th, _builder=b), b)


@builtin
def randn(seed, offset, n_rounds=N_ROUNDS_DEFAULT, _builder=None):
    """A block of float32 standard normal samples."""
    i1, i2, _, _ = randint4x(seed, offset, n_rounds, _builder=_builder)
    u1 = uint_to_uniform_float(i1, _builder=_builder)
    u2 = uint_to_uniform_float(i2, _builder=_builder)
    return pair_uniform_to_normal(u1, u2, _builder=_builder)[0]


@builtin
def randn4x(seed, offset, n_rounds=N_ROUNDS_DEFAULT, _builder=None):
    """Four blocks of float32 standard normal samples."""
    u1, u2, u3, u4 = rand4x(seed, offset, n_rounds, _builder=_builder)
    return (*pair_uniform_to_normal(u1, u2, _builder=_builder), *pair_uniform_to_normal(u3, u4, _builder=_builder))
