"""docs/accuracy.md lists every note switch of the published rows, with how many rows carry it."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import simulator.calibration.predict as predict

ROOT = Path(__file__).resolve().parents[3]
SECTION = "## Note switches of the published rows"
#: Columns each pattern is read from by run_options and the graph builders (the rest: source and notes).
FIELDS = {"_TRTLLM_FRAMEWORK": ("framework",), "_TRTLLM_PRE_XQA": ("framework",),
          "_FLASH2": ("metric_reported", "source", "notes"), "_FLASH3": ("metric_reported", "source", "notes"),
          "_TILE_LOOP_KERNEL": ("notes",)}


def _patterns() -> dict[str, re.Pattern[str]]:
    return {k: v for k, v in vars(predict).items() if k.startswith("_") and isinstance(v, re.Pattern)}


def _listed() -> dict[str, int]:
    text = (ROOT / "docs" / "accuracy.md").read_text()
    body = text[text.index(SECTION):]
    body = body[:body.find("\n## ", 1)] if "\n## " in body[1:] else body
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^\| `(_[A-Z0-9_]+)` \|.*\| (\d+) \|$", body, re.M)}


def _rows_with(name: str, pattern: re.Pattern[str]) -> int:
    n = 0
    for f in ("published_gpu.csv", "published_multi.csv"):
        with open(ROOT / "hwmodels" / "measurements" / f, newline="") as fh:
            for row in csv.DictReader(fh):
                if any(pattern.search(row.get(c) or "") for c in FIELDS.get(name, ("source", "notes"))):
                    n += 1
    return n


def test_every_pattern_is_listed() -> None:
    assert set(_listed()) == set(_patterns())


def test_row_counts_are_current() -> None:
    listed = _listed()
    assert {k: _rows_with(k, v) for k, v in _patterns().items()} == listed
    assert listed["_NO_GRAPHS"] == 85 and listed["_TRTLLM_FP8_GEMM_PLUGIN"] == 0
