"""`nodeperf plot --where`: the rows `nodeperf sweep show --where` keeps, with its located errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_capture import run_cli

BW = "hardware.memory.hbm.read_bandwidth_bytes_per_s"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from simulator.sweep import parse_experiment, run_sweep

    exp = parse_experiment({
        "schema": "nodeperf.experiment/1", "name": "plot-where", "metrics": ["latency_s", "energy_j"],
        "workload": {"model": "gemm:m=512,n=512,k=512"}, "hardware": {"name": "h100-sxm5-80gb"},
        "axes": {"hardware": {"memory.hbm.read_bandwidth_bytes_per_s": ["1 TB/s", "2 TB/s", "3.35 TB/s"],
                              "compute.tensor_flops_per_s.bf16": ["500 TFLOP/s", "989.4 TFLOP/s"]}},
    })
    out = tmp_path_factory.mktemp("plot") / "sweep.sqlite"
    run_sweep(exp, out, scheduler="synchronous")
    return out


def test_where_keeps_the_rows_sweep_show_keeps(store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fig = tmp_path / "p.svg"
    rc, text, err = run_cli(capsys, ["plot", "pareto", str(store), "--x", "latency_s", "--y", "energy_j",
                            "--where", "read_bandwidth_bytes_per_s >= 2e12", "-o", str(fig)])
    assert rc == 0, err
    assert text.startswith("Pareto front of 4 rows")  # 2 of 3 bandwidths x 2 bf16 rates
    rc, text, err = run_cli(capsys, ["sweep", "show", str(store), "--where", "read_bandwidth_bytes_per_s >= 2e12"])
    assert rc == 0 and "6 rows" in text and "4 selected" in text
    # repeated --where: every expression must hold (bandwidth >= 2 TB/s and bf16 at 500 TFLOP/s)
    rc, text, err = run_cli(capsys, ["plot", "heatmap", str(store), "--x", BW, "--y", "hardware.compute.tensor_flops_per_s.bf16",
                            "--value", "latency_s", "--where", "read_bandwidth_bytes_per_s >= 2e12",
                            "--where", "bf16 < 6e14", "-o", str(tmp_path / "h.png")])
    assert rc == 0, err
    assert "(2 rows)" in text


def test_where_on_a_csv(store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from simulator.sweep import load_results

    csv = tmp_path / "r.csv"
    load_results(store).to_csv(csv, index=False)
    rc, text, err = run_cli(capsys, ["plot", "pareto", str(csv), "--x", "latency_s", "--y", "energy_j",
                            "--where", "read_bandwidth_bytes_per_s < 1.5e12", "-o", str(tmp_path / "c.png")])
    assert rc == 0, err
    assert text.startswith("Pareto front of 2 rows")  # the 1 TB/s rows, at both bf16 rates


@pytest.mark.parametrize("where, message", [
    ("read_bandwith_bytes_per_s > 1", "plot pareto: --where: "),
    ("read_bandwith_bytes_per_s > 1", "did you mean"),
    ("__import__('os')", "plot pareto: --where: "),
    ("latency_s >", "plot pareto: --where: "),
    ("latency_s < 0", "plot pareto: --where: no row of 6"),
])
def test_bad_where_is_one_located_line(store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       where: str, message: str) -> None:
    fig = tmp_path / "x.png"
    rc, _, err = run_cli(capsys, ["plot", "pareto", str(store), "--x", "latency_s", "--y", "energy_j", "--where", where,
                         "-o", str(fig)])
    assert rc == 2
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not fig.exists()
