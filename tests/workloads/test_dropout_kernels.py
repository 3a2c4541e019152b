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


def test_training_dropout_writes_its_mask_and_its_backward_reads_it():
    # PyTorch's native_dropout (aten/src/ATen/native/cuda/Dropout.cu) writes the output and a one-byte keep-mask
    # per element; native_dropout_backward reads the gradient and that mask and writes the input gradient.
    # BERT-Large fp16 training at p = 0.1: the attention probabilities' dropout over (2, 16, 128, 128).
    from workloads.resolve import load_workload
    from workloads.semantics import DROPOUT_MASK_BYTES
    from workloads.training import training_graph

    g = training_graph(load_workload("bert_large", batch=2, seq=128, phase="train", dtype="fp16",
                                     attention="decomposed", dropout=0.1))
    n = 2 * 16 * 128 * 128
    fwd = [op for op in g if op.kind == "elementwise" and op.attrs.get("op") == "dropout"
           and op.outputs[0].numel == n]
    bwd = [op for op in g if op.kind == "elementwise_bwd" and op.attrs.get("op") == "dropout"
           and op.outputs[0].numel == n]
    assert DROPOUT_MASK_BYTES == 1 and len(fwd) == len(bwd) == 24
    assert (fwd[0].bytes_read, fwd[0].bytes_written) == (2 * n, 2 * n + n)
    assert (bwd[0].bytes_read, bwd[0].bytes_written) == (2 * n + n, 2 * n)


def test_inference_dropout_copies_without_a_mask():
    # at test time a static program's dropout is a copy (upscale_in_train): input read, output written, no mask
    from workloads.resolve import load_workload

    g = load_workload("bert_large", batch=2, seq=128, phase="forward", dtype="fp16", dropout=0.1)
    drop = next(op for op in g.ops if op.kind == "elementwise" and op.attrs.get("op") == "dropout")
    n = drop.outputs[0].numel
    assert (drop.bytes_read, drop.bytes_written) == (2 * n, 2 * n)


def test_cnn_training_dropout_writes_its_mask():
    # torchvision MobileNetV2's classifier dropout over the pooled (batch, 1280) features, fp32 training
    from workloads.resolve import load_workload

    g = load_workload("mobilenet_v2", batch=4, phase="train", dtype="fp32")
    drop = next(op for op in g.ops if op.kind == "elementwise" and op.attrs.get("op") == "dropout")
    assert drop.outputs[0].shape == (4, 1280)
    assert (drop.bytes_read, drop.bytes_written) == (4 * 4 * 1280, 4 * 4 * 1280 + 4 * 1280)
