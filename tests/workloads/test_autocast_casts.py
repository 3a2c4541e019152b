"""torch.autocast in eager PyTorch: fp32 weights, one cast kernel per conv/linear weight per forward."""

from __future__ import annotations

import pytest

from hwmodels.catalog import load_device
from simulator import EvalOptions, evaluate
from simulator.calibration.measurements import MeasurementSet
from simulator.calibration.predict import default_predict, stated_module_tree
from simulator.calibration.validation import DEFAULT_DATASET
from simulator.engines.analytical import module_call_counts
from simulator.hardware import known_devices
from workloads.frameworks import autocast_weight_casts, classification_validation_step
from workloads.training import training_graph
from workloads.zoo import build_model


def test_resnet50_casts_every_conv_and_linear_weight_once():
    g = build_model("resnet50", batch=1, dtype="fp16")
    a = autocast_weight_casts(g)
    casts = [op for op in a if "/autocast" in op.name]
    # 53 convolution weights, the classifier's weight and its bias
    assert len(casts) == 55
    assert len(a.ops) == len(g.ops) + 55 and a.meta["autocast"] is True
    # the cast weights' masters are fp32 (their memory doubles; BatchNorm parameters stay as they are);
    # each cast reads 4 bytes and writes 2 per element
    cast_bytes = sum(op.outputs[0].nbytes for op in casts)
    assert a.weight_bytes == g.weight_bytes + cast_bytes
    assert cast_bytes == 2 * 25_557_032 - 2 * sum(op.params for op in g if op.kind == "batchnorm")
    stem = next(op for op in casts if op.name == "conv1/autocast")
    n = 64 * 3 * 7 * 7
    assert (stem.inputs[0].dtype.value, stem.outputs[0].dtype.value) == ("fp32", "fp16")
    assert (stem.bytes_read, stem.bytes_written) == (4 * n, 2 * n)
    assert a.op("conv1").inputs[1] == stem.outputs[0]
    # the casts open no module path of their own
    assert module_call_counts(a) != {} and sum(c for c, _ in module_call_counts(a).values()) == 24


def test_refuses_training_graphs_and_a_second_application():
    g = build_model("resnet18", batch=2, dtype="fp16")
    with pytest.raises(ValueError, match="autocast weight casts already applied"):
        autocast_weight_casts(autocast_weight_casts(g))
    with pytest.raises(ValueError, match="got a training graph; expected an inference graph"):
        autocast_weight_casts(training_graph(build_model("resnet18", batch=2, phase="train", dtype="fp16")))


def test_host_bound_forward_pays_one_launch_per_cast():
    a100 = load_device("a100-sxm4-40gb")
    opts = EvalOptions(eager_framework=True, eager_modules=True)
    g = build_model("resnet50", batch=1, dtype="fp16")
    plain, amp = evaluate(g, a100, opts), evaluate(autocast_weight_casts(g), a100, opts)
    # batch 1 on an A100: every cast (the largest moves 14 MB) is floored at the eager per-op host time;
    # the container calls move from a convolution to its cast, and the Linear stays a module call
    assert amp.latency_s - plain.latency_s == pytest.approx(55 * a100.efficiency.framework_op_overhead_s, rel=1e-9)
    t4 = load_device("t4")  # on the T4 (300 GB/s) the big layer-4 weights' casts are memory-bound
    assert evaluate(autocast_weight_casts(g), t4, opts).latency_s - evaluate(g, t4, opts).latency_s > \
        55 * t4.efficiency.framework_op_overhead_s


def test_published_rows_under_autocast_get_the_casts():
    ms = MeasurementSet.load(DEFAULT_DATASET, devices=known_devices())
    row = next(m for m in ms if m.id == "pub-052")  # DeepLearningExamples ResNet-50, T4, AMP, batch 1
    assert "autocast" in row.notes
    g = build_model("resnet50", batch=1, dtype="fp16")
    t4 = load_device("t4")
    with_casts = default_predict(g, t4, row)
    opts = EvalOptions(eager_framework=True, eager_modules=True)
    # the row's notes also say its time is the DeepLearningExamples validation step (loss, accuracy, .item())
    # and name the module tree of its model code (the module calls the op names do not show)
    assert with_casts == pytest.approx(
        evaluate(stated_module_tree(classification_validation_step(autocast_weight_casts(g)), row, True), t4,
                 opts).latency_s, rel=1e-12)
    assert with_casts > evaluate(classification_validation_step(g), t4, opts).latency_s


def test_tied_weights_keep_their_dtype():
    from workloads.resolve import load_workload

    g = load_workload("gpt2", seq=64, dtype="bf16", framework="sdpa")
    a = autocast_weight_casts(g)
    tied = {t.name for op in g if op.kind == "embedding" for t in op.inputs if t.role == "weight"}
    casts = [op for op in a if "/autocast" in op.name]
    assert casts and not any(op.inputs[0].name in tied for op in casts)
    # every other 16-bit weight of a matmul is cast once
    want = {t.name for op in g if op.kind == "matmul" for t in op.inputs if t.role == "weight"} - tied
    assert {op.inputs[0].name for op in casts} == want and len(casts) == len(want)


@pytest.mark.parametrize(("argv", "message"), [
    (["--dtype", "fp16"], "--autocast: a torch.autocast region of PyTorch; got no --framework"),
    (["--framework", "vllm", "--dtype", "fp16"], "got vllm; expected --framework eager, sdpa or compile"),
    (["--framework", "eager"], "got weights in fp32; expected --dtype fp16 or bf16"),
    (["--framework", "eager", "--dtype", "fp16", "--train"], "got --train; expected no --train"),
])
def test_cli_refuses_what_autocast_does_not_describe(capsys, argv, message):
    from simulator.cli import main

    assert main(["predict", "resnet18", "--hardware", "t4", "--autocast", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_compiled_rows_under_autocast_run_the_casts_every_call(monkeypatch):
    # AOTAutograd traces with the autocast cache off: a compiled program holds one cast per weight and
    # runs it on every call; eager PyTorch inside one autocast region casts once and reuses the copy
    import workloads.frameworks as fw
    from simulator.calibration.frameworks_validation import (
        load_framework_rows,
        predict_framework_row,
    )

    ms, parsed = load_framework_rows()
    row = {m.id: (m, p, o) for m, (p, o) in zip(ms, parsed, strict=True)}
    with_casts = {i: predict_framework_row(*row[i]) for i in ("fw-062", "fw-063", "fw-064")}
    monkeypatch.setattr(fw, "autocast_weight_casts", lambda g: g)
    without = {i: predict_framework_row(*row[i]) for i in ("fw-062", "fw-063", "fw-064")}
    assert with_casts["fw-062"] == without["fw-062"]  # eager: the casts are cached
    for i in ("fw-063", "fw-064"):  # compiled default and reduce-overhead: 155 casts of ResNet-152's weights
        assert with_casts[i] > without[i]
