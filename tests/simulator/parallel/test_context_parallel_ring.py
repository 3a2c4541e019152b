"""Context parallelism as PyTorch's ``context_parallel`` runs it under the FSDP2 stacks: the ring's
kernels at chunk shapes, its fp32 merges, the exchanged key/value bytes, and sharding over dp x cp.
Every expected value is computed by hand from the shapes."""

from __future__ import annotations

from collections import Counter

import pytest

from simulator.hardware import load_hardware
from simulator.parallel.compose import _collective_times, evaluate_plan
from tests.simulator.parallel.tiny_gqa import tiny_gqa
from workloads.ir import Role
from workloads.parallel import ParallelPlan, plan_graphs

#: 2 layers, 8 query heads of 16, 2 key/value heads (GQA 4)
CFG = tiny_gqa("tiny-gqa", layers=2)
FP8_CFG = tiny_gqa("tiny-gqa-fp8-cp", layers=2)
B, S, CP, HQ, D = 1, 256, 4, 8, 16
SL = S // CP  # tokens per rank


def _forward(framework: str) -> list:
    (sg,) = plan_graphs(CFG, ParallelPlan(cp=CP), phase="prefill", seq=S, framework=framework)
    return [op for op in sg.graph.ops if op.group.startswith("layers.0.")]


def test_ring_runs_cp_sdpa_steps_at_chunk_shapes() -> None:
    ops = _forward("fsdp2")
    att = [op for op in ops if op.kind == "attention"]
    assert len(att) == CP
    # step 0: causal, local queries over the local chunk; steps 1..cp-1: non-causal over half a chunk
    assert att[0].attrs["causal"] and att[0].inputs[1].shape == (B, HQ, SL, D)
    for op in att[1:]:
        assert not op.attrs["causal"] and op.inputs[0].shape == (B, HQ, SL, D)
        assert op.inputs[1].shape == (B, HQ, SL // 2, D)
    # FLOPs (FMA = 2, QK and PV): causal pairs SL(SL+1)/2, then cp-1 half squares
    pairs = SL * (SL + 1) // 2 + (CP - 1) * SL * SL // 2
    assert sum(op.flops for op in att) == 2 * B * HQ * pairs * (D + D)


def test_ring_exchanges_repeated_heads_and_merges_in_fp32() -> None:
    ops = _forward("fsdp2")
    gathers = [op for op in ops if op.kind == "all_gather"]
    # repeat_kv before SDPA: every query head's keys and values are gathered, cp x SL tokens
    assert [op.outputs[0].shape for op in gathers] == [(B, HQ, S, D)] * 2
    n = B * HQ * SL * D
    merge = [op for op in ops if op.kind == "elementwise" and op.group.endswith(".ring")]
    # step 0 cast to fp32 (2 + 4 bytes); per later step: cast (2 + 4), out - out_i (4 + 4 + 4),
    # weight x diff (4 + 4), out - that (4 + 4 + 4); the final cast back (4 + 2)
    expected = n * (6 + (CP - 1) * (6 + 12 + 8 + 12) + 6)
    assert sum(op.bytes_read + op.bytes_written for op in merge) == expected
    assert len(merge) == 2 + 4 * (CP - 1)


def test_megatron_ring_is_unchanged_without_an_fsdp2_stack() -> None:
    ops = _forward("")
    att = [op for op in ops if op.kind == "attention"]
    assert len(att) == 2  # Transformer Engine's balanced pair of calls
    gathers = [op for op in ops if op.kind == "all_gather"]
    assert [op.outputs[0].shape for op in gathers] == [(B, 2, S, D)] * 2  # GQA heads, not repeated


def test_states_shard_and_gradients_reduce_over_dp_times_cp() -> None:
    hw = load_hardware("dgx-h100")
    plan = ParallelPlan(dp=1, cp=8, fsdp=True, microbatch=1, global_batch=1)
    res = evaluate_plan("llama-3-8b", hw, plan, train=True, seq=16384, recompute="full", framework="fsdp2")
    parts = res.stages[0].memory_breakdown()
    n_params = parts["parameters"] * 8 / 4.0  # fp32 shards over the 8 context-parallel ranks
    assert n_params == pytest.approx(8.03e9, rel=0.01)
    assert parts["gradients"] == pytest.approx(parts["parameters"])
    # the gradients reduce-scatter over the 8 ranks (fp32 under FSDP2's reduce dtype: twice the bf16 bytes)
    (sg,) = plan_graphs("llama-3-8b", plan, train=True, seq=16384, recompute="full", framework="fsdp2")
    grads = float(sg.graph.role_bytes(Role.GRADIENT))
    once = _collective_times([("reduce_scatter", grads)], 8, hw, 1)[("reduce_scatter", grads)]
    assert res.breakdown["dp_sync_s"] == pytest.approx(2.0 * once, rel=1e-9)


def test_compiled_loss_holds_no_fp32_logits(monkeypatch: pytest.MonkeyPatch) -> None:
    # torchtitan --compile compiles the loss since 2025-04-02: the eager loss's three fp32 logit-sized tensors
    # (12 bytes per logit over the graph's 16-bit logits and gradient, 4 bytes) are not materialised (the earlier
    # stack's eager final norm, ``eager_final_norm``, set apart so that the loss alone differs)
    import dataclasses

    from workloads import frameworks

    blocks = dataclasses.replace(frameworks.PROFILES["fsdp2-compile-blocks"], name="fsdp2-blocks-fused-final-norm",
                                 eager_final_norm=False)
    monkeypatch.setitem(frameworks.PROFILES, blocks.name, blocks)
    hw = load_hardware("dgx-h100")
    plan = ParallelPlan(dp=8, fsdp=True, microbatch=1, global_batch=8)
    mem = {fw: evaluate_plan(CFG, hw, plan, train=True, seq=S, recompute="full", framework=fw)
           .stages[0].memory_breakdown()["activations"] for fw in (blocks.name, "fsdp2-compile")}
    logits = 1 * S * 512  # microbatch x tokens x vocabulary
    assert mem[blocks.name] - mem["fsdp2-compile"] == pytest.approx((12.0 - 4.0) * logits)


def test_torchtitan_rows_name_the_loss_compile_of_their_version() -> None:
    from simulator.parallel.training_validation import load_training_rows, stated_recipe

    rows = {r.id: r for r in load_training_rows()}
    assert stated_recipe(rows["train-006"])["framework"] == "fsdp2-compile-blocks"  # torchtitan 9dec370, 2024-12-26
    assert stated_recipe(rows["train-050"])["framework"] == "fsdp2-compile"  # torchtitan e7c0cae, 2025-06-13


def test_ring_exchanges_hide_behind_step0_and_the_later_steps_backward() -> None:
    from simulator.parallel.stacks import ring_overlap_hidden

    recs = [("l.ring.gather_k", "all_gather", 2.0), ("l.ring.gather_v", "all_gather", 2.0),
            ("l.ring.step0", "attention", 3.0), ("l.ring.step1", "attention", 3.0), ("l.mlp", "matmul", 9.0),
            ("l.ring.gather_k@recompute", "all_gather", 1.0), ("l.ring.gather_v@recompute", "all_gather", 1.0),
            ("l.ring.step0@recompute", "attention", 3.0),
            ("l.ring.step1.bwd", "attention_bwd", 5.0), ("l.ring.step0.bwd", "attention_bwd", 4.0),
            ("l.ring.gather_v.bwd.regather", "all_gather", 1.5), ("l.ring.gather_k.bwd.regather", "all_gather", 1.5),
            ("l.ring.gather_v.bwd.dkv0", "all_to_all", 3.0), ("l.ring.gather_k.bwd.dkv0", "all_to_all", 3.0),
            ("l.ring.gather_v.bwd.dkv1", "all_to_all", 3.0), ("l.ring.gather_k.bwd.dkv1", "all_to_all", 3.0)]
    # forward: min(2 + 2, step0 3); recomputed pass: min(1 + 1, 3); backward: the re-gather behind step 0's
    # kernels, min(1.5 + 1.5, 4); exchange 0 behind step 1's, min(3 + 3, 5); the last one behind nothing
    assert ring_overlap_hidden(recs, 5) == (3.0, 2.0 + 3.0 + 5.0)
    hw = load_hardware("dgx-h100")
    res = evaluate_plan(CFG, hw, ParallelPlan(cp=4, fsdp=True, microbatch=1, global_batch=1), train=True, seq=S,
                        recompute="full", framework="fsdp2")
    ring = sum(r.time_s for r in res.reports[0].records if ".ring.gather_" in r.name)
    assert 0.0 < res.breakdown["cp_comm_hidden_s"] <= ring


def test_ring_backward_regathers_and_passes_fp32_dkv_once_per_step() -> None:
    # _templated_ring_attention_backward: kv_rotater all-gathers K and V again; dkv_rotater (ALL_TO_ALL)
    # permutes the fp32 accumulator once per step; no reduce-scatter
    (sg,) = plan_graphs(CFG, ParallelPlan(cp=CP), train=True, seq=S, framework="fsdp2")
    ops = [op for op in sg.graph.ops[sg.forward_ops:] if op.group.startswith("layers.0.") and ".ring" in op.group]
    assert not [op for op in ops if op.kind == "reduce_scatter"]
    regather = [op for op in ops if op.name.endswith(".bwd.regather")]
    assert [op.outputs[0].nbytes for op in regather] == [B * HQ * S * D * 2] * 2  # bf16, cp x SL tokens
    dkv = [op for op in ops if op.kind == "all_to_all"]
    assert len(dkv) == 2 * CP  # keys and values, one exchange per step
    local32 = B * HQ * SL * D * 4  # the fp32 accumulator of one rank's keys (or values)
    assert {op.inputs[0].nbytes for op in dkv} == {local32}
    # a permute sends its whole buffer to one peer: nccl-tests' all-to-all size is n / (n - 1) times it
    assert {op.attrs["size_bytes"] for op in dkv} == {local32 * CP / (CP - 1)}
    # step 0's accumulation (the local gradient and the re-gathered chunk in bf16 into fp32) and the final
    # cast back to bf16: (2 + 2 + 4) and (4 + 2) bytes per element, for keys and values
    acc = [op for op in ops if op.name.endswith((".bwd.acc0", "gather_k.bwd", "gather_v.bwd"))]
    assert sorted(op.bytes_read + op.bytes_written for op in acc) == sorted([local32 // 4 * 8] * 2 + [local32 // 4 * 6] * 2)
    hw = load_hardware("dgx-h100")
    res = evaluate_plan(CFG, hw, ParallelPlan(cp=CP, fsdp=True, microbatch=1, global_batch=1), train=True, seq=S,
                        recompute="full", framework="fsdp2")
    rec = {r.name: r.time_s for r in res.reports[0].records}
    t = rec["layers.0.attn.ring.gather_k.bwd.dkv0"]
    # priced as the 32 KiB permute's all-to-all over the 4 context-parallel ranks (_collective_times rounds the
    # 43,690.7 bytes to whole bf16 elements: 1 byte in 43,690)
    size = local32 * CP / (CP - 1)
    assert t == pytest.approx(_collective_times([("all_to_all", size)], CP, hw)[("all_to_all", size)], rel=1e-4)


def _fp8_step(cp: int, fp8: str | None) -> tuple[float, Counter]:
    """(step seconds, op kinds of the stage) of the tiny model on 8 H100s, FSDP over dp x cp, 1,024 tokens a rank,
    full recompute, torchtitan 9dec370's compiled blocks, with or without Float8 linears."""
    hw = load_hardware("dgx-h100")
    res = evaluate_plan(FP8_CFG, hw, ParallelPlan(cp=cp, dp=8 // cp, fsdp=True, microbatch=1, global_batch=8 // cp),
                        train=True, seq=1024 * cp, recompute="full", framework="fsdp2-compile-blocks", fp8_linears=fp8)
    return res.latency_s, Counter(r.kind for r in res.reports[0].records)


def test_float8_linears_cost_the_same_at_every_cp_degree() -> None:
    # torchao eab345c's tensorwise Float8Linear scales each operand from its local amax
    # (hp_tensor_to_float8_dynamic, reduce_amax False by default): at a fixed number of local tokens the casts,
    # amax reductions and fp8 GEMMs are those of one rank's tokens whatever cp is, and no amax all-reduce runs
    saving = []
    for cp in (1, 2, 4):
        fp8_s, fp8_kinds = _fp8_step(cp, "tensorwise")
        bf16_s, bf16_kinds = _fp8_step(cp, None)
        assert "all_reduce" not in fp8_kinds
        # 24 amax reductions a layer: input and weight of the 4 linear groups (qkv, out, gate_up, down) in the
        # forward and again in its recompute (16), one per backward GEMM of each group (8); 2 layers
        assert fp8_kinds["reduction"] - bf16_kinds["reduction"] == 2 * (4 * 2 * 2 + 4 * 2)
        saving.append(bf16_s - fp8_s)
    assert saving[1] == pytest.approx(saving[0], rel=1e-9) and saving[2] == pytest.approx(saving[0], rel=1e-9)
