"""Scaled activations (SPEC-moe.md §2, §7): the host side checks the arguments, allocates
the outputs, picks a tile config and launches kernels_dsl/moe/activations.py. numpy
arrays (bf16 through ml_dtypes) run on the interpreter, CUDA torch tensors on the GPU."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from kernels_dsl.moe import activations as _k
from kernels_dsl.moe.activations import ACTIVATIONS, REQUIRED, Activation, register  # noqa: F401 - the API

from .. import _C, cdiv, next_power_of_2
from ..arrays import array_arg, is_torch_tensor
from ..errors import LaunchError
from . import _arrays
from . import quant as _quant

_D = _C.ir.DType
_FLOATS = {_D.bf16: "bf16", _D.f32: "float32"}


class ActConfig(NamedTuple):
    """Tile sizes (powers of two; block_cols >= 32 for the backward) and warps of a launch.
    dprobs does not depend on them: its summation order is fixed."""

    block_rows: int
    block_cols: int
    num_warps: int = 4


def default_config(width: int) -> ActConfig:
    """16 rows by the output width rounded up to a power of two, clamped to 32..128 columns."""
    return ActConfig(16, min(128, max(_k.DS_CHUNK, next_power_of_2(width))))


def _pow2(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1 and v & (v - 1) == 0


def _check_config(fn, cfg, width, backward):
    cfg = default_config(width) if cfg is None else cfg
    if not isinstance(cfg, ActConfig):
        raise TypeError(f"{fn}: config must be a moe.ActConfig, got {type(cfg).__name__}")
    for field in ActConfig._fields:
        if not _pow2(getattr(cfg, field)):
            raise ValueError(f"{fn}: config.{field} must be a power of two, got {getattr(cfg, field)!r}")
    if backward and cfg.block_cols % _k.DS_CHUNK:
        raise ValueError(f"{fn}: config.block_cols must be a multiple of {_k.DS_CHUNK}, got {cfg.block_cols}")
    return cfg


def _activation(fn, name) -> Activation:
    if not isinstance(name, str):
        raise TypeError(f"{fn}: name must be an activation name (str), got {type(name).__name__}")
    act = ACTIVATIONS.get(name)
    if act is None:
        raise ValueError(f"{fn}: unknown activation {name!r}; moe.ACTIVATIONS has {sorted(ACTIVATIONS)}")
    return act


def _params(fn, act, given) -> list[float]:
    """The three parameter slots of the device functions, from act_params and the defaults."""
    names = [p for p, _ in act.params]
    for k in given:
        if k not in names:
            raise ValueError(f"{fn}: activation {act.name!r} has no parameter {k!r} (its parameters: {names})")
    values = {}
    for p, default in act.params:
        v = given.get(p, default)
        if v is REQUIRED:
            raise ValueError(f"{fn}: activation {act.name!r} needs the parameter {p!r}")
        if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)):
            raise TypeError(f"{fn}: parameter {p!r} must be a number, got {type(v).__name__}")
        values[p] = float(v)
    problem = act.check(values) if act.check is not None else None
    if problem:
        raise ValueError(f"{fn}: activation {act.name!r}: {problem}")
    slots = [values[p] for p in names]
    return slots + [0.0] * (_k.MAX_PARAMS - len(slots))


def _array(fn, name, v, like=None):
    """The array's dtype ('bf16' / 'float32' / other IR name); checks it is a contiguous
    numpy array or torch tensor, of the same kind and device as `like`."""
    if not isinstance(v, np.ndarray) and not is_torch_tensor(v):
        raise TypeError(f"{fn}: {name} must be a numpy array or a torch tensor, got {type(v).__name__}")
    if like is not None:
        if isinstance(v, np.ndarray) != isinstance(like, np.ndarray):
            raise TypeError(f"{fn}: {name} must be a {type(like).__name__} like h, got a {type(v).__name__}")
        if not isinstance(v, np.ndarray) and v.device != like.device:
            raise ValueError(f"{fn}: {name} is on {v.device} but h is on {like.device}")
    contiguous = v.flags.c_contiguous if isinstance(v, np.ndarray) else v.is_contiguous()
    if not contiguous:
        raise ValueError(f"{fn}: {name} must be contiguous")
    try:
        d = array_arg(name, v)[0]
    except LaunchError:
        d = None
    return _FLOATS.get(d, str(v.dtype))


def _float_array(fn, name, v, like=None):
    d = _array(fn, name, v, like)
    if d not in ("bf16", "float32"):
        raise TypeError(f"{fn}: {name} must be bf16 or float32, got {v.dtype}")
    if v.ndim != 2:
        raise ValueError(f"{fn}: {name} must be 2-D [rows, width], got shape {tuple(v.shape)}")


def _check_probs(fn, probs, rows, h):
    if _array(fn, "probs", probs, h) != "float32":
        raise TypeError(f"{fn}: probs must be float32, got {probs.dtype}")
    if tuple(probs.shape) != (rows,):
        raise ValueError(f"{fn}: probs must have shape ({rows},) (one weight per row of h), got {tuple(probs.shape)}")


def _layout(fn, act, width, interleave) -> tuple[int, int]:
    """(output width n, the kernels' K: a and b alternate in runs of K columns)."""
    if isinstance(interleave, bool) or not isinstance(interleave, (int, np.integer)):
        raise TypeError(f"{fn}: interleave must be an int (0: halves, K: blocks of K, 1: stride 1)")
    interleave = int(interleave)
    if interleave < 0:
        raise ValueError(f"{fn}: interleave must be >= 0 (0: halves, K: blocks of K, 1: stride 1), got {interleave}")
    if not act.glu:
        if interleave:
            raise ValueError(f"{fn}: interleave applies to GLU activations; {act.name!r} is unary")
        return width, 1
    if width % 2:
        raise ValueError(f"{fn}: a GLU needs an even width of h, got {width}")
    if interleave and width % (2 * interleave):
        raise ValueError(f"{fn}: width {width} of h is not a multiple of 2 * interleave = {2 * interleave}")
    n = width // 2
    return n, interleave or max(n, 1)


def _empty(like, shape):
    return np.empty(shape, like.dtype) if isinstance(like, np.ndarray) else like.new_empty(shape)


def _prepare(fn, name, h, probs, interleave, config, act_params, backward):
    act = _activation(fn, name)
    params = _params(fn, act, act_params)
    _float_array(fn, "h", h)
    rows, width = h.shape
    _check_probs(fn, probs, rows, h)
    n, k = _layout(fn, act, width, interleave)
    return act, params, rows, n, k, _check_config(fn, config, n, backward)


def scaled_act(name, h, probs, interleave=0, *, config: ActConfig | None = None, quantize=None, **act_params):
    """y [R, n] = probs[:, None] · act(h) for h [R, n1] (bf16 or float32; n1 = 2n for a
    GLU, stored as `interleave` says), in h's dtype: fp32 math, one rounding.

    quantize="mxfp8" or "fp8_block": y is quantized along its rows in the same kernel and
    returned as a moe.Quantized (e4m3 codes; MXFP8 blocks of 32, FP8-block 1 x 128), bit
    for bit moe.quantize(y, quantize) of the y above, without y's round trip through memory."""
    fn = "scaled_act"
    act, params, rows, n, k, cfg = _prepare(fn, name, h, probs, interleave, config, act_params, False)
    out = 0 if quantize is None else _quant_out(fn, quantize, n, cfg, config is None)
    if out:
        qb = _QUANT_OUT[quantize][1]
        cfg = cfg._replace(block_cols=max(cfg.block_cols, qb)) if config is None else cfg
        y = _arrays.empty(h, (rows, n), "e4m3")
        ys = _arrays.empty(h, (rows, n // qb), "e8m0" if out == 1 else "float32")
        y_arg, ys_arg = _arrays.as_int8(y), _arrays.as_int8(ys) if out == 1 else ys
    else:
        y = ys = y_arg = ys_arg = _empty(h, (rows, n))
    grid = (cdiv(rows, cfg.block_rows), cdiv(n, cfg.block_cols))
    if rows and n:
        _k.scaled_act_fwd_kernel[grid](h, probs, y_arg, ys_arg, rows, n, k, *params, **_meta(act, k, cfg), OUT=out)
    if not out:
        return y
    block = (1, _QUANT_OUT[quantize][1])
    return _quant.Quantized(y, ys, quantize, -1, (rows, n), fmt="e4m3", block=block)


# scaled_act's quantize: the kernel's OUT and the block along the rows.
_QUANT_OUT = {"mxfp8": (1, 32), "fp8_block": (2, 128)}


def _quant_out(fn, quantize, n, cfg, default):
    if not isinstance(quantize, str) or quantize not in _QUANT_OUT:
        raise ValueError(f"{fn}: quantize must be None or one of {sorted(_QUANT_OUT)}, got {quantize!r}")
    out, qb = _QUANT_OUT[quantize]
    if n % qb:
        raise ValueError(f"{fn}: quantize={quantize!r} needs the output width to be a multiple of {qb}, got {n}")
    if not default and cfg.block_cols % qb:
        got = cfg.block_cols
        raise ValueError(f"{fn}: quantize={quantize!r} needs config.block_cols a multiple of {qb}, got {got}")
    return out


def _meta(act, k, cfg):
    """The constexprs and launch options both kernels take."""
    return dict(
        ACT=act,
        BLOCK_R=cfg.block_rows,
        BLOCK_C=cfg.block_cols,
        GLU_RUN=math.gcd(k, cfg.block_cols),
        EVEN_ODD=act.glu and k == 1,
        num_warps=cfg.num_warps,
    )


def scaled_act_backward(name, h, probs, dy, interleave=0, *, config: ActConfig | None = None, **act_params):
    """(dh, dprobs) of y = scaled_act(name, h, probs, interleave): dh = dy · probs · act'(h)
    in h's dtype and layout, dprobs [R] float32 = Σ over the row of dy · act(h), summed in a
    fixed order (bitwise reproducible, independent of config)."""
    fn = "scaled_act_backward"
    act, params, rows, n, k, cfg = _prepare(fn, name, h, probs, interleave, config, act_params, True)
    _float_array(fn, "dy", dy, h)
    if tuple(dy.shape) != (rows, n):
        raise ValueError(f"{fn}: dy must have the output's shape ({rows}, {n}), got {tuple(dy.shape)}")
    dh, dprobs = _empty(h, tuple(h.shape)), _empty(probs, (rows,))
    _k.scaled_act_bwd_kernel[(cdiv(rows, cfg.block_rows),)](
        h,
        probs,
        dy,
        dh,
        dprobs,
        rows,
        n,
        k,
        *params,
        **_meta(act, k, cfg),
    )
    return dh, dprobs
