"""The heterogeneous placement study runs on its reduced configuration and its rows obey the optimisation."""

from __future__ import annotations

import csv

from studies.hetero_placement import plot, run


def test_reduced_study_rows_are_optima_never_worse_than_the_gpu_alone(tmp_path):
    cfg = run.load_config(reduced=True)
    rows = run.run(cfg)
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


def test_scripts_write_under_out_not_over_the_committed_results(tmp_path, monkeypatch, capsys):
    repo = run.HERE.parents[1]
    assert run.DEFAULT_OUT == repo / "out" / "hetero_placement" / "results.csv"
    assert plot.OUT_DIR == run.OUT_DIR
    out_dir = tmp_path / "out" / "hetero_placement"
    monkeypatch.setattr(run, "DEFAULT_OUT", out_dir / "results.csv")
    monkeypatch.setattr(plot, "OUT_DIR", out_dir)
    assert run.main(["--reduced"]) == 0
    assert plot.main([]) == 0
    assert (out_dir / "hetero_placement.png").stat().st_size > 10_000
    assert plot.main(["--csv", str(tmp_path / "missing.csv")]) == 2
    assert "missing.csv: no such results file" in capsys.readouterr().err
