"""The AV perception study runs on its reduced configuration: bounds cover the simulation, the GPU-only
split overloads the Orin GPU at 15 W while the GPU + DLA split meets every deadline, and the figures draw."""

from __future__ import annotations

import csv
import math

from studies.av_perception import plot, run


def test_reduced_study_rows_bounds_and_figures(tmp_path):
    cfg = run.load_config(reduced=True)
    rows, cdf_rows = run.run(cfg)
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


def test_scripts_default_to_out_and_report_a_missing_csv(tmp_path, capsys):
    repo = run.HERE.parents[1]
    assert run.OUT_DIR == repo / "out" / "av_perception" and plot.OUT_DIR == run.OUT_DIR
    assert plot.main(["--results", str(tmp_path / "nothing")]) == 2
    assert "results.csv: no such results file" in capsys.readouterr().err
