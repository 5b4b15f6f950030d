"""Kernels of scans, reductions with a combine_fn, sort, flip, interleave, gather,
histogram and propagate_nan, shared by the interpreter tests
(tests/python/language/test_combine.py) and the GPU tests (tests/gpu/test_combine_gpu.py)."""

import tilefuse as tf
import tilefuse.language as tl


@tf.jit
def add_fn(a, b):
    return a + b


@tf.jit
def recurrence_fn(a1, b1, a2, b2):
    # x -> a*x + b composed: first (a1, b1), then (a2, b2). Associative, not commutative.
    return a1 * a2, b1 * a2 + b2


@tf.jit
def argmax_fn(v1, i1, v2, i2):
    # Triton's tie-break-left argmax, as a user writes it.
    gt = v1 > v2 or (v1 == v2 and i1 < i2)
    return tl.where(gt, v1, v2), tl.where(gt, i1, i2)


@tf.jit
def last_nonzero_fn(a, b):
    # Associative, not commutative: a left fold keeps the last non-zero element.
    return tl.where(b != 0, b, a)


@tf.jit
def k_scan(x_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr, AXIS: tl.constexpr, OP: tl.constexpr, REV: tl.constexpr):
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    x = tl.load(x_ptr + offs)
    if OP == "cumsum":
        r = tl.cumsum(x, AXIS, reverse=REV)
    elif OP == "cumprod":
        r = tl.cumprod(x, axis=AXIS, reverse=REV)
    elif OP == "method":
        r = x.cumsum(AXIS, reverse=REV)
    else:
        r = tl.associative_scan(x, AXIS, add_fn, reverse=REV)
    tl.store(out_ptr + offs, r)


@tf.jit
def k_scan1d(x_ptr, out_ptr, N: tl.constexpr, REV: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(out_ptr + offs, tl.cumsum(tl.load(x_ptr + offs), 0, reverse=REV))


@tf.jit
def k_recurrence(a_ptr, b_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr, AXIS: tl.constexpr, REV: tl.constexpr):
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    a = tl.load(a_ptr + offs)
    b = tl.load(b_ptr + offs)
    _, x = tl.associative_scan((a, b), AXIS, recurrence_fn, reverse=REV)
    tl.store(out_ptr + offs, x)


@tf.jit
def k_argmax(x_ptr, v_ptr, i_ptr, M: tl.constexpr, N: tl.constexpr, AXIS: tl.constexpr, KEEP: tl.constexpr):
    rm = tl.arange(0, M)[:, None]
    rn = tl.arange(0, N)[None, :]
    x = tl.load(x_ptr + rm * N + rn)
    idx = tl.broadcast_to(rn if AXIS == 1 else rm, M, N)
    v, i = tl.reduce((x, idx), AXIS, argmax_fn, keep_dims=KEEP)
    if AXIS == 1:
        out = tl.arange(0, M)[:, None] if KEEP else tl.arange(0, M)
    else:
        out = tl.arange(0, N)[None, :] if KEEP else tl.arange(0, N)
    tl.store(v_ptr + out, v)
    tl.store(i_ptr + out, i)


@tf.jit
def k_reduce_all(x_ptr, out_ptr, last_ptr, max_ptr, M: tl.constexpr, N: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :])
    tl.store(out_ptr, tl.reduce(x, None, add_fn))
    tl.store(last_ptr + tl.arange(0, M), x.reduce(1, last_nonzero_fn))
    m = tl.reduce(x, None, tl.maximum, keep_dims=True)
    tl.static_assert(len(m.shape) == 2)
    tl.store(max_ptr + tl.zeros((1, 1), tl.int32), m)


@tf.jit
def k_bit_reduce(x_ptr, or_ptr, xor_ptr, all_ptr, M: tl.constexpr, N: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :])
    tl.store(or_ptr + tl.arange(0, M), tl.reduce_or(x, 1))
    tl.store(xor_ptr + tl.arange(0, N), x.xor_sum(0))
    tl.store(all_ptr, tl.xor_sum(x))


@tf.jit
def k_sort(x_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr, DESC: tl.constexpr):
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    tl.store(out_ptr + offs, tl.sort(tl.load(x_ptr + offs), descending=DESC))


@tf.jit
def k_flip(x_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr, DIM: tl.constexpr):
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    tl.store(out_ptr + offs, tl.flip(tl.load(x_ptr + offs), DIM))


@tf.jit
def k_interleave(a_ptr, b_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr):
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    c = tl.interleave(tl.load(a_ptr + offs), tl.load(b_ptr + offs))
    tl.store(out_ptr + tl.arange(0, M)[:, None] * (2 * N) + tl.arange(0, 2 * N)[None, :], c)


@tf.jit
def k_gather(
    src_ptr, idx_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr, IM: tl.constexpr, IN: tl.constexpr, AXIS: tl.constexpr
):
    src = tl.load(src_ptr + tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :])
    ioffs = tl.arange(0, IM)[:, None] * IN + tl.arange(0, IN)[None, :]
    index = tl.load(idx_ptr + ioffs)
    g = tl.gather(src, index, AXIS) if AXIS == 0 else src.gather(index, AXIS)  # the method form too
    tl.store(out_ptr + ioffs, g)


@tf.jit
def k_histogram(x_ptr, out_ptr, n, N: tl.constexpr, BINS: tl.constexpr, MASKED: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    if MASKED:
        h = tl.histogram(x, BINS, mask=offs < n)
    else:
        h = tl.histogram(x, BINS)
    tl.store(out_ptr + tl.arange(0, BINS), h)


@tf.jit
def k_minmax_nan(x_ptr, y_ptr, out_ptr, N: tl.constexpr, PROP: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    tl.store(out_ptr + offs, tl.minimum(x, y, propagate_nan=PROP))
    tl.store(out_ptr + N + offs, tl.maximum(x, y, propagate_nan=PROP))
    tl.store(out_ptr + 2 * N + offs, tl.clamp(x, -0.5, 0.5, propagate_nan=PROP))
