"""Megatron-Core's selective ``recompute_modules`` (``--recompute modules:NAME,...``): which ops each module
recomputes, what the backward then reads, and the FLOPs the recomputation adds (hand-computed)."""

from __future__ import annotations

import dataclasses

import pytest

from workloads.recompute import MEGATRON_MODULES, check_policy, module_names, module_segments
from workloads.training import training_graph
from workloads.zoo.transformer import TransformerConfig, train_forward, zoo_config

B, S = 2, 16
T = B * S  # tokens


def _mla() -> TransformerConfig:
    """A two-layer DeepSeek-V3 (latent attention, first layer dense, the second MoE with a shared expert)."""
    return dataclasses.replace(zoo_config("deepseek-v3"), name="mla-tiny", vocab=256, d_model=64, layers=2, heads=4,
                               q_lora_rank=32, kv_lora_rank=16, rope_head_dim=8, head_dim=16, v_head_dim=16, d_ff=32,
                               dense_d_ff=96, shared_d_ff=32, experts=4, top_k=2, first_dense=1)


def _gqa_moe() -> TransformerConfig:
    """A two-layer GPT-OSS-like model: grouped-query attention, every layer MoE."""
    return dataclasses.replace(zoo_config("gpt-oss-120b"), name="moe-tiny", vocab=256, d_model=64, layers=2,
                               heads=4, kv_heads=2, head_dim=16, d_ff=32, experts=4, top_k=2, sliding_window=0)


def _recomputed(step) -> set[str]:  # noqa: ANN001
    return {op.name.removesuffix("@recompute") for op in step.ops if op.name.endswith("@recompute")}


def test_mla_up_proj_recomputes_the_up_projections_and_rope_and_adds_their_flops() -> None:
    fg = train_forward(_mla(), batch=B, seq_len=S, dtype="bf16")
    step = training_graph(fg, recompute="modules:mla_up_proj")
    parts = {"q_norm", "q_up", "kv_norm", "kv_up", "q_heads", "rope_q", "kv_heads", "split_k_v", "k_rope_head",
             "rope_k", "k_rope_heads", "k"}
    assert _recomputed(step) == {f"layers.{i}.attn.{p}" for i in range(2) for p in parts}
    # the up projections' GEMMs again: 2 T (q_lora x heads x (d_head + rope) + kv_lora x heads x (d_head + v))
    added = sum(op.flops for op in step.ops if op.name.endswith("@recompute") and op.kind == "matmul")
    assert added == 2 * 2 * T * (32 * 4 * (16 + 8) + 16 * 4 * (16 + 16))
    # the attention backward reads the recomputed q, k, v; the down projections' outputs stay saved
    bwd = next(op for op in step.ops if op.kind == "attention_bwd" and op.group == "layers.1.attn")
    assert {t.name for t in bwd.inputs[:3]} >= {"layers.1.attn.rope_q@recompute", "layers.1.attn.k@recompute"}


def test_layernorm_recomputes_only_the_norms_that_are_modules_of_their_own() -> None:
    # TE fuses the input norm into linear_qkv (IdentityOp) and a dense layer's pre-MLP norm into linear_fc1
    assert _recomputed(training_graph(train_forward(_gqa_moe(), batch=B, seq_len=S, dtype="bf16"),
                                      recompute="modules:layernorm")) == {"layers.0.mlp_norm", "layers.1.mlp_norm"}
    # latent attention keeps its input norm (both down projections read it); layer 0 is dense
    assert _recomputed(training_graph(train_forward(_mla(), batch=B, seq_len=S, dtype="bf16"),
                                      recompute="modules:layernorm")) == {"layers.0.attn_norm", "layers.1.attn_norm",
                                                                          "layers.1.mlp_norm"}


def test_moe_act_recomputes_the_expert_activation_read_by_the_second_grouped_gemm() -> None:
    fg = train_forward(_gqa_moe(), batch=B, seq_len=S, dtype="bf16")
    step = training_graph(fg, recompute="modules:layernorm,moe_act")
    assert _recomputed(step) == {f"layers.{i}.{p}" for i in range(2) for p in
                                 ("mlp_norm", "moe.split_gate_up", "moe.act", "moe.gate_mul")}
    wgrad = next(op for op in step.ops if op.name == "layers.1.moe.experts_out.bwd_weight")
    assert wgrad.inputs[0].name == "layers.1.moe.gate_mul@recompute"  # experts_out's weight gradient
    assert not any(t.name == "layers.1.moe.gate_mul" for op in step.ops[len(fg.ops):] for t in op.inputs)


def test_mlp_recomputes_dense_layers_only_and_moe_the_whole_moe_layer() -> None:
    fg = train_forward(_mla(), batch=B, seq_len=S, dtype="bf16")
    seg = module_segments(fg, "modules:mlp")
    assert set(seg.values()) == {"layers.0/mlp"}  # layer 1 is a MoELayer: not "mlp"
    assert {n for n in seg} == {op.name for op in fg.ops if op.group.startswith("layers.0.mlp")} | {"layers.0.mlp_norm"}
    moe = module_segments(fg, "modules:moe")
    assert set(moe.values()) == {"layers.1/moe"} and "layers.1.shared_expert.down" in moe
    assert set(module_segments(fg, "modules:shared_experts").values()) == {"layers.1/shared_experts"}
    # dense-MLP recomputation adds the dense layer's three GEMMs: 2 T x 64 x 96 x 3
    added = sum(op.flops for op in training_graph(fg, recompute="modules:mlp").ops
                if op.name.endswith("@recompute") and op.kind == "matmul")
    assert added == 2 * T * 64 * 96 * 3


@pytest.mark.parametrize("policy, parts", [
    ("modules:moe_ac", ("unknown Megatron-Core module", "'moe_ac'", "did you mean 'moe_act'")),
    ("modules:", ("empty module name",)),
    ("modules:mlp,,moe", ("empty module name",)),
    ("modules:mlp,mlp", ("'mlp' given twice",)),
])
def test_bad_module_names_are_one_located_error(policy: str, parts: tuple[str, ...]) -> None:
    with pytest.raises(ValueError) as exc:
        check_policy(policy)
    assert str(exc.value).startswith("recompute modules:") and all(p in str(exc.value) for p in parts)


def test_module_names_in_order() -> None:
    assert module_names("modules:layernorm, moe_act") == ("layernorm", "moe_act")
    assert set(MEGATRON_MODULES) == {"core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe",
                                     "shared_experts"}


def test_tune_takes_module_policies_as_one_item_each() -> None:
    from simulator.cli.tune import _policies
    from simulator.sweep.tune import TuneError
    from simulator.sweep.tune_model import _recompute_axis

    items = _policies(["none", "modules:layernorm", "moe_act", "full", "modules:mla_up_proj", "mlp"])
    assert items == ["none", "modules:layernorm,moe_act", "full", "modules:mla_up_proj,mlp"]
    assert _recompute_axis(items).values == tuple(items)
    with pytest.raises(TuneError, match="did you mean 'moe_act'"):
        _recompute_axis(["modules:moe_ac"])
