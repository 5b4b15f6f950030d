"""tilefuse.testing, as triton.testing: do_bench and assert_close.

do_bench times with CUDA events and flushes the L2 cache (a buffer of twice the device's L2,
zeroed) before every timed run when kernels run on the GPU; on the interpreter it reads
the wall clock. The clock is the one thing that differs: _make_clock picks it (tests
replace it with a fake one)."""

from __future__ import annotations

import math
import statistics
import time

import numpy as np

from . import _C
from .jit import select_backend

_RETURN_MODES = ("min", "max", "mean", "median", "all")


class _WallClock:
    """The interpreter's clock: kernels run synchronously, caches are the host's."""

    def sync(self):
        pass

    def flush(self):
        pass

    def mark(self):
        return time.perf_counter()

    def elapsed_ms(self, start, end) -> float:
        return (end - start) * 1e3


class _CudaClock:
    """CUDA events on the current torch stream; the L2 flush zeroes a buffer of twice its size."""

    def __init__(self, torch):
        self.torch = torch
        device = torch.cuda.current_device()
        l2 = _C.runtime.device_info(device).l2_cache_bytes
        self.buffer = torch.empty(max(2 * l2, 1 << 20) // 4, dtype=torch.int32, device=f"cuda:{device}")

    def sync(self):
        self.torch.cuda.synchronize()

    def flush(self):
        self.buffer.zero_()

    def mark(self):
        e = self.torch.cuda.Event(enable_timing=True)
        e.record()
        return e

    def elapsed_ms(self, start, end) -> float:
        return start.elapsed_time(end)


def _make_clock(backend: str):
    if backend != "cuda":
        return _WallClock()
    try:
        import torch
    except ImportError:
        raise RuntimeError("do_bench on the GPU times with torch's CUDA events: install torch") from None
    return _CudaClock(torch)


def quantiles_of(times, q):
    """The q-quantiles of `times` with linear interpolation (as numpy's and torch's default)."""
    a = sorted(times)
    out = []
    for x in q:
        if not 0 <= x <= 1:
            raise ValueError(f"quantiles must be in [0, 1], got {x}")
        point = x * (len(a) - 1)
        lo, hi = math.floor(point), math.ceil(point)
        out.append(a[lo] + (point - lo) * (a[hi] - a[lo]))
    return out


def summarize(times, quantiles=None, return_mode="mean"):
    """do_bench's result from the per-run times: the quantiles when given (one value for one
    quantile), else times reduced by return_mode."""
    if quantiles is not None:
        q = quantiles_of(times, quantiles)
        return q[0] if len(q) == 1 else q
    if return_mode == "all":
        return list(times)
    return {"min": min, "max": max, "mean": statistics.mean, "median": statistics.median}[return_mode](times)


def measure(fn, warmup, rep, grad_to_none=None, backend=None) -> list:
    """Per-run times in ms of `fn`: one run, five to estimate its time, then warmup ms of
    untimed runs and rep ms of timed ones, each after an L2 flush."""
    clock = _make_clock(select_backend(()) if backend is None else backend)
    fn()
    clock.sync()
    start = clock.mark()
    for _ in range(5):
        clock.flush()
        fn()
    end = clock.mark()
    clock.sync()
    estimate = max(clock.elapsed_ms(start, end) / 5, 1e-6)  # a zero estimate would divide by zero
    n_warmup, n_repeat = max(1, int(warmup / estimate)), max(1, int(rep / estimate))
    for _ in range(n_warmup):
        fn()
    marks = []
    for _ in range(n_repeat):
        for x in grad_to_none or ():
            x.grad = None  # so that a backward pass in fn does not accumulate
        clock.flush()
        s = clock.mark()
        fn()
        marks.append((s, clock.mark()))
    clock.sync()
    return [clock.elapsed_ms(s, e) for s, e in marks]


def do_bench(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None, return_mode="mean"):
    """The run time of `fn` in ms, as triton.testing.do_bench: warmup and rep are budgets in
    ms; the result is the `quantiles` of the per-run times when given, else their
    min/max/mean/median or all of them (return_mode)."""
    if return_mode not in _RETURN_MODES:
        raise ValueError(f"return_mode must be one of {', '.join(_RETURN_MODES)}, got {return_mode!r}")
    return summarize(measure(fn, warmup, rep, grad_to_none), quantiles, return_mode)


def _as_numpy(x):
    if hasattr(x, "detach"):  # a torch tensor; bf16 and fp8 have no numpy form there
        x = x.detach().cpu()
        if x.is_floating_point():
            x = x.double()
        return x.numpy()
    x = np.asarray(x)
    if x.dtype.type.__module__.startswith("ml_dtypes"):  # bf16, fp8: compared as float64
        return x.astype(np.float64)
    return x


def assert_close(x, y, atol=None, rtol=None, err_msg=""):
    """Asserts |x - y| <= atol + rtol * |y| elementwise (NaNs equal), as
    triton.testing.assert_close: atol defaults to 1e-2, rtol to 0; either may be a function
    of x's dtype. x and y are arrays, tensors or scalars."""
    dtype = getattr(x, "dtype", None)
    atol = 1e-2 if atol is None else atol
    rtol = 0.0 if rtol is None else rtol
    atol = atol(dtype) if callable(atol) else atol
    rtol = rtol(dtype) if callable(rtol) else rtol
    a, b = _as_numpy(x), _as_numpy(y)
    if a.size > 1 or b.size > 1:
        np.testing.assert_allclose(a, b, atol=atol, rtol=rtol, equal_nan=True, err_msg=err_msg)
    elif not np.allclose(a, b, atol=atol, rtol=rtol, equal_nan=True):
        raise AssertionError(f"{err_msg} {a} is not close to {b} (atol={atol}, rtol={rtol})".strip())
