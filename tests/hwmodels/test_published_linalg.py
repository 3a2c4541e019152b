"""Published dense linear-algebra timings (hwmodels/measurements/published_linalg.csv): schema, units, buildable rows."""

from __future__ import annotations

import csv
import re
from pathlib import Path

from simulator.hardware import load_hardware
from workloads.micro import build_micro

MEAS = Path(__file__).resolve().parents[2] / "hwmodels" / "measurements"


def _rows(name: str) -> tuple[list[str], list[dict[str, str]]]:
    with open(MEAS / name, newline="") as f:
        r = csv.DictReader(f)
        return list(r.fieldnames or []), list(r)


def test_schema_matches_the_gpu_dataset():
    cols, rows = _rows("published_linalg.csv")
    assert cols == _rows("published_gpu.csv")[0]
    assert rows and len({r["id"] for r in rows}) == len(rows)


def test_rows_are_consistent_and_buildable():
    _, rows = _rows("published_linalg.csv")
    for r in rows:
        m = re.fullmatch(r"([0-9.]+) ms", r["metric_reported"])
        assert m, r["id"]
        assert abs(float(r["median_s"]) - float(m.group(1)) / 1e3) <= 1e-12
        assert r["source"] and r["notes"] and r["category"] == "linalg"
        load_hardware(r["device"])
        (op,) = build_micro(r["workload"], r["dtype"]).ops
        assert op.category == "linalg"
