"""Validation against published GPU measurements: every row is predicted and errors stay at the achieved level.

Nothing is fitted to these rows. The bounds below are the achieved figures (docs/accuracy.md)
rounded up. The issue's op-level target (MAPE <= 15%) is met (13.7%); the end-to-end target
(<= 20%) is not (20.5%); the residual errors are explained per category in docs/accuracy.md.
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


# achieved MAPE per group (docs/accuracy.md), rounded up to the next half percent
ACHIEVED_MAPE = {
    "gemm": 0.16, "bandwidth": 0.085, "attention": 0.14, "op-level": 0.14,
    "e2e_bert": 0.20, "e2e_cnn": 0.22, "e2e_llama_decode": 0.105, "e2e_llama_prefill": 0.315,
    "end-to-end": 0.21,
}


@pytest.mark.parametrize("group", sorted(ACHIEVED_MAPE))
def test_errors_stay_at_the_achieved_level(summaries, group):
    assert summaries[group].mape <= ACHIEVED_MAPE[group]


def test_op_level_meets_the_issue_target(summaries):
    assert summaries["op-level"].mape <= 0.15


def test_run_options_follow_the_stated_software_stack():
    from simulator.validation import _options_for

    with DEFAULT_DATASET.open(newline="") as fh:
        rows = {r["id"]: r for r in csv.DictReader(fh)}
    kernel = {i: _options_for(rows[i])[0].attention_kernel for i in ("pub-012", "pub-024", "pub-030", "pub-034", "pub-035")}
    # FlashAttention-2 (issue #1589, tritonbench flash_v2) vs FlashAttention-4, FlashAttention-3 and cuDNN
    assert kernel == {"pub-012": "flash2", "pub-024": "flash2", "pub-030": "flash3", "pub-034": "flash3",
                      "pub-035": "flash3"}
    eager, _ = _options_for(rows["pub-046"])  # DeepLearningExamples eager PyTorch ResNet-50
    assert eager.eager_framework and not eager.fusion
    trt, _ = _options_for(rows["pub-062"])  # TensorRT demoBERT engine
    assert trt.fusion and trt.cuda_graphs and not trt.eager_framework
    _, overrides = _options_for(rows["pub-094"])  # gpt-fast run power-limited to 330 W
    assert overrides == {"power.tdp_w": 330.0}


def test_summary_statistics_by_hand():
    rows = [RowResult(f"r{i}", "x", "w", "d", 1.0, p, "") for i, p in enumerate((1.1, 0.8, 1.0, 1.5))]
    s = summarise("x", rows, worst=2)
    assert s.n == 4
    assert s.mape == pytest.approx((0.1 + 0.2 + 0.0 + 0.5) / 4)
    assert s.bias == pytest.approx((0.1 - 0.2 + 0.0 + 0.5) / 4)
    assert s.max == pytest.approx(0.5) and s.median == pytest.approx(0.15)
    assert [r.id for r in s.worst] == ["r3", "r1"]
