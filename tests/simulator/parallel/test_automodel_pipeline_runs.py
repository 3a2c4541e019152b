"""NeMo AutoModel's pipelined MoE rows as its code runs them (@ cb97654): the pipeline schedule runs once per
gradient-accumulation step on one local batch (``schedule.step`` in recipes/llm/benchmark.py), so a step of
``GA`` local batches pays ``GA`` fills and drains (``ParallelPlan.pipeline_microbatches``); the DeepEP dispatch
waits on the host for its received counts (``Buffer.dispatch`` without ``num_worst_tokens``)."""

from __future__ import annotations

import dataclasses

import pytest

from simulator.hardware import load_hardware
from simulator.parallel import training_validation as tv
from simulator.parallel.compose import _accumulation_s, _scheduled_runs, evaluate_plan, stage_graphs
from simulator.parallel.schedule import pipeline_time
from tests.simulator.parallel.tiny_gqa import tiny_gqa
from workloads.parallel import ParallelPlan, PlanError

#: 4 layers, d 128, 8 query heads of 16, 2 key/value heads, SwiGLU 256, untied head, vocabulary 512
CFG = tiny_gqa("tiny-pp-runs", layers=4)


def test_schedule_runs_per_local_batch_pay_a_fill_and_drain_each() -> None:
    # 1F1B, 4 stages of forward 1 s and backward 2 s: one run of m microbatches takes (m + p - 1)(f + b)
    plan = ParallelPlan(pp=4, dp=1, microbatch=1, global_batch=8, pipeline_microbatches=4)
    run = lambda k: pipeline_time([1.0] * 4, [2.0] * 4, k)  # noqa: E731
    two = _scheduled_runs(plan, 8, run)
    assert (two.step_s, two.busy_s, two.bubble_s) == (42.0, 24.0, 18.0)  # 2 x (4 + 3) x 3; 2 x 3 x 3 idle
    one = _scheduled_runs(dataclasses.replace(plan, pipeline_microbatches=0), 8, run)
    assert (one.step_s, one.bubble_s) == (33.0, 9.0)  # (8 + 3) x 3: one fill and drain
    assert _scheduled_runs(dataclasses.replace(plan, pipeline_microbatches=8), 8, run) == one


def test_pipeline_microbatches_checked_and_read_as_before_at_its_default() -> None:
    with pytest.raises(PlanError, match=r"pipeline_microbatches: got 3 for 8 microbatches a step; expected a "
                                        r"divisor of 8 \(nearest: 2\)"):
        ParallelPlan(pp=2, dp=1, microbatch=1, global_batch=8, pipeline_microbatches=3)
    with pytest.raises(PlanError, match="pipeline_microbatches: got -1"):
        ParallelPlan(pp=2, dp=1, microbatch=1, global_batch=8, pipeline_microbatches=-1)
    assert "pipeline_microbatches" not in ParallelPlan(pp=2, global_batch=8).to_json()
    assert ParallelPlan(pp=2, global_batch=8, pipeline_microbatches=4).to_json()["pipeline_microbatches"] == 4


def test_evaluated_step_runs_the_schedule_per_local_batch() -> None:
    hw = load_hardware("dgx-h100x2")
    base = ParallelPlan(pp=2, dp=8, microbatch=1, global_batch=64, fsdp=True)  # 8 microbatches a rank
    whole = evaluate_plan(CFG, hw, base, train=True, seq=256, recompute="full")
    runs = evaluate_plan(CFG, hw, dataclasses.replace(base, pipeline_microbatches=2, grad_sync_per_step=True),
                         train=True, seq=256, recompute="full")
    fwd = [s.forward_s for s in whole.stages]
    # each backward also adds its gradients to FSDP2's float32 accumulators (no gradient sync until the last)
    graphs = stage_graphs(CFG, base, seq=256, train=True, recompute="full")
    acc = _accumulation_s([[(sg, None)] for sg in graphs], base, hw, 8, 2.0)
    bwd = [s.backward_s + a[0] for s, a in zip(whole.stages, acc, strict=True)]
    assert whole.pipeline.step_s == pytest.approx(pipeline_time(fwd, bwd, 8).step_s)
    assert runs.pipeline.step_s == pytest.approx(4 * pipeline_time(fwd, bwd, 2).step_s)
    # the same work, three more fills and drains of (p - 1)(f + b) each; the tail (gathers once a step) unchanged
    assert runs.pipeline.busy_s == pytest.approx(whole.pipeline.busy_s)
    assert runs.latency_s - whole.latency_s == pytest.approx(runs.pipeline.step_s - whole.pipeline.step_s)
    assert runs.pipeline.bubble_s == pytest.approx(4 * whole.pipeline.bubble_s, rel=1e-6)


def test_torch_schedule_runs_sync_their_gradients_each() -> None:
    # torch.distributed.pipelining alone: every schedule.step()'s last backward reduce-scatters and reshards, so 4
    # runs of 2 pay 4 reduce-scatters and 4 gathers, and each run's accumulation starts again (averaged over 2)
    hw = load_hardware("dgx-h100x2")
    base = ParallelPlan(pp=2, dp=8, microbatch=1, global_batch=64, fsdp=True, pipeline_microbatches=2)
    once = evaluate_plan(CFG, hw, dataclasses.replace(base, grad_sync_per_step=True), train=True, seq=256,
                         recompute="full")
    each = evaluate_plan(CFG, hw, base, train=True, seq=256, recompute="full")
    graphs = stage_graphs(CFG, base, seq=256, train=True, recompute="full")
    fwd = [s.forward_s for s in once.stages]
    acc = _accumulation_s([[(sg, None)] for sg in graphs], base, hw, 2, 2.0)
    bwd = [s.backward_s + a[0] for s, a in zip(once.stages, acc, strict=True)]
    assert each.pipeline.step_s == pytest.approx(4 * pipeline_time(fwd, bwd, 2).step_s)
    assert each.breakdown["dp_sync_exposed_s"] == pytest.approx(4 * once.breakdown["dp_sync_exposed_s"])
    tail = lambda r: r.latency_s - r.pipeline.step_s - r.breakdown["optimizer_s"]  # noqa: E731
    assert tail(each) == pytest.approx(4 * tail(once))  # reduce-scatter and all-gather, once a run
    assert tv._plan(_row("train-139"), 256).grad_sync_per_step  # NeMo AutoModel defers them to the step's end
    assert not tv._plan(_row("train-027"), 8).grad_sync_per_step  # torchtitan: torch's own


def _row(rid: str) -> tv.TrainingRecord:
    return {r.id: r for r in tv.load_training_rows()}[rid]


def test_automodel_rows_state_their_local_batch_and_deepep_host_wait() -> None:
    rows = {r.id: r for r in tv.load_training_rows()}
    p139 = tv._plan(rows["train-139"], 256)  # LBS 8, MBS 1, GA 4: four schedule runs of 8 microbatches
    assert (p139.microbatches, p139.pipeline_microbatches, p139.moe_host_sync) == (32, 8, True)
    p138 = tv._plan(rows["train-138"], 64)  # LBS 8, GA 1: one run of all 8
    assert (p138.microbatches, p138.pipeline_microbatches, p138.moe_host_sync) == (8, 8, True)
    p137 = tv._plan(rows["train-137"], 8)  # no pipeline: no schedule runs; DeepEP still waits on the host
    assert (p137.pipeline_microbatches, p137.moe_host_sync) == (0, True)
    assert tv._plan(rows["train-027"], 8).pipeline_microbatches == 0  # torchtitan: one schedule a step (GA 1)


def test_the_simulated_step_refuses_several_schedule_runs():
    """The DES engine runs every microbatch in one schedule, so a plan that states several schedule runs a step
    is refused there (one located error) instead of being priced as one run."""
    hw = load_hardware("dgx-h100")
    plan = dataclasses.replace(ParallelPlan(tp=1, pp=2, dp=4, microbatch=1, global_batch=16), pipeline_microbatches=2)
    with pytest.raises(PlanError, match="pipeline_microbatches: got 2 with engine 'des'"):
        evaluate_plan(CFG, hw, plan, engine="des", train=True, seq=256)
