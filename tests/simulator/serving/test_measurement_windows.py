"""A time-window benchmark client (``ServeConfig.measurement_interval_s``, ``serve --measurement-interval``):
perf_analyzer's windows under genai-perf (1.2 x the interval each, requests counted in the window they finish
in, 3 windows agreeing within the stability percentage, at most 10; ``src/inference_profiler.cc``)."""

from __future__ import annotations

import json
from types import SimpleNamespace as R

import pytest

from simulator.cli import main
from simulator.serving import ServeConfig, ServingError, simulate_serving
from simulator.serving.window import measured_windows

MODEL, HW = "llama-2-7b", "h100-sxm5-80gb"


def _rec(arrival: float, finish: float) -> R:
    return R(arrival_s=arrival, finish_s=finish)


# interval 10 s -> windows of 12 s: [0, 12] holds the finishes at 5 and 11 (latencies 5, 6), [12, 24] the one
# at 20 (latency 8), [24, 36] the one at 30 (9), [36, 48] the one at 40 (10)
RECORDS = [_rec(0, 5), _rec(5, 11), _rec(12, 20), _rec(21, 30), _rec(30, 40)]


def test_genai_perf_default_stops_after_three_windows_that_each_count_a_request():
    counted, info = measured_windows(RECORDS, 10.0)  # 999 %: 2 / 1 requests and 9 / 5.5 s latencies agree
    assert [r.finish_s for r in counted] == [5, 11, 20, 30]  # the request finishing at 40 s is not counted
    assert info["windows"] == 3 and info["stable"] and info["window_s"] == pytest.approx(12.0)
    assert info["end_s"] == pytest.approx(36.0) and info["counted_requests"] == 4


def test_a_tight_percentage_waits_for_agreeing_windows():
    # 30 %: windows 2-4 count 1, 1, 1 requests with mean latencies 8, 9, 10 s (10 / 8 = 1.25 <= 1.3)
    counted, info = measured_windows(RECORDS, 10.0, stability_pct=30.0)
    assert info["windows"] == 4 and info["stable"] and len(counted) == 5
    # 10 %: 10 / 8 > 1.1 and 2 / 1 > 1.1 at every window, so all 10 windows (120 s) run, unstable
    counted, info = measured_windows(RECORDS, 10.0, stability_pct=10.0)
    assert info["windows"] == 10 and not info["stable"] and info["end_s"] == pytest.approx(120.0)


def test_an_empty_window_is_never_stable():
    # nothing finishes in [0, 12]: windows 1-3 count 0, 1, 1, so a fourth window runs (13, 25, 37 s)
    counted, info = measured_windows([_rec(0, 13), _rec(13, 25), _rec(25, 37)], 10.0)
    assert info["windows"] == 4 and info["stable"] and len(counted) == 3


def test_a_windowed_run_averages_the_counted_requests_of_the_same_run():
    """The summary's latencies and throughput are those of the requests the windows count, in a run long
    enough that its clients still send when the last window closes (8 requests were asked for)."""
    base = dict(arrival="concurrency:n=4", lengths="fixed:in=512,out=64", requests=8)
    got = simulate_serving(MODEL, HW, ServeConfig(**base, measurement_interval_s=0.5))
    m = got.summary["measurement"]
    assert m["windows"] == 3 and m["stable"] and m["window_s"] == pytest.approx(0.6)
    plain = simulate_serving(MODEL, HW, ServeConfig(**{**base, "requests": m["simulated_requests"]}))
    assert m["simulated_requests"] > 8 and max(r.arrival_s for r in plain.requests) >= m["end_s"]
    counted, _ = measured_windows(plain.requests, 0.5)
    assert got.summary["requests"] == len(counted) == m["counted_requests"] < m["simulated_requests"]
    ttft = sum(r.ttft_s for r in counted) / len(counted)
    assert got.summary["ttft_s"]["mean"] == pytest.approx(ttft, rel=1e-12)
    span = max(r.finish_s for r in counted) - min(r.arrival_s for r in counted)
    assert got.summary["output_tokens_per_s"] == pytest.approx(64 * len(counted) / span, rel=1e-12)
    # without the option every request counts, as before
    assert "measurement" not in plain.summary and plain.summary["requests"] == m["simulated_requests"]


def test_bad_window_settings_are_located():
    with pytest.raises(ServingError, match=r"^measurement_interval_s: got 0; expected a positive number of seconds$"):
        simulate_serving(MODEL, HW, ServeConfig(requests=4, measurement_interval_s=0))
    with pytest.raises(ServingError, match=r"^stability_percentage: got -5; expected a positive percentage$"):
        simulate_serving(MODEL, HW, ServeConfig(requests=4, measurement_interval_s=1.0, stability_percentage=-5))


def test_serve_flag(capsys):
    args = ["serve", MODEL, "--hardware", HW, "--lengths", "fixed:in=256,out=8", "--requests", "6",
            "--arrival", "concurrency:n=2", "--json"]
    assert main([*args, "--measurement-interval", "200 ms"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["config"]["measurement_interval_s"] == pytest.approx(0.2)
    assert out["measurement"]["window_s"] == pytest.approx(0.24) and out["measurement"]["windows"] >= 3
    with pytest.raises(SystemExit) as exc:
        main([*args, "--measurement-interval", "0"])
    assert exc.value.code == 2
    assert "argument --measurement-interval: got '0'; expected a positive finite duration" in capsys.readouterr().err


def test_the_validation_reads_a_window_setting(one_row_csv):
    from simulator.calibration.serving_validation import ServingDataError, read_serving_csv

    f = one_row_csv("win.csv", settings="measurement_interval_s=100", settings_source="the client's command line")
    assert dict(read_serving_csv(f)[0].settings) == {"measurement_interval_s": 100.0}
    f = one_row_csv("bad.csv", settings="measurement_interval_s=-1", settings_source="the client's command line")
    with pytest.raises(ServingDataError, match=r"bad.csv:2: settings: measurement_interval_s: got '-1'; expected a "
                                               r"positive number of seconds"):
        read_serving_csv(f)
