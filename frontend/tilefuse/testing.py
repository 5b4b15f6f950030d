"""tilefuse.testing, as triton.testing: do_bench, do_bench_cudagraph, assert_close, perf_report
and Benchmark.

do_bench times with CUDA events and flushes the L2 cache (a buffer of twice the device's L2,
zeroed) before every timed run when kernels run on the GPU; on the interpreter it reads
the wall clock. The clock is the one thing that differs: _make_clock picks it (tests
replace it with a fake one)."""

from __future__ import annotations

import csv
import math
import os
import statistics
import time
import warnings

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

    def graph_runs(self, fn, n):
        """A replay function of one CUDA graph holding n calls of fn, captured on a side
        stream (the kernels launch on torch's current stream, the capture's)."""
        g = self.torch.cuda.CUDAGraph()
        with self.torch.cuda.graph(g):
            for _ in range(n):
                fn()
        self.sync()
        return g.replay


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


def _estimate_ms(clock, fn, flush) -> float:
    """One untimed call of fn (compiles and loads), then the mean time of five (each after an
    L2 flush when `flush`); never zero, as callers divide by it."""
    fn()
    clock.sync()
    start = clock.mark()
    for _ in range(5):
        if flush:
            clock.flush()
        fn()
    end = clock.mark()
    clock.sync()
    return max(clock.elapsed_ms(start, end) / 5, 1e-6)


def measure(fn, warmup, rep, grad_to_none=None, backend=None) -> list:
    """Per-run times in ms of `fn`: one run, five to estimate its time, then warmup ms of
    untimed runs and rep ms of timed ones, each after an L2 flush."""
    clock = _make_clock(select_backend(()) if backend is None else backend)
    estimate = _estimate_ms(clock, fn, flush=True)
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


def measure_graph(fn, rep, grad_to_none=None, backend=None, retries=10) -> list:
    """Per-call times in ms of `fn` replayed from a CUDA graph, as Triton's
    do_bench_cudagraph: one call, five to estimate its time, then a graph of rep ms of calls
    (no host launch overhead, no L2 flush between them) replayed `retries` times, each
    replay's time over its calls. On the interpreter, where there are no graphs, the wall
    clock's per-call times (measure)."""
    clock = _make_clock(select_backend(()) if backend is None else backend)
    if not hasattr(clock, "graph_runs"):
        return measure(fn, 0, rep, grad_to_none, backend)

    def call():
        for x in grad_to_none or ():
            x.grad = None
        fn()

    n = max(1, int(rep / _estimate_ms(clock, call, flush=False)))  # its first call outside the capture
    replay = clock.graph_runs(call, n)
    times = []
    for _ in range(retries):
        s = clock.mark()
        replay()
        e = clock.mark()
        clock.sync()
        times.append(clock.elapsed_ms(s, e) / n)
    return times


def do_bench_cudagraph(fn, rep=20, grad_to_none=None, quantiles=None, return_mode="mean"):
    """The run time of `fn` in ms from CUDA-graph replays, as triton.testing.do_bench_cudagraph
    (measure_graph); the result as do_bench's."""
    if return_mode not in _RETURN_MODES:
        raise ValueError(f"return_mode must be one of {', '.join(_RETURN_MODES)}, got {return_mode!r}")
    return summarize(measure_graph(fn, rep, grad_to_none), quantiles, return_mode)


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


class Benchmark:
    """One table of triton.testing.perf_report: fn(**{x_name: x}, **{line_arg: line}, **args) for
    every x of x_vals (one value for all x_names, or one per name) and every line of line_vals."""

    def __init__(
        self,
        x_names,
        x_vals,
        line_arg,
        line_vals,
        line_names,
        plot_name,
        args,
        xlabel="",
        ylabel="",
        x_log=False,
        y_log=False,
        styles=None,
    ):
        self.x_names, self.x_vals, self.line_arg = list(x_names), list(x_vals), line_arg
        self.line_vals, self.line_names, self.plot_name, self.args = list(line_vals), list(line_names), plot_name, args
        self.xlabel, self.ylabel, self.x_log, self.y_log, self.styles = xlabel, ylabel, x_log, y_log, styles
        if len(self.line_names) != len(self.line_vals):
            raise ValueError(
                f"Benchmark {plot_name!r}: {len(self.line_vals)} line_vals but {len(self.line_names)} line_names"
            )


class Mark:
    """A function under perf_report: run() measures every Benchmark, prints (print_data) and
    saves (save_path: <plot_name>.csv, and .png with matplotlib) the tables."""

    def __init__(self, fn, benchmarks):
        self.fn, self.benchmarks = fn, benchmarks

    def _table(self, bench: Benchmark, **kwargs):
        """Columns (the x_names, each line's name, then its -min and -max) and rows."""
        rows = []
        for x in bench.x_vals:
            xs = list(x) if isinstance(x, (list, tuple)) else [x] * len(bench.x_names)
            if len(xs) != len(bench.x_names):
                raise ValueError(f"Benchmark {bench.plot_name!r}: expected {len(bench.x_names)} x values, got {x}")
            means, lows, highs = [], [], []
            for line in bench.line_vals:
                ret = self.fn(**dict(zip(bench.x_names, xs)), **{bench.line_arg: line}, **bench.args, **kwargs)
                m, lo, hi = ret if isinstance(ret, (list, tuple)) else (ret, None, None)
                means.append(m)
                lows.append(lo)
                highs.append(hi)
            rows.append(xs + means + lows + highs)
        names = bench.line_names
        return bench.x_names + names + [f"{n}-min" for n in names] + [f"{n}-max" for n in names], rows

    def run(self, show_plots=False, print_data=False, save_path="", return_df=False, **kwargs):
        benches = [self.benchmarks] if isinstance(self.benchmarks, Benchmark) else self.benchmarks
        frames = []
        for bench in benches:
            columns, rows = self._table(bench, **kwargs)
            shown = len(bench.x_names) + len(bench.line_names)  # the -min/-max columns are for plots
            if print_data:
                print(bench.plot_name + ":")
                print(_format_table(columns[:shown], [r[:shown] for r in rows]))
            if save_path:
                os.makedirs(save_path, exist_ok=True)
                with open(os.path.join(save_path, f"{bench.plot_name}.csv"), "w", newline="") as f:
                    w = csv.writer(f)
                    w.writerow(columns[:shown])
                    w.writerows(r[:shown] for r in rows)
            if show_plots or save_path:
                _plot(bench, columns, rows, show_plots, save_path)
            if return_df:
                frames.append(_data_frame(columns[:shown], [r[:shown] for r in rows]))
        if return_df:
            return frames[0] if len(frames) == 1 else frames


def perf_report(benchmarks):
    """@tilefuse.testing.perf_report(Benchmark(...) or a list of them) over a function that
    returns a number, or (value, min, max), per point."""
    return lambda fn: Mark(fn, benchmarks)


def _format_table(columns, rows) -> str:
    cells = [[str(c) for c in columns]] + [[f"{v:.6g}" if isinstance(v, float) else str(v) for v in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    index = max(len(str(len(rows) - 1)), 1)
    lines = [" " * index + "".join(f"  {c:>{w}}" for c, w in zip(cells[0], widths))]
    lines += [f"{i:<{index}}" + "".join(f"  {c:>{w}}" for c, w in zip(row, widths)) for i, row in enumerate(cells[1:])]
    return "\n".join(lines)


def _plot(bench, columns, rows, show, save_path):
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        if show:
            raise ImportError("perf_report's show_plots needs matplotlib") from None
        warnings.warn(f"matplotlib is not installed: {bench.plot_name}.png not saved (the .csv is)", stacklevel=3)
        return
    n, lines = len(bench.x_names), len(bench.line_names)
    xs = [r[0] for r in rows]
    plt.figure()
    ax = plt.subplot()
    for i, name in enumerate(bench.line_names):
        col, lo, hi = (n + i, n + lines + i, n + 2 * lines + i)
        style = bench.styles[i] if bench.styles else None
        ax.plot(
            xs, [r[col] for r in rows], label=name, color=style[0] if style else None, ls=style[1] if style else None
        )
        if rows and rows[0][lo] is not None and rows[0][hi] is not None:
            ax.fill_between(xs, [r[lo] for r in rows], [r[hi] for r in rows], alpha=0.15)
    ax.legend()
    ax.set_xlabel(bench.xlabel or bench.x_names[0])
    ax.set_ylabel(bench.ylabel)
    ax.set_xscale("log" if bench.x_log else "linear")
    ax.set_yscale("log" if bench.y_log else "linear")
    if show:
        plt.show()
    if save_path:
        plt.savefig(os.path.join(save_path, f"{bench.plot_name}.png"))
    plt.close()


def _data_frame(columns, rows):
    try:
        import pandas as pd
    except ImportError:
        raise ImportError("perf_report's run(return_df=True) needs pandas") from None
    return pd.DataFrame(rows, columns=columns)
