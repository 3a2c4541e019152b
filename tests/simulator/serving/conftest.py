"""Shared helpers of the serving tests."""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture
def one_row_csv(tmp_path: Path) -> Callable[..., Path]:
    """``write(name, **columns)``: the serving dataset's first row with ``columns`` replaced, written alone
    (header and one row, so the row is line 2) to ``tmp_path / name``; returns the path."""
    from simulator.calibration.serving_validation import DEFAULT_SERVING_DATASET

    with open(DEFAULT_SERVING_DATASET, newline="") as fh:
        reader = csv.DictReader(fh)
        head = list(reader.fieldnames or [])
        first = next(reader)

    def write(name: str, **columns: str) -> Path:
        f = tmp_path / name
        with open(f, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=head, lineterminator="\n")
            w.writeheader()
            w.writerow({**first, **columns})
        return f

    return write
