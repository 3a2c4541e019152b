"""A benchmark client's warm-up (``ServeConfig.warmup_requests``, ``serve --warmup-requests``): the warm-up
requests all finish before the measured ones start (AIPerf ``_execute_phases``, perf_analyzer
``PerformWarmup`` + ``WaitForWarmupAndCleanup``), so a measured closed loop again starts with its N clients
sending at once; the summary covers the measured requests only."""

from __future__ import annotations

import json

import pytest

from simulator.cli import main
from simulator.serving import ServeConfig, ServingError, simulate_serving

MODEL, HW = "llama-2-7b", "h100-sxm5-80gb"
KEYS = ("makespan_s", "output_tokens_per_s", "requests_per_s", "energy_j", "kv_cache_utilization")


def _same_summary(a: dict, b: dict) -> None:
    for k in ("ttft_s", "tpot_s", "e2e_s"):
        assert b[k] == pytest.approx(a[k], rel=1e-12), k
    for k in KEYS:
        assert b[k] == pytest.approx(a[k], rel=1e-12), k
    assert b["batch_tokens"] == a["batch_tokens"] and b["preemptions"] == a["preemptions"]
    assert b["requests"] == a["requests"] and b["output_tokens"] == a["output_tokens"]


@pytest.mark.parametrize("arrival", ["concurrency:n=4", "burst"])
def test_a_drained_warmup_leaves_the_measured_run_as_a_fresh_one(arrival):
    """The simulated engine keeps no state across the drain (its prefix cache is warm from the start), so the
    12 measured requests after 6 warm-up requests run exactly as 12 requests alone: the start-up queue of
    the N clients sending at once stays in the measured mean."""
    base = dict(arrival=arrival, lengths="fixed:in=2000,out=64", requests=12)
    alone = simulate_serving(MODEL, HW, ServeConfig(**base))
    warm = simulate_serving(MODEL, HW, ServeConfig(**base, warmup_requests=6))
    _same_summary(alone.summary, warm.summary)
    assert warm.summary["warmup_requests"] == 6 and alone.summary["warmup_requests"] == 0
    # the measured requests keep their ids (6..17) and their times count from the end of the warm-up
    assert [r.id for r in warm.requests] == list(range(6, 18))
    assert [r.arrival_s for r in warm.requests] == pytest.approx([r.arrival_s for r in alone.requests], abs=1e-9)
    assert min(r.arrival_s for r in warm.requests) == 0.0
    assert len(warm.iterations) == len(alone.iterations) and warm.iterations[0].start_s == pytest.approx(0.0)
    if arrival.startswith("concurrency"):  # the 4 clients again send at once: their 4 prompts share the
        first = sorted(warm.requests, key=lambda r: r.id)[:4]  # first iterations, slower than one alone
        lone = simulate_serving(MODEL, HW, ServeConfig(**{**base, "arrival": "concurrency:n=1", "requests": 1}))
        assert all(r.arrival_s == 0.0 for r in first)
        assert min(r.ttft_s for r in first) > 1.5 * lone.summary["ttft_s"]["mean"]


def test_open_loop_gaps_restart_after_the_warmup():
    """Open-loop arrivals: the warm-up takes the first W arrivals; the measured ones keep their gaps,
    the first of them at the moment the warm-up drained."""
    base = dict(arrival="poisson:qps=5", lengths="fixed:in=256,out=16", requests=10, arrival_seed=0)
    from simulator.serving.arrivals import client_arrival_times, parse_arrival

    times = client_arrival_times(parse_arrival(base["arrival"]), 0, count=13)
    warm = simulate_serving(MODEL, HW, ServeConfig(**base, warmup_requests=3))
    got = [r.arrival_s for r in sorted(warm.requests, key=lambda r: r.id)]
    assert got == pytest.approx(list(times[3:] - times[3]), abs=1e-9)
    assert warm.summary["requests"] == 10


def test_bad_warmup_settings_are_located():
    with pytest.raises(ServingError, match=r"^warmup_requests: got -1; expected a non-negative integer$"):
        simulate_serving(MODEL, HW, ServeConfig(requests=4, warmup_requests=-1))
    with pytest.raises(ServingError, match=r"^warmup_requests: a warm-up of 2 requests with an arrival window"):
        simulate_serving(MODEL, HW, ServeConfig(arrival="poisson:qps=2", duration_s=5.0, requests=None,
                                                warmup_requests=2))


def test_serve_flag(capsys):
    args = ["serve", MODEL, "--hardware", HW, "--lengths", "fixed:in=256,out=8", "--requests", "6",
            "--arrival", "concurrency:n=2", "--json"]
    assert main([*args, "--warmup-requests", "4"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["requests"] == 6 and out["warmup_requests"] == 4 and out["config"]["warmup_requests"] == 4
    with pytest.raises(SystemExit) as exc:
        main([*args, "--warmup-requests", "-3"])
    assert exc.value.code == 2
    assert "argument --warmup-requests: got '-3'; expected an integer >= 0" in capsys.readouterr().err


def test_the_validation_reads_a_warmup_setting(one_row_csv):
    """A published run's stated warm-up (``warmup_requests=K`` in the settings column) reaches the replay's
    ServeConfig; a negative count is one located line."""
    from simulator.calibration.serving_validation import ServingDataError, read_serving_csv

    f = one_row_csv("warm.csv", settings="warmup_requests=20", settings_source="the client's command line")
    assert dict(read_serving_csv(f)[0].settings) == {"warmup_requests": 20}
    f = one_row_csv("cold.csv", settings="warmup_requests=-2", settings_source="the client's command line")
    with pytest.raises(ServingDataError, match=r"cold.csv:2: settings: warmup_requests: got '-2'; expected a "
                                               r"non-negative integer"):
        read_serving_csv(f)


def _trace(path, rows: int) -> str:
    path.write_text("arrival_s,input_len,output_len\n" + "".join(f"{0.01 * i:.2f},64,4\n" for i in range(rows)))
    return f"trace:{path}"


def test_a_trace_warms_up_on_its_first_rows_and_measures_the_rest(tmp_path):
    """A trace's warm-up is its first W rows; without ``requests`` every later row is measured (the run had
    cut the trace at W + 1000 rows, the default request count of the synthetic arrivals)."""
    arrival = _trace(tmp_path / "t.csv", 1005)
    warm = simulate_serving("gpt2", HW, ServeConfig(arrival=arrival, requests=None, warmup_requests=3))
    assert warm.summary["requests"] == 1002 and warm.summary["warmup_requests"] == 3
    assert [r.id for r in warm.requests] == list(range(3, 1005))


def test_a_warmup_of_a_whole_trace_is_located(tmp_path, capsys):
    """W warm-up requests on a trace of W rows or fewer leave nothing to measure: one located line (it had
    raised an IndexError)."""
    arrival = _trace(tmp_path / "t.csv", 4)
    for w in (4, 5):
        with pytest.raises(ServingError, match=rf"^warmup_requests: got {w} with a trace of 4 requests \(.*t\.csv\); "
                                               r"expected fewer than 4"):
            simulate_serving("gpt2", HW, ServeConfig(arrival=arrival, requests=None, warmup_requests=w))
    assert main(["serve", "gpt2", "--hardware", HW, "--arrival", arrival, "--warmup-requests", "5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "warmup_requests: got 5 with a trace of 4 requests" in err
