"""Llama 4 Scout and Maverick text decoders: shared experts, dense layers of their own width,
alternating MoE layers; parameter counts hand-computed from the configs and checked against the
published totals and active counts (model cards: 17B active; 109B total for Scout with its vision
encoder, 400B for Maverick)."""

from __future__ import annotations

import pytest

from workloads.parallel import ParallelPlan, plan_graphs
from workloads.zoo import build_model
from workloads.zoo.transformer import TransformerConfig, zoo_config

_EMB = 2 * 202048 * 5120 + 5120  # untied embedding and LM head, final norm
_ATTN = 5120 * 5120 * 2 + 2 * 5120 * 1024 + 2 * 5120  # q, o; k, v (8 KV heads of 128); two RMSNorms
_EXPERT = 3 * 5120 * 8192  # a SwiGLU MLP of width 8192: gate, up, down


def test_scout_parameters(moe_counts) -> None:
    per_layer = _ATTN + 5120 * 16 + 16 * _EXPERT + _EXPERT  # router, 16 routed experts, the shared expert
    total, active = moe_counts("llama4-scout-17b-16e")
    assert total == _EMB + 48 * per_layer == 107_769_861_120
    assert active == _EMB + 48 * (_ATTN + 5120 * 16 + 2 * _EXPERT) == 17_172_894_720
    assert round(active / 1e9) == 17  # model card: 17B active
    # model card: 109B total with the vision encoder (34 ViT layers of width 1408, MLP 5632: ~0.8B)
    assert 108.0e9 < total + 34 * (4 * 1408 * 1408 + 2 * 1408 * 5632) < 109.5e9


def test_maverick_parameters(moe_counts) -> None:
    dense = _ATTN + 3 * 5120 * 16384
    moe = _ATTN + 5120 * 128 + 128 * _EXPERT + _EXPERT
    total, active = moe_counts("llama4-maverick-17b-128e")
    assert total == _EMB + 24 * dense + 24 * moe == 400_711_848_960
    assert active == _EMB + 24 * dense + 24 * (_ATTN + 5120 * 128 + 2 * _EXPERT) == 17_184_691_200
    assert round(total / 1e9) == 401 and round(active / 1e9) == 17  # model card: 400B total, 17B active


def test_maverick_alternates_dense_and_moe_layers() -> None:
    g = build_model("llama4-maverick-17b-128e", seq=8, batch=1)
    groups = {op.group.split(".")[1] for op in g.ops if op.kind == "grouped_matmul"}
    assert groups == {str(i) for i in range(1, 48, 2)}  # layers 1, 3, ..., 47 (interleave_moe_layer_step 2)
    downs = {op.name for op in g.ops if op.name.endswith("mlp.down")}
    assert "layers.0.mlp.down" in downs and "layers.1.shared_expert.down" in {op.name for op in g.ops}


def test_chunked_attention_beyond_one_chunk_is_refused() -> None:
    with pytest.raises(ValueError, match="seq 16384 exceeds its attention chunk of 8192 tokens"):
        build_model("llama4-scout-17b-16e", seq=16384, batch=1)


def test_shared_and_dense_widths_split_over_tensor_parallel_ranks() -> None:
    sg = plan_graphs("llama4-maverick-17b-128e", ParallelPlan(tp=8), seq=64)[0]
    w = {t.name: t.shape for op in sg.graph.ops for t in op.inputs if t.role.value == "weight"}
    assert w["layers.0.mlp.down.weight"][0] * 8 == 16384 or w["layers.0.mlp.down.weight"][-1] * 8 == 16384
    with pytest.raises(ValueError, match="shared_d_ff: got 64; expected an integer >= 0, set only on an MoE model"):
        TransformerConfig(name="x", vocab=10, d_model=64, layers=2, heads=4, d_ff=64, shared_d_ff=64)


def test_deepseek_v3_parameters(moe_counts) -> None:
    # per layer: MLA (q down 7168x1536, q norm, q up 1536 x 128 x (128 + 64), kv down 7168 x (512 + 64), kv norm,
    # kv up 512 x 128 x (128 + 128), out 128 x 128 x 7168) and two RMSNorms
    mla = 7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 + 512 * 128 * 256 + 128 * 128 * 7168
    layer = mla + 2 * 7168
    expert = 3 * 7168 * 2048
    moe = 7168 * 256 + 256 * expert + expert  # router, 256 routed experts, one shared
    emb = 2 * 129280 * 7168 + 7168
    total, active = moe_counts("deepseek-v3")
    assert total == emb + 61 * layer + 3 * 3 * 7168 * 18432 + 58 * moe == 671_026_404_352
    assert active == emb + 61 * layer + 3 * 3 * 7168 * 18432 + 58 * (7168 * 256 + 9 * expert) == 37_552_282_624
    # DeepSeek-V3 report, Table 1: 671B total, 37B activated (the router's 58 x 256 correction biases not counted)
    assert round(total / 1e9) == 671 and int(active / 1e9) == 37


def test_latent_attention_shapes_and_cache() -> None:
    from workloads.ir import Role

    g = build_model("deepseek-v3", seq=16, batch=2, phase="prefill")
    core = next(op for op in g.ops if op.name == "layers.0.attn.core")
    assert [t.shape for t in core.inputs] == [(2, 128, 16, 192), (2, 128, 16, 192), (2, 128, 16, 128)]
    cached = sum(t.numel for op in g.ops for t in op.outputs if t.role is Role.KV_CACHE) * 2
    assert cached == zoo_config("deepseek-v3").kv_cache_bytes(2, 16) == 61 * 576 * 16 * 2 * 2
    with pytest.raises(ValueError, match="decode over the latent cache"):
        build_model("deepseek-v3", seq=16, batch=1, phase="decode", context=32)
    # a training step derives (the shared rotary key's broadcast has its backward: a sum over the heads)
    sg = plan_graphs("deepseek-v3", ParallelPlan(tp=8), seq=64, train=True)[0]
    bwd = next(op for op in sg.graph.ops if op.name == "layers.0.attn.k_rope_heads.bwd")
    assert bwd.kind == "reduction" and bwd.outputs[0].shape == (1, 1, 64, 64)
