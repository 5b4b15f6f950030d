"""The C launch fast path with torch tensors on the GPU: it reads every tensor's address,
device and dtype and the current stream at every launch, so a tensor whose storage was
swapped, a launch on a side stream and a mix of grids and keyword spellings all compute
what the full path would (checked exactly: x + y in fp32 is one correctly rounded add)."""

import pytest
import tilefuse as tf

from kernels_dsl.tutorials import vector_add

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]

add = vector_add.add_kernel


def _launch(x, y, out, grid=None, **kw):
    n = x.numel()
    add[grid or (tf.cdiv(n, 256),)](x, y, out, n, BLOCK_SIZE=256, **kw)


def test_a_tensor_whose_storage_changed_is_read_again():
    g = torch.Generator(device="cuda").manual_seed(1)
    x, y = (torch.randn(3000, device="cuda", generator=g) for _ in range(2))
    out = torch.full_like(x, float("nan"))
    for _ in range(2):  # the second launch takes the fast path
        _launch(x, y, out)
    torch.cuda.synchronize()
    assert torch.equal(out, x + y)
    x.data = torch.randn(3000, device="cuda", generator=g)  # same object and key, new storage
    out.set_(torch.full_like(x, float("nan")))
    _launch(x, y, out)
    torch.cuda.synchronize()
    assert torch.equal(out, x + y)


def test_launches_go_to_the_current_stream():
    g = torch.Generator(device="cuda").manual_seed(2)
    x = torch.randn(1 << 20, device="cuda", generator=g)
    y = torch.full_like(x, float("nan"))
    out = torch.full_like(x, float("nan"))
    _launch(x, x, out)  # compiled and remembered on the default stream
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    for _ in range(3):
        y.fill_(float("nan"))
        out.fill_(float("nan"))
        torch.cuda.synchronize()
        with torch.cuda.stream(side):
            torch.cuda._sleep(20_000_000)  # y is written late on the side stream ...
            y.copy_(x)
            _launch(x, y, out)  # ... and read after it only on the same stream
        side.synchronize()
        assert torch.equal(out, x + x)


def test_grid_and_keyword_spellings_share_one_launch():
    g = torch.Generator(device="cuda").manual_seed(3)
    x, y = (torch.randn(4096, device="cuda", generator=g) for _ in range(2))
    out = torch.full_like(x, float("nan"))
    for grid in (16, (16,), (16, 1, 1), [16]):
        out.fill_(float("nan"))
        _launch(x, y, out, grid=grid)
        torch.cuda.synchronize()
        assert torch.equal(out, x + y), grid
    assert add[16] is add[(16,)] is add[(16, 1, 1)]  # the fast path exists: one callable per grid
    built = {"".join(["BLOCK", "_SIZE"]): 256, "".join(["num", "_warps"]): 4}  # names not interned
    out.fill_(float("nan"))
    add[(16,)](x, y, out, x.numel(), **built)
    torch.cuda.synchronize()
    assert torch.equal(out, x + y)


def test_torch_tensors_are_read_without_their_methods():
    """On this torch the fast path reads torch.Tensor and Parameter directly (TorchReads.h):
    their key items carry no dtype object, a subclass's do (its methods may differ), and a
    view's address, a dtype change and a Parameter are read as the methods would."""
    from tilefuse import _C, gpu

    g = torch.Generator(device="cuda").manual_seed(4)
    base = torch.randn(4096 + 64, device="cuda", generator=g)
    x, y = base[64:], torch.randn(4096, device="cuda", generator=g)  # x: a view 256 bytes in
    out = torch.full_like(y, float("nan"))
    _launch(x, y, out)
    assert _C.launcher.torch_reads_enabled(), gpu.torch_reads_why
    fast = add._fast_path()
    n = x.numel()
    key = fast.key((16,), (x, y, out, n), {"BLOCK_SIZE": 256})
    tensor_items = [k for k in key if k[0] == 1]
    assert len(tensor_items) == 3 and all(obj is None for _, _, _, obj in tensor_items)
    before = len(fast)
    out.fill_(float("nan"))
    _launch(x, y, out)  # the fast path, with the view's address
    torch.cuda.synchronize()
    assert torch.equal(out, x + y) and len(fast) == before

    class Sub(torch.Tensor):
        pass

    s = x.as_subclass(Sub)
    fast.add_tensor_types([Sub])
    sub_items = [k for k in fast.key((16,), (s, y, out, n), {"BLOCK_SIZE": 256}) if k[0] == 1]
    assert sub_items[0][3] is torch.float32 and sub_items[1][3] is None

    p = torch.nn.Parameter(y.clone(), requires_grad=False)
    out.fill_(float("nan"))
    _launch(x, p, out)
    _launch(x, p, out)
    torch.cuda.synchronize()
    assert torch.equal(out, x + y)

    h = torch.randn(4096, device="cuda", generator=g).half()  # another dtype: another kernel
    oh = torch.full_like(h, float("nan"))
    _launch(h, h, oh)
    _launch(h, h, oh)
    torch.cuda.synchronize()
    assert torch.equal(oh, h + h)
