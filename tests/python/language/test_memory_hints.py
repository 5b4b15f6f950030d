"""Triton's cache_modifier, eviction_policy and volatile on tl.load / tl.store: the same
results as without them (the interpreter ignores them), the qualifier in each ld / st of
the PTX as Triton writes it (ld.global.cg.v4.b32, ld.global.L1::evict_first.L2::cache_hint
with an L2 policy, ld.volatile.global), on vector and element-wise accesses, for sm_90a
and sm_80; bad or conflicting hints refused at the kernel's line in Triton's words."""

import re

import ml_dtypes
import numpy as np
import pytest
import tilefuse as tf
import tilefuse.language as tl

from tests.ptxas import PTXAS, assert_assembles


@tf.jit
def copy_plus_one(x_ptr, y_ptr, n, LC: tl.constexpr, SC: tl.constexpr, LE: tl.constexpr, SE: tl.constexpr,
                  VOL: tl.constexpr, BLOCK: tl.constexpr):  # fmt: skip
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=3, cache_modifier=LC, eviction_policy=LE, volatile=VOL)
    tl.store(y_ptr + offs, x + 1, mask=m, cache_modifier=SC, eviction_policy=SE)


@tf.jit
def block_copy(x_ptr, y_ptr, n, LC: tl.constexpr, SE: tl.constexpr, BLOCK: tl.constexpr):
    src = tl.make_block_ptr(x_ptr, (n,), (1,), (tl.program_id(0) * BLOCK,), (BLOCK,), (0,))
    dst = tl.make_block_ptr(y_ptr, (n,), (1,), (tl.program_id(0) * BLOCK,), (BLOCK,), (0,))
    tl.store(dst, tl.load(src, boundary_check=(0,), cache_modifier=LC) * 2, boundary_check=(0,), eviction_policy=SE)


# (load cache, store cache, load eviction, store eviction, volatile load)
HINTS = [
    (".ca", ".wb", "", "", False),
    (".cg", ".cg", "", "", False),
    (".cv", ".cs", "", "", False),
    ("", ".wt", "evict_first", "", False),
    ("", "", "evict_last", "evict_first", False),
    ("", "", "", "evict_last", True),
]
DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16, np.int8, np.int64]


def _ids(h):
    return "-".join(x.strip(".") or "_" for x in map(str, h))


def _random(dtype, n, rng):
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-100, 100, n).astype(dtype)
    return rng.standard_normal(n).astype(dtype)


@pytest.mark.parametrize("hints", HINTS, ids=_ids)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_hints_change_no_result(hints, dtype):
    rng = np.random.default_rng()
    n = 1000  # the last program's tail is masked off: its lanes read `other`, store nothing
    x, y = _random(dtype, 1024, rng), _random(dtype, 1024, rng)
    y0 = y.copy()
    lc, sc, le, se, vol = hints
    copy_plus_one[(4,)](x, y, n, LC=lc, SC=sc, LE=le, SE=se, VOL=vol, BLOCK=256)
    want = (x[:n].astype(np.float64) + 1).astype(dtype)
    np.testing.assert_array_equal(y[:n], want)
    np.testing.assert_array_equal(y[n:], y0[n:])


def test_block_pointer_hints_change_no_result():
    rng = np.random.default_rng()
    x, y = rng.standard_normal(300).astype(np.float32), np.zeros(300, np.float32)
    block_copy[(3,)](x, y, 300, LC=".cg", SE="evict_first", BLOCK=128)
    np.testing.assert_array_equal(y, x * 2)


def _accesses(ptx):
    return sorted(set(re.findall(r"\b(?:ld|st)(?:\.volatile)?\.global[\w.:]*", ptx)))


def _qualifiers(cache, evict, vol):
    if vol:
        return ".volatile.global"
    if cache:
        return f".global{cache}"
    return f".global.L1::{evict}.L2::cache_hint" if evict else ".global"


@pytest.mark.skipif(not PTXAS, reason="needs ptxas")
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("n,vector", [(1024, True), (999, False)], ids=["vector", "elementwise"])
@pytest.mark.parametrize("hints", HINTS, ids=_ids)
def test_each_access_carries_its_hint(hints, n, vector, arch, tmp_path):
    lc, sc, le, se, vol = hints
    x = np.zeros(1024, np.float16)
    k = copy_plus_one.warmup(x, x, n, LC=lc, SC=sc, LE=le, SE=se, VOL=vol, BLOCK=1024, grid=(1,), target=arch)
    ptx = k.asm["ptx"]
    # n % 16 == 0: 16-byte accesses (4 words); else one 2-byte element each.
    shape = ".v4.b32" if vector else ".b16"
    ld, st = "ld" + _qualifiers(lc, le, vol) + shape, "st" + _qualifiers(sc, se, False) + shape
    hinted = [a for a in (ld, st) if a not in ("ld.global" + shape, "st.global" + shape)]
    assert set(hinted) <= set(_accesses(ptx)), _accesses(ptx)
    policies = {f"createpolicy.fractional.L2::{e}.b64" for e in (le, se) if e}
    assert set(re.findall(r"createpolicy\.fractional\.L2::\w+\.b64", ptx)) == policies
    assert_assembles(ptx, arch, tmp_path)


@pytest.mark.skipif(not PTXAS, reason="needs ptxas")
def test_no_hint_no_qualifier_and_block_pointers_carry_theirs(tmp_path):
    x = np.zeros(1024, np.float32)
    plain = copy_plus_one.warmup(x, x, 1024, LC="", SC="", LE="", SE="", VOL=False, BLOCK=1024, grid=(1,))
    assert not re.search(r"\.(ca|cg|cv|cs|wb|wt|volatile)\b|evict_|createpolicy", plain.asm["ptx"])
    bp = block_copy.warmup(x, x, 1000, LC=".cg", SE="evict_first", BLOCK=128, grid=(8,)).asm["ptx"]
    accesses = _accesses(bp)
    assert any(a.startswith("ld.global.cg.") for a in accesses), accesses
    assert any(a.startswith("st.global.L1::evict_first.L2::cache_hint.") for a in accesses), accesses
    assert_assembles(bp, "sm_90a", tmp_path)


@tf.jit
def bad_hint(x_ptr, LC: tl.constexpr, SC: tl.constexpr, LE: tl.constexpr, VOL: tl.constexpr):
    v = tl.load(x_ptr + tl.arange(0, 16), cache_modifier=LC, eviction_policy=LE, volatile=VOL)
    tl.store(x_ptr + tl.arange(0, 16), v, cache_modifier=SC)


@pytest.mark.parametrize(
    "lc,sc,le,vol,msg",
    [
        (".cs", "", "", False, r"Cache modifier \.cs not supported \(one of \.ca, \.cg, \.cv\)"),
        ("", ".ca", "", False, r"Cache modifier \.ca not supported \(one of \.wb, \.cg, \.cs, \.wt\)"),
        ("", "", "evict_normal", False, r"Eviction policy evict_normal not supported"),
        (".cg", "", "evict_first", False, "cache_modifier .cg and eviction_policy evict_first cannot be combined"),
        (".cg", "", "", True, "a volatile load takes no cache_modifier or eviction_policy"),
    ],
)
def test_bad_hints_are_refused_at_the_kernel_line(lc, sc, le, vol, msg):
    with pytest.raises(tf.CompilationError, match=msg) as info:
        bad_hint[(1,)](np.zeros(16, np.float32), LC=lc, SC=sc, LE=le, VOL=vol)
    assert "tl.load" in str(info.value) or "tl.store" in str(info.value)
