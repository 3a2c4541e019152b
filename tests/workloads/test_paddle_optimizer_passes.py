"""The passes a static PaddlePaddle training step runs beside its optimizer update: the global-norm gradient clip
(workloads.frameworks.clip_grad_by_global_norm) and the loss-scale unscale of O1 mixed precision
(workloads.frameworks.amp_unscale_pass), and the published rows' notes switches that apply them."""

from __future__ import annotations

import csv
import dataclasses

import pytest

from simulator.calibration.predict import amp_unscale_stated, grad_clip_stated
from simulator.calibration.validation import DEFAULT_DATASET
from workloads.frameworks import amp_unscale_pass, clip_grad_by_global_norm
from workloads.resolve import load_workload


@pytest.fixture(scope="module")
def step():
    return load_workload("bert_base", batch=2, seq=128, dtype="fp16", train=True)


def test_clip_adds_a_norm_and_a_scale_per_gradient(step):
    clipped = clip_grad_by_global_norm(step)
    updates = [op for op in step.ops if op.kind == "optimizer_update"]
    # per gradient a sum of squares and a multiply; once: add_n, sum, sqrt, maximum, divide
    assert len(clipped.ops) == len(step.ops) + 2 * len(updates) + 5
    up = clipped.op("optimizer.layers.0.mlp.up.weight")
    norm = clipped.op("optimizer.layers.0.mlp.up.weight.grad_sq_norm")
    mul = clipped.op("optimizer.layers.0.mlp.up.weight.grad_clip")
    g = norm.inputs[0]
    assert g.shape == (768, 3072) or g.shape == (3072, 768)
    assert norm.flops == 2 * 768 * 3072 and norm.outputs[0].shape == (1,)
    # the multiply reads the gradient (and the one-element scale) and writes the clipped gradient the update reads
    assert mul.bytes_written == g.nbytes and mul.bytes_read == g.nbytes + g.dtype.bits // 8
    assert up.inputs[1] == mul.outputs[0] and up.outputs == step.op(up.name).outputs
    assert clipped.meta["grad_clip"] == "global_norm"


def test_unscale_reads_and_writes_every_gradient_once_more(step):
    unscaled = amp_unscale_pass(step)
    for before, after in zip((op for op in step.ops if op.kind == "optimizer_update"),
                             (op for op in unscaled.ops if op.kind == "optimizer_update"), strict=True):
        g = before.inputs[1]
        assert after.bytes_read - before.bytes_read == g.nbytes
        assert after.bytes_written - before.bytes_written == g.nbytes
    assert len(unscaled.ops) == len(step.ops)


def test_passes_refuse_a_graph_without_updates():
    fwd = load_workload("bert_base", batch=1, seq=64, phase="forward", dtype="fp16")
    with pytest.raises(ValueError, match="expected a training step"):
        clip_grad_by_global_norm(fwd)
    with pytest.raises(ValueError, match="expected a training step"):
        amp_unscale_pass(fwd)


def test_switches_read_the_paddle_fine_tuning_rows():
    with DEFAULT_DATASET.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["id"] for r in rows if grad_clip_stated(r["notes"])} == {"pub-086", "pub-087"}
    assert {r["id"] for r in rows if amp_unscale_stated(r["notes"])} == {"pub-087"}  # pub-086: TF32, no loss scale


def test_pub087_pays_at_least_the_passes_traffic():
    # the clip reads every gradient twice and writes it once, the unscale reads and writes it once: five passes
    # over the gradients, at most at the A100's HBM peak
    from hwmodels.catalog import load_device
    from simulator.calibration.measurements import MeasurementSet
    from simulator.calibration.predict import GraphCache, default_predict
    from simulator.hardware import known_devices

    m = {x.id: x for x in MeasurementSet.load(DEFAULT_DATASET, devices=known_devices())}["pub-087"]
    plain = dataclasses.replace(m, notes=m.notes.replace("(gradients clipped by their global norm)", "").replace(
        "(gradients unscaled in one pass over all of them)", ""))
    graphs, dev = GraphCache(), load_device(m.device)
    base = graphs.get(plain)
    grad_bytes = sum(op.inputs[1].nbytes for op in base.ops if op.kind == "optimizer_update")
    delta = default_predict(graphs.get(m), dev, m) - default_predict(base, dev, plain)
    hbm = 2039e9  # A100 80GB SXM HBM2e, the catalog's datasheet figure
    assert delta > 5 * grad_bytes / hbm
    assert delta < 0.01  # 600 small kernels and 3.2 GB of traffic: milliseconds, not tens of them
