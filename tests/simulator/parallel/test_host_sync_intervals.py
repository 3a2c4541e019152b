"""The step priced per host-sync interval (simulator.parallel.host_sync): hand-computed cases, and the
sync attribute Megatron-Core's dropless dispatchers put on the MoE dispatch."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from simulator.parallel.host_sync import host_per_kernel_s, host_sync_ops, sync_interval_excess


def _rec(time_us: float, kernels: int, group: str = "layers.0") -> SimpleNamespace:
    return SimpleNamespace(time_s=time_us * 1e-6, kernels=kernels, group=group)


def test_host_bound_intervals_by_hand():
    # ops A, S (the sync), B in the forward pass (forward_ops 3), C in the backward pass; 20 us per kernel
    # interval 1 = [A, S]: G = 10 + 5 = 15 us, H = (1 + 1) x 20 = 40 us -> 25 us more, all forward
    # interval 2 = [B, C]: G = 10 + 40 = 50 us, H = (3 + 2) x 20 = 100 us -> 50 us more: forward 10/50 of it
    # (10 us), backward 40/50 (40 us); one sync of 5.8 us charged to the forward pass
    recs = [_rec(10, 1), _rec(5, 1), _rec(10, 3), _rec(40, 2)]
    f, b = sync_interval_excess(recs, [1], 3, 20e-6, 5.8e-6)
    assert f == pytest.approx((25 + 10 + 5.8) * 1e-6)
    assert b == pytest.approx(40e-6)


def test_gpu_bound_intervals_pay_only_the_round_trip():
    # two syncs; every interval's GPU time exceeds its host issue time (1 kernel x 20 us against 100 us)
    recs = [_rec(100, 1), _rec(100, 1), _rec(100, 1), _rec(100, 1)]
    f, b = sync_interval_excess(recs, [0, 2], 2, 20e-6, 5.8e-6)
    assert (f, b) == (pytest.approx(2 * 5.8e-6), 0.0)


def test_no_sync_adds_nothing_and_the_optimizer_is_left_out():
    recs = [_rec(1, 5), _rec(1, 5)]
    assert sync_interval_excess(recs, [], 1, 20e-6, 5.8e-6) == (0.0, 0.0)
    # the optimizer's 50 kernels would make the last interval host-bound; they are skipped
    recs = [_rec(100, 1), _rec(100, 1), _rec(10, 50, group="optimizer")]
    f, b = sync_interval_excess(recs, [0], 1, 20e-6, 0.0, skip=lambda r: r.group == "optimizer")
    assert (f, b) == (0.0, 0.0)


def test_host_per_kernel_is_the_eager_op_time_or_the_launch_floor():
    eff = SimpleNamespace(framework_op_overhead_s=20e-6, launch_overhead_s=5e-6, graph_launch_overhead_s=2.5e-6)
    assert host_per_kernel_s(eff, SimpleNamespace(cuda_graphs=False)) == 20e-6
    eff = SimpleNamespace(framework_op_overhead_s=0.0, launch_overhead_s=5e-6, graph_launch_overhead_s=2.5e-6)
    assert host_per_kernel_s(eff, SimpleNamespace(cuda_graphs=False)) == 5e-6
    assert host_per_kernel_s(eff, SimpleNamespace(cuda_graphs=True)) == 2.5e-6


def _two_layer_moe() -> object:
    from workloads.zoo.transformer import zoo_config

    return dataclasses.replace(zoo_config("qwen3-30b-a3b"), layers=2)


def test_moe_dispatch_carries_the_sync_only_when_the_plan_says_so():
    from workloads.parallel import ParallelPlan, plan_graphs

    for flag, want in ((True, 2), (False, 0)):
        (sg,) = plan_graphs(_two_layer_moe(), ParallelPlan(microbatch=1, moe_host_sync=flag), seq=512, train=True)
        syncs = host_sync_ops(sg.graph.ops)
        assert len(syncs) == want  # one per MoE layer
        assert all(sg.graph.ops[i].kind == "moe_dispatch" and i < sg.forward_ops for i in syncs)


def test_gpu_bound_step_adds_one_round_trip_per_moe_layer():
    # Qwen3-30B-A3B's layers at 4096 tokens on one H100 under the megatron-core stack: every sync interval
    # takes longer on the GPU than its kernels x 20 us of host issue time, so each of the 2 MoE layers'
    # syncs adds efficiency.host_sync_s = 5.8 us to the one-microbatch step
    from simulator.hardware import load_hardware
    from simulator.parallel.compose import evaluate_plan
    from simulator.parallel.stacks import profile_options
    from workloads.parallel import ParallelPlan

    hw = load_hardware("h100-sxm5-80gb")
    lat = [evaluate_plan(_two_layer_moe(), hw, ParallelPlan(microbatch=1, moe_host_sync=flag),
                         profile_options("megatron-core"), train=True, seq=4096, dtype="bf16",
                         framework="megatron-core").latency_s for flag in (False, True)]
    assert lat[1] - lat[0] == pytest.approx(2 * 5.8e-6, rel=1e-6)


def test_hopper_sync_round_trip_is_the_sourced_figure():
    from hwmodels.catalog import load_device

    assert load_device("h100-sxm5-80gb").efficiency.host_sync_s == pytest.approx(5.8e-6)


def test_a_non_boolean_moe_host_sync_is_refused():
    from workloads.parallel import ParallelPlan, PlanError

    with pytest.raises(PlanError, match="moe_host_sync: got 'yes'; expected true or false"):
        ParallelPlan(moe_host_sync="yes")  # type: ignore[arg-type]
