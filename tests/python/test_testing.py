"""tilefuse.testing: do_bench's schedule and statistics with a fake clock (as Triton's:
a budget-derived number of warm-up and timed runs, an L2 flush before each timed run,
linear-interpolated quantiles), assert_close's checks and messages, perf_report's tables."""

import contextlib
import csv
import importlib.util

import ml_dtypes
import numpy as np
import pytest
import tilefuse as tf
from tilefuse import testing

from tests.python.test_autotune import FakeClock


@pytest.fixture
def clock(monkeypatch):
    c = FakeClock()
    monkeypatch.setattr(testing, "_make_clock", lambda backend: c)
    return c


def scripted(clock, durations):
    """A function that advances the clock by the next duration at each call (from 0, so that
    the estimate's 5 x 2 ms span is exact in floating point)."""
    clock.now, clock.flushes = 0.0, 0
    it = iter(durations)
    calls = []

    def fn():
        calls.append(1)
        clock.advance(next(it))

    return fn, calls


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_do_bench_schedule_and_statistics(clock, seed):
    rng = np.random.default_rng(seed)
    # One first call, five estimating runs of 2 ms: 10 ms of warm-up is 5 runs, 20 ms of repeats 10.
    timed = rng.uniform(0.5, 3.0, 10)
    fn, calls = scripted(clock, [7.0] + [2.0] * 5 + [9.0] * 5 + list(timed))
    got = tf.testing.do_bench(fn, warmup=10, rep=20, return_mode="all")
    assert len(calls) == 1 + 5 + 5 + 10 and clock.flushes == 5 + 10
    np.testing.assert_allclose(got, timed, rtol=1e-12)
    for mode, ref in [("mean", np.mean), ("median", np.median), ("min", np.min), ("max", np.max)]:
        fn, _ = scripted(clock, [7.0] + [2.0] * 5 + [9.0] * 5 + list(timed))
        assert tf.testing.do_bench(fn, warmup=10, rep=20, return_mode=mode) == pytest.approx(ref(timed), rel=1e-12)
    fn, _ = scripted(clock, [7.0] + [2.0] * 5 + [9.0] * 5 + list(timed))
    q = tf.testing.do_bench(fn, warmup=10, rep=20, quantiles=[0.5, 0.2, 0.8])
    np.testing.assert_allclose(q, np.quantile(timed, [0.5, 0.2, 0.8]), rtol=1e-12)
    fn, _ = scripted(clock, [7.0] + [2.0] * 5 + [9.0] * 5 + list(timed))
    assert tf.testing.do_bench(fn, warmup=10, rep=20, quantiles=[0.25]) == pytest.approx(
        np.quantile(timed, 0.25), rel=1e-12
    )


def test_do_bench_clears_grads_and_checks_arguments(clock):
    class Param:
        grad = "stale"

    p = Param()
    seen = []

    def fn():
        seen.append(p.grad)
        p.grad = "stale"
        clock.advance(1.0)

    tf.testing.do_bench(fn, warmup=1, rep=3, grad_to_none=[p])
    assert seen[-3:] == [None] * 3 and seen[0] == "stale"
    with pytest.raises(ValueError, match="return_mode must be one of"):
        tf.testing.do_bench(fn, return_mode="average")
    with pytest.raises(ValueError, match=r"quantiles must be in \[0, 1\]"):
        tf.testing.do_bench(fn, warmup=1, rep=2, quantiles=[1.5])


def test_do_bench_on_the_wall_clock():
    # The interpreter's clock: a run that sleeps ~2 ms measures at least that.
    import time

    t = tf.testing.do_bench(lambda: time.sleep(0.002), warmup=4, rep=20, return_mode="min")
    assert 2.0 <= t < 200.0


def test_assert_close():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, 9))
    tf.testing.assert_close(x + 5e-3, x)  # atol 1e-2 by default
    tf.testing.assert_close(x * (1 + 1e-4), x, atol=0, rtol=2e-4)
    tf.testing.assert_close(np.array([np.nan, 1.0]), np.array([np.nan, 1.0]))
    with pytest.raises(AssertionError, match="Mismatched elements: 1 / 72"):
        y = x.copy()
        y[3, 4] += 0.5
        tf.testing.assert_close(y, x, err_msg="tile")
    with pytest.raises(AssertionError, match=r"seen 1.5 is not close to 1.0 \(atol=0.1, rtol=0.0\)"):
        tf.testing.assert_close(1.5, 1.0, atol=0.1, err_msg="seen")
    # bf16 arrays compare as float64; atol may depend on x's dtype (bf16 rounds to within 2^-8 relative).
    b = x.astype(ml_dtypes.bfloat16)
    tf.testing.assert_close(b, x, atol=lambda dt: 2**-8 * np.abs(x).max() if dt == b.dtype else 0.0)
    with pytest.raises(AssertionError):
        tf.testing.assert_close(b, x, atol=lambda dt: 0.0)


def test_perf_report(tmp_path, capsys):
    calls = []
    bench = tf.testing.Benchmark(
        x_names=["N"],
        x_vals=[128, 1024],
        line_arg="provider",
        line_vals=["a", "b"],
        line_names=["A", "B"],
        plot_name="demo",
        args={"scale": 2},
        ylabel="GB/s",
    )

    @tf.testing.perf_report(bench)
    def measure(N, provider, scale):
        calls.append((N, provider, scale))
        v = N * scale * (1 if provider == "a" else 3)
        return (float(v), v - 1.0, v + 1.0) if provider == "a" else v

    has_plots = importlib.util.find_spec("matplotlib") is not None
    with contextlib.nullcontext() if has_plots else pytest.warns(UserWarning, match="demo.png not saved"):
        measure.run(print_data=True, save_path=str(tmp_path))
    assert calls == [(128, "a", 2), (128, "b", 2), (1024, "a", 2), (1024, "b", 2)]
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "demo:" and out[1].split() == ["N", "A", "B"]
    assert out[2].split() == ["0", "128", "256", "768"] and out[3].split() == ["1", "1024", "2048", "6144"]
    with open(tmp_path / "demo.csv") as f:
        assert list(csv.reader(f)) == [["N", "A", "B"], ["128", "256.0", "768"], ["1024", "2048.0", "6144"]]
    # One value per x_name, or one for all; a wrong count is named.
    two = tf.testing.Benchmark(["M", "N"], [(3, 4), 5], "p", [1], ["P"], "two", {})
    assert tf.testing.perf_report(two)(lambda M, N, p: M * N + p)._table(two)[1] == [
        [3, 4, 13, None, None],
        [5, 5, 26, None, None],
    ]
    bad = tf.testing.Benchmark(["M", "N"], [(1, 2, 3)], "p", [1], ["P"], "bad", {})
    with pytest.raises(ValueError, match=r"'bad': expected 2 x values, got \(1, 2, 3\)"):
        tf.testing.perf_report(bad)(lambda M, N, p: 0).run()
    with pytest.raises(ValueError, match="2 line_vals but 1 line_names"):
        tf.testing.Benchmark(["N"], [1], "p", [1, 2], ["P"], "lines", {})
    if importlib.util.find_spec("pandas") is None:
        with pytest.raises(ImportError, match=r"run\(return_df=True\) needs pandas"):
            measure.run(return_df=True)
    else:
        assert measure.run(return_df=True).shape == (2, 3)
