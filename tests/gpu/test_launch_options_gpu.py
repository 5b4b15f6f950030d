"""Triton's launch options and memory hints on the GPU: maxnreg caps the registers the
driver reports and changes no result; cache_modifier / eviction_policy / volatile loads and
stores give the values of plain ones (vector and element-wise, every hint, several dtypes);
launch_cooperative_grid runs a grid-wide barrier built from atomics (release add, volatile
acquire spin) with every program resident, and refuses a grid that cannot be."""

import pytest
import tilefuse as tf
import tilefuse.language as tl

from tests.python.language.test_memory_hints import HINTS, copy_plus_one

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]


@tf.jit
def many_live(x_ptr, o_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a = tl.load(x_ptr + offs)
    b = tl.load(x_ptr + BLOCK + offs)
    c = tl.load(x_ptr + 2 * BLOCK + offs)
    s = tl.sum(a * b + c, axis=0)
    tl.store(o_ptr + offs, a * s + b * c + tl.exp(a))


@pytest.mark.parametrize("cap", [None, 32, 64])
def test_maxnreg_caps_registers_and_changes_no_result(cap):
    x = torch.randn(3 * 2048, device="cuda")
    out = torch.empty(2048, device="cuda")
    kw = {} if cap is None else {"maxnreg": cap}
    k = many_live[(1,)](x, out, BLOCK=2048, num_warps=4, **kw)
    a, b, c = x.double().view(3, 2048)
    want = a * (a * b + c).sum() + b * c + torch.exp(a)
    torch.testing.assert_close(out.double(), want, rtol=2e-5, atol=2e-5 * want.abs().max().item())
    loaded = next(v for key, v in k.loaded.items() if key[1] == 4)
    if cap is not None:
        assert loaded.resources().num_regs <= cap


@pytest.mark.parametrize("n", [4096, 4001])  # 16-byte accesses; element-wise with a masked tail
@pytest.mark.parametrize("hints", HINTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int8, torch.int64])
def test_hinted_accesses_give_plain_results(hints, n, dtype):
    if dtype.is_floating_point:
        x = torch.randn(4096, device="cuda").to(dtype)
    else:
        x = torch.randint(-100, 100, (4096,), device="cuda", dtype=dtype)
    y = torch.full((4096,), 7, device="cuda", dtype=dtype)
    lc, sc, le, se, vol = hints
    copy_plus_one[(16,)](x, y, n, LC=lc, SC=sc, LE=le, SE=se, VOL=vol, BLOCK=256)
    assert torch.equal(y[:n], (x[:n].double() + 1).to(dtype))
    assert torch.equal(y[n:], torch.full_like(y[n:], 7))


@tf.jit
def grid_barrier(count_ptr, seen_ptr, out_ptr):
    # Every program arrives (a release add), waits until all have (volatile loads, then an
    # acquire), then reads the count: each must see every arrival.
    tl.atomic_add(count_ptr, 1, sem="release")
    n = tl.num_programs(0)
    while tl.load(count_ptr, volatile=True) < n:
        pass
    seen = tl.atomic_add(count_ptr, 0, sem="acquire")
    tl.store(seen_ptr + tl.program_id(0), seen)
    tl.store(out_ptr + tl.program_id(0), tl.program_id(0) * 2)


def test_cooperative_grid_barrier():
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    count = torch.zeros(1, device="cuda", dtype=torch.int32)
    seen = torch.zeros(sms, device="cuda", dtype=torch.int32)
    out = torch.zeros(sms, device="cuda", dtype=torch.int32)
    grid_barrier[(sms,)](count, seen, out, launch_cooperative_grid=True)
    torch.cuda.synchronize()
    assert count.item() == sms
    assert bool((seen >= sms).all())
    assert torch.equal(out, torch.arange(sms, device="cuda", dtype=torch.int32) * 2)


def test_cooperative_grid_beyond_residency_is_refused():
    count = torch.zeros(1, device="cuda", dtype=torch.int32)
    big = 1 << 20
    with pytest.raises(tf.LaunchError, match=rf"launch_cooperative_grid: {big} programs cannot all be resident"):
        grid_barrier[(big,)](count, count, count, launch_cooperative_grid=True)
    assert count.item() == 0  # nothing launched
