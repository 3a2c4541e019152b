"""The query, key and value projections run as three GEMMs (PaddlePaddle's paddle.nn.MultiHeadAttention: q_proj,
k_proj, v_proj): workloads.frameworks.split_qkv_projection and the published rows' notes switch."""

from __future__ import annotations

import csv
import dataclasses

import pytest

from simulator.calibration.predict import qkv_unfused
from simulator.calibration.validation import DEFAULT_DATASET
from workloads.frameworks import split_qkv_projection
from workloads.resolve import load_workload


def test_bert_large_qkv_becomes_three_gemms_on_the_same_input():
    g = load_workload("bert_large", batch=2, seq=128, phase="forward", dtype="fp16", attention="decomposed")
    s = split_qkv_projection(g)
    names = [op.name for op in s.ops]
    assert "layers.0.attn.qkv" not in names and "layers.0.attn.split_qkv" not in names
    parts = [op for op in s.ops if op.name.startswith("layers.0.attn.qkv.part")]
    # each part: the 1024 x 1024 weight and its 1024 bias, on the layer's input
    assert [[t.shape for t in op.inputs[1:]] for op in parts] == [[(1024, 1024), (1024,)]] * 3
    assert len({op.inputs[0].name for op in parts}) == 1
    # 24 layers: two more GEMMs and one split fewer each
    assert len(s.ops) == len(g.ops) + 24
    assert sum(op.kind == "matmul" for op in s.ops) == sum(op.kind == "matmul" for op in g.ops) + 48
    # parameters partitioned, not copied
    assert s.params == g.params
    # the attention core reads the parts' outputs
    qk = next(op for op in s.ops if op.name == "layers.0.attn.q_heads")
    assert qk.inputs[0] is parts[0].outputs[0]


def test_graph_without_fused_qkv_is_unchanged():
    g = load_workload("resnet18", batch=1)
    assert [op.name for op in split_qkv_projection(g).ops] == [op.name for op in g.ops]


def test_switch_reads_the_paddle_rows_whose_program_has_three_projections():
    assert qkv_unfused("...: the query, key and value projections as three GEMMs.")
    assert not qkv_unfused("one QKV GEMM, as the graph has it")
    with DEFAULT_DATASET.open(newline="", encoding="utf-8") as fh:
        rows = {r["id"] for r in csv.DictReader(fh) if qkv_unfused(r["notes"])}
    # the TF32 fine-tuning and inference rows and the AMP inference row; the AMP fine-tuning row (a5388a4,
    # fuse_qkv=bert_config.fuse_mha) keeps one QKV GEMM
    assert rows == {"pub-086", "pub-088", "pub-089"}


@pytest.mark.parametrize("row", ["pub-086", "pub-088"])
def test_split_rows_cost_more_and_training_is_derived_from_the_split_forward(row):
    # three 1024-wide GEMMs instead of one 3072-wide: never faster; the training step's backward holds the parts'
    # input- and weight-gradient GEMMs (no fused QKV GEMM left anywhere in the step)
    from hwmodels.catalog import load_device
    from simulator.calibration.measurements import MeasurementSet
    from simulator.calibration.predict import GraphCache, default_predict
    from simulator.hardware import known_devices

    m = {x.id: x for x in MeasurementSet.load(DEFAULT_DATASET, devices=known_devices())}[row]
    plain = dataclasses.replace(m, notes=m.notes.replace("as three GEMMs", "as they come"))
    graphs, dev = GraphCache(), load_device(m.device)
    g = graphs.get(m)
    assert not any(op.name.endswith("attn.qkv") for op in g.ops)
    assert g.params == graphs.get(plain).params
    if m.train:
        assert sum("attn.qkv.part" in op.name for op in g.ops) > 3 * 24  # forward parts plus their gradients
    assert default_predict(g, dev, m) > default_predict(graphs.get(plain), dev, plain)
