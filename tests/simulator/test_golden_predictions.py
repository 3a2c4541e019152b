"""Golden predictions: the published-set rows and zoo models' per-op records equal the stored values exactly.

A refactoring of the models that should change no number is checked bit for bit (``==``). When a
change of the numbers is intended, regenerate with ``python tests/simulator/make_golden_predictions.py
--write`` and say so in the change's note.
"""

from __future__ import annotations

import logging

import pytest
from make_golden_predictions import collect, differences, load


@pytest.fixture(scope="module")
def golden_and_now():
    logging.disable(logging.WARNING)
    try:
        return load(), collect()
    finally:
        logging.disable(logging.NOTSET)


def test_published_predictions_equal_the_golden_file(golden_and_now):
    golden, now = golden_and_now
    assert len(golden["published"]) > 100
    assert [r["id"] for r in now["published"]] == [r["id"] for r in golden["published"]]
    diff = differences({"published": golden["published"], "models": {}}, {"published": now["published"], "models": {}})
    assert not diff, "\n".join(diff)
    assert now["published"] == golden["published"]


def test_zoo_op_records_equal_the_golden_file(golden_and_now):
    golden, now = golden_and_now
    assert set(now["models"]) == set(golden["models"])
    diff = differences({"published": [], "models": golden["models"]}, {"published": [], "models": now["models"]})
    assert not diff, "\n".join(diff)
    assert now["models"] == golden["models"]
