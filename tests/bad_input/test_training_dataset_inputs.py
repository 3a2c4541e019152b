"""Bad training-measurement CSVs (`nodeperf validate --dataset training FILE.csv`): one located line per
problem (file:line, column, got, expected), exit 2, no traceback."""

from __future__ import annotations

import csv
import itertools
from pathlib import Path

import pytest

from simulator.cli import main
from simulator.parallel.training_validation import DEFAULT_TRAINING_DATASET, TRAINING_COLUMNS
from tests.bad_input.contract import one_line, several


def _write(tmp_path: Path, changes: dict[str, str], *, drop: str = "", rows: int = 1) -> Path:
    with open(DEFAULT_TRAINING_DATASET, newline="", encoding="utf-8") as f:
        src = list(itertools.islice(csv.DictReader(f), rows))
    src[0].update(changes)
    cols = [c for c in TRAINING_COLUMNS if c != drop]
    p = tmp_path / "runs.csv"
    with open(p, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(src)
    return p


def _run(capsys: pytest.CaptureFixture[str], p: Path) -> tuple[int, str]:
    rc = main(["validate", "--dataset", "training", str(p)])
    return rc, capsys.readouterr().err


@pytest.mark.parametrize(("changes", "parts"), [
    ({"tp": "eight"}, (":2: tp: not a positive integer", "got 'eight'", "expected a positive integer or empty")),
    ({"metric": "tokens_per_sec"}, (":2: metric: unknown metric", "got 'tokens_per_sec'",
                                    "did you mean 'tokens_per_s_per_device'")),
    ({"value": "-3"}, (":2: value: not a positive number", "got '-3'")),
    ({"source": " "}, (":2: source: empty value", "expected a citation")),
    ({"notes": ""}, (":2: notes: empty value", "expected the recipe details")),
    ({"n_devices": ""}, (":2: n_devices: empty value", "expected the number of devices")),
    ({"compile": "yes"}, (":2: compile:", "got 'yes'", "expected 1, 0 or empty")),
])
def test_bad_value_is_one_located_line(tmp_path, capsys, changes, parts) -> None:
    p = _write(tmp_path, changes)
    rc, err = _run(capsys, p)
    one_line(rc, err, str(p), *parts)


def test_missing_column_names_it(tmp_path, capsys) -> None:
    p = _write(tmp_path, {}, drop="notes")
    rc, err = _run(capsys, p)
    one_line(rc, err, f"{p}:1: header: missing columns", "expected also notes")


def test_duplicate_id_and_several_problems_are_each_listed(tmp_path, capsys) -> None:
    p = _write(tmp_path, {"tp": "0", "metric": "x"}, rows=2)
    rows = list(csv.DictReader(open(p, newline="", encoding="utf-8")))
    rows[1]["id"] = rows[0]["id"]
    with open(p, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    rc, err = _run(capsys, p)
    lines = several(rc, err, 3, str(p), each_names_where=True)
    assert any(":3: id: duplicate id" in ln for ln in lines)


def test_training_dataset_refuses_hardware_flag(capsys) -> None:
    rc = main(["validate", "--dataset", "training", "--hardware", "h100-sxm5-80gb"])
    one_line(rc, capsys.readouterr().err, "--dataset training", "expected neither")


def test_missing_file_is_one_line(tmp_path, capsys) -> None:
    p = tmp_path / "absent.csv"
    rc, err = _run(capsys, p)
    one_line(rc, err, str(p))


def test_nul_byte_is_one_located_line(tmp_path, capsys) -> None:
    p = _write(tmp_path, {"notes": "a\x00b"})
    rc, err = _run(capsys, p)
    one_line(rc, err, f"{p}:2:", "NUL byte")
