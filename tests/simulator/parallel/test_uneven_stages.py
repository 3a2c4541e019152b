"""Uneven pipeline splits (Megatron-Core's account_for_embedding/loss, torchtitan's generated split
points, explicit counts), their timing by the schedule's own order (equal to the discrete-event
engine), and the distributed optimizer's padded gradient buffer."""

from __future__ import annotations

import math

import pytest

from simulator.hardware import load_hardware
from simulator.parallel.compose import _collective_times, evaluate_plan
from simulator.parallel.pipeline_des import simulate_pipeline
from simulator.parallel.schedule import pipeline_time, schedule_makespan
from workloads.parallel import (
    ParallelPlan,
    PlanError,
    plan_graphs,
    split_layers,
    stage_layer_ranges,
)


def test_torchtitan_split_of_405b_over_eight_stages() -> None:
    # generate_split_points @ 9dec370: base 126 // 8 = 15 first, 6 middles get 16 (remainder 6), last 126 - 111
    assert split_layers(126, 8, rule="torchtitan") == (15, 16, 16, 16, 16, 16, 16, 15)
    assert split_layers(10, 4, rule="torchtitan") == (2, 3, 3, 2)


def test_megatron_account_for_embedding_and_loss() -> None:
    # get_num_layers_to_build: (126 + 2) / (8 x 8) = 2 per virtual stage, one fewer on the first and last
    counts = split_layers(126, 8, 8, "megatron-embedding-loss")
    assert len(counts) == 64 and sum(counts) == 126
    assert counts[0] == counts[-1] == 1 and set(counts[1:-1]) == {2}
    assert split_layers(94, 8, 1, "megatron-embedding-loss") == (11, 12, 12, 12, 12, 12, 12, 11)
    assert split_layers(31, 4, 1, "megatron-embedding") == (7, 8, 8, 8)
    with pytest.raises(ValueError, match="not divisible by pp x interleave = 8"):
        split_layers(126, 8, 1, "megatron-loss")  # 127 over 8


def test_ranges_follow_the_counts_and_megatrons_interleaved_assignment() -> None:
    assert stage_layer_ranges(10, 2, 2, (2, 3, 3, 2)) == [[(0, 2), (5, 8)], [(2, 5), (8, 10)]]


def test_plan_states_and_checks_an_uneven_split() -> None:
    with pytest.raises(PlanError, match="pp 5 does not divide layers=12.*stage_layers"):
        plan_graphs("gpt2", ParallelPlan(pp=5), seq=128)
    with pytest.raises(PlanError, match="sum to 11; expected the model's layers=12"):
        plan_graphs("gpt2", ParallelPlan(pp=5, stage_layers=(2, 2, 2, 2, 3)), seq=128)
    with pytest.raises(PlanError, match="got 3 counts; expected pp x interleave = 5 x 1 = 5"):
        ParallelPlan(pp=5, stage_layers=(2, 2, 8))
    with pytest.raises(PlanError, match="pipeline_split: got 'torchtitn'.*did you mean 'torchtitan'"):
        ParallelPlan(pp=2, pipeline_split="torchtitn")
    graphs = plan_graphs("gpt2", ParallelPlan(pp=5, stage_layers=(2, 3, 3, 2, 2)), seq=128)
    assert [sg.layers for sg in graphs] == [(0, 2), (2, 5), (5, 8), (8, 10), (10, 12)]
    tt = plan_graphs("gpt2", ParallelPlan(pp=5, pipeline_split="torchtitan"), seq=128)
    assert [sg.layers for sg in tt] == [(0, 2), (2, 5), (5, 8), (8, 10), (10, 12)]  # 2, 3, 3, 2 + remainder 2
    assert ParallelPlan(pp=5).to_json().keys().isdisjoint({"stage_layers", "pipeline_split"})  # unchanged JSON


@pytest.mark.parametrize("schedule,v", [("1f1b", 1), ("gpipe", 1), ("interleaved", 2)])
def test_unequal_stages_the_schedule_and_the_simulation_agree(schedule: str, v: int) -> None:
    # a bottleneck in the middle, a light first and a heavy last chunk
    p, m = 4, 8
    f = [[1.0 + 0.25 * ((d * 7 + c * 3) % 4) for c in range(v)] for d in range(p)]
    b = [[2.0 * x for x in row] for row in f]
    des = simulate_pipeline(f, b, m, schedule).pipeline_s
    t = pipeline_time([sum(r) for r in f], [sum(r) for r in b], m, schedule, v, chunk_fwd_s=f, chunk_bwd_s=b)
    assert t.step_s == pytest.approx(des, rel=1e-12)
    assert t.step_s == pytest.approx(schedule_makespan(f, b, m, schedule), rel=1e-12)


def test_middle_bottleneck_hand_checked() -> None:
    # 1F1B, p = 3, m = 2; f = (1, 2, 1), b = 2 f.
    # S0: F0 [0,1] F1 [1,2]; S1: F0 [1,3] F1 [3,5] (warm-up 1); S2: F0 [3,4] B0 [4,6]; S1: B0 [6,10];
    # S2: F1 [6,7] B1 [7,9]; S1: B1 [10,14]; S0: B0 [10,12] B1 [14,16] -> 16 (the fill-and-drain bound:
    # the other stages' 3 + 3, plus m x 6 = 18)
    t = pipeline_time([1.0, 2.0, 1.0], [2.0, 4.0, 2.0], 2)
    assert t.step_s == 16.0 and t.busy_s == 12.0 and t.bottleneck_stage == 1
    assert simulate_pipeline([[1.0], [2.0], [1.0]], [[2.0], [4.0], [2.0]], 2, "1f1b").pipeline_s == 16.0


def test_zero1_gradient_buffer_padded_as_megatrons_distributed_optimizer() -> None:
    # dp 3 does not divide the flat gradient; Megatron pads the bucket to lcm(dp, 128) = 384 elements
    node = load_hardware("dgx-h100")
    nbytes = 2.0 * (384 * 1000 + 7)  # bf16 gradients, 7 elements over a multiple of 384
    padded = _collective_times([("reduce_scatter", 2.0 * 384 * 1001)], 3, node, pad_to=math.lcm(3, 128))
    got = _collective_times([("reduce_scatter", nbytes)], 3, node, pad_to=384)
    assert got[("reduce_scatter", nbytes)] == padded[("reduce_scatter", 2.0 * 384 * 1001)] > 0.0
    # end to end: a ZeRO-1 plan whose dp divides no stage's gradient prices its step (no shape error)
    res = evaluate_plan("gpt2", node, ParallelPlan(pp=2, dp=3, zero_stage=1, microbatch=1, global_batch=6),
                        train=True, seq=256)
    assert res.latency_s > 0.0 and res.breakdown["dp_sync_s"] > 0.0


def test_automodel_split_puts_the_remainder_first() -> None:
    # generate_hf_model_fqn_per_model_part: 61 // 32 = 1 each, the first 61 % 32 = 29 stages one more
    counts = split_layers(61, 4, 8, "automodel")
    assert counts[:29] == (2,) * 29 and counts[29:] == (1, 1, 1)


def test_the_bound_is_exact_when_the_last_stage_is_slowest() -> None:
    # GPipe and 1F1B never keep a slowest last stage waiting: the bound without the walk equals the walk
    import random

    rng = random.Random(0)
    for _ in range(200):
        p, m, schedule = rng.randint(2, 6), rng.randint(1, 12), rng.choice(["1f1b", "gpipe"])
        f = [rng.uniform(0.5, 1.5) for _ in range(p)]
        b = [rng.uniform(0.5, 3.0) for _ in range(p)]
        f[-1], b[-1] = max(f), max(b)
        walk = schedule_makespan([[x] for x in f], [[x] for x in b], m, schedule)
        assert pipeline_time(f, b, m, schedule).step_s == pytest.approx(walk, rel=1e-12)


def test_pipelined_fsdp_holds_the_stage_unsharded() -> None:
    # FSDP2 under PyTorch's pipeline schedules: the stage's bf16 parameters stay gathered, its gradients
    # accumulate unsharded in fp32 (4 bytes a parameter) until the last microbatch
    node = load_hardware("dgx-h100")
    plan = ParallelPlan(pp=2, dp=4, fsdp=True, microbatch=1, global_batch=8)
    res = evaluate_plan("gpt2", node, plan, train=True, seq=256, dtype="bf16")
    graphs = plan_graphs("gpt2", plan, seq=256, train=True, dtype="bf16")
    for st, sg in zip(res.stages, graphs, strict=True):
        n = sg.graph.params  # the stage's parameters (gpt2's tied table counted on both ends)
        parts = st.memory_breakdown()
        assert parts["buffers.fsdp_unsharded_params"] == 2.0 * n  # bf16, gathered
        assert parts["buffers.fsdp_unsharded_grads"] == 4.0 * n  # fp32 reduce dtype, accumulated
        assert st.weights_bytes == 4.0 * n / 4  # the fp32 shard over the 4 data-parallel ranks
    flat = evaluate_plan("gpt2", node, ParallelPlan(dp=8, fsdp=True, microbatch=1, global_batch=8), train=True,
                         seq=256, dtype="bf16")
    assert "buffers.fsdp_unsharded_grads" not in flat.stages[0].memory_breakdown()
