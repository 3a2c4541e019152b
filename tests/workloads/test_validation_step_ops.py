"""DeepLearningExamples' image-classification validation step: what its timer holds beyond the network."""

from __future__ import annotations

import pytest

from hwmodels.catalog import load_device
from simulator import EvalOptions, evaluate
from simulator.calibration.measurements import MeasurementSet
from simulator.calibration.predict import default_predict, stated_module_tree, timed_validation_step
from simulator.calibration.validation import DEFAULT_DATASET
from simulator.engines.analytical import module_call_counts
from simulator.hardware import known_devices
from workloads.frameworks import autocast_weight_casts, classification_validation_step
from workloads.training import training_graph
from workloads.zoo import build_model


def test_fp32_step_adds_loss_accuracy_and_three_item_reads():
    g = build_model("resnet50", batch=8, dtype="fp32")
    v = classification_validation_step(g)
    added = [op.name for op in v][len(g.ops):]
    # F.cross_entropy = log_softmax + nll_loss; accuracy: topk, eq, then per k a float copy, sum and mul_;
    # then .item() of top-1, top-5 and the loss
    assert added == ["loss.log_softmax", "loss.nll_loss", "accuracy_topk", "accuracy_eq",
                     "accuracy_top1_float", "accuracy_top1_sum", "accuracy_top1_mul",
                     "accuracy_top5_float", "accuracy_top5_sum", "accuracy_top5_mul",
                     "item_top1", "item_top5", "item_loss"]
    assert v.meta["dle_validation_step"] is True and v.op("loss.log_softmax").inputs[0] == g.op("fc").outputs[0]
    assert v.op("item_loss").inputs[0] == v.op("loss.nll_loss").outputs[0]
    # the loss module's call is one container; the accuracy function's ops open none
    calls = module_call_counts(v)
    assert calls["loss.log_softmax"] == (1, 0) and not any(n.startswith(("accuracy", "item")) for n in calls)


def test_under_autocast_the_images_and_the_logits_are_cast():
    g = autocast_weight_casts(build_model("resnet50", batch=8, dtype="fp16"))
    v = classification_validation_step(g)
    assert len(v.ops) == len(g.ops) + 13 + 2
    cast = v.op("conv1/autocast_input")  # the loader's fp32 batch, 8 x 3 x 224 x 224
    n = 8 * 3 * 224 * 224
    assert (cast.bytes_read, cast.bytes_written) == (4 * n, 2 * n)
    assert v.op("conv1").inputs[0] == cast.outputs[0]
    logits = v.op("loss.log_softmax/autocast")  # log_softmax runs in fp32 under autocast
    assert (logits.inputs[0].dtype.value, logits.outputs[0].dtype.value) == ("fp16", "fp32")


def test_host_bound_step_pays_one_eager_op_per_added_kernel():
    t4 = load_device("t4")
    opts = EvalOptions(eager_framework=True, eager_modules=True)
    g = build_model("resnet50", batch=1, dtype="fp32")
    plain, step = evaluate(g, t4, opts), evaluate(classification_validation_step(g), t4, opts)
    eff = t4.efficiency
    # batch 1: 13 one-kernel ops at the per-op host floor, and the loss module's container call
    assert step.latency_s - plain.latency_s == pytest.approx(
        13 * eff.framework_op_overhead_s + eff.framework_container_call_s, rel=1e-9)


def test_refuses_a_second_application_and_training_graphs():
    g = build_model("resnet18", batch=2, dtype="fp32")
    with pytest.raises(ValueError, match="validation-step ops already added"):
        classification_validation_step(classification_validation_step(g))
    with pytest.raises(ValueError, match="got a training graph; expected an inference graph"):
        classification_validation_step(training_graph(build_model("resnet18", batch=2, phase="train")))


def test_published_inference_rows_say_their_timed_step():
    ms = MeasurementSet.load(DEFAULT_DATASET, devices=known_devices())
    marked = sorted(m.id for m in ms if timed_validation_step(m.notes))
    assert marked == [f"pub-{i:03d}" for i in range(46, 58)]  # DeepLearningExamples ResNet-50 on T4
    row = next(m for m in ms if m.id == "pub-046")
    g = build_model("resnet50", batch=1, dtype="fp32")
    t4 = load_device("t4")
    opts = EvalOptions(eager_framework=True, eager_modules=True)
    assert default_predict(g, t4, row) == pytest.approx(
        evaluate(stated_module_tree(classification_validation_step(g), row, True), t4, opts).latency_s, rel=1e-12)
