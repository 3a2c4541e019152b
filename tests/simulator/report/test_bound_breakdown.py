"""CostReport.bound_breakdown partitions the ops' summed time, so its shares sum to 1 however the ops were
scheduled: back to back (where that sum is the latency), overlapped on discrete-event streams, or one device's
ops of each stage of a parallel plan (where the step's latency holds bubbles and repeats)."""

from __future__ import annotations

import pytest

from simulator.hardware import load_hardware
from simulator.parallel import evaluate_plan
from workloads.parallel import ParallelPlan
from workloads.resolve import load_workload


def _shares(report) -> dict[str, float]:
    total = sum(r.time_s for r in report.records)
    out: dict[str, float] = {}
    for r in report.records:
        out[r.bound] = out.get(r.bound, 0.0) + r.time_s / total
    return out


def test_two_stream_schedule_and_two_stage_plan_partition_their_op_time() -> None:
    from simulator.engines.discrete_event import simulate

    g = load_workload("gpt2", phase="prefill", batch=8, seq=512)
    des = simulate(g, load_hardware("h100-sxm5-80gb"), streams=2)
    # the streams overlap: the op time exceeds the latency (the shares had summed to that ratio, above 1)
    assert sum(r.time_s for r in des.records) > des.latency_s
    plan = evaluate_plan("llama-2-7b", load_hardware("dgx-h100"), ParallelPlan(tp=2, pp=2, dp=2), train=True,
                         seq=1024).to_cost_report()
    assert sum(r.time_s for r in plan.records) > plan.latency_s  # both stages' ops; each device runs one
    for rep in (des, plan):
        bb = rep.bound_breakdown
        assert sum(bb.values()) == pytest.approx(1.0, rel=1e-12)
        for bound, share in _shares(rep).items():
            assert bb[bound] == pytest.approx(share, rel=1e-12)
