"""TILEFUSE_DEBUG=1 on the GPU: planted out-of-bounds accesses (exactly one violating lane
each, so the report is deterministic) raise KernelRuntimeError after the launch with the
kernel's file:line, the program id, the lane's element and the index against the buffer's
extent; the violating access is skipped and every other lane's result is exact; masked-off
lanes never trip; a view into the middle of a buffer is checked against the rest of its
storage."""

import inspect

import pytest
import tilefuse as tf
import tilefuse.language as tl

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]


@pytest.fixture(autouse=True)
def debug(monkeypatch, tmp_path):
    monkeypatch.setenv("TILEFUSE_DEBUG", "1")
    monkeypatch.setenv("TILEFUSE_CACHE_DIR", str(tmp_path))


def line_of(fn, text):
    lines, first = inspect.getsourcelines(fn.fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def expect(e, fn, text, message):
    assert e.value.message == message
    assert (e.value.file, e.value.line) == (inspect.getsourcefile(fn.fn), line_of(fn, text))


@tf.jit
def copy_upto(x_ptr, y_ptr, limit, shift, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < limit)  # planted: load
    tl.store(y_ptr + offs + shift, x * 3.0, mask=offs < limit)  # planted: store


BLOCKS = [64, 128, 1024]


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("n", [1000, 4096, 77777])
def test_load_past_the_end(block, n):
    x, y = torch.randn(n, device="cuda"), torch.zeros(n + 1, device="cuda")
    grid = (tf.cdiv(n + 1, block),)
    with pytest.raises(tf.KernelRuntimeError) as e:
        copy_upto[grid](x, y, n + 1, 0, BLOCK=block)  # element n of x is one past its end
    msg = f"out-of-bounds load at element [{n % block}]: index {n} of 'x_ptr', which holds {n} elements"
    expect(e, copy_upto, "planted: load", f"{msg} (program {n // block}, 0, 0)")
    # The skipped load reads 0 (no `other`); every other lane is exact.
    assert torch.equal(y[:n], x * 3.0) and y[n].item() == 0.0


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("n", [1000, 4096])
def test_store_at_a_negative_offset(block, n):
    x, y = torch.randn(n, device="cuda"), torch.full((n,), 7.0, device="cuda")
    with pytest.raises(tf.KernelRuntimeError) as e:
        copy_upto[(tf.cdiv(n, block),)](x, y, n, -1, BLOCK=block)
    expect(e, copy_upto, "planted: store", "out-of-bounds store at element [0]: index -1 of 'y_ptr', which holds "
           f"{n} elements (program 0, 0, 0)")  # fmt: skip
    assert torch.equal(y[: n - 1], x[1:] * 3.0) and y[n - 1].item() == 7.0


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("n", [1, 1000, 4097])
def test_masked_off_lanes_do_not_trip(block, n):
    x, y = torch.randn(n, device="cuda"), torch.zeros(n, device="cuda")
    copy_upto[(tf.cdiv(n, block) + 3,)](x, y, n, 0, BLOCK=block)  # programs and lanes past n are masked
    assert torch.equal(y, x * 3.0)


def test_a_view_into_the_middle_of_a_buffer():
    base = torch.randn(3000, device="cuda")
    view, out = base[1000:2000], torch.zeros(3000, device="cuda")
    # Past the view but inside its storage: not a violation (the extent is the storage's).
    copy_upto[(tf.cdiv(2000, 128),)](view, out, 2000, 0, BLOCK=128)
    assert torch.equal(out[:2000], base[1000:] * 3.0)
    with pytest.raises(tf.KernelRuntimeError) as e:
        copy_upto[(tf.cdiv(2001, 128),)](view, out, 2001, 0, BLOCK=128)
    expect(e, copy_upto, "planted: load", "out-of-bounds load at element [80]: index 2000 of 'x_ptr', which holds "
           "2000 elements (program 15, 0, 0)")  # fmt: skip
    # A view of the output: one element before it is out of its bounds, though inside the storage.
    out = torch.full((3000,), 5.0, device="cuda")
    with pytest.raises(tf.KernelRuntimeError) as e:
        copy_upto[(8,)](base, out[1000:], 1000, -1, BLOCK=128)
    expect(e, copy_upto, "planted: store", "out-of-bounds store at element [0]: index -1 of 'y_ptr', which holds "
           "2000 elements (program 0, 0, 0)")  # fmt: skip
    assert out[999].item() == 5.0 and torch.equal(out[1000:1999], base[1:1000] * 3.0)


@tf.jit
def rows(x_ptr, y_ptr, C, BLOCK: tl.constexpr):
    offs = tl.program_id(1) * C + tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs))  # planted: 2-D grid


@pytest.mark.parametrize("gx,gy,block", [(3, 5, 64), (1, 70, 128), (8, 2, 256)])
def test_two_dimensional_grids(gx, gy, block):
    C = gx * block
    x = torch.randn(gy * C - 1, device="cuda")  # one short: the last lane of the last program
    y = torch.zeros(gy * C, device="cuda")
    with pytest.raises(tf.KernelRuntimeError) as e:
        rows[(gx, gy)](x, y, C, BLOCK=block)
    n = gy * C - 1
    expect(e, rows, "planted: 2-D grid", f"out-of-bounds load at element [{block - 1}]: index {n} of 'x_ptr', "
           f"which holds {n} elements (program {gx - 1}, {gy - 1}, 0)")  # fmt: skip
    assert torch.equal(y[:n], x)


@tf.jit
def tile2d(x_ptr, y_ptr, stride, R: tl.constexpr, C: tl.constexpr):
    r = tl.arange(0, R)[:, None]
    c = tl.arange(0, C)[None, :]
    tl.store(y_ptr + r * C + c, tl.load(x_ptr + r * stride + c) + 1.0)  # planted: 2-D tile


@pytest.mark.parametrize("R,C", [(16, 32), (64, 64), (8, 128)])
def test_the_element_of_a_two_dimensional_tile(R, C):
    stride = C + 3
    x = torch.randn((R - 1) * stride + C - 1, device="cuda")  # the tile's last element is one past the end
    y = torch.zeros(R * C, device="cuda")
    with pytest.raises(tf.KernelRuntimeError) as e:
        tile2d[(1,)](x, y, stride, R=R, C=C)
    n = x.numel()
    expect(e, tile2d, "planted: 2-D tile", f"out-of-bounds load at element [{R - 1}, {C - 1}]: index {n} of "
           f"'x_ptr', which holds {n} elements (program 0, 0, 0)")  # fmt: skip
    ref = torch.stack([x[i * stride : i * stride + C] if i < R - 1 else torch.cat([x[i * stride :], x.new_zeros(1)])
                       for i in range(R)]).flatten() + 1.0  # fmt: skip
    assert torch.equal(y, ref)


@tf.jit
def scatter_add(idx_ptr, v_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    i = tl.load(idx_ptr + offs, mask=offs < n)
    tl.atomic_add(out_ptr + i, tl.load(v_ptr + offs, mask=offs < n), mask=offs < n)  # planted: atomic


@pytest.mark.parametrize("n,bins", [(1000, 17), (5000, 300)])
def test_atomics(n, bins):
    g = torch.Generator(device="cuda").manual_seed(n)
    idx = torch.randint(0, bins, (n,), device="cuda", dtype=torch.int32, generator=g)
    v = torch.randint(-8, 8, (n,), device="cuda", generator=g).float()  # small integers: exact sums
    bad = n // 3
    idx[bad] = bins  # one index past the end
    out = torch.zeros(bins, device="cuda")
    with pytest.raises(tf.KernelRuntimeError) as e:
        scatter_add[(tf.cdiv(n, 256),)](idx, v, out, n, BLOCK=256)
    expect(e, scatter_add, "planted: atomic", f"out-of-bounds atomic_add at element [{bad % 256}]: index {bins} of "
           f"'out_ptr', which holds {bins} elements (program {bad // 256}, 0, 0)")  # fmt: skip
    keep = torch.arange(n, device="cuda") != bad
    ref = torch.zeros(bins, device="cuda", dtype=torch.float64).index_add_(0, idx[keep].long(), v[keep].double())
    assert torch.equal(out.double(), ref)


def test_clean_launches_match_the_plain_build(monkeypatch):
    n = 50000
    x = torch.randn(n, device="cuda")
    y_debug, y_plain = torch.zeros(n, device="cuda"), torch.zeros(n, device="cuda")
    copy_upto[(tf.cdiv(n, 512),)](x, y_debug, n, 0, BLOCK=512)
    monkeypatch.setenv("TILEFUSE_DEBUG", "0")
    copy_upto[(tf.cdiv(n, 512),)](x, y_plain, n, 0, BLOCK=512)
    assert torch.equal(y_debug, y_plain) and torch.equal(y_plain, x * 3.0)


@tf.jit
def desc_rows(x_ptr, y_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    xd = tl.make_tensor_descriptor(x_ptr, [M, N], [N, 1], [BM, BN])
    yd = tl.make_tensor_descriptor(y_ptr, [M, N], [N, 1], [BM, BN])
    pm = tl.program_id(0) * BM
    yd.store([pm, 0], xd.load([pm, 0]) * 2.0)  # planted: descriptor


@pytest.mark.parametrize("blocks,BM,BN", [(3, 64, 64), (5, 16, 128)])
def test_a_descriptor_larger_than_its_buffer(blocks, BM, BN):
    # Off TMA in debug builds: the descriptor's elements past its sizes read as zero (no
    # violation), but sizes that overrun the buffer itself are one.
    M, N = blocks * BM, BN
    x, y = torch.randn(M * N - 1, device="cuda"), torch.zeros(M * N, device="cuda")
    with pytest.raises(tf.KernelRuntimeError) as e:
        desc_rows[(blocks,)](x, y, M, N, BM=BM, BN=BN)
    n = M * N - 1
    expect(e, desc_rows, "planted: descriptor", f"out-of-bounds descriptor load at element [{BM - 1}, {BN - 1}]: "
           f"index {n} of 'x_ptr', which holds {n} elements (program {blocks - 1}, 0, 0)")  # fmt: skip
    assert torch.equal(y[:n], x * 2.0) and y[n].item() == 0.0
    desc_rows[(blocks + 2,)](x, y, M - 1, N, BM=BM, BN=BN)  # within the buffer: rows past M are masked
