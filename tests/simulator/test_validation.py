"""Validation against published GPU measurements: every row is predicted and op-level errors stay bounded.

The thresholds guard the current model quality (nothing is fitted to these rows); the achieved
figures per category are printed by ``python -m simulator.validation``-style use of
:func:`simulator.validation.validate_published`.
"""

from __future__ import annotations

import csv
import logging

import pytest

from simulator.validation import DEFAULT_DATASET, RowResult, summarise, validate_published


@pytest.fixture(scope="module")
def summaries():
    logging.disable(logging.WARNING)
    try:
        return validate_published()
    finally:
        logging.disable(logging.NOTSET)


def test_every_row_is_predicted(summaries):
    with DEFAULT_DATASET.open(newline="") as fh:
        n_rows = sum(1 for _ in csv.DictReader(fh))
    assert summaries["skipped"].n == 0
    assert summaries["all"].n == n_rows
    assert summaries["op-level"].n + summaries["end-to-end"].n == n_rows


def test_gemm_and_bandwidth_errors_are_bounded(summaries):
    assert summaries["gemm"].mape <= 0.20
    assert summaries["bandwidth"].mape <= 0.15


def test_summary_statistics_by_hand():
    rows = [RowResult(f"r{i}", "x", "w", "d", 1.0, p, "") for i, p in enumerate((1.1, 0.8, 1.0, 1.5))]
    s = summarise("x", rows, worst=2)
    assert s.n == 4
    assert s.mape == pytest.approx((0.1 + 0.2 + 0.0 + 0.5) / 4)
    assert s.bias == pytest.approx((0.1 - 0.2 + 0.0 + 0.5) / 4)
    assert s.max == pytest.approx(0.5) and s.median == pytest.approx(0.15)
    assert [r.id for r in s.worst] == ["r3", "r1"]
