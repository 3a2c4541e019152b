"""The heterogeneous placement study runs on its reduced configuration and its rows obey the optimisation."""

from __future__ import annotations

import csv

import pytest

from studies._cli import load_config
from studies.hetero_placement import plot, run


@pytest.fixture(scope="module")
def cfg():
    return load_config(run.HERE / "config.toml", reduced=True)


@pytest.fixture(scope="module")
def rows(cfg):
    return run.run(cfg)


def test_reduced_study_rows_are_optima_never_worse_than_the_gpu_alone(tmp_path, cfg, rows):
    cases = sum(len(cfg["idle_policies"]) if o == "energy" else 1 for o in cfg["objectives"])
    assert len(rows) == len(cfg["workloads"]) * cases * len(cfg["links"])
    for r in rows:
        assert r["exact"] is True
        if r["objective"] == "latency":  # the GPU-only placement is feasible, so the optimum is at least as fast
            assert r["speedup"] >= 1 - 1e-12
        elif r["objective"] == "throughput":
            assert r["throughput_per_s"] >= r["gpu_throughput_per_s"] * (1 - 1e-12)
        else:
            assert r["energy_ratio"] <= 1 + 1e-12
        assert 0 <= r["ops_on_accelerator"] <= r["ops"]
    # a free link never makes the optimum worse
    key = {(r["workload"], r["objective"], r["idle"], r["link"]): r for r in rows}
    for (w, o, i, link), r in key.items():
        if link == "ideal":
            cat = key[(w, o, i, "catalog")]
            if o == "latency":
                assert r["latency_s"] <= cat["latency_s"] * (1 + 1e-12)
            elif o == "energy":
                assert r["energy_j"] <= cat["energy_j"] * (1 + 1e-12)
    out = tmp_path / "results.csv"
    run.write_csv(rows, out)
    with open(out, newline="") as f:
        assert len(list(csv.DictReader(f))) == len(rows)
    fig = tmp_path / "fig.png"
    plot.plot(out, fig)
    assert fig.stat().st_size > 10_000


def test_one_command_writes_under_out_not_over_the_committed_results(tmp_path, monkeypatch, capsys, cfg, rows):
    assert run.OUT_DIR == run.HERE.parents[1] / "out" / "hetero_placement"
    committed = (run.HERE / "results.csv").read_bytes()
    monkeypatch.setattr(run, "run", lambda given: rows if given == cfg else pytest.fail(f"config {given}"))
    assert run.main(["--reduced", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "hetero_placement.png").stat().st_size > 10_000
    assert (run.HERE / "results.csv").read_bytes() == committed
    assert run.main(["--plot-only", "--out", str(tmp_path / "missing")]) == 2
    assert "results.csv: no such results file" in capsys.readouterr().err


def test_committed_results_are_current(rows, committed_csv):
    """The committed results.csv (and the figure drawn from it) is today's model on every row the reduced
    configuration computes."""
    n = committed_csv(rows, run.HERE / "results.csv", run.write_csv, ["workload", "objective", "idle", "link"],
                      refresh="python -m studies.hetero_placement --out studies/hetero_placement --figures docs/figures")
    assert n == 2 * 4 * 2
