"""`--csv FILE` of `nodeperf realtime` (one row per task and chain) and `nodeperf partition` (one row
per op): the header, and values equal to those of the same run's `--json`."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from simulator.cli.main import main

SCENARIO = """
name = "csv"
frames = 40

[[tasks]]
name = "camera"
model = "elementwise:numel=1048576,op=mul"
device = "gpu"
rate = "30 Hz"
deadline = "5 ms"
priority = 5

[[tasks]]
name = "planner"
model = "gemm:m=512,n=512,k=2048"
device = "gpu"
after = ["camera"]
deadline = "50 ms"
priority = 2

[[chains]]
name = "cam"
tasks = ["camera", "planner"]
deadline = "200 ms"
"""


def _rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader)


def test_realtime_csv_matches_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "s.toml"
    scenario.write_text(SCENARIO)
    out = tmp_path / "rt.csv"
    argv = ["realtime", str(scenario), "--hardware", "l4", "--seed", "3"]
    assert main([*argv, "--csv", str(out)]) == 0
    assert f"wrote 3 rows to {out}" in capsys.readouterr().out
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    header, rows = _rows(out)
    assert header[:3] == ["kind", "name", "device"]
    assert {"p50_s", "p99_s", "max_s", "wcrt_bound_s", "deadline_s", "deadline_misses", "chain_tasks"} <= set(header)
    assert [(r["kind"], r["name"]) for r in rows] == [("task", "camera"), ("task", "planner"), ("chain", "cam")]
    assert rows[1]["device"] == "gpu" and rows[2]["device"] == "" and rows[2]["chain_tasks"] == "camera planner"
    assert float(rows[1]["p99_s"]) == doc["tasks"][1]["p99_s"]
    assert float(rows[2]["max_s"]) == doc["chains"][0]["max_s"]
    assert float(rows[0]["deadline_s"]) == 5e-3 and int(rows[0]["jobs"]) == doc["tasks"][0]["jobs"]


def test_partition_csv_matches_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "p.csv"
    argv = ["partition", "resnet18", "--hardware", "h100-plus-systolic128"]
    assert main([*argv, "--csv", str(out)]) == 0
    capsys.readouterr()
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    header, rows = _rows(out)
    assert header == ["position", "op", "device", "device_spec"]
    assert {r["op"]: r["device"] for r in rows} == doc["placement"]
    assert [int(r["position"]) for r in rows] == list(range(len(doc["placement"])))
    assert all(r["device_spec"] == doc["devices"][r["device"]] for r in rows)


@pytest.mark.parametrize("cmd", [["partition", "resnet18", "--hardware", "h100-plus-systolic128"],
                                 ["realtime", "SCENARIO", "--hardware", "l4"]])
def test_csv_bad_path_is_one_located_line(cmd: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "s.toml"
    scenario.write_text(SCENARIO)
    argv = [str(scenario) if a == "SCENARIO" else a for a in cmd]
    assert main([*argv, "--csv", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--csv {tmp_path}: is a folder" in err
