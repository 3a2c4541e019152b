"""PaddlePaddle's O1 mask add: the op on the attention scores in fp32 between two casts
(workloads.frameworks.fp32_score_add) and the published rows' notes switch."""

from __future__ import annotations

import csv
import dataclasses

from simulator.calibration.predict import fp32_mask_add
from simulator.calibration.validation import DEFAULT_DATASET
from workloads.frameworks import fp32_score_add
from workloads.resolve import load_workload


def test_score_op_runs_in_fp32_between_casts():
    g = load_workload("bert_base", batch=2, seq=128, phase="forward", dtype="fp16", attention="decomposed")
    f = fp32_score_add(g)
    assert len(f.ops) == len(g.ops) + 2 * 12
    names = [op.name for op in f.ops]
    i = names.index("layers.0.attn.core.scale")
    up, core, back = f.ops[i - 1], f.ops[i], f.ops[i + 1]
    assert up.name == "layers.0.attn.core.scale.cast_fp32" and back.name == "layers.0.attn.core.scale.cast_back"
    assert [t.dtype.value for t in (up.inputs[0], up.outputs[0], core.outputs[0], back.outputs[0])] == \
        ["fp16", "fp32", "fp32", "fp16"]
    # the softmax reads the same tensor as before
    old = next(op for op in g.ops if op.name == "layers.0.attn.core.scale").outputs[0]
    assert back.outputs[0] == old
    # scores 2 x 12 x 128 x 128: the up-cast reads 2 bytes and writes 4 per score, the op 4 and 4, the cast back 4 and 2
    n = 2 * 12 * 128 * 128
    assert [op.bytes_read + op.bytes_written for op in (up, core, back)] == [6 * n, 8 * n, 6 * n]
    # an fp32 graph is unchanged
    g32 = load_workload("bert_base", batch=1, seq=64, phase="forward", dtype="fp32", attention="decomposed")
    assert [op.name for op in fp32_score_add(g32).ops] == [op.name for op in g32.ops]


def test_switch_reads_the_amp_inference_row_only():
    assert fp32_mask_add("...: the mask add in fp32 between casts.")
    with DEFAULT_DATASET.open(newline="", encoding="utf-8") as fh:
        rows = {r["id"] for r in csv.DictReader(fh) if fp32_mask_add(r["notes"])}
    assert rows == {"pub-089"}


def test_pub089_pays_the_extra_score_traffic():
    # 24 layers x 32 x 16 x 384 x 384 scores: 16 more bytes each (6 + 6 for the casts, 4 more for the fp32 op)
    from hwmodels.catalog import load_device
    from simulator.calibration.measurements import MeasurementSet
    from simulator.calibration.predict import GraphCache, default_predict
    from simulator.hardware import known_devices

    m = {x.id: x for x in MeasurementSet.load(DEFAULT_DATASET, devices=known_devices())}["pub-089"]
    plain = dataclasses.replace(m, notes=m.notes.replace("mask add in fp32 between casts", "mask add"))
    graphs, dev = GraphCache(), load_device(m.device)
    delta = default_predict(graphs.get(m), dev, m) - default_predict(graphs.get(plain), dev, plain)
    moved = 24 * 32 * 16 * 384 * 384 * 16
    hbm = 2039e9  # A100 80GB SXM HBM2e, the catalog's datasheet figure
    assert moved / hbm < delta < 2 * moved / hbm
