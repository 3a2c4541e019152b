"""Megatron-Core's ``overlap_moe_expert_parallel_comm`` (Megatron-Bridge ``moe_a2a_overlap``): the combined 1F1B
schedule pairs one chunk's forward with another's backward in its steady phase, the all-to-alls of one beside the
compute of the other (megatron/core/pipeline_parallel/combined_1f1b.py, schedules.py ``get_pp_rank_microbatches``
@ core_v0.15.0). Hand-computed warm-up counts and hidden seconds; the plan's refusals; the rows that state it."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from simulator.engines.options import EvalOptions
from simulator.hardware import load_hardware
from simulator.parallel.compose import evaluate_plan
from workloads.parallel import ParallelPlan, PlanError

#: A MoE layer's sub-steps in the order the stage graph records them: the forward, then the backward.
_STEPS = (("f_attn", "attn.core", "attention"), ("f_dispatch", "moe.dispatch_all_to_all", "all_to_all"),
          ("f_mlp", "moe.experts_in", "grouped_matmul"), ("f_combine", "moe.combine_all_to_all", "all_to_all"),
          ("b_combine", "moe.combine_all_to_all.bwd", "all_to_all"),
          ("b_mlp", "moe.experts_in.bwd_data", "grouped_matmul_bwd_data"),
          ("b_dispatch", "moe.dispatch_all_to_all.bwd", "all_to_all"), ("b_attn", "attn.core.bwd", "attention_bwd"))


def _chunk(*layers: dict[str, float]) -> tuple[object, object]:
    """A stage-graph chunk of the given layers (each its sub-steps' seconds, :data:`_STEPS` keys, absent: 0 s):
    every layer's forward records, then every layer's backward records in reverse layer order."""
    def recs(i: int, d: dict[str, float], prefix: str) -> list[object]:
        return [SimpleNamespace(kind=kind, time_s=d.get(k, 0.0), name=f"layers.{i}.{name}", group=f"layers.{i}")
                for k, name, kind in _STEPS if k.startswith(prefix)]
    fwd = [r for i, d in enumerate(layers) for r in recs(i, d, "f_")]
    bwd = [r for i, d in reversed(list(enumerate(layers))) for r in recs(i, d, "b_")]
    sg = SimpleNamespace(forward_ops=len(fwd))
    split = (sum(r.time_s for r in fwd), sum(r.time_s for r in bwd), 0.0, 0.0)
    return sg, SimpleNamespace(sg=sg, report=SimpleNamespace(records=fwd + bwd), split=split)


#: Forward 3 s with 1 s of all-to-all, backward 5 s with 1 s; each all-to-all under the compute beside it: 2 s hidden
_EVEN = {"f_attn": 1.0, "f_dispatch": 0.5, "f_mlp": 1.0, "f_combine": 0.5, "b_combine": 0.5, "b_mlp": 2.0,
         "b_dispatch": 0.5, "b_attn": 2.0}


def test_interleaved_warm_up_and_steady_pairs_by_hand():
    # pp 2, vp 2, 4 microbatches: 8 chunk forwards a stage. Warm-up 2 (p - s - 1) + (v - 1) p + 1: stage 0 runs 5
    # first (3 steady pairs), stage 1 runs 3 (5 pairs). Each chunk: forward 3 s with 1 s of all-to-all, backward 5 s
    # with 1 s: a pair computes 6 s and sends 2 s, so it hides 2 s. Per microbatch: 3 x 2 / 4 = 1.5 s, 5 x 2 / 4 = 2.5.
    from simulator.parallel.compose import _a2a_overlap_hidden

    plan = ParallelPlan(pp=2, dp=2, ep=2, schedule="interleaved", interleave=2, global_batch=8,
                        moe_a2a_overlap=True)
    stages = [[_chunk(_EVEN), _chunk(_EVEN)] for _ in range(2)]
    assert _a2a_overlap_hidden(stages, plan, plan.microbatches) == pytest.approx([1.5, 2.5])


def test_each_all_to_all_hides_only_under_the_compute_beside_it():
    # TransformerLayerSchedulePlan.run @ core_v0.15.0: combine bwd beside attention fwd, dispatch fwd + bwd beside
    # the experts' bwd + fwd, combine fwd beside attention bwd. All-to-alls 4 s, compute 4.5 s: min(4, 4.5) = 4 s
    # would be the bound, but the combine forward (1 s) has only 0.5 s of attention backward beside it:
    # min(1, 1) + min(1 + 1, 1 + 2) + min(1, 0.5) = 3.5 s a pair. No pipeline, 3 microbatches: one warm-up
    # forward, 2 steady pairs: 2 x 3.5 / 3 s a microbatch
    from simulator.parallel.compose import _a2a_overlap_hidden

    layer = {"f_attn": 1.0, "f_dispatch": 1.0, "f_mlp": 1.0, "f_combine": 1.0, "b_combine": 1.0, "b_mlp": 2.0,
             "b_dispatch": 1.0, "b_attn": 0.5}
    plan = ParallelPlan(dp=2, ep=2, global_batch=3 * 2, moe_a2a_overlap=True)
    assert _a2a_overlap_hidden([[_chunk(layer)]], plan, 3) == pytest.approx([2 * 3.5 / 3])


def test_layer_i_forward_pairs_with_layer_l_minus_1_minus_i_backward():
    # a dense first layer (2 s attention forward, 4 s backward, no all-to-all) and a MoE layer: forward 0 beside
    # backward 1 hides min(1, 2) + min(0 + 1, 0 + 2) + min(0, b1 attn) = 2 s; forward 1 beside backward 0 hides
    # min(0, 1) + min(1 + 0, 1 + 0) + min(1, 4) = 2 s. A chunk-wide sum would pair the MoE layer with itself too
    from simulator.parallel.compose import _paired_layers_hidden

    dense = {"f_attn": 2.0, "b_attn": 4.0}
    moe = {"f_attn": 1.0, "f_dispatch": 1.0, "f_mlp": 1.0, "f_combine": 1.0, "b_combine": 1.0, "b_mlp": 2.0,
           "b_dispatch": 1.0, "b_attn": 0.25}
    assert _paired_layers_hidden(_chunk(dense, moe)[1]) == pytest.approx(4.0)
    assert _paired_layers_hidden(_chunk(moe)[1]) == pytest.approx(1.0 + 2.0 + 0.25)


def test_the_plan_refuses_what_megatron_core_refuses():
    with pytest.raises(PlanError, match=r"moe_a2a_overlap: got it with ep 1; expected ep > 1"):
        ParallelPlan(dp=2, moe_a2a_overlap=True)
    with pytest.raises(PlanError, match=r"moe_a2a_overlap: got it with pipeline_microbatches 2; expected "
                                        r"pipeline_microbatches 0"):
        ParallelPlan(pp=2, schedule="interleaved", interleave=2, dp=2, ep=2, global_batch=8,
                     pipeline_microbatches=2, moe_a2a_overlap=True)
    with pytest.raises(PlanError, match=r"moe_a2a_overlap: got it with pp 2 and schedule '1f1b'; expected "
                                        r"schedule 'interleaved'"):
        ParallelPlan(pp=2, dp=2, ep=2, moe_a2a_overlap=True)
    assert "moe_a2a_overlap" not in ParallelPlan(dp=2, ep=2).to_json()  # the default reads as before
    assert ParallelPlan(dp=2, ep=2, moe_a2a_overlap=True).to_json()["moe_a2a_overlap"] is True


def _qwen_step(flag: bool, engine: str = "analytical") -> object:
    from simulator.hardware import load_hardware
    from simulator.parallel.compose import evaluate_plan
    from simulator.parallel.stacks import profile_options
    from workloads.zoo.transformer import zoo_config

    cfg = dataclasses.replace(zoo_config("qwen3-30b-a3b"), layers=2)
    plan = ParallelPlan(dp=8, ep=8, microbatch=1, global_batch=8 * 4, moe_a2a_overlap=flag)
    return evaluate_plan(cfg, load_hardware("dgx-h100"), plan, profile_options("megatron-core"), train=True,
                         seq=4096, dtype="bf16", framework="megatron-core", engine=engine)


def test_the_step_shrinks_by_the_hidden_all_to_alls_of_the_steady_pairs():
    # Two Qwen3-30B-A3B layers, EP 8 on one DGX H100, 4 microbatches: one warm-up forward, 3 steady pairs, each
    # all-to-all (less than the compute beside it) running beside compute that keeps 100 of the H100's 132 SMs
    # (NCCL's all-to-all holds one SM per channel, 32 peer-to-peer channels on a DGX H100): each pair hides
    # 100/132 of its all-to-all seconds, read off the priced records
    off, on = _qwen_step(False), _qwen_step(True)
    m = 4
    a2a = sum(r.time_s for rep in off.reports for r in rep.records if r.kind == "all_to_all")
    work = off.pipeline.step_s / m
    assert 0 < a2a < work - a2a
    assert on.extra["a2a_overlap_hidden_s"] == pytest.approx((m - 1) * a2a * 100 / 132, rel=1e-9)
    assert on.pipeline.step_s == pytest.approx(off.pipeline.step_s - (m - 1) * a2a * 100 / 132, rel=1e-9)


def test_the_dispatchers_kernels_take_their_sms_from_the_compute_beside_them():
    # (units - held) / units: DeepEP's 20 SMs (Megatron-Core moe_deepep_num_sms) of a B200's 148 and an H100's 132
    # (the report's "about 20%" of the GEMMs' efficiency on H100: 132 / 112 = 1.18); NCCL's 32 peer-to-peer
    # channels of a DGX H100 and a DGX B200 for the alltoall dispatcher; HybridEP's 16 (moe_hybridep_num_sms at
    # 0d8e0714); none without a framework profile
    from simulator.hardware import load_hardware
    from simulator.parallel.compose import _a2a_compute_share

    h100, b200 = load_hardware("dgx-h100"), load_hardware("dgx-b200")

    def share(dispatch: str, system: object, framework: str = "megatron-core") -> float:
        return _a2a_compute_share(ParallelPlan(dp=8, ep=8, moe_dispatch=dispatch), system, framework)

    assert share("deepep", b200) == pytest.approx(128 / 148)
    assert share("deepep", h100) == pytest.approx(112 / 132)
    assert share("sparse", h100) == pytest.approx(100 / 132)
    assert share("sparse", b200) == pytest.approx(116 / 148)
    assert share("hybridep", b200) == pytest.approx(132 / 148)
    assert share("hybridep", h100) == pytest.approx(116 / 132)
    assert share("deepep", b200, "") == 1.0


def test_a_dispatcher_holding_every_sm_is_refused():
    # NCCL's 32 peer-to-peer channels of a DGX H100 against a device of 32 SMs: no compute runs beside the all-to-all
    import dataclasses as dc

    from simulator.hardware import load_hardware
    from simulator.parallel.compose import _a2a_compute_share
    from workloads.parallel import PlanError

    h100 = load_hardware("dgx-h100")
    small = dc.replace(h100, device=dc.replace(h100.device, compute=dc.replace(h100.device.compute, units=32)))
    with pytest.raises(PlanError, match="moe_a2a_overlap: got moe_dispatch 'sparse' .* hold 32 SMs, on a device of 32; "
                                        "expected a dispatcher holding fewer SMs"):
        _a2a_compute_share(ParallelPlan(dp=8, ep=8, moe_dispatch="sparse"), small, "megatron-core")


def test_a_slowed_compute_hides_less_of_each_all_to_all():
    # _EVEN at share 0.5: min(1, 0.5 x 0.5) + min(3, 0.5 x 1) + min(2, 0.5 x 0.5) = 1.0 s, against 2.0 s at full rate;
    # a long all-to-all still hides all of a short compute: min(0.2, 0.5 x 4) = 0.2
    from simulator.parallel.compose import _paired_layers_hidden

    assert _paired_layers_hidden(_chunk(_EVEN)[1], 0.5) == pytest.approx(1.0)
    assert _paired_layers_hidden(_chunk({"f_attn": 0.2, "b_combine": 4.0})[1], 0.5) == pytest.approx(0.2)


def test_a_tensor_parallel_stack_keeps_the_hidden_all_to_alls():
    # Megatron-Core re-times the stages for its tensor-parallel overlap (sequence parallel, tp 2): the step still
    # shrinks by the hidden all-to-alls (one stage: m x the hidden seconds a microbatch), and the hidden seconds
    # come off the communication, not the compute (the step ignored them before, and its compute went down)
    def step(flag: bool) -> object:
        from simulator.hardware import load_hardware
        from simulator.parallel.compose import evaluate_plan
        from simulator.parallel.stacks import profile_options
        from workloads.zoo.transformer import zoo_config

        cfg = dataclasses.replace(zoo_config("qwen3-30b-a3b"), layers=2)
        plan = ParallelPlan(tp=2, sequence_parallel=True, dp=4, ep=4, microbatch=1, global_batch=4 * 4,
                            moe_a2a_overlap=flag)
        return evaluate_plan(cfg, load_hardware("dgx-h100"), plan, profile_options("megatron-core"), train=True,
                             seq=4096, dtype="bf16", framework="megatron-core")

    off, on = step(False), step(True)
    hidden = on.extra["a2a_overlap_hidden_s"]
    assert hidden > 0 and on.latency_s == pytest.approx(off.latency_s - hidden, rel=1e-9)
    assert on.breakdown["compute_s"] == pytest.approx(off.breakdown["compute_s"], rel=1e-9)
    assert on.breakdown["communication_s"] == pytest.approx(off.breakdown["communication_s"] - hidden, rel=1e-9)


def test_the_des_engine_refuses_it():
    with pytest.raises(PlanError, match=r"moe_a2a_overlap: got it with engine 'des'; expected engine 'analytical'"):
        _qwen_step(True, engine="des")


def test_only_rows_whose_notes_state_the_recipe_setting_take_it():
    from simulator.parallel.training_validation import _a2a_overlap, _plan, load_training_rows

    rows = {r["id"]: r for r in load_training_rows()}
    # train-065: QWEN3_235B_A22B_H100_FP8_CS_BASE_CONFIG @ v0.2.0; train-060's printed VP 2 is the B200 config's
    # before the overlap was set (87aa39ce7), v0.2.0's has VP 4 with it; train-144..147 (runs that ran out of
    # memory): CommOverlapConfig(overlap_moe_expert_parallel_comm=True) in _enable_hybridep_full_iteration_mxfp8,
    # src/megatron/bridge/perf_recipes/qwen/common.py @ 9c0cd2575^; train-150/152: Megatron-Bridge pull request
    # #1760's 'before' runs (_set_moe_a2a_overlap_overrides @ fd03ab1ea)
    assert sorted(k for k, r in rows.items() if _a2a_overlap(r)) == ["train-064", "train-065", "train-066",
                                                                      "train-144", "train-145", "train-146",
                                                                      "train-147", "train-150", "train-152"]
    assert _plan(rows["train-066"], 32).moe_a2a_overlap and not _plan(rows["train-060"], 8).moe_a2a_overlap
    assert _plan(rows["train-065"], 16).moe_a2a_overlap


def test_the_hidden_time_never_exceeds_the_backward_it_is_taken_from():
    # no pipeline, 10 microbatches: 9 steady pairs. Forward 4 s with 2 s of all-to-all, backward 1 s with 0.5 s: a
    # pair hides min(0.25, 1) + min(1 + 0.25, 1 + 0.25) + min(1, 0.25) = 1.75 s: 9 x 1.75 / 10 = 1.575 s a
    # microbatch, more than the 1 s backward. Taken off the backward it is at most the backward: 1 s hidden, 0 s left
    from simulator.parallel.compose import _a2a_overlap_hidden, _a2a_overlapped_backward

    plan = ParallelPlan(dp=2, ep=2, global_batch=10 * 2, moe_a2a_overlap=True)
    stages = [[_chunk({"f_attn": 1.0, "f_dispatch": 1.0, "f_mlp": 1.0, "f_combine": 1.0, "b_combine": 0.25,
                       "b_mlp": 0.25, "b_dispatch": 0.25, "b_attn": 0.25})]]
    assert _a2a_overlap_hidden(stages, plan, 10) == pytest.approx([1.575])
    bwd, chunk_bwd, hidden = _a2a_overlapped_backward(stages, plan, 10, [1.0], [[1.0]])
    assert (bwd, chunk_bwd, hidden) == ([0.0], [[0.0]], [1.0])


def test_the_plan_refuses_a_non_boolean_and_the_einsum_dispatch():
    # Megatron-Core asserts moe_token_dispatcher_type in ['alltoall', 'flex'] (transformer_config.py @ core_v0.15.0):
    # the sparse (alltoall), deepep and hybridep (flex) dispatches; the one-hot einsum dispatch is neither
    with pytest.raises(PlanError, match=r"moe_a2a_overlap: got 'yes'; expected true or false"):
        ParallelPlan(dp=2, ep=2, moe_a2a_overlap="yes")
    with pytest.raises(PlanError, match=r"moe_a2a_overlap: got it with moe_dispatch 'einsum'; expected moe_dispatch "
                                        r"'sparse', 'deepep' or 'hybridep'"):
        ParallelPlan(dp=2, ep=2, moe_dispatch="einsum", capacity_factor=1.0, moe_a2a_overlap=True)
    assert ParallelPlan(dp=2, ep=2, moe_dispatch="deepep", moe_a2a_overlap=True).moe_a2a_overlap
    assert ParallelPlan(dp=2, ep=2, moe_dispatch="hybridep", moe_a2a_overlap=True).moe_a2a_overlap


def test_pairs_per_stage_follow_the_warm_up_count():
    # interleaved pp 2, vp 2: stage 0 warms up with 2 (2 - 0 - 1) + (2 - 1) 2 + 1 = 5 of its m v chunk forwards,
    # stage 1 with 3; 4 microbatches (8 chunk forwards): 3 and 5 pairs; 2 microbatches: 0 and 1. No pipeline:
    # one warm-up forward, m - 1 pairs; without the schedule none
    from simulator.parallel.compose import _a2a_pairs

    inter = ParallelPlan(pp=2, dp=2, ep=2, schedule="interleaved", interleave=2, microbatch=1, global_batch=8,
                         moe_a2a_overlap=True)
    assert [_a2a_pairs(inter, s) for s in (0, 1)] == [3, 5]
    assert [_a2a_pairs(inter, s, 2) for s in (0, 1)] == [0, 1]
    flat = ParallelPlan(dp=8, ep=8, microbatch=1, global_batch=24, moe_a2a_overlap=True)
    assert _a2a_pairs(flat, 0) == 2 and _a2a_pairs(flat, 0, 1) == 0
    assert _a2a_pairs(ParallelPlan(dp=8, ep=8, microbatch=1, global_batch=24), 0) == 0


def test_a_pair_holds_the_backward_layers_attention_side_not_a_microbatch():
    """Qwen3-30B-A3B, one 4,096-token sequence a microbatch, 4 microbatches, no pipeline. At a pair's peak the
    forward chunk holds layers 0..i and the backward chunk layers 0..L-1-i less the last's MoE side: one
    microbatch's stash (in flight stays 1) plus the attention side of one layer, by hand (bf16): the attention
    norm's and the two residual-path outputs (attn_residual, mlp_norm) 3 x 4096 x 2048 x 2 = 48 MiB; q contiguous,
    rope q and the attention output 3 x 32 heads x 4096 x 128 x 2 = 96 MiB; k contiguous, rope k and v contiguous
    3 x 4 x 4096 x 128 x 2 = 12 MiB; the router's indices 4096 x 8 x 4 = 128 KiB (its probabilities reach the
    combine through the dispatcher's all-to-all of probabilities, a tensor of the MoE side)."""
    hw = load_hardware("dgx-h100")
    out = {}
    for overlap in (False, True):
        plan = ParallelPlan(dp=8, ep=8, microbatch=1, global_batch=32, moe_a2a_overlap=overlap)
        r = evaluate_plan("qwen3-30b-a3b", hw, plan, EvalOptions(plan=plan), train=True, seq=4096,
                          framework="megatron-core")
        out[overlap] = r.stages[0]
    pair = (48 + 96 + 12) * 2**20 + 128 * 2**10
    assert out[True].memory_breakdown()["activations.a2a_overlap_paired_layer"] == pair == 163_708_928
    assert out[True].in_flight == out[False].in_flight == 1.0
    assert out[True].activations_bytes - out[False].activations_bytes == pytest.approx(pair, rel=1e-12)
    assert "activations.a2a_overlap_paired_layer" not in out[False].memory_breakdown()
