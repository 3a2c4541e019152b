"""Realtime runs in bounded memory: lazy releases (the same draws as all at once), streamed response
statistics (exact, then a stated log histogram), and scenario variables counted before their support
is built."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from simulator.realtime.scenario import Distribution, scenario_from_dict
from simulator.realtime.simulate import (
    HISTOGRAM_RELATIVE_ERROR,
    ResponseStats,
    SampleStream,
    _source_releases,
)


def _all_at_once(t: SimpleNamespace, horizon: float, rng: np.random.Generator) -> list[float]:
    """The releases as the simulator drew them before it streamed them (one vectorised call each)."""
    if t.activation == "periodic":
        n = max(0, math.ceil((horizon - t.offset_s) / t.period_s))
        arrivals = t.offset_s + np.arange(n) * t.period_s
    else:
        n_max = int(math.ceil((horizon - t.offset_s) / t.period_s)) + 1
        gaps = rng.uniform(t.period_s, t.max_interarrival_s, size=max(n_max - 1, 0))
        arrivals = t.offset_s + np.concatenate(([0.0], np.cumsum(gaps)))
        arrivals = arrivals[arrivals < horizon]
    jit = rng.uniform(0.0, t.jitter_s, size=len(arrivals)) if t.jitter_s > 0 else np.zeros(len(arrivals))
    return [float(a + j) for a, j in zip(arrivals, jit, strict=True)]


@pytest.mark.parametrize("activation", ["periodic", "sporadic"])
@pytest.mark.parametrize("jitter_s", [0.0, 0.002])
@pytest.mark.parametrize("block", [7, 1 << 16])
def test_streamed_releases_equal_the_vectorised_draws(activation: str, jitter_s: float, block: int) -> None:
    t = SimpleNamespace(activation=activation, offset_s=0.013, period_s=1 / 30, max_interarrival_s=0.05,
                        jitter_s=jitter_s)
    want = _all_at_once(t, 100.0, np.random.default_rng(5))
    got = list(_source_releases(t, 100.0, np.random.default_rng(5), block=block))
    assert got == want
    assert len(got) > 1000


def test_releases_are_a_generator_not_a_list() -> None:
    t = SimpleNamespace(activation="periodic", offset_s=0.0, period_s=1e-3, max_interarrival_s=None, jitter_s=0.0)
    it = _source_releases(t, 1e9, np.random.default_rng(0))  # 10^12 releases: never materialised
    assert [next(it) for _ in range(3)] == [0.0, 1e-3, 2e-3]


def test_stream_below_its_limit_is_exact() -> None:
    xs = [0.004, 0.001, 0.003, 0.002, 0.010]
    s = SampleStream(deadline_s=0.0035)
    for x in xs:
        s.add(x)
    got = ResponseStats.of_stream(s)
    assert got == ResponseStats.of(xs, 0.0035)
    assert got.exact and got.count == 5 and got.deadline_misses == 2  # 0.004 and 0.010
    assert got.p50_s == 0.003 and got.max_s == 0.010 and got.min_s == 0.001


def test_stream_above_its_limit_uses_the_histogram_within_its_stated_error() -> None:
    rng = np.random.default_rng(1)
    xs = rng.lognormal(mean=math.log(5e-3), sigma=0.5, size=20_000)
    s = SampleStream(deadline_s=1e-2, exact_limit=1000)
    for x in xs:
        s.add(float(x))
    got = ResponseStats.of_stream(s)
    want = ResponseStats.of(list(xs), 1e-2)
    assert not got.exact and s.samples is None
    assert got.count == want.count == 20_000
    assert got.deadline_misses == want.deadline_misses
    assert got.max_s == want.max_s and got.min_s == want.min_s
    assert got.mean_s == pytest.approx(want.mean_s, rel=1e-12)
    # nearest-rank from a bin 0.1% wide against numpy's linear interpolation: within the bin and the
    # gap between neighbouring samples at that rank
    for g, w in ((got.p50_s, want.p50_s), (got.p99_s, want.p99_s)):
        assert g == pytest.approx(w, rel=2 * HISTOGRAM_RELATIVE_ERROR + 2e-3)


def test_variable_with_a_max_of_10_to_the_9_is_counted_not_built() -> None:
    d = Distribution("uniform", mean=5e8, lo=0, hi=10**9)
    assert d.support_size(0.9999) == 10**9 + 1
    assert Distribution("poisson", mean=1e12, lo=0).support_size(0.9999) > 4096  # no 10^13-step quantile loop


def test_scenario_with_a_huge_variable_is_a_located_error() -> None:
    from simulator.realtime.costing import _support
    from simulator.realtime.scenario import ScenarioError

    scn = scenario_from_dict({
        "name": "big", "variables": {"n": {"distribution": "uniform", "low": 1, "high": 10**9, "produced_by": "a"}},
        "tasks": [{"name": "a", "model": "gemm:m=8,n=8,k=8", "device": "gpu", "rate": "10 Hz", "deadline": "1 s"},
                  {"name": "b", "model": "gemm:m={n},n=8,k=8", "device": "gpu", "after": ["a"],
                   "deadline": "1 s"}]}, where="big.toml")
    with pytest.raises(ScenarioError, match=r"1000000000 distinct job sizes to cost; got variables n \(1000000000 "
                                            r"values\); expected at most 4096"):
        _support(scn, scn.task("b"))
