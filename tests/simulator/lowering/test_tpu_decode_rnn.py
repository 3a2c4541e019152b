"""TPU decode attention with grouped KV heads is bounded by streaming the KV cache (one GEMM per KV head
with the group's query heads as rows, as the Pallas ragged paged attention kernel runs it), and an
LSTM runs as its GEMMs on the arrays plus its gates on the vector unit, not as a roofline."""

from __future__ import annotations

import pytest

from simulator.engines.analytical import evaluate
from simulator.hardware import load_hardware
from workloads.ir import GraphBuilder
from workloads.resolve import load_workload

V5E_HBM = 819e9 * 0.758  # tpu-v5e.toml: HBM bandwidth x efficiency.dram_bandwidth_fraction


def _attention(records):
    return [r for r in records if r.kind == "attention"]


def test_llama3_8b_decode_on_v5e_is_bounded_by_kv_streaming() -> None:
    g = load_workload("llama-3-8b", phase="decode", batch=8, context=2048)
    rep = evaluate(g, load_hardware("tpu-v5e"))
    att = _attention(rep.records)
    assert len(att) == 32
    # per layer: K and V of 8 sequences x 8 KV heads x 2049 positions x 128 x 2 B, plus q read and o written
    kv = 2 * 8 * 8 * 2049 * 128 * 2
    per_layer = kv + 2 * (8 * 32 * 128 * 2)
    assert all(r.dram_bytes == per_layer for r in att)
    want = 32 * per_layer / V5E_HBM  # = 3.4677 ms
    assert sum(r.time_s for r in att) == pytest.approx(want, rel=1e-9)
    assert want == pytest.approx(3.4677e-3, rel=1e-4)
    assert "4 query heads per KV head in one GEMM" in att[0].notes and "bound memory" in att[0].notes


def test_multi_head_attention_keeps_one_gemm_per_head() -> None:
    b = GraphBuilder("mha", dtype="bf16")
    q = b.input("q", (2, 8, 1, 128))
    k = b.input("k", (2, 8, 1024, 128))
    v = b.input("v", (2, 8, 1024, 128))
    b.op("attention", [q, k, v], name="attn", causal=True)
    rec = _attention(evaluate(b.build(), load_hardware("tpu-v5e")).records)[0]
    assert "2 GEMMs over 16 batch x heads on the arrays (QK^T" in rec.notes


def test_gqa_prefill_folds_the_group_into_the_rows() -> None:
    b = GraphBuilder("gqa", dtype="bf16")
    q = b.input("q", (1, 32, 256, 128))
    k = b.input("k", (1, 8, 256, 128))
    v = b.input("v", (1, 8, 256, 128))
    b.op("attention", [q, k, v], name="attn", causal=False)
    rec = _attention(evaluate(b.build(), load_hardware("tpu-v5e")).records)[0]
    # 8 GEMMs of 4 heads x 256 queries = 1024 rows, two per MXU
    assert "over 8 batch x KV heads" in rec.notes and "4 query heads per KV head" in rec.notes
    assert "per array 2 x (M,N,K)=(1024, 256, 128)" in rec.notes, rec.notes


def test_lstm_runs_as_gemms_and_vector_gates_not_a_roofline() -> None:
    b = GraphBuilder("lstm", dtype="bf16")
    x = b.input("x", (64, 32, 1024))
    wi = b.weight("wi", (1, 4096, 1024))
    wh = b.weight("wh", (1, 4096, 1024))
    b.op("lstm", [x, wi, wh], name="lstm", hidden=1024)
    (rec,) = evaluate(b.build(), load_hardware("tpu-v5e")).records
    assert rec.rule == "mxu-rnn-steps" and not rec.fallback
    assert "64 sequential steps of recurrent GEMM" in rec.notes and "gates on the vector unit" in rec.notes
    # 64 sequential steps, each reading the 4H x H bf16 recurrent weights (8 MiB) from HBM
    floor = 64 * (4096 * 1024 * 2) / V5E_HBM
    assert floor == pytest.approx(0.8647e-3, rel=1e-3)
    assert floor < rec.time_s < floor * 1.25
    # the roofline at 92.3 % of the bf16 peak it replaced would have been 5x faster
    assert rec.time_s > 5 * (2 * 64 * 32 * 4096 * 2048) / (197e12 * 0.923)
