"""The head split and merge of attention as transpose kernels (PaddlePaddle's MultiHeadAttention: transpose2 of
q, k, v and of the output): workloads.frameworks.head_transposes and the published rows' notes switch."""

from __future__ import annotations

import csv

from simulator.calibration.predict import head_transposes_stated
from simulator.calibration.validation import DEFAULT_DATASET
from workloads.frameworks import head_transposes
from workloads.resolve import load_workload


def test_bert_base_gets_four_transposes_per_layer():
    g = load_workload("bert_base", batch=2, seq=128, phase="forward", dtype="fp16", attention="decomposed")
    t = head_transposes(g)
    tr = [op for op in t.ops if op.kind == "transpose"]
    assert len(tr) == 4 * 12 and len(t.ops) == len(g.ops) + 48
    names = [op.name for op in t.ops]
    i = names.index("layers.0.attn.q_heads")
    assert names[i + 1] == "layers.0.attn.q_heads.transpose"
    reshape, perm = t.ops[i], t.ops[i + 1]
    assert reshape.outputs[0].shape == (2, 128, 12, 64) and perm.outputs[0].shape == (2, 12, 128, 64)
    # the tensor the attention core reads keeps its name and shape
    orig = next(op for op in g.ops if op.name == "layers.0.attn.q_heads").outputs[0]
    assert perm.outputs[0] == orig
    j = names.index("layers.0.attn.merge_heads")
    assert names[j - 1] == "layers.0.attn.merge_heads.transpose"
    assert t.ops[j - 1].outputs[0].shape == (2, 128, 12, 64) and t.ops[j].outputs[0].shape == (2, 128, 768)
    # each transpose moves its tensor: 2 x 128 x 768 fp16 values read and written
    assert all(op.bytes_read == 2 * 128 * 768 * 2 for op in tr)


def test_training_step_transposes_the_gradients_back():
    from workloads.training import training_graph

    fwd = load_workload("bert_base", batch=2, seq=128, phase="train", dtype="fp16", attention="decomposed")
    step = training_graph(head_transposes(fwd))
    assert sum(op.kind == "transpose" for op in step.ops) == 2 * 4 * 12


def test_switch_reads_the_paddle_rows_with_decomposed_attention():
    assert head_transposes_stated("...: the head split and merge as transpose kernels.")
    with DEFAULT_DATASET.open(newline="", encoding="utf-8") as fh:
        rows = {r["id"] for r in csv.DictReader(fh) if head_transposes_stated(r["notes"])}
    assert rows == {"pub-086", "pub-088", "pub-089"}  # pub-087: the fused attention pass
