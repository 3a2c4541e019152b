"""Dropout layers as kernels in every phase (a static-graph stack's dropout ops), at a stated probability."""

from __future__ import annotations

import pytest


def test_dropout_kernels_in_every_phase_at_the_stated_probability():
    # a static-graph stack (PaddlePaddle) runs every dropout layer as an op, in inference too (a copy at test time):
    # BERT-Large forward has one on the embeddings and three per layer (attention probabilities, the attention
    # output and the MLP output): 1 + 24 x 3 = 73, each the shape of its input
    from workloads.resolve import load_workload

    plain = load_workload("bert_large", batch=2, seq=128, phase="forward", dtype="fp16", attention="decomposed")
    g = load_workload("bert_large", batch=2, seq=128, phase="forward", dtype="fp16", attention="decomposed",
                      dropout=0.1)
    drops = [op for op in g.ops if op.kind == "elementwise" and op.attrs.get("op") == "dropout"]
    assert len(drops) == 73 and len(g.ops) == len(plain.ops) + 73
    shapes = {op.outputs[0].shape for op in drops}
    assert shapes == {(2, 128, 1024), (2, 16, 128, 128)}
    # with fused attention the probabilities' dropout is inside the attention op: 1 + 24 x 2
    fused = load_workload("bert_large", batch=2, seq=128, phase="forward", dtype="fp16", dropout=0.1)
    assert sum(op.attrs.get("op") == "dropout" for op in fused.ops if op.kind == "elementwise") == 49
    assert not any(op.attrs.get("op") == "dropout" for op in plain.ops if op.kind == "elementwise")


@pytest.mark.parametrize("p", [1.0, -0.1, True, "0.1"])
def test_dropout_probability_out_of_range_is_refused(p):
    from workloads.resolve import load_workload

    with pytest.raises(ValueError, match=r"model 'bert_large': dropout; got .*expected a probability in \[0, 1\)"):
        load_workload("bert_large", batch=1, seq=16, phase="forward", dropout=p)
