"""The disaggregation study on its reduced configuration (Llama 3 8B, 4 H100s of a DGX H100, 1,024-token
prompts: 4 colocated replicas against 1 prefill + 3 decode replicas): rates, attainment and goodput by
hand, the decode pool's TPOT free of prefill work, and located errors for deployments that do not compare."""

from __future__ import annotations

import csv
import math

import pytest

from studies._cli import load_config
from studies.disaggregation import run


@pytest.fixture(scope="module")
def cfg():
    return load_config(run.HERE / "config.toml", reduced=True)


@pytest.fixture(scope="module")
def rows(cfg):
    return run.run(cfg)


def test_rates_follow_the_token_load(cfg, rows):
    for r in rows:
        assert r["gpus"] == 4
        assert r["rate_rps"] == pytest.approx(r["load_tokens_per_s_per_gpu"] * 4 / (1024 + 256), rel=1e-5)
        assert 0.0 <= r["attainment"] <= 1.0
    # 2,000 tokens/s per GPU on 4 GPUs of 1,280-token requests: 6.25 requests/s, about 187 in 30 s
    first = next(r for r in rows if r["load_tokens_per_s_per_gpu"] == 2000)
    assert first["rate_rps"] == 6.25 and 150 < first["requests"] < 230


def test_the_decode_pool_runs_no_prefill(rows):
    """The split's decode replicas run decode-only iterations: its TPOT p99 stays within 25% of its
    light-load value while the colocated replicas' grows with the prefill chunks mixed into their steps."""
    def tpot(dep):
        mine = sorted((r for r in rows if r["deployment"] == dep and r["ttft_slo_s"] == 0.5
                       and r["tpot_slo_s"] == 0.01), key=lambda r: r["rate_rps"])
        return [r["tpot_p99_s"] for r in mine]

    split, colo = tpot("p1d3"), tpot("colocated")
    assert max(split) < 1.25 * split[0]
    assert max(colo) > 2 * colo[0]


def test_served_fraction_tells_a_growing_queue(rows):
    """At light load the deployment produces the decode tokens its arrivals need (within Poisson noise); past
    the single prefill GPU's capacity the 1+3 split falls behind."""
    first = {r["deployment"]: r["served_fraction"] for r in rows if r["load_tokens_per_s_per_gpu"] == 2000}
    assert all(0.95 < v < 1.05 for v in first.values()), first
    split = {r["load_tokens_per_s_per_gpu"]: r["served_fraction"] for r in rows if r["deployment"] == "p1d3"}
    # the sweep's last load (two misses in a row), 62.5 requests/s of 1,024-token prompts or more: one H100
    # prefills about 42 per second
    assert max(split) >= 20000 and split[max(split)] < 0.8


def test_goodput_interpolates_attainment_by_hand():
    g = [{"rate_rps": 4.0, "gpus": 4, "attainment": 1.0}, {"rate_rps": 8.0, "gpus": 4, "attainment": 0.95},
         {"rate_rps": 12.0, "gpus": 4, "attainment": 0.75}, {"rate_rps": 16.0, "gpus": 4, "attainment": 0.95}]
    # 0.95 at 8/s, 0.75 at 12/s: 0.9 is crossed a quarter of the way, 9 requests/s on 4 GPUs
    assert run.goodput_of(g, 0.9) == pytest.approx(9.0 / 4)
    assert run.goodput_of(g[:2], 0.9) == 8.0 / 4  # met at the last load of the grid
    assert run.goodput_of([{**g[0], "attainment": 0.5}], 0.9) == 0.0
    # a load that falls behind counts as attainment 0: 0.9 is crossed a tenth of the way from 1.0 at 4/s
    behind = [g[0], {**g[1], "served_fraction": 0.8}]
    assert run.goodput_of(behind, 0.9, min_served=0.9) == pytest.approx(4.4 / 4)
    assert run.goodput_of(behind, 0.9) == 8.0 / 4  # without the condition


def test_the_winner_by_hand(cfg, rows):
    out = run.goodput(rows, cfg)
    assert len(out) == len(cfg["ttft_slos_s"]) * len(cfg["tpot_slos_s"])
    for o in out:
        mine = [r for r in rows if r["ttft_slo_s"] == o["ttft_slo_s"] and r["tpot_slo_s"] == o["tpot_slo_s"]]
        c = run.goodput_of([r for r in mine if r["deployment"] == "colocated"], 0.9, 0.9)
        d = run.goodput_of([r for r in mine if r["deployment"] == "p1d3"], 0.9, 0.9)
        assert (o["colocated_rps_per_gpu"], o["disaggregated_rps_per_gpu"]) == (c, d)
        if c > 0:
            assert o["ratio"] == pytest.approx(d / c)
            assert o["winner"] == ("tie" if abs(d / c - 1) <= 0.02 else "disaggregated" if d > c else "colocated")
        else:
            assert o["winner"] in ("neither", "disaggregated") and (math.isinf(o["ratio"]) or math.isnan(o["ratio"]))
    # a looser TPOT bound never lowers goodput
    by = {(o["ttft_slo_s"], o["tpot_slo_s"]): o for o in out}
    for a in cfg["ttft_slos_s"]:
        tp = sorted(cfg["tpot_slos_s"])
        for lo, hi in zip(tp, tp[1:], strict=False):
            assert by[(a, hi)]["colocated_rps_per_gpu"] >= by[(a, lo)]["colocated_rps_per_gpu"]


@pytest.mark.parametrize("deployments,message", [
    ([{"name": "c", "replicas": 4}, {"name": "s", "prefill": 1, "decode": 2}],
     "deployments[1]: 3 GPUs; got 3; expected 4 like deployments[0]"),
    ([{"name": "c", "replicas": 4}, {"name": "s", "prefill": 4}], "deployments[1]: got keys ['name', 'prefill']"),
    ([{"name": "s", "prefill": 2, "decode": 2}], "got 0 colocated deployments; expected exactly one"),
])
def test_deployments_that_do_not_compare_are_located(tmp_path, capsys, deployments, message):
    text = (run.HERE / "config.toml").read_text()
    head = text[: text.index("[[deployments]]")]
    tables = "".join("[[deployments]]\n" + "".join(f"{k} = {v!r}\n".replace("'", '"') for k, v in d.items())
                     for d in deployments)
    bad = tmp_path / "bad.toml"
    bad.write_text(head + tables)
    assert run.main(["--config", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(bad) in err and message in err, err
    assert not (tmp_path / "o").exists()


def test_runner_writes_csvs_and_figure(tmp_path, rows, cfg):
    run.write_csv(rows, tmp_path / run.CSV_NAME)
    run.write_csv(run.goodput(rows, cfg), tmp_path / run.GOODPUT_NAME, run.goodput_columns(cfg))
    assert run.main(["--reduced", "--plot-only", "--out", str(tmp_path)]) == 0
    with open(tmp_path / run.GOODPUT_NAME, newline="") as f:
        back = list(csv.DictReader(f))
    assert len(back) == 8 and set(back[0]) == set(run.goodput_columns(cfg))
    assert (tmp_path / run.FIGURE_NAME).read_bytes()[:4] == b"\x89PNG"


def test_committed_results_are_current(rows, committed_csv):
    n = committed_csv(rows, run.HERE / run.CSV_NAME, run.write_csv,
                      ["prompt_len", "deployment", "load_tokens_per_s_per_gpu", "ttft_slo_s", "tpot_slo_s"],
                      refresh="python -m studies.disaggregation --out studies/disaggregation --figures docs/figures")
    assert n == len(rows)


def test_committed_goodput_is_the_goodput_of_the_committed_results(committed_csv):
    """goodput.csv is what `goodput` gives from the committed results.csv under the full configuration (to
    the CSV's 6 digits: the interpolation reads rounded attainments)."""
    full = load_config(run.HERE / "config.toml")
    with open(run.HERE / run.CSV_NAME, newline="") as f:
        rows = [{**r, "prompt_len": int(r["prompt_len"]), "gpus": int(r["gpus"]),
                 **{k: float(r[k]) for k in ("rate_rps", "attainment", "served_fraction", "ttft_slo_s", "tpot_slo_s")}}
                for r in csv.DictReader(f)]
    assert {r["prompt_len"] for r in rows} == set(full["prompt_lens"])
    good = run.goodput(rows, full)
    n = committed_csv(good, run.HERE / run.GOODPUT_NAME, lambda r, p: run.write_csv(r, p, run.goodput_columns(full)),
                      ["prompt_len", "ttft_slo_s", "tpot_slo_s"],
                      refresh="python -m studies.disaggregation --out studies/disaggregation")
    with open(run.HERE / run.GOODPUT_NAME, newline="") as f:
        assert n == len(good) == len(list(csv.DictReader(f))) == 5 * 2 * 4
