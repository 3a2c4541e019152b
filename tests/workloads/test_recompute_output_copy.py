"""Megatron-Core's copy of each recomputed ``CheckpointWithoutOutput`` output back into the storage the forward
released (``ParallelPlan.recompute_output_copy``; ``_recompute`` in megatron/core/tensor_parallel/random.py before
NVIDIA/Megatron-LM f54403492e): one elementwise copy per output, its own kernel, read by the backward; bytes
hand-computed."""

from __future__ import annotations

import dataclasses

import pytest

from simulator.engines.options import EvalOptions
from simulator.engines.walk import walk_graph
from workloads.recompute import discards_output
from workloads.training import training_graph
from workloads.zoo.transformer import TransformerConfig, train_forward, zoo_config

B, S = 2, 16
T = B * S  # tokens


def _moe() -> TransformerConfig:
    """Two GPT-OSS-like MoE layers: d_model 64, 4 experts of d_ff 32, top-2."""
    return dataclasses.replace(zoo_config("gpt-oss-120b"), name="copy-moe-tiny", vocab=256, d_model=64, layers=2,
                               heads=4, kv_heads=2, head_dim=16, d_ff=32, experts=4, top_k=2, sliding_window=0)


def _mla() -> TransformerConfig:
    """Two DeepSeek-V3-like layers: latent attention, 4 heads of 16 (+ 8 RoPE) query/key and 16 value dims."""
    return dataclasses.replace(zoo_config("deepseek-v3"), name="copy-mla-tiny", vocab=256, d_model=64, layers=2,
                               heads=4, q_lora_rank=32, kv_lora_rank=16, rope_head_dim=8, head_dim=16, v_head_dim=16,
                               d_ff=32, dense_d_ff=96, shared_d_ff=32, experts=4, top_k=2, first_dense=1)


def _copies(step):  # noqa: ANN001, ANN202
    return [op for op in step.ops if op.name.endswith(".restore_copy")]


def _moved(op) -> int:  # noqa: ANN001
    return sum(t.nbytes for t in (*op.inputs, *op.outputs))


def test_layernorm_and_moe_act_copy_each_recomputed_output_once() -> None:
    fg = train_forward(_moe(), batch=B, seq_len=S, dtype="bf16")
    step = training_graph(fg, recompute="modules:layernorm,moe_act", output_copy=True)
    names = sorted(op.name for op in _copies(step))
    assert names == [f"layers.{i}.{m}.restore_copy" for i in range(2) for m in ("mlp_norm", "moe.gate_mul")]
    norm = next(op for op in _copies(step) if op.name == "layers.1.mlp_norm.restore_copy")
    # the pre-MLP norm's output, T x 64 bf16 = 4,096 bytes, read from the recomputed tensor and written once
    assert norm.inputs[0].name == "layers.1.mlp_norm@recompute" and norm.outputs[0].nbytes == T * 64 * 2
    # the experts' activation: T x top-2 = 64 routed rows of d_ff 32 in bf16 = 4,096 bytes
    act = next(op for op in _copies(step) if op.name == "layers.1.moe.gate_mul.restore_copy")
    assert act.outputs[0].nbytes == T * 2 * 32 * 2
    assert sum(_moved(op) for op in _copies(step)) == 2 * 2 * (T * 64 * 2 + T * 2 * 32 * 2)  # 32,768 bytes
    # the backward reads the restored storage: fc2's weight gradient takes the copy as its activation
    readers = [op for op in step.ops if "layers.1.moe.gate_mul.restore_copy" in {t.name for t in op.inputs}]
    assert [op.name for op in readers] == ["layers.1.moe.experts_out.bwd_weight"]
    assert len(step.ops) == len(training_graph(fg, recompute="modules:layernorm,moe_act").ops) + 4


def test_mla_up_proj_copies_query_key_and_value() -> None:
    step = training_graph(train_forward(_mla(), batch=B, seq_len=S, dtype="bf16"), recompute="modules:mla_up_proj",
                          output_copy=True)
    per_layer = [op for op in _copies(step) if op.group == "layers.1.attn"]
    assert len(per_layer) == 3 and len(_copies(step)) == 6
    # q and k: T x 4 heads x (16 + 8) bf16 = 6,144 bytes each; v: T x 4 x 16 bf16 = 4,096 bytes
    assert sorted(op.outputs[0].nbytes for op in per_layer) == [T * 4 * 16 * 2, T * 4 * 24 * 2, T * 4 * 24 * 2]


@pytest.mark.parametrize("policy", ["modules:core_attn", "modules:moe", "full", "selective"])
def test_checkpointed_modules_keep_their_input_and_copy_nothing(policy: str) -> None:
    # tensor_parallel.checkpoint re-runs the module from its saved input: no released output to restore
    step = training_graph(train_forward(_moe(), batch=B, seq_len=S, dtype="bf16"), recompute=policy,
                          output_copy=True)
    assert _copies(step) == []


def test_without_the_copy_the_step_is_unchanged() -> None:
    fg = train_forward(_moe(), batch=B, seq_len=S, dtype="bf16")
    assert _copies(training_graph(fg, recompute="modules:layernorm,moe_act")) == []


def test_the_copy_is_a_kernel_of_its_own_under_fusion() -> None:
    # the recomputed SwiGLU's elementwise ops fuse into one kernel; the storage copy joins nothing
    step = training_graph(train_forward(_moe(), batch=B, seq_len=S, dtype="bf16"), recompute="modules:moe_act",
                          output_copy=True)
    walk = walk_graph(step, EvalOptions(fusion=True, epilogue_fusion=True), True, 50e6)
    fused = {op.name: f.get("fused_into", "") for op, f in zip(step.ops, walk.op_fields, strict=True)}
    assert fused["layers.0.moe.gate_mul@recompute"] == "layers.0.moe.act@recompute"
    assert fused["layers.0.moe.gate_mul.restore_copy"] == ""
    assert not [n for n, into in fused.items() if into == "layers.0.moe.gate_mul.restore_copy"]


def test_discarding_segments_are_named_by_their_module() -> None:
    assert [discards_output(s) for s in ("layers.0/attn_norm", "layers.12/mla_up_proj", "layers.0/mlp",
                                         "layers.0/shared_experts", "loss_chunks", "layers.0.moe_act")] == \
        [True, True, False, False, False, False]
