"""The launch API and specialization of @tilefuse.jit: grids, constexpr parameters,
the specialization cache, argument types and hints in the IR, compile without launch,
the IR text of each stage, backend selection, device functions and the pass registry."""

import inspect
import re

import ml_dtypes
import numpy as np
import pytest
import tilefuse as tf
import tilefuse.language as tl

Module = tf._C.ir.Module


@pytest.fixture
def rng():
    return np.random.default_rng()


def _signature(asm_text: str, name: str) -> str:
    """The `func @name(...)` header line of a function in IR text."""
    lines = [ln for ln in asm_text.splitlines() if ln.startswith(f"func @{name}(")]
    assert len(lines) == 1, asm_text
    return lines[0]


def _aligned(n: int, dtype, misalign_bytes: int = 0) -> np.ndarray:
    """An array of n elements whose data starts `misalign_bytes` past a 16-byte boundary."""
    itemsize = np.dtype(dtype).itemsize
    raw = np.empty(n * itemsize + 32 + misalign_bytes, np.uint8)
    start = (-raw.ctypes.data) % 16 + misalign_bytes
    a = raw[start : start + n * itemsize].view(dtype)
    assert a.ctypes.data % 16 == misalign_bytes % 16
    return a


@tf.jit
def scale_add(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * alpha + y, mask=mask)


def _scale_add_ref(x, y, alpha):
    return (x.astype(np.float64) * np.float32(alpha) + y).astype(x.dtype)


def _inputs(rng, n, dtype=np.float32):
    x = rng.standard_normal(n).astype(dtype)
    y = rng.standard_normal(n).astype(dtype)
    return x, y, np.full(n, np.nan, dtype), float(rng.uniform(0.5, 2.0))


# --- grids ---


@pytest.mark.parametrize("form", ["tuple", "int", "list", "numpy_int", "callable"])
def test_grid_forms(rng, form):
    n, block = 203, 32
    x, y, out, alpha = _inputs(rng, n)
    programs = tf.cdiv(n, block)
    grid = {
        "tuple": (programs,),
        "int": programs,
        "list": [programs],
        "numpy_int": (np.int64(programs),),
        "callable": lambda meta: (tf.cdiv(meta["n"], meta["BLOCK"]),),
    }[form]
    scale_add[grid](x, y, out, n, alpha, BLOCK=block)
    np.testing.assert_allclose(out, _scale_add_ref(x, y, alpha), rtol=1e-6, atol=1e-6)


def test_callable_grid_sees_every_argument_and_launch_option(rng):
    n = 100
    x, y, out, alpha = _inputs(rng, n)
    seen = {}

    def grid(meta):
        seen.update(meta)
        return (tf.cdiv(n, meta["BLOCK"]),)

    scale_add[grid](x, y, out, n, alpha, BLOCK=64, num_warps=8)
    assert seen["BLOCK"] == 64 and seen["n"] == n and seen["alpha"] == alpha and seen["num_warps"] == 8
    assert seen["x_ptr"] is x and "num_stages" in seen
    np.testing.assert_allclose(out, _scale_add_ref(x, y, alpha), rtol=1e-6, atol=1e-6)


@tf.jit
def grid_ids(out_ptr):
    pid0, pid1, pid2 = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    n0, n1, n2 = tl.num_programs(0), tl.num_programs(1), tl.num_programs(2)
    flat = (pid2 * n1 + pid1) * n0 + pid0
    tl.store(out_ptr + flat, pid0 * 10000 + pid1 * 100 + pid2)
    if flat == 0:
        tl.store(out_ptr + n0 * n1 * n2, n0 * 10000 + n1 * 100 + n2)


@pytest.mark.parametrize("grid", [(3,), (3, 2), (2, 3, 4)])
def test_multidimensional_grid(grid):
    full = tuple(grid) + (1,) * (3 - len(grid))
    out = np.full(int(np.prod(full)) + 1, -1, np.int32)
    grid_ids[grid](out)
    assert out[-1] == full[0] * 10000 + full[1] * 100 + full[2]
    out = out[:-1]
    p0, p1, p2 = np.meshgrid(*[np.arange(g) for g in full], indexing="ij")
    want = np.zeros(full, np.int32)
    want[...] = p0 * 10000 + p1 * 100 + p2
    np.testing.assert_array_equal(out.reshape(full[::-1]), want.transpose(2, 1, 0))


def test_empty_grid_runs_nothing(rng):
    x, y, out, alpha = _inputs(rng, 16)
    scale_add[(0,)](x, y, out, 16, alpha, BLOCK=16)
    assert np.isnan(out).all()


# --- constexpr parameters ---


@tf.jit
def fill_string_annotation(out_ptr, value, BLOCK: "tl.constexpr"):  # noqa: F821
    tl.store(out_ptr + tl.arange(0, BLOCK), tl.full((BLOCK,), value, tl.float32))


@tf.jit
def fill_annotation(out_ptr, value, BLOCK: tl.constexpr):
    tl.store(out_ptr + tl.arange(0, BLOCK), tl.full((BLOCK,), value, tl.float32))


@pytest.mark.parametrize("kernel", [fill_annotation, fill_string_annotation], ids=["annotation", "string"])
def test_constexpr_parameters(rng, kernel):
    assert kernel.constexprs == {"BLOCK"}
    before = len(kernel.cache)
    for block in (16, 64):
        value = float(rng.standard_normal())
        out = np.full(block, np.nan, np.float32)
        k = kernel[(1,)](out, value, BLOCK=block)
        np.testing.assert_array_equal(out, np.float32(value))
        assert "BLOCK" not in _signature(k.asm["tile"], kernel.__name__)
        assert f"tile<{block}xf32>" in k.asm["tile"]
    assert len(kernel.cache) == before + 2  # one specialization per constexpr value


def test_constexpr_passed_positionally(rng):
    out = np.full(32, np.nan, np.float32)
    value = float(rng.standard_normal())
    fill_annotation[(1,)](out, value, 32)
    np.testing.assert_array_equal(out, np.float32(value))


# --- the specialization cache ---


def test_cache_one_entry_per_specialization(rng):
    @tf.jit
    def k(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * alpha + tl.load(y_ptr + offs, mask=mask), mask=mask)

    assert len(k.cache) == 0
    compiled = []
    for n in (50, 77, 123):  # same dtypes, other sizes and data: one entry
        x, y, out, alpha = _inputs(rng, n)
        compiled.append(k[(tf.cdiv(n, 32),)](x, y, out, n, alpha, BLOCK=32))
        np.testing.assert_allclose(out, _scale_add_ref(x, y, alpha), rtol=1e-6, atol=1e-6)
    assert len(k.cache) == 1
    assert compiled[0] is compiled[1] is compiled[2]

    x, y, out, alpha = _inputs(rng, 50, np.float16)  # another dtype: a new entry
    k[(2,)](x, y, out, 50, alpha, BLOCK=32)
    np.testing.assert_allclose(out, _scale_add_ref(x, y, alpha), rtol=2e-3, atol=2e-3)
    assert len(k.cache) == 2
    assert "ptr<f16>" in _signature(list(k.cache.values())[-1].asm["tile"], "k")

    x, y, out, alpha = _inputs(rng, 64)  # n divisible by 16: another entry (hinted)
    k[(2,)](x, y, out, 64, alpha, BLOCK=32)
    assert len(k.cache) == 3
    x, y, out, alpha = _inputs(rng, 64)
    k[(1,)](x, y, out, 64, alpha, BLOCK=64)  # another constexpr value
    assert len(k.cache) == 4
    k[(1,)](x, y, out, 64, alpha, BLOCK=64)
    assert len(k.cache) == 4


@tf.jit
def strided_copy(x_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs * stride, mask=mask), mask=mask)


def test_integer_one_is_specialized_as_constexpr(rng):
    n = 45
    x = rng.standard_normal(n).astype(np.float32)
    out = np.full(n, np.nan, np.float32)
    k = strided_copy[(tf.cdiv(n, 16),)](x, out, n, 1, BLOCK=16)
    np.testing.assert_array_equal(out, x)
    sig = _signature(k.asm["tile"], "strided_copy")
    assert "%stride" not in sig and "%n: i32" in sig
    assert [name for name, _ in k.signature] == ["x_ptr", "out_ptr", "n"]

    x = rng.standard_normal(3 * n).astype(np.float32)
    k3 = strided_copy[(tf.cdiv(n, 16),)](x, out, n, 3, BLOCK=16)
    np.testing.assert_array_equal(out, x[::3])
    assert "%stride: i32" in _signature(k3.asm["tile"], "strided_copy")
    assert k3 is not k


def test_do_not_specialize_keeps_one_and_multiples_of_16_as_arguments(rng):
    @tf.jit(do_not_specialize=("stride", "n"))
    def copy_ns(x_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs * stride, mask=mask), mask=mask)

    for n, stride in ((32, 1), (48, 2), (33, 5)):
        x = rng.standard_normal(n * stride).astype(np.float32)
        out = np.full(n, np.nan, np.float32)
        k = copy_ns[(tf.cdiv(n, 16),)](x, out, n, stride, BLOCK=16)
        np.testing.assert_array_equal(out, x[::stride])
        sig = _signature(k.asm["tile"], "copy_ns")
        assert "%stride: i32" in sig and "%n: i32" in sig
        assert "aligned16 = [0, 1]" in sig  # only the pointers are hinted
    assert len(copy_ns.cache) == 1


def test_alignment_and_divisibility_hints(rng):
    n = 64
    x = _aligned(n, np.float32)
    x[:] = rng.standard_normal(n)
    out = _aligned(n, np.float32, misalign_bytes=4)
    k = strided_copy[(2,)](x, out, 32, 2, BLOCK=16)  # 32 % 16 == 0, stride 2 is not
    np.testing.assert_array_equal(out[:32], x[::2])
    assert "aligned16 = [0, 2]" in _signature(k.asm["tile"], "strided_copy")

    out2 = _aligned(n, np.float32)
    k2 = strided_copy[(1,)](x, out2, 2, 32, BLOCK=16)  # both pointers aligned, stride % 16 == 0
    assert "aligned16 = [0, 1, 3]" in _signature(k2.asm["tile"], "strided_copy")

    xm = _aligned(n, np.float32, misalign_bytes=8)
    k3 = strided_copy[(2,)](xm, out, 20, 3, BLOCK=16)
    assert "aligned16" not in _signature(k3.asm["tile"], "strided_copy")
    assert len({id(c) for c in (k, k2, k3)}) == 3


@tf.jit
def typed_args(out_ptr, a, b, c, flag):
    if flag:
        tl.store(out_ptr, a.to(tl.float32) + c)
    else:
        tl.store(out_ptr, b.to(tl.float32) - c)


def test_argument_types_int_i64_float_bool(rng):
    out = np.full(1, np.nan, np.float64)
    c = float(rng.uniform(-4.0, 4.0))
    big = int(rng.integers(2**33, 2**40))
    k = typed_args[(1,)](out, 7, big, c, True)
    sig = _signature(k.asm["tile"], "typed_args")
    assert "%a: i32" in sig and "%b: i64" in sig and "%c: f32" in sig and "%flag: i1" in sig, sig
    assert "ptr<f64>" in sig
    np.testing.assert_allclose(out[0], 7 + np.float32(c), rtol=1e-6)

    typed_args[(1,)](out, 7, big, c, False)
    np.testing.assert_allclose(out[0], np.float32(big) - np.float32(c), rtol=1e-6)
    assert len(typed_args.cache) == 1  # bool values share one specialization

    k_neg = typed_args[(1,)](out, -(2**31) - 5, -(2**35), c, True)
    sig = _signature(k_neg.asm["tile"], "typed_args")
    assert "%a: i64" in sig and "%b: i64" in sig
    np.testing.assert_allclose(out[0], np.float32(-(2**31) - 5) + np.float32(c), rtol=1e-6)

    with pytest.raises(tf.LaunchError, match="64 bits"):
        typed_args[(1,)](out, 2**64, 3, c, True)


def test_bfloat16_and_fp8_arrays_are_typed_pointers(rng):
    @tf.jit
    def convert(x_ptr, out_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs).to(tl.float32))

    for dt, name in (
        (ml_dtypes.bfloat16, "bf16"),
        (ml_dtypes.float8_e4m3fn, "f8e4m3"),
        (ml_dtypes.float8_e5m2, "f8e5m2"),
    ):
        x = rng.standard_normal(32).astype(dt)
        out = np.full(32, np.nan, np.float32)
        k = convert[(1,)](x, out, BLOCK=32)
        assert f"%x_ptr: ptr<{name}>" in _signature(k.asm["tile"], "convert")
        np.testing.assert_array_equal(out, x.astype(np.float32))


# --- compile without launching; IR text ---


def test_compile_without_launch(rng):
    @tf.jit
    def k(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * alpha + tl.load(y_ptr + offs, mask=mask), mask=mask)

    x, y, out, alpha = _inputs(rng, 70)
    compiled = k.compile(x, y, out, 70, alpha, BLOCK=32, num_warps=8)
    assert isinstance(compiled, tf.CompiledKernel)
    assert np.isnan(out).all()
    assert len(k.cache) == 1
    assert compiled.name == "k"
    assert compiled.signature == [
        ("x_ptr", "ptr<f32>"),
        ("y_ptr", "ptr<f32>"),
        ("out_ptr", "ptr<f32>"),
        ("n", "i32"),
        ("alpha", "f32"),
    ]
    assert set(compiled.asm) >= {"tile", "tile_raw"}
    launched = k[(3,)](x, y, out, 70, alpha, BLOCK=32)
    assert launched is compiled
    np.testing.assert_allclose(out, _scale_add_ref(x, y, alpha), rtol=1e-6, atol=1e-6)


@tf.jit
def rich_kernel(x_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n, BLOCK):
        mask = start + offs < n
        acc += tl.load(x_ptr + start + offs, mask=mask, other=0.0) * scale
    total = tl.sum(acc, axis=0)
    if pid == 0:
        res = total
    else:
        res = -total
    i = 0
    while i < 3:
        res = res * 0.5
        i += 1
    tl.store(out_ptr + pid, res)


def test_asm_texts_round_trip_through_the_parser(rng):
    n = 75
    x = rng.standard_normal(n).astype(np.float32)
    out = np.full(2, np.nan, np.float32)
    k = rich_kernel[(2,)](x, out, n, 0.75, BLOCK=16)
    ref = x.astype(np.float64).sum() * 0.75 / 8
    np.testing.assert_allclose(out, [ref, -ref], rtol=1e-5, atol=1e-5)
    for stage in ("tile_raw", "tile"):
        text = k.asm[stage]
        assert isinstance(text, str) and text.startswith("func @rich_kernel(")
        for keyword in ("for ", "if ", "while "):
            assert keyword in text, (stage, keyword)
        parsed = Module.parse(text)
        parsed.verify()
        assert parsed.to_text() == text
        assert str(Module.parse(parsed.to_text())) == str(parsed)
    assert k.asm["tile"] != k.asm["tile_raw"]  # the pipeline did something
    assert k.asm["tile"] == k.module.to_text()


# --- backend selection ---


def test_numpy_arguments_always_use_the_interpreter(monkeypatch):
    arrays = [np.zeros(4, np.float32), 3]
    for env in ("", "interp", "cuda"):
        monkeypatch.setenv("TILEFUSE_BACKEND", env)
        assert tf.select_backend(arrays) == "interp"


def test_backend_environment_variable(monkeypatch):
    monkeypatch.setattr(tf.jit_module, "_device_count", lambda: 1)
    monkeypatch.setenv("TILEFUSE_BACKEND", "interp")
    assert tf.select_backend([3, 2.5]) == "interp"
    monkeypatch.setenv("TILEFUSE_BACKEND", "cuda")
    assert tf.select_backend([3, 2.5]) == "cuda"
    monkeypatch.setenv("TILEFUSE_BACKEND", "bogus")
    with pytest.raises(tf.LaunchError, match="bogus"):
        tf.select_backend([3])
    monkeypatch.setattr(tf.jit_module, "_device_count", lambda: 0)
    monkeypatch.setenv("TILEFUSE_BACKEND", "cuda")
    with pytest.raises(tf.LaunchError, match="no GPU"):
        tf.select_backend([3, 2.5])


def test_default_backend_follows_the_gpu(monkeypatch):
    monkeypatch.delenv("TILEFUSE_BACKEND", raising=False)
    monkeypatch.setattr(tf.jit_module, "_device_count", lambda: 0)
    assert tf.select_backend([3, 2.5]) == "interp"
    monkeypatch.setattr(tf.jit_module, "_device_count", lambda: 2)
    assert tf.select_backend([3, 2.5]) == "cuda"
    assert tf.select_backend([np.zeros(2, np.float32)]) == "interp"


def test_default_backend_on_this_machine(monkeypatch):
    monkeypatch.delenv("TILEFUSE_BACKEND", raising=False)
    want = "cuda" if tf._C.runtime.device_count() > 0 else "interp"
    assert tf.select_backend([1]) == want


# --- device functions ---


@tf.jit
def poly(x, a, b):
    return x * a + b


@tf.jit(noinline=True)
def poly_noinline(x, a, b):
    return x * a + b


@tf.jit
def two_results(x):
    return tl.maximum(x, 0.0), tl.minimum(x, 0.0)


@tf.jit
def uses_helpers(x_ptr, out_ptr, pos_ptr, neg_ptr, BLOCK: tl.constexpr, NOINLINE: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    if NOINLINE:
        y = poly_noinline(x, 3.0, 0.5)
        y = poly_noinline(y, 3.0, 0.5)
    else:
        y = poly(x, 3.0, 0.5)
        y = poly(y, 3.0, 0.5)
    pos, neg = two_results(x)
    tl.store(out_ptr + offs, y)
    tl.store(pos_ptr + offs, pos)
    tl.store(neg_ptr + offs, neg)


def _run_uses_helpers(rng, noinline):
    x = rng.standard_normal(32).astype(np.float32)
    out, pos, neg = (np.full(32, np.nan, np.float32) for _ in range(3))
    k = uses_helpers[(1,)](x, out, pos, neg, BLOCK=32, NOINLINE=noinline)
    ref = (x.astype(np.float64) * 3.0 + 0.5) * 3.0 + 0.5
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(pos, np.maximum(x, 0))
    np.testing.assert_array_equal(neg, np.minimum(x, 0))
    return k


def test_device_functions_are_inlined(rng):
    k = _run_uses_helpers(rng, False)
    assert re.search(r"call @poly__\w+", k.asm["tile_raw"])
    assert re.search(r"call @two_results__\w+", k.asm["tile_raw"])
    # Two calls with the same argument types and constants share one function.
    assert len(re.findall(r"^func @poly__", k.asm["tile_raw"], re.M)) == 1
    assert "call" not in k.asm["tile"]
    assert re.findall(r"^func @(\w+)", k.asm["tile"], re.M) == ["uses_helpers"]


def test_noinline_device_function_stays_a_call(rng):
    k = _run_uses_helpers(rng, True)
    tile = k.asm["tile"]
    assert len(re.findall(r"call @poly_noinline__\w+", tile)) == 2
    assert "noinline = true" in tile
    assert "call @two_results" not in tile
    assert sorted(re.findall(r"^func @([a-z_]+)__", tile, re.M)) == ["poly_noinline"]
    assert Module.parse(tile).to_text() == tile


@tf.jit
def scaled(x, FACTOR: tl.constexpr):
    return x * FACTOR


@tf.jit
def uses_constexpr_helper(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, scaled(x, 2.0) + scaled(x, 3.0) + scaled(x, FACTOR=2.0))


def test_device_function_constexpr_arguments_specialize(rng):
    x = rng.standard_normal(16).astype(np.float32)
    out = np.full(16, np.nan, np.float32)
    k = uses_constexpr_helper[(1,)](x, out, BLOCK=16)
    np.testing.assert_allclose(out, x.astype(np.float64) * 7.0, rtol=1e-6, atol=1e-6)
    assert len(re.findall(r"^func @scaled__", k.asm["tile_raw"], re.M)) == 2


@tf.jit
def recurse(x, depth):
    return recurse(x, depth) + 1.0


@tf.jit
def calls_recursive(x_ptr):
    tl.store(x_ptr, recurse(tl.load(x_ptr), 3))


@tf.jit
def ping(x):
    return pong(x)


@tf.jit
def pong(x):
    return ping(x)


@tf.jit
def calls_mutual(x_ptr):
    tl.store(x_ptr, ping(tl.load(x_ptr)))


@pytest.mark.parametrize(
    "kernel,callee,site", [(calls_recursive, "recurse", recurse), (calls_mutual, "ping", pong)], ids=["self", "mutual"]
)
def test_recursion_is_a_compile_error(kernel, callee, site):
    x = np.random.default_rng().standard_normal(1).astype(np.float32)
    with pytest.raises(tf.CompilationError, match=f"recursive call of '{callee}'") as info:
        kernel[(1,)](x)
    # The error points at the call that closes the cycle, in the function that makes it.
    lines, first = inspect.getsourcelines(site.fn)
    offset = next(i for i, text in enumerate(lines) if f"return {callee}(" in text)
    e = info.value
    assert (e.file, e.line, e.col) == (__file__, first + offset, lines[offset].index(callee) + 1)
    assert str(e).startswith(f"{__file__}:{e.line}:{e.col}: error: recursive call of '{callee}'")


def test_device_function_argument_errors():
    @tf.jit
    def bad_call(x_ptr):
        tl.store(x_ptr, poly(tl.load(x_ptr), 1.0))

    with pytest.raises(tf.CompilationError, match="call of 'poly'"):
        bad_call[(1,)](np.random.default_rng().standard_normal(1).astype(np.float32))


# --- the pass registry through Python ---


def test_pass_registry_names():
    names = tf._C.passes.names()
    assert {"inliner", "canonicalize", "cse", "licm", "dce"} <= set(names)
    for name in names:
        assert callable(getattr(tf._C.passes, name))


def _raw_module_text(rng):
    x = rng.standard_normal(40).astype(np.float32)
    out = np.full(2, np.nan, np.float32)
    return rich_kernel.compile(x, out, 40, 0.5, BLOCK=16).asm["tile_raw"]


@pytest.mark.parametrize("name", ["inliner", "canonicalize", "cse", "licm", "dce"])
def test_each_pass_runs_on_a_parsed_module(rng, name):
    text = _raw_module_text(rng)
    m = Module.parse(text)
    getattr(tf._C.passes, name)(m)
    m.verify()
    after = m.to_text()
    assert Module.parse(after).to_text() == after


def _ops(text):
    return [m.group(1) for m in re.finditer(r"^\s*(?:%\S+(?:, %\S+)* = )?([a-z_]+)\b", text, re.M)]


def test_passes_do_their_job(rng):
    _run_uses_helpers(rng, False)
    raw = next(iter(k.asm["tile_raw"] for k in uses_helpers.cache.values() if "call @poly__" in k.asm["tile_raw"]))
    m = Module.parse(raw)
    tf._C.passes.inliner(m)
    m.verify()
    assert "call" not in _ops(m.to_text())
    tf._C.passes.dce(m)
    assert re.findall(r"^func @(\w+)", m.to_text(), re.M) == ["uses_helpers"]

    # cse: the frontend computes `pid * stride` twice for the two pointers.
    @tf.jit
    def twice(x_ptr, y_ptr, stride, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        tl.store(y_ptr + row * stride + offs, tl.load(x_ptr + row * stride + offs))

    x = rng.standard_normal(64).astype(np.float32)
    y = np.full(64, np.nan, np.float32)
    k = twice[(2,)](x, y, 32, BLOCK=32)
    np.testing.assert_array_equal(y, x)
    m = Module.parse(k.asm["tile_raw"])
    assert _ops(m.to_text()).count("mul") == 2
    tf._C.passes.cse(m)
    assert _ops(m.to_text()).count("mul") == 1

    # licm: `scale * 2.0` does not depend on the loop.
    @tf.jit
    def invariant(x_ptr, out_ptr, n, scale):
        acc = 0.0
        for i in range(n):
            acc += tl.load(x_ptr + i) * (scale * 2.0)
        tl.store(out_ptr, acc)

    x = rng.standard_normal(10).astype(np.float32)
    out = np.full(1, np.nan, np.float32)
    k = invariant[(1,)](x, out, 10, 0.25)
    np.testing.assert_allclose(out[0], (x.astype(np.float64) * 0.5).sum(), rtol=1e-5)
    m = Module.parse(k.asm["tile_raw"])

    def muls_in_loop(text):
        body = text[text.index("for ") :]
        return _ops(body[: body.index("\n  }")]).count("mul")

    assert muls_in_loop(m.to_text()) == 2
    tf._C.passes.licm(m)
    m.verify()
    assert muls_in_loop(m.to_text()) == 1


def test_dump_all_prints_ir_after_each_pass(rng, monkeypatch, capfd):
    @tf.jit
    def k(x_ptr, out_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs) * 2.0)

    capfd.readouterr()
    monkeypatch.setenv("TILEFUSE_DUMP", "all")
    x = rng.standard_normal(16).astype(np.float32)
    out = np.full(16, np.nan, np.float32)
    k[(1,)](x, out, BLOCK=16)
    err = capfd.readouterr().err
    for stage, name in (
        ("inline", "inliner"),
        ("simplify", "canonicalize"),
        ("simplify", "cse"),
        ("optimize", "licm"),
        ("optimize", "dce"),
    ):
        assert f"// -----// IR after {stage}/{name} //----- //" in err
    assert err.count("func @k(") >= 8
    np.testing.assert_array_equal(out, x * 2)

    monkeypatch.setenv("TILEFUSE_DUMP", "cse")
    k[(1,)](x, out, BLOCK=16)  # cached: compiles nothing, prints nothing
    assert capfd.readouterr().err == ""
    k.compile(x, out, BLOCK=64)
    err = capfd.readouterr().err
    assert "IR after simplify/cse" in err and "IR after optimize/cse" in err and "licm" not in err


def test_time_passes_prints_a_line_per_pass(rng, monkeypatch, capfd):
    @tf.jit
    def k(x_ptr, out_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs) + 1.0)

    capfd.readouterr()
    monkeypatch.delenv("TILEFUSE_DUMP", raising=False)
    monkeypatch.setenv("TILEFUSE_TIME_PASSES", "1")
    k.compile(rng.standard_normal(16).astype(np.float32), np.zeros(16, np.float32), BLOCK=16)
    err = capfd.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("[tilefuse]")]
    assert len(lines) == 8, err  # inline: 1 pass, simplify: 3, optimize: 4
    for ln in lines:
        assert re.fullmatch(r"\[tilefuse\] +\w+ +\w+ +[0-9.]+ ms", ln), ln


@tf.jit
def _copy_at_offset(base_ptr, out_ptr, offset, N: tl.constexpr):
    r = tl.arange(0, N)
    tl.store(out_ptr + r, tl.load(base_ptr + offset + r))


def test_interp_buffers_admit_memory_reached_by_offsets(rng):
    # Another array, addressed by its element offset from the argument's address.
    base, other = np.zeros(4, np.float32), rng.standard_normal(16).astype(np.float32)
    delta = (other.ctypes.data - base.ctypes.data) // 4
    assert (other.ctypes.data - base.ctypes.data) % 4 == 0
    out = np.zeros(16, np.float32)
    with pytest.raises(tf.KernelRuntimeError, match="out-of-bounds load"):
        _copy_at_offset[(1,)](base, out, delta, N=16)
    with tf.jit_module.interp_buffers(other):
        _copy_at_offset[(1,)](base, out, delta, N=16)
    assert np.array_equal(out, other)
    with pytest.raises(tf.KernelRuntimeError, match="out-of-bounds load"):
        _copy_at_offset[(1,)](base, out, delta, N=16)  # only inside the block


def test_a_launch_leaves_no_reference_cycles(rng):
    """The launch path creates no cyclic garbage: its arguments (device tensors on the GPU)
    are released when the caller drops them, not when the cyclic collector runs."""
    import gc
    import weakref

    x, y, out, alpha = _inputs(rng, 100)
    scale_add[(4,)](x, y, out, 100, alpha, BLOCK=32)  # compiled outside the measurement
    x2 = x.copy()
    gone = weakref.ref(x2)
    gc.collect()
    gc.disable()
    try:
        scale_add[(4,)](x2, y, out, 100, alpha, BLOCK=32)
        del x2
        assert gone() is None
        assert gc.collect() == 0
    finally:
        gc.enable()
    np.testing.assert_allclose(out, _scale_add_ref(x, y, alpha), rtol=1e-6, atol=1e-6)  # f32: two roundings
