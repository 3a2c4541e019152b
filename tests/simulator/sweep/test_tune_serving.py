"""`nodeperf tune --serve`: rate bisection by hand, a tiny real search's ordering, located bad input."""

from __future__ import annotations

import json

import pytest

import simulator.sweep.tune_serving as ts
from simulator.cli import main
from simulator.serving import ServeConfig
from simulator.serving.config import ServingError


def _fake_probe(capacity: float):
    def probe(model, cand, base, qps, probe_seconds):
        met = qps <= capacity
        return {"slo": [{"metric": "ttft_p99", "value_s": 0.5 if met else 5.0, "bound_s": 2.0, "met": met}],
                "cost": {"usd_per_million_tokens": 10.0 / cand.replicas}, "ttft_s": {"p99": 0.5},
                "tpot_s": {"p99": 0.01}, "output_tokens_per_s": 100.0}
    return probe


def test_bisection_by_hand(monkeypatch):
    # capacity 3 req/s: 0.25, 0.5, 1, 2 pass, 4 fails; then 3 passes, 3.5, 3.25, 3.125, 3.0625 fail -> 3.0
    monkeypatch.setattr(ts, "_probe", _fake_probe(3.0))
    base = ServeConfig(slo=("ttft_p99<=2 s",), requests=50)
    out = ts.max_rate("m", ts.ServeCandidate("h100-sxm5-80gb"), base, qps_min=0.25, steps=5)
    assert out.qps == 3.0 and out.reason is None
    assert [q for q, _, _ in out.probes] == [0.25, 0.5, 1, 2, 4, 3.0, 3.5, 3.25, 3.125, 3.0625]
    # requests per probe: at least 50, else 30 s of arrivals (4 req/s -> 120)
    assert [n for q, _, n in out.probes][:5] == [50, 50, 50, 60, 120]
    low = ts.max_rate("m", ts.ServeCandidate("x"), base, qps_min=4.0)
    assert low.qps is None and low.reason.startswith("SLO violated at the lowest rate (4 req/s): ttft_p99 = 5 s > 2 s")


def test_ranking_and_rejection_reasons(monkeypatch):
    monkeypatch.setattr(ts, "_probe", _fake_probe(3.0))
    base = ServeConfig(slo=("ttft_p99<=2 s",))
    cands = ts.candidates(["h100-sxm5-80gb"], replicas=[1, 2])
    best = ts.tune_serving("m", cands, base, "min-cost").best
    assert best.candidate.replicas == 2 and best.usd_per_million_tokens == 5.0
    with pytest.raises(ts.ServeTuneError, match="unknown serving objective; got 'max-qpz'.*did you mean 'max-qps'"):
        ts.tune_serving("m", cands, base, "max-qpz")
    with pytest.raises(ServingError, match="tpt"):
        ts.tune_serving("m", cands, ServeConfig(slo=("tpt_p99<=1 s",)), "max-qps")
    with pytest.raises(ts.ServeTuneError, match="--slo: none given"):
        ts.tune_serving("m", cands, ServeConfig(), "max-qps")


def test_tiny_real_search_h100_beats_a100(capsys):
    # Same 7B model, same SLO: the H100 (3.35 TB/s, 989 dense bf16 TFLOP/s) serves more than the A100
    # (2.04 TB/s, 312 TFLOP/s); a plan of 2 devices on a one-device card is rejected, saying why.
    args = ["tune", "llama-2-7b", "--serve", "--hardware", "h100-sxm5-80gb,a100-sxm4-80gb", "--tp", "1,2",
            "--slo", "tpot_p99<=40 ms", "--lengths", "fixed:in=256,out=32", "--probe-requests", "40",
            "--probe-seconds", "5", "--qps-min", "1", "--qps-max", "64", "--json"]
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    ranked = [(r["hardware"], r["tp"]) for r in doc["ranked"]]
    assert ranked == [("h100-sxm5-80gb", 1), ("a100-sxm4-80gb", 1)]
    assert doc["ranked"][0]["qps"] > doc["ranked"][1]["qps"] > 1
    assert all(r["tpot_p99_s"] <= 0.040 for r in doc["ranked"])
    assert [r["reason"].split(":")[0] for r in doc["rejected"]] == ["cannot run", "cannot run"]
    assert "expected a system with at least 2 devices" in doc["rejected"][0]["reason"]


def test_cli_bad_input_exit_2(capsys):
    base = ["tune", "llama-2-7b", "--serve", "--hardware", "h100-sxm5-80gb", "--lengths", "fixed:in=64,out=8"]
    assert main([*base, "--slo", "ttft_p99<=2 s", "--objective", "min-cots"]) == 2
    assert "did you mean 'min-cost'" in capsys.readouterr().err
    assert main([*base, "--slo", "ttfb_p99<=2 s"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--slo #1" in err and "ttfb" in err
    assert main([*base, "--slo", "ttft_p99<=2 s", "--replicas", "0"]) == 2
    assert "--replicas: '0' is not a positive integer" in capsys.readouterr().err


MIN_COST = ["tune", "llama-2-7b", "--serve", "--hardware", "h100-sxm5-80gb", "--slo", "tpot_p99<=40 ms",
            "--lengths", "fixed:in=256,out=32", "--probe-requests", "40", "--probe-seconds", "5", "--qps-min", "1",
            "--qps-max", "4", "--objective", "min-cost"]


def test_min_cost_states_offered_and_achieved_rates(capsys):
    # the capacity is the offered Poisson rate; the cost is priced at what that probe served: cost per million
    # output tokens = the deployment's hourly price / (achieved output tokens/s x 3600) x 1e6
    assert main([*MIN_COST, "--json"]) == 0
    best = json.loads(capsys.readouterr().out)["best"]
    assert best["offered_requests_per_s"] == best["qps"] == 4.0  # the SLO holds up to --qps-max
    assert best["offered_output_tokens_per_s"] == 4.0 * 32  # fixed 32 output tokens a request
    assert best["cost_rate"] == "achieved"
    # the run's makespan outlasts the last arrival: fewer requests/s served than offered
    assert 0 < best["achieved_requests_per_s"] < best["offered_requests_per_s"]
    assert best["achieved_output_tokens_per_s"] == pytest.approx(best["achieved_requests_per_s"] * 32, rel=1e-12)
    assert best["achieved_output_tokens_per_s"] == best["output_tokens_per_s"]
    assert best["usd_per_hour"] == pytest.approx(2.99)  # one H100 SXM at the catalog's on-demand rent
    assert best["usd_per_million_tokens"] == pytest.approx(
        best["usd_per_hour"] / (best["achieved_output_tokens_per_s"] * 3600) * 1e6, rel=1e-9)
    assert main(MIN_COST) == 0
    text = capsys.readouterr().out
    assert "offered" in text and "achieved" in text and "USD/h" in text
    row = next(line for line in text.splitlines() if line.startswith("  1. "))
    fields = row.split()  # 1. hardware tp offered achieved tokens/s USD/h USD/M
    assert fields[3] == ">=4" and best["capacity_capped"] and float(fields[4]) == pytest.approx(best["achieved_requests_per_s"], rel=1e-2)
    assert float(fields[5]) == pytest.approx(best["achieved_output_tokens_per_s"], rel=1e-3)
    assert float(fields[6]) == pytest.approx(2.99) and float(fields[7]) == pytest.approx(
        best["usd_per_million_tokens"], rel=1e-2)


def _rich_probe(capacity: float):
    plain = _fake_probe(capacity)

    def probe(*args):
        return {**plain(*args), "requests": 50, "output_tokens": 6400, "requests_per_s": 1.0,
                "output_tokens_per_s": 128.0, "devices": 1}
    return probe


def test_the_search_probes_qps_max_and_says_when_every_slo_held_there(monkeypatch, capsys):
    """Doubling from 0.25 req/s stops at 64 below --qps-max 100: 100 is probed too (64 had been reported as the
    capacity of a deployment that meets its SLOs at 100), and a capacity that every probe up to --qps-max met is
    marked as a lower bound (``capacity_capped``; ``>=`` in the table)."""
    monkeypatch.setattr(ts, "_probe", _rich_probe(1000.0))
    base = ServeConfig(slo=("ttft_p99<=2 s",), requests=50)
    out = ts.max_rate("m", ts.ServeCandidate("h100-sxm5-80gb"), base, qps_min=0.25, qps_max=100.0)
    assert out.qps == 100.0 and out.capped and out.to_json()["capacity_capped"] is True
    assert [q for q, _, _ in out.probes] == [0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 100.0]
    # capacity 80: 64 passes, 100 fails, then bisection: 82 fails, 73, 77.5, 79.75 pass, 80.875 fails
    monkeypatch.setattr(ts, "_probe", _rich_probe(80.0))
    out = ts.max_rate("m", ts.ServeCandidate("h100-sxm5-80gb"), base, qps_min=0.25, qps_max=100.0)
    assert out.qps == 79.75 and not out.capped and out.to_json()["capacity_capped"] is False
    monkeypatch.undo()  # a real search: GPT-2 meets a 2 s TTFT at every probe up to 3 req/s
    assert main(["tune", "gpt2", "--serve", "--hardware", "h100-sxm5-80gb", "--slo", "ttft_p99<=2 s", "--lengths",
                 "fixed:in=64,out=8", "--probe-requests", "20", "--probe-seconds", "1", "--qps-max", "3"]) == 0
    text = capsys.readouterr().out
    assert ">=3 " in text and "the capacity is at least that" in text
