"""FSDP under pipeline schedules, as torchtitan's 3D fp8 rows run it: parameters all-gathered once a step (not
before each microbatch's forward and backward, as ZeRO-3 without pipelining), and the interleaved 405B row's
two stages per rank (torchtitan ``generate_split_points`` @ 9dec370) with the pipeline-degree microbatches."""

from __future__ import annotations

import dataclasses

import pytest

from simulator.hardware import load_hardware
from simulator.parallel import training_validation as tv
from simulator.parallel.compose import _collective_times, evaluate_plan, stage_graphs
from tests.simulator.parallel.tiny_gqa import tiny_gqa
from workloads.ir import Role
from workloads.parallel import ParallelPlan

#: 4 layers, d 128, 8 query heads of 16, 2 key/value heads, SwiGLU 256, untied head, vocabulary 512
CFG = tiny_gqa("tiny-fsdp-pp", layers=4)
S = 256


def _tail(plan: ParallelPlan) -> tuple[float, object, object]:
    """(what the step adds after the pipeline, the result, the system)."""
    hw = load_hardware("dgx-h100x2")
    res = evaluate_plan(CFG, hw, plan, train=True, seq=S, recompute="full")
    return res.latency_s - res.pipeline.step_s, res, hw


def test_fsdp_with_pipeline_gathers_once_a_step_zero3_before_every_forward_and_backward() -> None:
    base = ParallelPlan(pp=2, dp=8, microbatch=1, global_batch=64)  # 8 microbatches per rank
    m = base.microbatches
    assert m == 8
    fsdp_tail, fsdp, hw = _tail(dataclasses.replace(base, fsdp=True))
    zero3_tail, zero3, _ = _tail(dataclasses.replace(base, zero_stage=3))
    # the same stages and optimizer step; FSDP2 under PyTorch's schedules reduce-scatters after the stage's last
    # backward, waited on (exposed in full), ZeRO-3 behind the backward; the count of weight all-gathers differs
    assert fsdp.breakdown["dp_sync_exposed_s"] == fsdp.breakdown["dp_sync_s"] > 0
    assert 0 < zero3.breakdown["dp_sync_exposed_s"] <= zero3.breakdown["dp_sync_s"]
    assert fsdp.breakdown["optimizer_s"] == pytest.approx(zero3.breakdown["optimizer_s"])
    gather_fsdp = fsdp_tail - fsdp.breakdown["dp_sync_exposed_s"] - fsdp.breakdown["optimizer_s"]
    gather_zero3 = zero3_tail - zero3.breakdown["dp_sync_exposed_s"] - zero3.breakdown["optimizer_s"]
    assert gather_fsdp > 0
    assert gather_zero3 == pytest.approx((1 + 2 * m) * gather_fsdp, rel=1e-9)


def test_the_one_gather_is_the_stage_weights_all_gather_over_the_data_parallel_ranks() -> None:
    plan = ParallelPlan(pp=2, dp=8, microbatch=1, global_batch=64, fsdp=True)
    graphs = stage_graphs(CFG, plan, phase="prefill", seq=S, context=None, dtype=None, train=True, optimizer="adamw",
                          recompute="full", batch=None)
    # each parameter once: not the optimizer's updated copies the graph's weight role also holds
    wbytes = [sum(float(sg.graph.weight_bytes) for sg in graphs if sg.stage == s) for s in range(2)]
    assert all(w == sum(float(sg.graph.role_bytes(Role.WEIGHT)) for sg in graphs if sg.stage == s) / 2
               for s, w in enumerate(wbytes))
    hw = load_hardware("dgx-h100x2")
    coll = _collective_times([("all_gather", w) for w in wbytes], 8, hw, plan.tp)
    tail, res, _ = _tail(plan)
    gathered = tail - res.breakdown["dp_sync_exposed_s"] - res.breakdown["optimizer_s"]
    # the worst stage's tail: its one all-gather (the stages differ by the embedding and the head)
    assert any(gathered == pytest.approx(coll[("all_gather", w)], rel=1e-9) for w in wbytes)


def test_train_027_runs_torchtitans_default_two_stages_per_rank_with_pp_degree_microbatches() -> None:
    rows = {r.id: r for r in tv.load_training_rows()}
    for rid, schedule, v in (("train-025", "1f1b", 1), ("train-027", "interleaved", 2), ("train-028", "interleaved", 2)):
        row = rows[rid]
        g = row.ints
        plan = tv._plan(row, g["n_devices"] // (g["tp"] * g["pp"]))
        assert (plan.schedule, plan.interleave) == (schedule, v)
        # local batch 32 split into pipeline_parallel_degree = 8 microbatches of 4 (build_pipeline_schedule @ 9dec370)
        assert (plan.microbatch, plan.microbatches, plan.dp) == (4, 8, 8)
        assert plan.pipeline_split == "torchtitan"


def test_the_once_a_step_gather_applies_only_to_stacks_running_torch_pipelining() -> None:
    from simulator.parallel.compose import _fsdp_gathers_once_per_step

    # torchtitan / NeMo AutoModel (fsdp2 profiles) and no profile (a plan's FSDP stands for PyTorch FSDP2)
    assert [_fsdp_gathers_once_per_step(f) for f in ("", "fsdp2", "fsdp2-compile", "torchtitan")] == [True] * 4
    # MaxText (pipeline_fsdp_ag_once False by default) and Megatron (no PipelineStage): every microbatch
    assert [_fsdp_gathers_once_per_step(f) for f in ("maxtext", "megatron-core", "megatron-lm")] == [False] * 3


def test_fsdp_with_pipeline_under_megatron_lm_gathers_before_every_forward_and_backward() -> None:
    base = ParallelPlan(pp=2, dp=8, microbatch=1, global_batch=64)
    hw = load_hardware("dgx-h100x2")
    tails = []
    for plan in (dataclasses.replace(base, fsdp=True), dataclasses.replace(base, zero_stage=3)):
        res = evaluate_plan(CFG, hw, plan, train=True, seq=S, recompute="full", framework="megatron-lm")
        tails.append(res.latency_s - res.pipeline.step_s - res.breakdown["dp_sync_exposed_s"] - res.breakdown["optimizer_s"])
    # the same 1 + 2m all-gathers as ZeRO-3 (8 microbatches: 17 gathers), not FSDP2's one
    assert tails[0] > 0
    assert tails[0] == pytest.approx(tails[1], rel=1e-9)


def test_pipelined_fsdp_memory_holds_the_whole_stage_only_where_it_gathers_once() -> None:
    # gpt2 (d 768, 12 layers, vocabulary 50257, 1024 positions) over pp=2 x dp=4 with FSDP, bf16 parameters.
    # One block: 12 x 768^2 weights + 6912 biases + 3072 norm parameters = 7,087,872, 14,175,744 bytes in bf16;
    # stage 0's root group: wte + wpe = 50257 x 768 + 1024 x 768 = 39,383,808 parameters, 78,767,616 bytes.
    node = load_hardware("dgx-h100")
    plan = ParallelPlan(pp=2, dp=4, fsdp=True, microbatch=1, global_batch=8)
    block, root = 2 * 7_087_872, 2 * 39_383_808
    stage0 = 2 * 6 * 7_087_872 + root  # the stage's bf16 parameters (6 blocks and the root group)
    once = evaluate_plan("gpt2", node, plan, train=True, seq=S, dtype="bf16", framework="torchtitan")
    b = once.stages[0].memory_breakdown()
    assert b["buffers.fsdp_unsharded_params"] == stage0  # held gathered through the step
    assert b["buffers.fsdp_unsharded_grads"] == 2 * stage0  # accumulated unsharded in fp32
    # a stack that gathers for every microbatch's forward and backward keeps the per-gather buffers: the root
    # and FSDP_UNSHARDED_IN_FLIGHT = 2 blocks gathered, the fp32 reduce-scatter input of one block
    each = evaluate_plan("gpt2", node, plan, train=True, seq=S, dtype="bf16", framework="megatron-core")
    b = each.stages[0].memory_breakdown()
    assert b["buffers.fsdp_unsharded_params"] == root + 2 * block == 107_119_104
    assert b["buffers.fsdp_reduce_scatter"] == 2 * block == 28_351_488
    assert "buffers.fsdp_unsharded_grads" not in b
    assert each.stages[0].weights_bytes == once.stages[0].weights_bytes == 4 * stage0 / 2 / 4  # fp32 shard over 4
