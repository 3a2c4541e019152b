"""The serving-capacity study on its reduced configuration (Llama 3 8B on one H100, vLLM's scheduler): the
rows are what simulate_serving gives, the shared bucket cache changes nothing, the sweep stops where the
rule says, and capacity and its price follow from the rows by hand."""

from __future__ import annotations

import csv

import pytest

from studies._cli import load_config
from studies.serving_capacity import run


@pytest.fixture(scope="module")
def cfg():
    return load_config(run.HERE / "config.toml", reduced=True)


@pytest.fixture(scope="module")
def rows(cfg):
    return run.run(cfg)


def test_the_shared_bucket_cache_changes_no_result(cfg):
    """Two runs of the same deployment in one cache (the second reusing the first's buckets) give the same
    summary as a run without it."""
    short = {**cfg, "duration_s": 5}
    plain = run.simulate("llama-3-8b", "h100-sxm5-80gb", 1, short, arrival="poisson:qps=20").summary
    with run.shared_pricer_cache():
        run.simulate("llama-3-8b", "h100-sxm5-80gb", 1, short, arrival="poisson:qps=40")
        shared = run.simulate("llama-3-8b", "h100-sxm5-80gb", 1, short, arrival="poisson:qps=20").summary
    for key in ("ttft_s", "tpot_s", "e2e_s", "output_tokens_per_s", "energy_j"):
        assert shared[key] == plain[key], key
    assert shared["engine_calls"] < plain["engine_calls"]  # the buckets of the first run were reused
    import simulator.serving.iteration as iteration

    assert iteration.IterationPricer.__name__ == "IterationPricer"  # restored after the block


def test_rows_meet_the_slo_as_their_percentiles_say(rows):
    for r in rows:
        assert r["meets_slo"] == (r["ttft_p99_s"] <= 2.0 and r["tpot_p99_s"] <= 0.1), r
    # at a trickle a decode step streams the 16.1 GB of bf16 weights: TPOT >= 16.06e9 B / 3.35 TB/s = 4.8 ms
    light = min(rows, key=lambda r: r["rate_rps"])
    assert light["rate_rps"] == 2 and 16.06e9 / 3.35e12 < light["tpot_p50_s"] < 2 * 16.06e9 / 3.35e12
    # a Poisson window of 60 s at 2 requests/s: about 120 requests (101 for seed 0)
    assert 80 < light["requests"] < 160


def test_the_sweep_stops_after_two_misses_and_bisects(cfg, rows):
    grid = [r for r in rows if r["rate_rps"] in cfg["deployments"][0]["rates"]]
    assert [r["meets_slo"] for r in grid][-2:] == [False, False]   # stopped after two misses in a row
    assert all(r["meets_slo"] for r in grid[:-2])
    extra = sorted(r["rate_rps"] for r in rows if r["rate_rps"] not in cfg["deployments"][0]["rates"])
    assert len(extra) == cfg["refine_steps"]
    ok, bad = run._grid_capacity(grid)
    assert all(ok < x < bad for x in extra)
    assert extra[0] == (ok + bad) / 2  # the first bisection point
    # the overloaded tail: throughput saturates below the offered rate, TTFT grows
    last = max(rows, key=lambda r: r["rate_rps"])
    assert last["requests_per_s"] < 0.8 * last["rate_rps"] and last["ttft_p99_s"] > 2.0


def test_capacity_and_its_price_by_hand(cfg, rows):
    cap = run.capacity(rows, cfg)
    assert len(cap) == 1
    c = cap[0]
    passing = sorted(r["rate_rps"] for r in rows if r["meets_slo"])
    assert c["capacity_rps"] == passing[-1]
    assert c["usd_per_device_hour"] == 2.99  # RunPod Secure Cloud 1x_H100-SXM_SECURE (prices.toml)
    assert c["usd_per_hour"] == 2.99 and c["requests_per_usd"] == pytest.approx(c["capacity_rps"] * 3600 / 2.99)
    assert c["limited_by"] in ("ttft", "tpot", "ttft+tpot") and c["on_frontier"] is True
    assert "1x_H100-SXM_SECURE" in c["price_source"] and c["price_date"] == "read 2026-12-07 (catalog commit 0727c2bd)"
    at = next(r for r in rows if r["rate_rps"] == c["capacity_rps"])
    assert c["usd_per_million_output_tokens"] == pytest.approx(2.99 / 3600 / at["output_tokens_per_s"] * 1e6)


def test_the_frontier_keeps_deployments_nobody_beats():
    rows = [{"model": "m", "usd_per_hour": 1.0, "capacity_rps": 5.0}, {"model": "m", "usd_per_hour": 2.0, "capacity_rps": 4.0},
            {"model": "m", "usd_per_hour": 3.0, "capacity_rps": 9.0}, {"model": "n", "usd_per_hour": 9.0, "capacity_rps": 1.0},
            {"model": "m", "usd_per_hour": 3.0, "capacity_rps": 9.0}, {"model": "m", "usd_per_hour": 0.5, "capacity_rps": 0.0}]
    # 2 $/h for 4 req/s is beaten by 1 $/h for 5; two equal rows both stay; no capacity is never on it
    assert run.frontier_flags(rows) == [True, False, True, True, True, False]


def test_runner_writes_csvs_and_figures(tmp_path, rows, cfg):
    run.write_csv(rows, tmp_path / run.CSV_NAME)
    run.write_csv(run.capacity(rows, cfg), tmp_path / run.CAPACITY_NAME, run.CAPACITY_COLUMNS)
    assert run.main(["--reduced", "--plot-only", "--out", str(tmp_path)]) == 0
    with open(tmp_path / run.CSV_NAME, newline="") as f:
        back = list(csv.DictReader(f))
    assert len(back) == len(rows) and set(back[0]) == set(run.COLUMNS)
    for name in (run.FIGURE_NAME, run.FRONTIER_FIGURE):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"


def test_a_bad_slo_is_located(tmp_path, capsys):
    text = (run.HERE / "config.toml").read_text().replace('"tpot_p99<=100 ms"', '"tpop_p99<=100 ms"')
    bad = tmp_path / "bad.toml"
    bad.write_text(text)
    assert run.main(["--config", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{bad}: slo[1]: " in err and "did you mean 'tpot'" in err
    assert not (tmp_path / "o").exists()


def test_committed_results_are_current(rows, committed_csv):
    n = committed_csv(rows, run.HERE / run.CSV_NAME, run.write_csv, ["deployment", "scheduler", "rate_rps"],
                      refresh="python -m studies.serving_capacity --out studies/serving_capacity --figures docs/figures")
    assert n == len(rows)


def test_committed_capacity_is_the_capacity_of_the_committed_results(committed_csv):
    """capacity.csv is what `capacity` gives from the committed results.csv under the full configuration
    (to the CSV's 6 digits: the cost per million tokens is recomputed from a rounded throughput)."""
    full = load_config(run.HERE / "config.toml")
    with open(run.HERE / run.CSV_NAME, newline="") as f:
        rows = [{**r, "rate_rps": float(r["rate_rps"]), "meets_slo": r["meets_slo"] == "True",
                 **{k: float(r[k]) for k in ("ttft_p99_s", "tpot_p99_s", "output_tokens_per_s")}}
                for r in csv.DictReader(f)]
    assert {(r["deployment"], r["scheduler"]) for r in rows} == {(d["name"], s) for d in full["deployments"]
                                                                 for s in full["schedulers"]}
    cap = run.capacity(rows, full)
    n = committed_csv(cap, run.HERE / run.CAPACITY_NAME, lambda r, p: run.write_csv(r, p, run.CAPACITY_COLUMNS),
                      ["deployment", "scheduler"], refresh="python -m studies.serving_capacity --out studies/serving_capacity")
    with open(run.HERE / run.CAPACITY_NAME, newline="") as f:
        assert n == len(cap) == len(list(csv.DictReader(f)))
