"""Each linear layer's bias added by a kernel of its own (a static PaddlePaddle program without the
fuse_gemm_epilogue pass): workloads.frameworks.unfuse_linear_bias and the published rows' notes switch."""

from __future__ import annotations

import csv
import dataclasses

from simulator.calibration.predict import linear_bias_unfused
from simulator.calibration.validation import DEFAULT_DATASET
from workloads.frameworks import autocast_weight_casts, unfuse_linear_bias
from workloads.resolve import load_workload


def test_bert_base_bias_adds_follow_their_gemms():
    g = load_workload("bert_base", batch=2, seq=128, phase="forward", dtype="fp16")
    u = unfuse_linear_bias(g)
    mm = [op for op in g.ops if op.kind == "matmul" and len(op.inputs) == 3]
    # 12 layers x (qkv, out, up, down) + the dense after the encoder; each gets one add after it
    assert len(mm) == 49
    assert len(u.ops) == len(g.ops) + 49 and u.params == g.params
    names = [op.name for op in u.ops]
    i = names.index("layers.0.mlp.up")
    assert names[i + 1] == "layers.0.mlp.up.bias_add"
    up, add = u.ops[i], u.ops[i + 1]
    assert len(up.inputs) == 2 and add.attrs["op"] == "add"
    assert [t.shape for t in add.inputs] == [(2, 128, 3072), (3072,)]
    # the add writes the GEMM's old output: its consumers are unchanged
    assert add.outputs[0] == next(op for op in g.ops if op.name == "layers.0.mlp.up").outputs[0]
    # an add of 2 x 128 x 3072 fp16 values reads the product and the bias and writes the sum
    assert add.flops == 2 * 128 * 3072


def test_training_step_takes_the_bias_gradient_from_the_add():
    from workloads.training import training_graph

    fwd = load_workload("bert_base", batch=2, seq=128, phase="train", dtype="fp16")
    step = training_graph(unfuse_linear_bias(fwd))
    assert any(op.name == "layers.0.mlp.up.bias_add" for op in step.ops)
    bias_grads = [op for op in step.ops if op.kind == "reduction" and op.name.startswith("layers.0.mlp.up.bias_add")]
    assert len(bias_grads) == 1 and bias_grads[0].outputs[0].numel == 3072  # summed over batch and positions
    assert not any(op.name == "layers.0.mlp.up.bwd_bias" for op in step.ops)


def test_cast_biases_stay_cast():
    # under PaddlePaddle's O1 rewrite the bias is cast too: casting first, then unfusing, the add reads the cast
    g = unfuse_linear_bias(autocast_weight_casts(load_workload("bert_base", batch=1, seq=64, phase="forward",
                                                               dtype="fp16")))
    add = next(op for op in g.ops if op.name == "layers.0.mlp.up.bias_add")
    producer = next(op for op in g.ops if op.outputs[0] is add.inputs[1] or op.outputs[0] == add.inputs[1])
    assert producer.attrs.get("op") == "cast"


def test_switch_reads_the_paddle_rows_without_the_epilogue_pass():
    assert linear_bias_unfused("..., so this TF32 step runs the linear bias adds as separate kernels.")
    with DEFAULT_DATASET.open(newline="", encoding="utf-8") as fh:
        rows = {r["id"] for r in csv.DictReader(fh) if linear_bias_unfused(r["notes"])}
    assert rows == {"pub-086", "pub-088", "pub-089"}  # pub-087: fuse_gemm_epilogue under --amp


def test_unfused_bias_adds_cost_their_traffic():
    # pub-088 (TF32, 32 x 384 tokens): per layer q, k, v, out (1024 columns each), up (4096) and down (1024) outputs,
    # each read and written once in fp32 by its add: at most the A100's HBM peak, at least half of it
    from hwmodels.catalog import load_device
    from simulator.calibration.measurements import MeasurementSet
    from simulator.calibration.predict import GraphCache, default_predict
    from simulator.hardware import known_devices

    m = {x.id: x for x in MeasurementSet.load(DEFAULT_DATASET, devices=known_devices())}["pub-088"]
    # device time only: the uncached program run's host time per op (serial_host_s) left out of both
    m = dataclasses.replace(m, notes=m.notes.replace("program prepared again in every run", ""))
    plain = dataclasses.replace(m, notes=m.notes.replace("bias adds as separate kernels", "bias adds"))
    graphs, dev = GraphCache(), load_device(m.device)
    delta = default_predict(graphs.get(m), dev, m) - default_predict(graphs.get(plain), dev, plain)
    moved = 24 * (4 * 1024 + 4096 + 1024) * 32 * 384 * 4 * 2
    hbm = 2039e9  # A100 80GB SXM HBM2e, the catalog's datasheet figure
    assert moved / hbm < delta < 2 * moved / hbm
