"""Validation against published MLPerf Inference Edge results of Jetson AGX Orin (nothing fitted).

The dataset's figures are checked against the lines of the MLPerf logs they cite, every row names its
source, and the achieved error is pinned (docs/edge.md explains each row): MAPE 23.1 % over the four
predicted rows, 6.6 % for ResNet-50; the BERT Offline row misses by 65 % because the harness runs
SQuAD samples at their own lengths while the graph is fixed at 384 tokens.
"""

from __future__ import annotations

import csv
import json

import pytest

from simulator.calibration.validation import EDGE_DATASET, load_edge_rows, validate_edge
from simulator.cli.main import main


@pytest.fixture(scope="module")
def result():
    return validate_edge()


def test_dataset_loads_and_every_row_is_cited():
    rows = load_edge_rows()
    assert [r.id for r in rows] == [f"edge-00{i}" for i in range(1, 7)]
    for r in rows:
        assert "mlperf_log_summary.txt" in r.source and "eaf622a25c00f2b4b1d2c4f5b4f430570429d24a" in r.source
        assert f"/{r.benchmark}/{r.scenario}/" in r.source
    with EDGE_DATASET.open(newline="") as fh:
        raw = list(csv.DictReader(fh))
    assert all(x["round"].startswith("MLPerf Inference v3.1") and x["submitter"] == "NVIDIA" for x in raw)
    assert all("TensorRT 8.5.2" in x["software"] for x in raw)


# the figures as printed in each cited mlperf_log_summary.txt (latencies in ns, throughput in samples/s)
LOGGED = {"edge-001": ("90th percentile latency (ns) : 640258", 640258e-6),
          "edge-002": ("Samples per second: 6423.63", 6423.63),
          "edge-003": ("90th percentile latency (ns) : 11672065", 11672065e-6),
          "edge-004": ("Samples per second: 148.713", 148.713),
          "edge-005": ("90th percentile latency (ns) : 5704810", 5704810e-6),
          "edge-006": ("Samples per second: 553.693", 553.693)}


def test_values_are_the_logged_figures():
    for r in load_edge_rows():
        line, value = LOGGED[r.id]
        assert f"line '{line}'" in r.source
        assert r.value == pytest.approx(value, rel=1e-9)


def test_mape_is_the_achieved_figure(result):
    assert result["n"] == 4 and result["not_scored"] == 2
    assert result["mape"] == pytest.approx(23.13, abs=0.1)
    assert result["by_benchmark"]["resnet50"]["mape"] == pytest.approx(6.61, abs=0.1)
    err = {r["id"]: r["error_pct"] for r in result["rows"]}
    assert err["edge-001"] == pytest.approx(-7.5, abs=0.2)   # ResNet-50 single stream, GPU
    assert err["edge-002"] == pytest.approx(-5.7, abs=0.2)   # ResNet-50 offline, GPU + 2 DLAs
    assert err["edge-005"] == pytest.approx(+14.1, abs=0.2)  # BERT single stream at 384 tokens (upper bound)
    assert err["edge-006"] == pytest.approx(-65.2, abs=0.2)  # BERT offline at 384 tokens (lower bound)
    assert err["edge-003"] is None and err["edge-004"] is None  # no RetinaNet in the zoo


def test_offline_throughput_sums_the_engines(result):
    from simulator.calibration.validation import predict_edge_row

    row = next(r for r in load_edge_rows() if r.id == "edge-002")
    gpu_only = predict_edge_row(type(row)(**{**row.__dict__, "engines": row.engines[:1]}))
    one_dla = predict_edge_row(type(row)(**{**row.__dict__, "engines": row.engines[1:2]}))
    total = next(r["predicted"] for r in result["rows"] if r["id"] == "edge-002")
    assert total == pytest.approx(gpu_only + 2 * one_dla, rel=1e-9)
    assert one_dla > 0.1 * gpu_only


@pytest.mark.parametrize(("edit", "needle"), [
    (("value", "-3"), "value: invalid value; got '-3'; expected a positive number"),
    (("unit", "s"), "unit: invalid value; got 's'; expected ms for metric latency_p90"),
    (("source", ""), "source: invalid value; got ''; expected a citation"),
    (("engines", "jetson-agx-orin-64gb"), "engines: invalid value; got 'jetson-agx-orin-64gb'; expected device:batch"),
    (("in_score", "yes"), "in_score: invalid value; got 'yes'"),
])
def test_bad_rows_are_located(tmp_path, edit, needle):
    with EDGE_DATASET.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    rows[0][edit[0]] = edit[1]
    bad = tmp_path / "edge.csv"
    with bad.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    with pytest.raises(ValueError, match=f"{bad}:2: " + needle):
        load_edge_rows(bad)


def test_cli_prints_the_edge_group(capsys):
    assert main(["validate", "--dataset", "edge", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n"] == 4 and out["mape"] == pytest.approx(23.13, abs=0.1)
    assert main(["validate", "--dataset", "edge", "--hardware", "l4"]) == 2
    assert "expected neither" in capsys.readouterr().err
