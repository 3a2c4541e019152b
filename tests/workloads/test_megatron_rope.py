"""Megatron-Core's RoPE and QKV split with Transformer Engine (profile ``megatron-core``; NVIDIA/Megatron-LM
core_v0.15.0 megatron/core/transformer/attention.py get_query_key_value_tensors and rope_utils.py
apply_rotary_pos_emb, TransformerEngine v2.9 attention/rope.py FusedRoPEFunc and dot_product_attention/utils.py
get_qkv_layout): TE's fused RoPE per tensor, a library kernel; the query's reshape copy with grouped queries; the
value's contiguous copy before the attention; Megatron-Core's op-by-op RoPE for GPT-OSS (YaRN)."""

from __future__ import annotations

from simulator.engines.analytical import evaluate
from simulator.hardware import load_hardware
from simulator.parallel.stacks import profile_options
from workloads.resolve import load_workload
from workloads.training import training_graph

S, H, KV, D = 64, 32, 8, 128  # llama-3-8b: 32 query heads, 8 KV heads of 128


def _attn(g):
    return [op for op in g if op.group.startswith("layers.0.attn") and ".bwd" not in op.name]


def test_megatron_core_copies_the_grouped_query_and_the_value_and_marks_rope_a_library_kernel():
    g = load_workload("llama-3-8b", batch=1, seq=S, phase="prefill", dtype="bf16", framework="megatron-core")
    ops = {op.name.rsplit(".", 1)[-1]: op for op in _attn(g)}
    q, v = ops["q_contiguous"], ops["v_contiguous"]
    # 8 query groups of 4 heads: the reshape copies the query (bf16 in and out); the value view is copied too
    assert (q.bytes_read, q.bytes_written) == (2 * S * H * D, 2 * S * H * D) == (524_288, 524_288)
    assert (v.bytes_read, v.bytes_written) == (2 * S * KV * D,) * 2 == (131_072, 131_072)
    assert "k_contiguous" not in ops  # no QK-norm: TE's fused RoPE reads the strided key
    assert all(ops[n].attrs.get("aten_fallback") for n in ("rope_q", "rope_k", "q_contiguous", "v_contiguous"))
    # order: the copy before the query's RoPE, the value's copy just before the attention kernel
    names = [op.name.rsplit(".", 1)[-1] for op in _attn(g)]
    assert names.index("q_contiguous") < names.index("rope_q") and names.index("v_contiguous") == \
        names.index("core") - 1


def test_one_query_group_per_rank_is_a_view():
    # tp 8: one of the 8 query groups per rank, its 4 heads a view of the QKV output (no reshape copy)
    g = load_workload("llama-3-8b", batch=1, seq=S, phase="prefill", dtype="bf16", framework="megatron-core", tp=8)
    names = [op.name.rsplit(".", 1)[-1] for op in _attn(g)]
    assert "q_contiguous" not in names and "v_contiguous" in names


def test_rope_gradient_reads_only_the_output_gradient():
    g = load_workload("llama-3-8b", batch=1, seq=S, phase="train", dtype="bf16", framework="megatron-core")
    step = training_graph(g)
    bwd = next(op for op in step if op.name == "layers.0.attn.rope_q.bwd")
    assert len(bwd.inputs) == 1 and bwd.attrs.get("aten_fallback")
    assert (bwd.bytes_read, bwd.bytes_written) == (2 * S * H * D, 2 * S * H * D)


def test_rope_is_its_own_kernel_not_the_qkv_gemms_epilogue():
    g = load_workload("llama-3-8b", batch=1, seq=S, phase="prefill", dtype="bf16", framework="megatron-core")
    rep = evaluate(g, load_hardware("h100-sxm5-80gb"), profile_options("megatron-core"))
    rec = {r.name.rsplit(".", 1)[-1]: r for r in rep.records if r.group == "layers.0.attn"}
    assert (rec["rope_q"].fused_into, rec["rope_k"].fused_into) == ("", "")
    assert rec["rope_q"].time_s > 0 and rec["q_contiguous"].time_s > 0


def test_gpt_oss_runs_megatron_cores_unfused_rope():
    # Megatron-Bridge turns apply_rope_fusion off for GPT-OSS's YaRN position embedding
    g = load_workload("gpt-oss-120b", batch=1, seq=S, phase="prefill", dtype="bf16", framework="megatron-core")
    names = [op.name.rsplit(".", 1)[-1] for op in g if op.group == "layers.0.attn.rope_q"]
    assert names == ["cos", "cos_mscale", "cos_to_dtype", "sin", "sin_mscale", "sin_to_dtype", "halves", "neg",
                     "rotate_half", "mul_cos", "mul_sin", "add", "cat_pass"]
    # 64 query heads in 8 groups: the query's copy; the value's copy before the attention
    attn = [op.name.rsplit(".", 1)[-1] for op in _attn(g)]
    assert "q_contiguous" in attn and "v_contiguous" in attn
