"""The gate and up projections of a gated MLP run as two GEMMs (TensorRT-LLM v0.5 Llama engines built without
--use_fused_mlp): workloads.frameworks.split_gated_mlp and the published rows' notes switch."""

from __future__ import annotations

import csv

from simulator.calibration.predict import gated_mlp_unfused
from simulator.calibration.validation import DEFAULT_DATASET
from workloads.frameworks import split_gated_mlp
from workloads.resolve import load_workload


def _names(g):
    return [op.name for op in g.ops]


def test_fp16_llama_gate_up_becomes_two_gemms_in_fused_order():
    g = load_workload("llama-2-7b", batch=1, seq=2048, phase="prefill", dtype="fp16")
    s = split_gated_mlp(g)
    names = _names(s)
    assert "layers.0.mlp.gate_up" not in names and "layers.0.mlp.split_gate_up" not in names
    i = names.index("layers.0.mlp.gate_up.part0")
    # the activation follows the gate GEMM and the product the up GEMM (epilogue order)
    assert names[i:i + 4] == ["layers.0.mlp.gate_up.part0", "layers.0.mlp.act", "layers.0.mlp.gate_up.part1",
                              "layers.0.mlp.gate_mul"]
    parts = [op for op in s.ops if op.name.startswith("layers.0.mlp.gate_up.part")]
    assert [op.inputs[1].shape for op in parts] == [(4096, 11008), (4096, 11008)]
    assert all(op.inputs[0].name == "layers.0.mlp_norm" for op in parts)
    # 32 layers: one op more (two GEMMs) and one fewer (the split) each
    assert len(s.ops) == len(g.ops)
    assert sum(op.kind == "matmul" for op in s.ops) == sum(op.kind == "matmul" for op in g.ops) + 32
    # the parameters are partitioned, not copied: 2 x 4096 x 11008 per layer either way
    w = {t.name: t.numel for op in g.ops for t in op.inputs if t.role.name == "WEIGHT"}
    ws = {t.name: t.numel for op in s.ops for t in op.inputs if t.role.name == "WEIGHT"}
    assert sum(ws.values()) == sum(w.values())
    assert ws["layers.0.mlp.gate_up.weight.part0"] == 4096 * 11008


def test_fp8_weight_scales_split_per_output_channel():
    g = load_workload("llama-2-7b", batch=1, seq=128, phase="prefill", dtype="fp16", weight_dtype="fp8_e4m3",
                      kv_dtype="fp8_e4m3")
    s = split_gated_mlp(g)
    part = next(op for op in s.ops if op.name == "layers.3.mlp.gate_up.part1")
    assert part.kind == "quant_matmul"
    assert [t.shape for t in part.inputs] == [(1, 128, 4096), (4096, 11008), (11008,)]
    assert part.outputs[0].name == "layers.3.mlp.split_gate_up:1"


def test_graph_without_gated_mlp_is_unchanged():
    g = load_workload("gpt2", batch=1, seq=128)
    assert _names(split_gated_mlp(g)) == _names(g)


def test_switch_reads_the_trtllm_v05_rows_only():
    assert gated_mlp_unfused("... and the gate and up projections as two GEMMs (the page's ...")
    assert not gated_mlp_unfused("gate_up fused GEMM")
    with DEFAULT_DATASET.open(newline="", encoding="utf-8") as fh:
        rows = {r["id"] for r in csv.DictReader(fh) if gated_mlp_unfused(r["notes"])}
    # the first-token rows and the throughput rows of the same engine build (performance.md @ 138f96d), and the
    # first-token rows of the 0.9.0 page (perf-overview.md @ 6ad7cf1, trtllm-build without --use_fused_mlp)
    assert rows == {"pub-090", "pub-091", "pub-092", "pub-093", "pub-113", "pub-114", "pub-108", "pub-109", "pub-110",
                    "pub-111", "pub-112"} | {f"pub-{i}" for i in range(165, 173)}


def test_graph_cache_builds_the_unfused_mlp_for_the_v05_rows_only():
    from simulator.calibration.measurements import MeasurementSet
    from simulator.calibration.predict import GraphCache
    from simulator.hardware import known_devices

    ms = {m.id: m for m in MeasurementSet.load(DEFAULT_DATASET, devices=known_devices())}
    cache = GraphCache()
    v05 = _names(cache.get(ms["pub-114"]))
    assert "layers.31.mlp.gate_up.part1" in v05 and "layers.31.mlp.gate_up" not in v05
    other = _names(cache.get(ms["pub-094"]))  # gpt-fast: not stated, so its graph keeps the fused GEMM
    assert "layers.0.mlp.gate_up" in other and not any(n.endswith(".part0") for n in other)
