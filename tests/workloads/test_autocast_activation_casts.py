"""An fp32 model inside one torch.autocast region (weight casts cached): the activations' casts."""

from __future__ import annotations

import pytest

from simulator.calibration.frameworks_validation import (
    load_framework_rows,
    predict_framework_row,
    timed_sync_s,
)
from workloads.frameworks import autocast_activation_casts
from workloads.resolve import load_workload
from workloads.training import training_graph


def _casts(g):
    return [op for op in g if "/autocast_in" in op.name]


def test_vit_casts_around_the_fp32_norms_and_softmax():
    g = load_workload("vit_b16", batch=1, dtype="bf16", framework="eager")
    a = autocast_activation_casts(g)
    casts = _casts(a)
    # the fp32 image for the patch convolution; per layer q, k, v and the MLP's up projection read the fp32
    # LayerNorm output, the softmax casts the 16-bit scores up, PV casts the fp32 probabilities down; the
    # classifier reads the fp32 final norm: 1 + 12 x 6 + 1
    assert len(casts) == 74 and len(a.ops) == len(g.ops) + 74
    assert [op.name for op in casts[:7]] == [
        "embed.patch/autocast_in0", "layers.0.attn.q/autocast_in0", "layers.0.attn.k/autocast_in0",
        "layers.0.attn.v/autocast_in0", "layers.0.attn.core.softmax/autocast_in0", "layers.0.attn.core.pv/autocast_in0",
        "layers.0.mlp.up/autocast_in0"]
    assert casts[-1].name == "head.classifier/autocast_in0"
    # the output projection reads the 16-bit PV (after the head copy): no cast; nor does the down projection
    assert not any(op.name.startswith(("layers.0.attn.out/", "layers.0.mlp.down/")) for op in casts)
    assert a.op("layers.0.attn.q").inputs[0] == casts[1].outputs[0] and a.meta["autocast_activations"] is True


def test_batch_norm_keeps_the_16_bit_stream():
    a = autocast_activation_casts(load_workload("resnet152", batch=1, dtype="bf16", framework="eager"))
    assert [op.name for op in _casts(a)] == ["conv1/autocast_in0"]  # only the loader's fp32 image


def test_refused_twice_and_for_training():
    a = autocast_activation_casts(load_workload("resnet18", batch=1, dtype="bf16"))
    with pytest.raises(ValueError, match="already added"):
        autocast_activation_casts(a)
    step = training_graph(load_workload("bert_base", batch=2, seq=64, phase="train", dtype="bf16"), optimizer="sgd")
    with pytest.raises(ValueError, match="expected an inference graph"):
        autocast_activation_casts(step)


def test_only_the_eager_autocast_rows_get_them():
    ms, parsed = load_framework_rows()
    rows = {m.id: (m, p, o) for m, (p, o) in zip(ms, parsed, strict=True)}
    m, p, o = rows["fw-066"]
    plain = load_workload("vit_b16", batch=1, dtype="bf16", framework="eager")
    from hwmodels.catalog import load_device
    from simulator import EvalOptions, evaluate

    eo = EvalOptions(**p.cost_options())
    dev = load_device(m.device)
    from workloads.frameworks import with_module_tree

    # the row names its model code (Module tree: transformers ViTForImageClassification): its 75 module calls the
    # graph's names do not show are charged too (workloads.frameworks.MODULE_TREES)
    casts = autocast_activation_casts(plain)
    expected = evaluate(with_module_tree(casts, "transformers ViTForImageClassification"), dev, eo).latency_s
    # the ROCm blog's timer synchronises once per call (simulator.calibration.frameworks_validation.timed_sync_s)
    assert timed_sync_s(m, dev) == pytest.approx(dev.efficiency.host_sync_s) and dev.efficiency.host_sync_s > 0
    assert predict_framework_row(m, p, o) == pytest.approx(expected + timed_sync_s(m, dev), rel=1e-12)
    assert expected - evaluate(casts, dev, eo).latency_s == pytest.approx(75 * dev.efficiency.framework_container_call_s,
                                                                         rel=1e-6)
    assert expected > evaluate(plain, dev, eo).latency_s
