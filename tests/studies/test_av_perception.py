"""The AV perception study runs on its reduced configuration: bounds cover the simulation, the GPU-only
split overloads the Orin GPU at 15 W while the GPU + DLA split meets every deadline, and the figures draw."""

from __future__ import annotations

import csv
import math

import pytest

from studies._cli import load_config
from studies.av_perception import plot, run


@pytest.fixture(scope="module")
def cfg():
    return load_config(run.HERE / "config.toml", reduced=True)


@pytest.fixture(scope="module")
def results(cfg):
    return run.run(cfg)


def test_reduced_study_rows_bounds_and_figures(tmp_path, cfg, results):
    rows, cdf_rows = results
    per_config = 7 + 2  # tasks + chains of scenario.toml
    assert len(rows) == len(cfg["placements"]) * len(cfg["power_modes"]) * per_config
    for r in rows:
        if math.isfinite(r["wcrt_bound_s"]):
            assert r["max_s"] <= r["wcrt_bound_s"], r
        assert r["p50_s"] <= r["p99_s"] <= r["p999_s"] <= r["max_s"]
    by = {(r["placement"], r["power_mode"], r["name"]): r for r in rows}
    # GPU only at 15 W: detector 30 Hz + segmentation 10 Hz + the rest exceed the GPU: overload, misses
    over = by[("gpu-only", "15w", "segmentation")]
    assert over["device_utilisation_wcet"] > 1 and over["deadline_misses"] == over["jobs"]
    assert math.isinf(over["wcrt_bound_s"])
    # the same stack with the detector and segmentation on the DLAs meets every deadline, with bounds to show it
    for r in rows:
        if r["placement"] == "gpu+dla":
            assert r["deadline_misses"] == 0 and r["wcrt_bound_s"] <= r["deadline_s"], r
    # more power never misses more: 60 W misses nothing in either split
    assert all(r["deadline_misses"] == 0 for r in rows if r["power_mode"] == "60w")
    # the CSVs round-trip and the figures draw
    res, cdf = run.write_csvs(rows, cdf_rows, tmp_path)
    with open(res, newline="") as f:
        back = list(csv.DictReader(f))
    assert [r["name"] for r in back] == [r["name"] for r in rows]
    assert back[0]["wcrt_bound_s"] and any(r["wcrt_bound_s"] == "inf" for r in back)
    pngs = plot.plot(tmp_path, tmp_path / "fig")
    assert all(p.stat().st_size > 20_000 for p in pngs)


def test_one_command_defaults_to_out_and_reports_a_missing_csv(tmp_path, capsys):
    assert run.OUT_DIR == run.HERE.parents[1] / "out" / "av_perception"
    assert run.main(["--plot-only", "--out", str(tmp_path / "nothing")]) == 2
    assert "results.csv: no such results file" in capsys.readouterr().err


def test_options_reach_the_configuration(tmp_path, monkeypatch, capsys, cfg, results):
    seen = []
    monkeypatch.setattr(run, "run", lambda given: seen.append(given) or results)
    assert run.main(["--reduced", "--contention", "off", "--transfers", "on", "--out", str(tmp_path)]) == 0
    assert seen == [{**cfg, "contention": False, "transfers": True}]
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{len(results[0])} rows -> {tmp_path / 'results.csv'}; {len(results[1])} CDF points -> {tmp_path / 'cdf.csv'}"
    assert out[1:] == [f"figure -> {tmp_path / name}" for name in plot.FIGURES]


def test_committed_results_are_current(results, committed_csv):
    """The committed results.csv agrees with today's model on the reduced run's rows, in every column that does
    not depend on how many frames are simulated (the bounds, the deadline, worst-case utilisation and work)."""
    n = committed_csv(results[0], run.HERE / "results.csv", lambda rows, path: run.write_rows(rows, path, run.COLUMNS),
                      ["placement", "power_mode", "kind", "name"],
                      columns=["device", "wcrt_bound_s", "deadline_s", "device_utilisation_wcet", "transfer_s",
                               "contention_s"],
                      refresh="python -m studies.av_perception --out studies/av_perception --figures docs/figures")
    assert n == 2 * 2 * 9
