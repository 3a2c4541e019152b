"""PaddlePaddle's cuDNN fused attention keeps its score matrix in memory (workloads.paddle_fmha): the forward writes
S, the backward reads S and writes and reads back dS; the GPU lowering adds that traffic to the fused kernel."""

from __future__ import annotations

import csv
import dataclasses

import pytest

import nodeperf as npf
from hwmodels import gpu
from simulator.calibration.predict import stored_scores_stated
from simulator.calibration.validation import DEFAULT_DATASET
from workloads.paddle_fmha import STORED_SCORE_ATTR, stored_score_attention
from workloads.resolve import load_workload

B, H, S = 2, 16, 128  # BERT-Large heads at a small batch and sequence


@pytest.fixture(scope="module")
def step():
    return load_workload("bert_large", batch=B, seq=S, dtype="fp16", train=True)


def test_marks_one_pass_forward_and_three_backward(step):
    marked = stored_score_attention(step)
    fwd = [op for op in marked.ops if op.kind == "attention"]
    bwd = [op for op in marked.ops if op.kind == "attention_bwd"]
    assert len(fwd) == len(bwd) == 24
    assert {op.attrs[STORED_SCORE_ATTR] for op in fwd} == {1}  # S written
    assert {op.attrs[STORED_SCORE_ATTR] for op in bwd} == {3}  # S read, dS written, dS read back
    assert len(marked.ops) == len(step.ops) and marked.meta["stored_scores"] is True


def test_refuses_a_graph_without_attention():
    cnn = load_workload("resnet50", batch=1, seq=224)
    with pytest.raises(ValueError, match="got no attention op"):
        stored_score_attention(cnn)


def test_lowering_adds_the_score_traffic_at_the_streaming_rate(step):
    hw = npf.load_hardware("a100-sxm4-80gb")
    before = {r.name: r for r in npf.evaluate(step, hw).records if r.kind.startswith("attention")}
    after = {r.name: r for r in npf.evaluate(stored_score_attention(step), hw).records
             if r.kind.startswith("attention")}
    scores = B * H * S * S * 2  # [batch, heads, seq, seq] fp16: 1,048,576 bytes
    p = gpu.gpu_params(hw, "fp16")
    for name, r in before.items():
        passes = 3 if r.kind == "attention_bwd" else 1
        assert after[name].dram_bytes - r.dram_bytes == pytest.approx(passes * scores)
        # the memory term grows by those bytes at the DRAM rate the attention model streams at
        assert after[name].memory_s - r.memory_s == pytest.approx(
            passes * scores / (p.dram_bytes_per_s * p.dram_fraction), rel=1e-9)
        assert after[name].compute_s == pytest.approx(r.compute_s)
        assert after[name].time_s >= r.time_s


def test_switch_reads_only_the_fused_attention_fine_tuning_row():
    with DEFAULT_DATASET.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    # pub-088/089 decompose their attention (no fusion pass in evaluate()); pub-086 is TF32 (no --fuse-mha)
    assert {r["id"] for r in rows if stored_scores_stated(r["notes"])} == {"pub-087"}


def test_pub087_pays_the_score_traffic_of_its_24_layers():
    from hwmodels.catalog import load_device
    from simulator.calibration.measurements import MeasurementSet
    from simulator.calibration.predict import GraphCache, default_predict
    from simulator.hardware import known_devices

    m = {x.id: x for x in MeasurementSet.load(DEFAULT_DATASET, devices=known_devices())}["pub-087"]
    plain = dataclasses.replace(m, notes=m.notes.replace("(softmax stored between the fused attention kernels)", ""))
    graphs, dev = GraphCache(), load_device(m.device)
    delta = default_predict(graphs.get(m), dev, m) - default_predict(graphs.get(plain), dev, plain)
    # four passes over 32 x 16 x 384 x 384 fp16 scores in each of 24 layers: 14.5 GB; at most their time at the
    # attention model's DRAM rate is added (less where a kernel's compute term still covers part of it: 0.49 of it at
    # the Ampere stream triad figure, 0.873; more than half at MT4G's read figure, 0.758, whose slower bytes a
    # kernel's compute covered less)
    moved = 4 * 24 * 32 * 16 * 384 * 384 * 2
    assert moved == pytest.approx(14.5e9, rel=0.01)
    p = gpu.gpu_params(dev, "fp16")
    assert 0.45 * moved / (p.dram_bytes_per_s * p.dram_fraction) < delta <= moved / (p.dram_bytes_per_s * p.dram_fraction)


def test_gelu_fold_drops_the_gelu_kernels_and_rewires_the_gemms(step):
    from workloads.paddle_epilogue import fold_gelu_into_gemms

    folded = fold_gelu_into_gemms(step)
    # one gelu forward and one backward per layer go, nothing else
    assert len(folded.ops) == len(step.ops) - 2 * 24 and folded.meta["gelu_in_gemm_epilogue"] == 24
    names = {op.name for op in folded.ops}
    assert "layers.3.mlp.act" not in names and "layers.3.mlp.act.bwd" not in names
    # the up projection's GEMM writes the activation the down projection reads ...
    assert folded.op("layers.3.mlp.up").outputs == step.op("layers.3.mlp.act").outputs
    assert [c.name for c in folded.consumers("layers.3.mlp.act")] == \
        [c.name for c in step.consumers("layers.3.mlp.act")]
    # ... and the down projection's dX GEMM writes the pre-activation's gradient the up projection's backward reads
    assert folded.op("layers.3.mlp.down.bwd_a").outputs == step.op("layers.3.mlp.act.bwd").outputs
    assert folded.flops == step.flops - sum(op.flops for op in step.ops if op.name.endswith((".mlp.act", ".mlp.act.bwd")))


def test_gelu_fold_refuses_a_graph_without_gelu():
    from workloads.paddle_epilogue import fold_gelu_into_gemms

    with pytest.raises(ValueError, match="got no gelu after a matmul"):
        fold_gelu_into_gemms(load_workload("resnet50", batch=1, seq=224, train=True))


def test_gelu_switch_reads_only_the_amp_fine_tuning_row():
    from simulator.calibration.predict import gelu_epilogue_stated

    with DEFAULT_DATASET.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    # pub-086 (TF32) has no fuse_gemm_epilogue: program.py sets it under --amp only
    assert {r["id"] for r in rows if gelu_epilogue_stated(r["notes"])} == {"pub-087"}
