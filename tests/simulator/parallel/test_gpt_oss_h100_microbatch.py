"""train-063 (GPT-OSS-120B, 64 H100, PP 4, EP 8, Megatron-Bridge 25.11) at the micro-batch its recipe code and
the later archive tables state (1), and why the printed 4 cannot have run: four 16,384-token micro-batches in
flight on the first 1F1B stage do not fit an 80 GB H100 beside the weights and optimizer state."""

from __future__ import annotations

import dataclasses

import pytest

from simulator.hardware import load_hardware
from simulator.parallel import training_validation as tv
from simulator.parallel.compose import evaluate_plan
from simulator.parallel.stacks import profile_options


@pytest.fixture(scope="module")
def row():
    return next(r for r in tv.load_training_rows() if r.id == "train-063")


def _evaluate(row, microbatch: int):
    recipe = tv.stated_recipe(row)
    plan = dataclasses.replace(tv._plan(row, 16), microbatch=microbatch)
    return evaluate_plan(row["model"], load_hardware("dgx-h100x8"), plan, profile_options(recipe["framework"]),
                         train=True, seq=4096, dtype="bf16", **recipe)


def test_the_row_states_the_recipe_codes_micro_batch(row):
    assert row.ints["microbatch"] == 1 and row.ints["global_batch"] == 512 and row.ints["pp"] == 4
    assert "micro_batch_size=1" in row["notes"] and "26.04.01 print MBS 1" in row["notes"]
    res = tv._predict(row)
    assert res.status == "predicted" and res.fits is True


def test_the_printed_micro_batch_does_not_fit_an_h100(row):
    one, four = _evaluate(row, 1), _evaluate(row, 4)
    assert one.fits_in_memory and not four.fits_in_memory
    # the first stage keeps pp = 4 micro-batches in flight under 1F1B: its saved activations grow about 4-fold
    # with the micro-batch, weights, gradients and optimizer state stay
    act = [max(s.memory_breakdown()["activations"] for s in r.stages) / 2**30 for r in (one, four)]
    assert act[1] / act[0] == pytest.approx(4.0, rel=0.05)
    assert four.memory_per_device_bytes > 80e9 > one.memory_per_device_bytes
