"""Parallel plans: Megatron-style tensor / sequence / pipeline splits of transformer graphs."""

from __future__ import annotations

from collections import Counter

import pytest

from workloads.ir import Role
from workloads.parallel import ParallelPlan, PlanError, plan_graphs, stage_layer_ranges
from workloads.training import training_graph
from workloads.zoo import build_model
from workloads.zoo.transformer import TransformerConfig, build

COLLECTIVES = {"all_reduce", "all_gather", "reduce_scatter", "send", "recv"}


def _by_name(g):  # noqa: ANN001, ANN202
    return {op.name: op for op in g.ops}


@pytest.mark.parametrize("tp", [2, 4, 8])
@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_tensor_parallel_ops_are_sharded_or_replicated_and_flops_are_conserved(tp: int, phase: str) -> None:
    """Every op of a rank's graph is either the unsharded op's 1/tp share (projections, attention,
    LM head), a replicated copy (norms, residual adds), or a collective the split added."""
    kw = {"batch": 2, "context": 256} if phase == "decode" else {"batch": 1, "seq": 256}
    full = build_model("llama-2-7b", phase=phase, **kw)
    part = build_model("llama-2-7b", phase=phase, tp=tp, **kw)
    f_ops = _by_name(full)
    sharded = replicated = added = 0.0
    for op in part.ops:
        ref = f_ops.get(op.name)
        if op.kind in COLLECTIVES:
            assert ref is None
            added += op.flops
        elif op.attrs.get("grad_all_reduce"):  # Megatron's "f": a view forward
            assert ref is None and op.kind == "reshape" and op.flops == 0
        elif ref is not None and ref.flops == op.flops and ref.outputs[0].shape == op.outputs[0].shape:
            replicated += op.flops
        else:
            assert ref is not None, op.name
            assert op.flops * tp == ref.flops, (op.name, op.flops, ref.flops)
            sharded += op.flops
    # the sum over the tp ranks is the unsharded work, plus replicated copies, plus the reductions
    assert tp * (sharded + replicated) == full.flops + (tp - 1) * replicated
    assert added > 0
    # per layer: one all-reduce after the attention output and one after the MLP down projection,
    # one after the vocabulary-parallel embedding; the logits are gathered for sampling
    kinds = Counter(op.kind for op in part.ops if op.kind in COLLECTIVES)
    assert kinds == {"all_reduce": 2 * 32 + 1, "all_gather": 1}
    # weights: the sharded matrices 1/tp, the norms replicated (65 norm vectors of 4096)
    norms = 65 * 4096
    assert part.params == (full.params - norms) // tp + norms


def test_tensor_parallel_kv_cache_and_heads() -> None:
    full = build_model("llama-2-70b", phase="decode", batch=4, context=1024)
    part = build_model("llama-2-70b", phase="decode", batch=4, context=1024, tp=8)
    assert part.role_bytes(Role.KV_CACHE) * 8 == full.role_bytes(Role.KV_CACHE)  # 8 KV heads, one per rank
    # 16 ranks for 8 KV heads: each rank keeps one replicated KV head (as vLLM does)
    cfg = TransformerConfig("gqa", vocab=1024, d_model=1024, layers=2, heads=16, kv_heads=8, d_ff=4096,
                            mlp="swiglu", norm="rmsnorm", pos="rope", tied_embeddings=False, qkv_bias=False,
                            out_bias=False, mlp_bias=False)
    g = build(cfg, batch=1, phase="decode", context=64, tp=16)
    kc = [t for t in g.tensors.values() if t.role is Role.KV_CACHE]
    assert kc and all(t.shape[1] == 1 for t in kc)


def test_sequence_parallel_replaces_all_reduce_by_gather_and_scatter_and_shards_norms() -> None:
    g = build_model("llama-2-7b", phase="train", batch=1, seq=512, tp=4, sequence_parallel=True)
    kinds = Counter(op.kind for op in g.ops if op.kind in COLLECTIVES)
    # per layer: all-gather before attention and MLP, reduce-scatter after them; the embedding's
    # reduce-scatter and the gather before the LM head; training keeps the logits vocabulary-sharded
    assert kinds == {"all_gather": 2 * 32 + 1, "reduce_scatter": 2 * 32 + 1}
    norm = next(op for op in g.ops if op.kind == "rmsnorm")
    assert norm.inputs[0].shape == (1, 512 // 4, 4096)


def test_training_step_backward_has_the_conjugate_collectives() -> None:
    """Megatron's f/g operators: the forward all-reduce's backward is the identity, the column-parallel
    input's backward is an all-reduce; with sequence parallelism gathers and scatters swap."""
    g = training_graph(build_model("llama-2-7b", phase="train", batch=1, seq=256, tp=2))
    fwd = len(build_model("llama-2-7b", phase="train", batch=1, seq=256, tp=2).ops)
    bwd_ar = [op for op in g.ops[fwd:] if op.kind == "all_reduce"]
    assert len(bwd_ar) == 2 * 32 + 1  # attention and MLP inputs per layer, and the LM head's input
    sp = training_graph(build_model("llama-2-7b", phase="train", batch=1, seq=256, tp=2, sequence_parallel=True))
    kinds = Counter(op.kind for op in sp.ops if op.kind in COLLECTIVES)
    # forward: gather in, scatter out; backward: the scatter's conjugate gather, the gather's
    # conjugate scatter, and the gather again for the weight gradients (Megatron keeps only the local
    # shard: Korthikanti et al. 2022, Sec. 4.2.2)
    assert kinds["reduce_scatter"] == 2 * (2 * 32 + 1)
    assert kinds["all_gather"] == 3 * (2 * 32 + 1)
    assert "all_reduce" not in kinds
    regather = [op for op in sp.ops if op.kind == "all_gather" and op.name.endswith("@recompute")]
    assert len(regather) == 2 * 32 + 1


def test_pipeline_stages_split_layers_and_conserve_training_flops() -> None:
    plan = ParallelPlan(tp=2, pp=4, microbatch=1, global_batch=8)
    stages = plan_graphs("llama-2-7b", plan, train=True, seq=256)
    assert [s.layers for s in stages] == [(0, 8), (8, 16), (16, 24), (24, 32)]
    full = training_graph(build_model("llama-2-7b", phase="train", batch=1, seq=256))
    comm = sum(op.flops for s in stages for op in s.graph.ops if op.kind in COLLECTIVES)
    total = sum(s.graph.flops for s in stages)
    # within 0.1 %: the rest is replicated norms and residual adds on the tp ranks
    assert 2 * total - 2 * comm == pytest.approx(full.flops, rel=1e-3)
    assert 2 * total - 2 * comm >= full.flops
    first, mid, last = stages[0].graph, stages[1].graph, stages[-1].graph
    assert any(op.kind == "embedding" for op in first.ops) and not any(op.kind == "embedding" for op in mid.ops)
    assert any(op.kind == "cross_entropy" for op in last.ops)
    # activations go forward with send/recv, their gradients come back the same way
    assert Counter(op.kind for op in first.ops if op.kind in ("send", "recv")) == {"send": 1, "recv": 1}
    assert Counter(op.kind for op in mid.ops if op.kind in ("send", "recv")) == {"send": 2, "recv": 2}
    assert Counter(op.kind for op in last.ops if op.kind in ("send", "recv")) == {"send": 1, "recv": 1}


def test_interleaved_stage_assignment() -> None:
    assert stage_layer_ranges(8, 2, 2) == [[(0, 2), (4, 6)], [(2, 4), (6, 8)]]


@pytest.mark.parametrize(("plan", "needle"), [
    (dict(tp=6), "tp 6 does not divide heads=64; expected a divisor (nearest: 4 or 8)"),
    (dict(pp=7), "pp 7 does not divide layers=80; expected a divisor (nearest pp: 5 or 8)"),
    (dict(pp=160), "pp 160 is larger than the 80 layers"),
    (dict(ep=2), "ep 2: the model has no experts"),
])
def test_plans_that_do_not_divide_name_the_dimension_and_the_nearest_values(plan: dict, needle: str) -> None:
    with pytest.raises(PlanError, match="llama-2-70b") as exc:
        plan_graphs("llama-2-70b", ParallelPlan(**plan), phase="decode")
    assert needle in str(exc.value)


@pytest.mark.parametrize(("kw", "needle"), [
    (dict(dp=4, microbatch=2, global_batch=100), "global_batch: 100 is not a multiple of dp x microbatch = 4 x 2 = 8"
                                                "; expected a multiple (nearest: 96 or 104)"),
    (dict(tp=0), "tp: got 0; expected a positive integer"),
    (dict(schedule="1fb1"), "did you mean '1f1b'"),
    (dict(interleave=2), "expected schedule 'interleaved'"),
    (dict(sequence_parallel=True), "expected tp > 1"),
    (dict(cuda_graph="full_iteraton"), "cuda_graph: got 'full_iteraton'; expected one of 'full_iteration', 'transformer_engine' or ''"
                                       " (none); did you mean 'full_iteration'"),
    (dict(moe_rank_capacity_factor=0), "moe_rank_capacity_factor: got 0; expected a number > 0"),
    (dict(dp=8, fsdp=True, zero_stage=1), "zero_stage: got 1 with fsdp; expected zero_stage 0 or 3"),  # was dropped
    (dict(dp=8, fsdp=True, zero_stage=2), "zero_stage: got 2 with fsdp; expected zero_stage 0 or 3"),
])
def test_bad_plans_are_located_errors(kw: dict, needle: str) -> None:
    with pytest.raises(PlanError) as exc:
        ParallelPlan(**kw)
    assert needle in str(exc.value)


def test_plan_counts() -> None:
    plan = ParallelPlan(tp=8, pp=16, dp=8, microbatch=1, global_batch=1536, schedule="interleaved", interleave=3)
    assert plan.devices == 1024 and plan.microbatches == 192


def test_non_transformer_is_refused() -> None:
    with pytest.raises(PlanError, match="parallel plans split transformers"):
        plan_graphs("resnet50", ParallelPlan(tp=2))


def test_expert_parallelism_splits_experts_and_exchanges_tokens_all_to_all() -> None:
    full = build_model("mixtral-8x7b", phase="prefill", batch=2, seq=256)
    part = build_model("mixtral-8x7b", phase="prefill", batch=2, seq=256, ep=8)
    experts = lambda g: sum(t.numel for t in g.tensors.values() if ".experts." in t.name and t.role is Role.WEIGHT)  # noqa: E731
    assert experts(part) * 8 == experts(full)
    kinds = Counter(op.kind for op in part.ops if op.kind in COLLECTIVES | {"all_to_all"})
    assert kinds == {"all_to_all": 2 * 32}  # dispatch and combine in every MoE layer
    a2a = next(op for op in part.ops if op.kind == "all_to_all")
    assert a2a.attrs["group_size"] == 8
    # the experts' work per rank: 1/8 of the experts, but the tokens of all 8 ranks
    g_full = next(op for op in full.ops if op.name.endswith("experts_in"))
    g_part = next(op for op in part.ops if op.name.endswith("experts_in"))
    assert g_part.inputs[1].shape[0] * 8 == g_full.inputs[1].shape[0]
    # training: every all-to-all has its backward all-to-all
    step = training_graph(build_model("mixtral-8x7b", phase="train", batch=1, seq=128, ep=4))
    assert Counter(op.kind for op in step.ops)["all_to_all"] == 4 * 32
    with pytest.raises(ValueError, match="ep 3: expected a divisor of experts=8"):
        build_model("mixtral-8x7b", phase="prefill", batch=1, seq=64, ep=3)


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_context_parallelism_balances_causal_attention_and_conserves_its_flops(cp: int) -> None:
    full = build_model("llama-2-7b", phase="prefill", batch=1, seq=4096)  # its context (a prefill beyond is refused)
    part = build_model("llama-2-7b", phase="prefill", batch=1, seq=4096, cp=cp)
    att = lambda g: sum(op.flops for op in g.ops if op.kind == "attention")  # noqa: E731
    # every rank holds chunks r and 2cp-1-r: the same causal work each, 1/cp of the whole
    assert att(part) * cp == att(full)
    # the rest splits exactly too, but for the last token's logits, which every rank's graph computes
    # (only the last rank's are used): cp - 1 extra rows of the 4096 x 32000 LM head
    assert part.flops * cp == full.flops + (cp - 1) * 2 * 4096 * 32000
    gathers = [op for op in part.ops if op.kind == "all_gather" and op.attrs.get("axis") == 2]
    assert len(gathers) == 2 * 32 and all(op.attrs["group_size"] == cp for op in gathers)
    assert part.role_bytes(Role.KV_CACHE) * cp == full.role_bytes(Role.KV_CACHE)  # the cache split by sequence
    step = training_graph(build_model("llama-2-7b", phase="train", batch=1, seq=4096, cp=cp))
    assert Counter(op.kind for op in step.ops)["reduce_scatter"] == 2 * 32  # key/value gradients go back


@pytest.mark.parametrize(("kw", "needle"), [
    (dict(phase="decode", cp=2), "cp 2: context parallelism splits a decoder's prompt or training sequence"),
    (dict(phase="prefill", seq=1000, cp=3), "cp 3: seq 1000 is not divisible by 6 (2 x cp); expected a multiple of 6"
                                          " (nearest: 996 or 1002)"),
])
def test_context_parallel_plans_that_do_not_divide(kw: dict, needle: str) -> None:
    cp = kw.pop("cp")
    with pytest.raises(PlanError) as exc:
        plan_graphs("llama-2-7b", ParallelPlan(cp=cp), **kw)
    assert needle in str(exc.value)
