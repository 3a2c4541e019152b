"""The SLO-frontier study on its reduced configuration (L4): TTFT is the batch's prefill, TPOT the mean of
the decode steps, the KV cache stops fitting where the hand count says, and the frontier picks the
largest batch that meets the SLOs."""

from __future__ import annotations

import csv

import pytest

from studies._cli import load_config
from studies.slo_frontier import run


@pytest.fixture(scope="module")
def cfg():
    return load_config(run.HERE / "config.toml", reduced=True)


@pytest.fixture(scope="module")
def rows(cfg):
    return run.run(cfg)


def test_ttft_and_tpot_are_the_prefill_and_the_mean_decode_step(cfg, rows):
    from simulator import evaluate
    from simulator.engines.analytical import EvalOptions
    from simulator.hardware import load_hardware
    from workloads.resolve import load_workload

    l4 = load_hardware("l4")
    opts = EvalOptions(cuda_graphs=True)
    r = next(x for x in rows if x["batch"] == 8)
    n_in, n_out = cfg["input_len"], cfg["output_len"]
    pre = evaluate(load_workload("llama-2-7b", phase="prefill", batch=8, seq=n_in, dtype="bf16"), l4, opts)
    assert r["ttft_s"] == pytest.approx(pre.latency_s, rel=1e-9)
    # with two samples the decode steps are interpolated on the line between the first (context n_in)
    # and the last (context n_in + n_out - 2): their mean is the mean of the two ends
    ends = [evaluate(load_workload("llama-2-7b", phase="decode", batch=8, context=c, dtype="bf16"), l4, opts).latency_s
            for c in (n_in, n_in + n_out - 2)]
    assert r["tpot_s"] == pytest.approx(sum(ends) / 2, rel=1e-9)
    assert r["e2e_latency_s"] == pytest.approx(r["ttft_s"] + (n_out - 1) * r["tpot_s"], rel=1e-9)
    assert r["output_tokens_per_s"] == pytest.approx(8 * n_out / r["e2e_latency_s"], rel=1e-9)
    # a decode step streams the weights once: TPOT >= weights / the L4's 300 GB/s
    g = load_workload("llama-2-7b", phase="decode", batch=1, context=n_in, dtype="bf16")
    assert l4.main_memory.read_bandwidth_bytes_per_s == pytest.approx(300e9)
    assert min(x["tpot_s"] for x in rows) >= g.weight_bytes / 300e9


def test_memory_fit_follows_the_kv_cache(rows):
    # Llama-2-7B bf16: 6.74e9 parameters x 2 B = 13.5 GB of weights; KV cache 2 x 32 layers x 4096 x 2 B
    # = 0.5 MiB per token, 1280 tokens per sequence = 0.67 GB per sequence; the L4 has 24 GB
    fits = {r["batch"]: r["fits_in_memory"] for r in rows}
    assert fits == {1: True, 8: True, 32: False}
    kv = 2 * 32 * 4096 * 2 * (1024 + 256)
    assert 13.4e9 + 8 * kv < 24e9 < 13.4e9 + 32 * kv
    # more batch: more throughput and a longer TPOT and TTFT
    by = sorted(rows, key=lambda r: r["batch"])
    for a, b in zip(by, by[1:], strict=False):
        assert b["output_tokens_per_s"] > a["output_tokens_per_s"]
        assert b["tpot_s"] > a["tpot_s"] and b["ttft_s"] > a["ttft_s"]


def test_frontier_picks_the_best_batch_within_the_slos(rows):
    front = run.frontier(rows, [0.04, 0.06, 1.0], ttft_slo_s=10.0)
    by = {f["tpot_slo_s"]: f for f in front}
    tpot = {r["batch"]: r["tpot_s"] for r in rows}
    assert tpot[1] > 0.04  # the L4 cannot stream 13.5 GB in 40 ms
    assert by[0.04]["batch"] == "" and by[0.04]["limited_by"] == "tpot"
    assert tpot[1] <= 0.06 < tpot[8]  # 49.5 ms at batch 1, 64.5 ms at batch 8
    assert by[0.06]["batch"] == 1 and by[0.06]["limited_by"] == "tpot"
    assert by[1.0]["batch"] == 8 and by[1.0]["limited_by"] == "memory"  # batch 32 would meet the SLO but not fit
    tight = run.frontier(rows, [1.0], ttft_slo_s=rows[0]["ttft_s"])  # only batch 1's prefill is fast enough
    assert tight[0]["batch"] == 1 and tight[0]["limited_by"] == "ttft"


def test_runner_writes_csvs_and_figure(tmp_path, rows, cfg):
    run.write_csv(rows, tmp_path / run.CSV_NAME)  # what `main` writes before it draws (the run is the fixture's)
    assert run.main(["--reduced", "--plot-only", "--out", str(tmp_path)]) == 0
    with open(tmp_path / run.CSV_NAME, newline="") as f:
        back = list(csv.DictReader(f))
    assert [int(r["batch"]) for r in back] == cfg["batches"] and set(back[0]) == set(run.COLUMNS)
    assert (tmp_path / run.FIGURE_NAME).read_bytes()[:4] == b"\x89PNG"


def test_committed_results_are_current(rows, committed_csv):
    """The committed results.csv (and the figures drawn from it) is today's model, in every column, on every row
    the reduced configuration computes."""
    n = committed_csv(rows, run.HERE / run.CSV_NAME, run.write_csv, ["device", "batch"],
                      refresh="python -m studies.slo_frontier --out studies/slo_frontier --figures docs/figures")
    assert n == len(rows)


def test_committed_frontier_is_the_frontier_of_the_committed_results(tmp_path):
    """frontier.csv is what `frontier` picks from the committed results.csv under the full configuration's SLOs
    (with results.csv current, by the test above, so is the frontier)."""
    full = load_config(run.HERE / "config.toml")
    with open(run.HERE / run.CSV_NAME, newline="") as f:
        rows = [{**r, "batch": int(r["batch"]), "fits_in_memory": r["fits_in_memory"] == "True",
                 **{k: float(r[k]) for k in ("ttft_s", "tpot_s", "output_tokens_per_s")}} for r in csv.DictReader(f)]
    assert len(rows) == len(full["devices"]) * len(full["batches"])
    run.write_csv(run.frontier(rows, full["tpot_slos_s"], full["ttft_slo_s"]), tmp_path / "f.csv", run.FRONTIER_COLUMNS)
    assert (tmp_path / "f.csv").read_text() == (run.HERE / run.FRONTIER_NAME).read_text()
