"""moe.route / dispatch / combine and their backwards on the interpreter, bitwise (and
integer-exact) against numpy references written from the docstrings, on fresh random
routings (the seed is printed): k = 1, 2, 8, experts with no tokens, every entry on one
expert, dropped entries (-1), several blocks of entries (and of the per-block scan),
the receive-side segments of expert parallelism, and bad input."""

import importlib

import ml_dtypes
import numpy as np
import pytest
from tilefuse import moe

D = importlib.import_module("tilefuse.moe.dispatch")  # moe.dispatch is its function

BF16 = ml_dtypes.bfloat16
COLS = 64  # combine_dweights' column chunk (dispatch._COLS)


@pytest.fixture(scope="module")
def rng():
    seed = np.random.SeedSequence().entropy
    print(f"seed = {seed}")
    return np.random.default_rng(seed)


def ref_route(ids, experts):
    """(counts, offsets, pos, src[:valid]): a stable sort of the valid entries by expert."""
    flat = ids.reshape(-1)
    valid = np.flatnonzero(flat >= 0)
    src = valid[np.argsort(flat[valid], kind="stable")]
    counts = np.bincount(flat[valid], minlength=experts)
    pos = np.full(flat.size, -1)
    pos[src] = np.arange(src.size)
    return counts, np.concatenate([[0], np.cumsum(counts)]), pos, src


def ref_dispatch(x, src, k, weights=None):
    rows = np.zeros((x.shape[0] * k, x.shape[1]), x.dtype)
    v = x[src // k]
    if weights is not None:
        v = (v.astype(np.float32) * weights.reshape(-1)[src][:, None]).astype(x.dtype)
    rows[: src.size] = v
    return rows


def ref_combine(rows, pos, tokens, k, weights=None):
    acc = np.zeros((tokens, rows.shape[1]), np.float32)
    pos = pos.reshape(tokens, k)
    for j in range(k):
        v = np.where((pos[:, j] >= 0)[:, None], rows[np.maximum(pos[:, j], 0)].astype(np.float32), np.float32(0))
        if weights is not None:
            v = v * np.where(pos[:, j] >= 0, weights[:, j], np.float32(0))[:, None]
        acc = acc + v
    return acc.astype(rows.dtype)


def ref_dweights(dout, rows, pos, k):
    """Σ_c dout·rows per entry: fp32 products in chunks of COLS columns, each chunk folded
    left to right in float64 and rounded once (tl.sum on the interpreter), the chunks
    added in order in fp32."""
    live = pos >= 0
    g = dout[np.arange(pos.size) // k].astype(np.float32)
    y = rows[np.maximum(pos, 0)].astype(np.float32)
    prod = np.where(live[:, None], g * y, np.float32(0))
    acc = np.zeros(pos.size, np.float32)
    for c0 in range(0, prod.shape[1], COLS):
        s = np.zeros(pos.size, np.float64)
        for c in range(c0, min(c0 + COLS, prod.shape[1])):
            s = s + prod[:, c].astype(np.float64)
        acc = acc + s.astype(np.float32)
    return acc


def routing(rng, case, tokens, k, experts):
    if case == "random":
        # top-k without repeats per token, as a router gives
        return np.argsort(rng.random((tokens, experts)), axis=1)[:, :k].astype(np.int32)
    if case == "empty_experts":  # only the odd experts get entries
        return (2 * rng.integers(0, experts // 2, (tokens, k)) + 1).astype(np.int32)
    if case == "one_expert":
        return np.full((tokens, k), experts - 1, np.int32)
    ids = rng.integers(0, experts, (tokens, k)).astype(np.int32)  # "dropped"
    ids[rng.random((tokens, k)) < 0.3] = -1
    return ids


def assert_same(a, b, what):
    assert a.dtype == b.dtype and a.shape == b.shape, f"{what}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}"
    assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), f"{what}: not bitwise equal"


# (tokens, k, experts): one block; several blocks; a scan of several steps (E = 64:
# blocks of 128 entries, 32 blocks per step: 38 blocks).
SHAPES = [(37, 1, 5), (53, 2, 8), (100, 8, 16), (600, 8, 64)]
CASES = ["random", "empty_experts", "one_expert", "dropped"]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("tokens,k,experts", SHAPES)
def test_route(rng, case, tokens, k, experts):
    ids = routing(rng, case, tokens, k, experts)
    r = moe.route(ids, experts)
    counts, offsets, pos, src = ref_route(ids, experts)
    assert np.array_equal(r.counts, counts) and r.counts.dtype == np.int32
    assert np.array_equal(r.offsets, offsets)
    assert np.array_equal(r.pos, pos)
    assert np.array_equal(r.src[: src.size], src)
    if case == "empty_experts":
        assert not r.counts[::2].any()


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("tokens,k,experts", SHAPES[:3])
@pytest.mark.parametrize("dtype", [BF16, np.float32])
def test_dispatch_combine(rng, case, tokens, k, experts, dtype):
    d = 70  # two column tiles, the second partial
    ids = routing(rng, case, tokens, k, experts)
    x = rng.standard_normal((tokens, d)).astype(dtype)
    w = rng.random((tokens, k)).astype(np.float32)
    r = moe.route(ids, experts)
    _, _, pos, src = ref_route(ids, experts)
    rows = moe.dispatch(x, r)
    assert_same(rows, ref_dispatch(x, src, k), "dispatch")
    assert_same(moe.dispatch(x, r, w), ref_dispatch(x, src, k, w), "dispatch weighted")
    y = rng.standard_normal(rows.shape).astype(dtype)  # the experts' outputs
    assert_same(moe.combine(y, r), ref_combine(y, pos, tokens, k), "combine")
    assert_same(moe.combine(y, r, w), ref_combine(y, pos, tokens, k, w), "combine weighted")
    dout = rng.standard_normal((tokens, d)).astype(dtype)
    drows, dw = moe.combine_backward(dout, y, r, w)
    assert_same(drows, ref_dispatch(dout, src, k, w), "combine_backward drows")
    assert_same(dw, ref_dweights(dout, y, pos, k).reshape(tokens, k), "combine_backward dweights")
    drows_plain, none = moe.combine_backward(dout, y, r)
    assert none is None
    assert_same(drows_plain, ref_dispatch(dout, src, k), "combine_backward unweighted")
    assert_same(moe.dispatch_backward(y, r), ref_combine(y, pos, tokens, k), "dispatch_backward")


@pytest.mark.parametrize("case", ["random", "dropped"])
def test_dispatch_weights(rng, case):
    tokens, k, experts = 45, 2, 6
    ids = routing(rng, case, tokens, k, experts)
    w = rng.standard_normal((tokens, k)).astype(np.float32)
    r = moe.route(ids, experts)
    _, _, pos, src = ref_route(ids, experts)
    expect = np.zeros(tokens * k, np.float32)
    expect[: src.size] = w.reshape(-1)[src]
    assert_same(moe.dispatch_weights(w, r), expect, "dispatch_weights")
    g = rng.standard_normal(tokens * k).astype(np.float32)
    back = np.where(pos >= 0, g[np.maximum(pos, 0)], np.float32(0)).reshape(tokens, k)
    assert_same(moe.dispatch_weights_backward(g, r), back, "dispatch_weights_backward")


def test_combine_is_the_adjoint_of_dispatch(rng):
    """<dispatch(x), y> = <x, dispatch_backward(y)> in float64 on fp32 data (a property
    independent of the references above)."""
    tokens, k, experts, d = 40, 8, 16, 33
    ids = routing(rng, "random", tokens, k, experts)
    r = moe.route(ids, experts)
    x = rng.standard_normal((tokens, d)).astype(np.float32)
    y = rng.standard_normal((tokens * k, d)).astype(np.float32)
    lhs = np.sum(moe.dispatch(x, r).astype(np.float64) * y)
    rhs = np.sum(x.astype(np.float64) * moe.dispatch_backward(y, r))
    # dispatch_backward rounds each sum of k = 8 fp32 terms: relative 8·2^-24 per element
    assert abs(lhs - rhs) <= 8 * 2.0**-24 * np.sum(np.abs(x) @ np.abs(y.reshape(tokens, k, d)).sum(1).T)


@pytest.mark.parametrize("world,local", [(1, 5), (2, 3), (4, 2)])
def test_segments(rng, world, local):
    runs = rng.integers(0, 6, world * local).astype(np.int32)
    runs[rng.random(runs.size) < 0.3] = 0
    rows = int(runs.sum()) + 3  # 3 rows past the runs
    expect = np.concatenate([np.repeat(np.arange(runs.size) % local, runs), [-1, -1, -1]]).astype(np.int32)
    assert np.array_equal(D.segments(runs, rows, local), expect)


def test_bad_input():
    ids = np.zeros((4, 2), np.int32)
    ids[2, 1] = 7
    with pytest.raises(ValueError, match=r"ids\[2, 1\] = 7 is not an expert in \[0, 4\)"):
        moe.route(ids, 4)
    with pytest.raises(TypeError, match="ids must be int32, got float32"):
        moe.route(np.zeros((4, 2), np.float32), 4)
    with pytest.raises(ValueError, match="ids must be 2-D"):
        moe.route(np.zeros(4, np.int32), 4)
    with pytest.raises(ValueError, match="num_experts must be a positive int"):
        moe.route(np.zeros((4, 2), np.int32), 0)
    r = moe.route(np.zeros((4, 2), np.int32), 4)
    with pytest.raises(ValueError, match=r"moe.dispatch: expected 4 rows, got shape \(5, 8\)"):
        moe.dispatch(np.zeros((5, 8), BF16), r)
    with pytest.raises(ValueError, match=r"weights must have the routing's shape \(4, 2\)"):
        moe.combine(np.zeros((8, 8), BF16), r, np.zeros((4, 3), np.float32))
    with pytest.raises(TypeError, match="rows must be bfloat16 or float32, got int32"):
        moe.combine(np.zeros((8, 8), np.int32), r)
