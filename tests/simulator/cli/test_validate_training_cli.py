"""`nodeperf validate --dataset training [FILE.csv] [--json]`: the table and the JSON summary."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from simulator.cli import main
from simulator.parallel.training_validation import DEFAULT_TRAINING_DATASET, TRAINING_COLUMNS


def _two_rows(tmp_path: Path) -> Path:
    with open(DEFAULT_TRAINING_DATASET, newline="", encoding="utf-8") as f:
        src = [r for r in csv.DictReader(f) if r["id"] in ("train-071", "train-124")]
    # a not-statable row for the fixture: train-124 with a remat policy name MaxText does not define
    src[1] = {**src[1], "recompute": "maxtext:save_everything", "offload": ""}
    p = tmp_path / "two.csv"
    with open(p, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(TRAINING_COLUMNS))
        w.writeheader()
        w.writerows(src)
    return p


def test_json_summary_and_rows(tmp_path, capsys) -> None:
    assert main(["validate", "--dataset", "training", str(_two_rows(tmp_path)), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    s = out["summary"]
    assert (s["rows"], s["predicted"], s["not_statable_yet"]) == (2, 1, 1)
    by_id = {r["id"]: r for r in out["rows"]}
    assert by_id["train-071"]["status"] == "predicted" and by_id["train-071"]["system"] == "tpu-v5e-256"
    # MaxText Mixtral 8x7B on v6e-256 (dense einsum MoE dispatch, stated) under a remat policy no flag states:
    # its nearest-recipe figure (full recomputation) is labelled apart
    why = " | ".join(by_id["train-124"]["why"])
    assert why == "recompute: named policy 'maxtext:save_everything'"
    assert by_id["train-124"]["system"] == "tpu-v6e-256" and by_id["train-124"]["nearest"] is not None


def test_table(tmp_path, capsys) -> None:
    assert main(["validate", "--dataset", "training", str(_two_rows(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "2 rows; 1 predicted, 1 not statable yet, 0 skipped" in out
    assert "TPU v5e x fsdp" in out and "TPU v6e x moe" in out
