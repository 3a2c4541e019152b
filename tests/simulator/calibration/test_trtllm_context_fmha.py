"""The TensorRT-LLM Llama-2-7B first-token rows (category e2e_llama_prefill): every row states an engine built with
the context FMHA (v0.5 ``--enable_context_fmha``, v0.9.0 ``--context_fmha enable``), which the GPT attention plugin
keeps on for its float16 plugin type, so each layer's context attention is one fused causal kernel, never the
unfused QK^T / masked softmax / PV path (docs/accuracy.md, "The 2048-token first-token rows: was the context FMHA
on? Yes").
"""

from __future__ import annotations

import pytest

from simulator.calibration.measurements import MeasurementSet
from simulator.calibration.predict import GraphCache, attention_decomposed, run_options
from simulator.calibration.validation import DEFAULT_DATASET, known_devices

V05 = ["pub-090", "pub-091", "pub-092", "pub-093", "pub-113", "pub-114"]
V09 = [f"pub-{i}" for i in range(165, 173)]


@pytest.fixture(scope="module")
def rows():
    ms = MeasurementSet.load(DEFAULT_DATASET, devices=known_devices())
    return {m.id: m for m in ms}


def test_every_first_token_row_states_the_fused_context_attention(rows):
    prefill = sorted(rid for rid, m in rows.items() if m.category == "e2e_llama_prefill")
    assert prefill == sorted(V05 + V09)
    for rid in V05:
        assert "--enable_context_fmha --use_gpt_attention_plugin float16" in rows[rid].notes, rid
    for rid in V09:
        assert "--context_fmha enable --gpt_attention_plugin float16" in rows[rid].notes, rid
    assert not [rid for rid in prefill if attention_decomposed(rows[rid].notes)]


def test_a100_2048_token_attention_is_one_causal_kernel_a_layer(rows):
    """pub-114: 32 layers, each one attention op over the causal half of the 2048 x 2048 scores (the diagonal
    included): 32 heads x 2048 x 2049 / 2 pairs x (2 x 128 + 2 x 128) FLOP = 34.38 GFLOP, one kernel, no softmax op."""
    from hwmodels.catalog import load_device
    from simulator.engines.analytical import evaluate

    m = rows["pub-114"]
    graph = GraphCache().get(m)
    kinds = [op.kind for op in graph.ops]
    assert kinds.count("attention") == 32
    assert "softmax" not in kinds
    pairs = 32 * 2048 * 2049 // 2
    for op in graph.ops:
        if op.kind == "attention":
            assert op.flops == pairs * 4 * 128 == 34_376_515_584
    opts, _ = run_options({"id": m.id, "source": m.source, "notes": m.notes, "metric_reported": m.metric_reported,
                           "dtype": m.dtype})
    records = [r for r in evaluate(graph, load_device(m.device), opts).records if r.kind == "attention"]
    assert [(r.rule, r.kernels) for r in records] == [("flash-attention", 1)] * 32
