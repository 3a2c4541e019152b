"""The step priced per host-sync interval (simulator.parallel.host_sync): hand-computed cases, and the
sync attribute Megatron-Core's dropless dispatchers put on the MoE dispatch."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from simulator.parallel.host_sync import (
    host_per_kernel_s,
    host_sync_ops,
    interval_time,
    sync_interval_excess,
)


def _rec(time_us: float, kernels: int, group: str = "layers.0") -> SimpleNamespace:
    return SimpleNamespace(time_s=time_us * 1e-6, kernels=kernels, group=group)


def test_host_bound_intervals_by_hand():
    # ops A, S (the sync), B in the forward pass (forward_ops 3), C in the backward pass; 20 us per kernel;
    # each kernel starts at the later of its issue and the end of the one before (the GPU idle at a sync)
    # interval 1 = [A, S]: A issued at 20, runs 20-30; S issued at 40, runs 40-45: 45 us for G = 15 -> +30
    # interval 2 = [B (3 kernels of 3.33 us), C (2 of 20 us)]: B's kernels issued at 20, 40, 60, the last
    # ends at 63.3; C's at 80 and 100, ending 100 and 120: 120 us for G = 50 -> +70, forward 10/50 of it
    # (14 us), backward 40/50 (56 us); one sync of 5.8 us charged to the forward pass
    recs = [_rec(10, 1), _rec(5, 1), _rec(10, 3), _rec(40, 2)]
    f, b = sync_interval_excess(recs, [1], 3, 20e-6, 5.8e-6)
    assert f == pytest.approx((30 + 14 + 5.8) * 1e-6)
    assert b == pytest.approx(56e-6)


def test_gpu_bound_intervals_pay_the_round_trip_and_the_first_issue():
    # two syncs; every op's GPU time (100 us) exceeds its host issue time (1 kernel x 20 us): after each sync
    # the GPU waits only for the first op's issue, 20 us, then runs back to back
    recs = [_rec(100, 1), _rec(100, 1), _rec(100, 1), _rec(100, 1)]
    f, b = sync_interval_excess(recs, [0, 2], 2, 20e-6, 5.8e-6)
    # intervals [0] (forward), [1, 2] (half forward, half backward by G), [3] (backward): 20 us each; each
    # sync's 5.8 us round trip to the pass it is in (op 0 forward, op 2 backward)
    assert f == pytest.approx((20 + 10) * 1e-6 + 5.8e-6)
    assert b == pytest.approx((10 + 20) * 1e-6 + 5.8e-6)


def test_a_run_of_cheap_kernels_is_exposed_although_the_interval_is_gpu_bound():
    # G = 200 us against H = 5 x 20 = 100 us: max(H, G) would add nothing. The four tiny kernels issued after
    # the long one wait for nothing but the host (issued by 100 us, the long kernel ended at 220), so the
    # interval takes 20 + 200 = 220 us; issued before it, they hold the long kernel back to 80 + 20 ...
    assert interval_time([(20e-6, 200e-6, 1)] + [(20e-6, 0.0, 1)] * 4) == pytest.approx(220e-6)
    assert interval_time([(20e-6, 0.0, 1)] * 4 + [(20e-6, 200e-6, 1)]) == pytest.approx(300e-6)
    # a view takes host time only; a 3-kernel op of 30 us host, 3 us GPU: host-bound, ends 3 x 10 + 1
    assert interval_time([(5e-6, 0.0, 0), (30e-6, 3e-6, 3)]) == pytest.approx(5e-6 + 31e-6)


def test_host_only_ops_are_issued_before_their_op():
    # the router stands for 2 framework ops more than its kernel (host_ops): 3 x 20 us of issue before a
    # 10 us kernel, in an interval of its own
    recs = [_rec(10, 1), _rec(10, 1)]
    f, _ = sync_interval_excess(recs, [0], 2, 20e-6, 0.0, host_ops=(2, 0))
    assert f == pytest.approx((70 - 10) * 1e-6 + (30 - 10) * 1e-6)


def test_host_only_ops_after_an_op_follow_its_kernels():
    # a 100 us kernel then 2 host-only ops issued after it (host_ops (0, 2)): issue at 20, run 20-120; the
    # two ops are issued by 60 and wait for the kernel: the interval ends at 120, 20 us over its G; the
    # second interval, one 10 us kernel, waits 20 us for its issue
    recs = [_rec(100, 1), _rec(10, 1)]
    f, _ = sync_interval_excess(recs, [0], 2, 20e-6, 0.0, host_ops=((0, 2), 0))
    assert f == pytest.approx((20 + 20) * 1e-6)
    # issued before it instead, they hold the kernel back by their 40 us: 160 us for G = 100
    f, _ = sync_interval_excess(recs, [0], 2, 20e-6, 0.0, host_ops=((2, 0), 0))
    assert f == pytest.approx((60 + 20) * 1e-6)


def test_no_sync_adds_nothing_and_the_optimizer_is_left_out():
    recs = [_rec(1, 5), _rec(1, 5)]
    assert sync_interval_excess(recs, [], 1, 20e-6, 5.8e-6) == (0.0, 0.0)
    # the optimizer's 50 kernels (1,000 us of issue) are skipped: each interval pays only its first issue
    recs = [_rec(100, 1), _rec(100, 1), _rec(10, 50, group="optimizer")]
    f, b = sync_interval_excess(recs, [0], 1, 20e-6, 0.0, skip=lambda r: r.group == "optimizer")
    assert (f, b) == (pytest.approx(20e-6), pytest.approx(20e-6))


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


def test_each_gpu_bound_moe_layer_adds_a_round_trip_and_one_issue():
    # Qwen3-30B-A3B's layers at 4096 tokens on one H100 under the megatron-core stack: each sync interval
    # between two MoE layers' syncs waits for its first kernel's issue (one framework op, 20 us) after the sync's
    # round trip (efficiency.host_sync_s = 5.8 us), and once more inside the layer (below): a third
    # MoE layer adds 40.8 us more to what the syncs add to the one-microbatch step. The per-call cuBLASLt setup of
    # Transformer Engine's per-expert GEMMs (efficiency.library_gemm_call_s) is set to 0 here: with all 128 experts on
    # one GPU their 256-row GEMMs are shorter than 10 us of issue each (test_per_expert_gemm_calls_... below)
    from hwmodels.paths import with_overrides
    from simulator.hardware import load_hardware
    from simulator.parallel.compose import evaluate_plan
    from simulator.parallel.stacks import profile_options
    from workloads.parallel import ParallelPlan

    hw = with_overrides(load_hardware("h100-sxm5-80gb"), {"efficiency.library_gemm_call_s": 0.0})

    def added(layers: int) -> float:
        cfg = dataclasses.replace(_two_layer_moe(), layers=layers)
        lat = [evaluate_plan(cfg, hw, ParallelPlan(microbatch=1, moe_host_sync=flag),
                             profile_options("megatron-core"), train=True, seq=4096, dtype="bf16",
                             framework="megatron-core").latency_s for flag in (False, True)]
        return lat[1] - lat[0]

    # Megatron-Core's SwiGLU is a kernel of its own after the first expert GEMM (FrameworkProfile.
    # epilogue_bias_only): that GEMM's 127 per-expert launches are issue-bound (each kernel's 5 us launch floor as
    # long as its 5 us issue), so the GPU ends them 5 us after the host issues the last and then waits for the
    # SwiGLU kernel's issue, one framework op (20 us): 15 us more a layer
    assert added(3) - added(2) == pytest.approx(20e-6 + 5.8e-6 + (20e-6 - 5e-6), rel=1e-6)


def test_per_expert_gemm_calls_take_the_library_call_time_where_the_host_is_behind():
    # one expert-GEMM op of 4 kernels (its own GEMM and 3 more per-expert GEMMs from the library), 4 us of GPU each,
    # right after a sync: the framework op issues at 20 us (its kernel runs 20-24), then the library's three
    # GEMMs at 10 us each (gemm_call_s, not the 5 us launch floor) are issued at 30, 40, 50 and end at 54:
    # 54 us for G = 16 -> +38 us (at the launch floor: 25, 30, 35 -> 39 us, +23)
    recs = [_rec(16, 4), _rec(0, 0)]
    recs[0].rule = "grouped-gemm-per-expert"
    f, _ = sync_interval_excess(recs, [0], 2, 20e-6, 0.0, launch_s=5e-6, gemm_calls=(3, 0), gemm_call_s=10e-6)
    assert f == pytest.approx(38e-6)
    f, _ = sync_interval_excess(recs, [0], 2, 20e-6, 0.0, launch_s=5e-6)
    assert f == pytest.approx(23e-6)
    # GEMMs longer than their issue (20 us each): the host stays ahead, the call time is hidden; G + 20 us
    recs = [_rec(80, 4), _rec(0, 0)]
    recs[0].rule = "grouped-gemm-per-expert"
    f, _ = sync_interval_excess(recs, [0], 2, 20e-6, 0.0, launch_s=5e-6, gemm_calls=(3, 0), gemm_call_s=10e-6)
    assert f == pytest.approx(20e-6)


def test_per_expert_gemm_calls_counts_the_library_gemms_of_a_per_expert_stack():
    from simulator.parallel.host_sync import gemm_call_s, per_expert_gemm_calls

    x = SimpleNamespace(shape=(16, 256, 2048))
    op = SimpleNamespace(kind="grouped_matmul_bwd_weight", attrs={"per_expert_streams": 4}, inputs=(x,))
    assert per_expert_gemm_calls(op) == 15  # experts_active defaults to the input's expert axis
    assert per_expert_gemm_calls(SimpleNamespace(kind="matmul", attrs={"per_expert_streams": 4}, inputs=(x,))) == 0
    eff = SimpleNamespace(library_gemm_call_s=10e-6, launch_overhead_s=5e-6, graph_launch_overhead_s=2.5e-6)
    assert gemm_call_s(eff, SimpleNamespace(cuda_graphs=False)) == pytest.approx(10e-6)
    assert gemm_call_s(eff, SimpleNamespace(cuda_graphs=True)) == pytest.approx(2.5e-6)  # replay skips the setup


def test_hopper_sync_round_trip_is_the_sourced_figure():
    from hwmodels.catalog import load_device

    assert load_device("h100-sxm5-80gb").efficiency.host_sync_s == pytest.approx(5.8e-6)


def test_a_non_boolean_moe_host_sync_is_refused():
    from workloads.parallel import ParallelPlan, PlanError

    with pytest.raises(PlanError, match="moe_host_sync: got 'yes'; expected true or false"):
        ParallelPlan(moe_host_sync="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize(("dispatch", "before", "after"), [("sparse", 11, None), ("hybridep", None, 1)])
def test_the_dispatchers_framework_ops_ride_on_the_dispatch(dispatch, before, after):
    # Megatron-Core's alltoall dispatcher at EP 8: 8 count ops and 4 host copies before the wait, less the
    # counts' all-gather, a collective op of the graph (the probabilities' all-to-all after it is one too);
    # HybridEP: only the sum of the received counts after it
    from workloads.parallel import ParallelPlan, plan_graphs

    plan = ParallelPlan(microbatch=1, ep=8, dp=8, moe_host_sync=True, moe_dispatch=dispatch)
    (sg,) = plan_graphs(_two_layer_moe(), plan, seq=512, train=True, framework="megatron-core")
    fwd = sg.graph.ops[:sg.forward_ops]
    dispatch_ops = [op for op in fwd if op.kind == "moe_dispatch"]
    a2a = [op for op in fwd if op.name.endswith("dispatch_all_to_all")]
    assert len(dispatch_ops) == len(a2a) == 2
    assert all(op.attrs.get("host_ops") == before and op.attrs["host_sync"] for op in dispatch_ops)
    assert all(op.attrs.get("host_ops_after") == after and "host_ops" not in op.attrs for op in a2a)
    # no host sync, or no expert parallelism: nothing rides on them
    for p in (ParallelPlan(microbatch=1, ep=8, dp=8, moe_dispatch=dispatch),
              ParallelPlan(microbatch=1, moe_host_sync=True, moe_dispatch=dispatch)):
        (sg,) = plan_graphs(_two_layer_moe(), p, seq=512, train=True, framework="megatron-core")
        assert not any("host_ops" in op.attrs or "host_ops_after" in op.attrs for op in sg.graph.ops)


@pytest.mark.parametrize(("key", "value"), [("host_ops", -1), ("host_ops", "12"), ("host_ops_after", 1.5),
                                            ("host_ops_after", True)])
def test_a_bad_host_ops_attribute_is_one_located_error(key, value):
    # the composition reads the counts off the graph's ops: anything but a non-negative integer names the op
    from simulator.hardware import load_hardware
    from simulator.parallel.compose import _with_host_syncs
    from workloads.ir import GraphError

    op = SimpleNamespace(name="layers.0.moe.dispatch", kind="moe_dispatch", attrs={"host_sync": True, key: value})
    sg = SimpleNamespace(graph=SimpleNamespace(ops=[op], memo=lambda _k, fn: fn()), forward_ops=1)
    with pytest.raises(GraphError, match=rf"op 'layers.0.moe.dispatch' \(moe_dispatch\): {key}: got {value!r}; "
                                         "expected a non-negative integer"):
        _with_host_syncs(sg, (), (0.0, 0.0, 0.0, 0.0), load_hardware("h100-sxm5-80gb"),
                         SimpleNamespace(cuda_graphs=False, eager_framework=True))


def test_the_alltoall_dispatcher_runs_its_count_gather_and_probability_all_to_all_as_collectives():
    # Megatron-Core's alltoall dispatcher (token_dispatcher.py @ 0d8e0714): the per-expert counts' all-gather over
    # the EP group before the wait (dropless only), the probabilities' all-to-all after the tokens' (both modes),
    # and its backward. Qwen3-30B-A3B, 128 experts, top 8, 512 tokens a rank, EP 8: the gather reads 128 int64
    # (1,024 bytes) and writes 8 x 1,024; the probabilities are 512 x 8 bf16 = 8,192 bytes each way
    from workloads.parallel import ParallelPlan, plan_graphs

    def side_ops(plan, framework="megatron-core"):
        (sg,) = plan_graphs(_two_layer_moe(), plan, seq=512, train=True, framework=framework)
        ops = sg.graph.ops
        return sg, [(i, op) for i, op in enumerate(ops) if op.name.split(".")[-1] in ("count_all_gather",
                                                                                      "probs_all_to_all")
                    or op.name.endswith("probs_all_to_all.bwd")]

    sg, side = side_ops(ParallelPlan(microbatch=1, ep=8, dp=8, moe_host_sync=True))
    ops = sg.graph.ops
    gathers = [(i, op) for i, op in side if op.kind == "all_gather"]
    probs = [(i, op) for i, op in side if op.kind == "all_to_all"]
    assert len(gathers) == 2 and len(probs) == 4  # per MoE layer: one gather; one all-to-all forward, one backward
    for i, op in gathers:
        assert i < sg.forward_ops and ops[i + 1].kind == "moe_dispatch" and ops[i + 1].attrs["host_sync"]
        assert op.inputs[0].nbytes == 1024 and op.outputs[0].nbytes == 8 * 1024 and op.attrs["group_size"] == 8
    assert [i < sg.forward_ops for i, _ in probs] == [True, True, False, False]
    assert all(op.inputs[0].nbytes == 512 * 8 * 2 and op.attrs["group_size"] == 8 for _, op in probs)
    # without the host wait (capacity-padded) no gather, the probabilities' all-to-all still
    _, side = side_ops(ParallelPlan(microbatch=1, ep=8, dp=8))
    assert [op.kind for _, op in side].count("all_gather") == 0 and len(side) == 4
    # HybridEP, no expert parallelism, or a stack that does not list the mode: none
    for plan, fw in ((ParallelPlan(microbatch=1, ep=8, dp=8, moe_host_sync=True, moe_dispatch="hybridep"),
                      "megatron-core"),
                     (ParallelPlan(microbatch=1, moe_host_sync=True), "megatron-core"),
                     (ParallelPlan(microbatch=1, ep=8, dp=8, moe_host_sync=True), None)):
        assert side_ops(plan, fw)[1] == []
