"""`nodeperf validate --dataset training [FILE.csv] [--json]`: the table and the JSON summary."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from simulator.cli import main
from simulator.parallel.training_validation import DEFAULT_TRAINING_DATASET, TRAINING_COLUMNS


def _two_rows(tmp_path: Path) -> Path:
    with open(DEFAULT_TRAINING_DATASET, newline="", encoding="utf-8") as f:
        src = [r for r in csv.DictReader(f) if r["id"] in ("train-071", "train-005")]
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
    # torchtitan FSDP + compile + Float8 on the 96 GB / 500 W boards: Float8 tensorwise and per-op SAC are stated
    # (fp8_linears, selective-op); torch.compile with the FSDP2 stack is the one piece left; the boards
    # themselves are the catalog's grand-teton-h100-96gb nodes
    why = " | ".join(by_id["train-005"]["why"])
    assert why == "compile: torch.compile with the fsdp2 stack"
    assert "board:" not in why and by_id["train-005"]["system"] == "grand-teton-h100-96gb"
    assert by_id["train-005"]["nearest"] is not None  # the labelled nearest-recipe figure


def test_table(tmp_path, capsys) -> None:
    assert main(["validate", "--dataset", "training", str(_two_rows(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "2 rows; 1 predicted, 1 not statable yet, 0 skipped" in out
    assert "TPU v5e x fsdp" in out and "H100 x fsdp+fp8" in out
