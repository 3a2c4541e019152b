"""The diagnostic split of a predicted MaxText step (simulator/parallel/maxtext_breakdown.py)."""

from __future__ import annotations

import pytest

from simulator.parallel.maxtext_breakdown import StepBreakdown


def _bd(measured: float | None, predicted: float, gather: float, reduce: float, exposed: float) -> StepBreakdown:
    return StepBreakdown(row_id="r", system="s", tokens_per_chip=1.0, measured_step_s=measured,
                         predicted_step_s=predicted, compute_s=10.0, gemm_s=9.0, attention_s=0.5, other_s=0.5,
                         tp_comm_s=0.0, fsdp_gather_s=gather, grad_reduce_s=reduce, exposed_s=exposed,
                         offload_exposed_s=0.0)


def test_beyond_collectives_subtracts_only_the_hidden_part_of_the_fsdp_collectives():
    # 17.18 s measured, 11.52 s predicted, 1.93 + 0.97 s of collectives of which 0.02 s already exposed:
    # 17.18 - 11.52 - (2.90 - 0.02) = 2.78 s that no serial collective accounts for
    b = _bd(17.18, 11.52, 1.93, 0.97, 0.02)
    assert b.beyond_collectives_s == pytest.approx(2.78)
    assert b.step_error == pytest.approx(11.52 / 17.18 - 1.0)


def test_beyond_collectives_is_negative_when_serial_collectives_would_overshoot():
    assert _bd(10.0, 9.0, 1.5, 0.5, 0.0).beyond_collectives_s == pytest.approx(-1.0)


def test_beyond_collectives_needs_a_measured_step():
    assert _bd(None, 9.0, 1.0, 0.5, 0.0).beyond_collectives_s is None
