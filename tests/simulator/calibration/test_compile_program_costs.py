"""What a torch.compile (Inductor) program launches and spends besides its kernels: a norm or softmax fused with
the pointwise op before it, the channels-last weight copies of the layout optimisation, and the host time of one
call (Dynamo's cache lookup, the CUDA-graph tree); each from PyTorch's code or a cited measurement."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hwmodels"))
from gpu_devices import h100  # noqa: E402

from simulator import EvalOptions, evaluate  # noqa: E402
from simulator.calibration.frameworks_validation import (  # noqa: E402
    compiled_call_host_s,
    load_framework_rows,
    predict_framework_row,
)
from workloads.frameworks import autocast_weight_casts, get_profile, inductor_layout_copies  # noqa: E402
from workloads.ir import GraphBuilder  # noqa: E402
from workloads.resolve import load_workload  # noqa: E402


def residual_norm_softmax():
    b = GraphBuilder("res-ln-softmax", dtype="fp16")
    x = b.input("x", (197, 768))
    r = b.input("r", (197, 768))
    h = b.op("elementwise", [x, r], name="residual", op="add")
    h = b.op("layernorm", [h, b.weight("ln_w", (768,)), b.weight("ln_b", (768,))], name="norm")
    s = b.op("elementwise", [h], name="scale", op="mul")
    b.op("softmax", [s], name="softmax", axis=-1)
    return b.build()


def test_a_norm_and_a_softmax_join_the_pointwise_kernel_before_them_under_inductor():
    g = residual_norm_softmax()
    plain = evaluate(g, h100(), EvalOptions(fusion=True, epilogue_fusion=False))
    assert plain.op("norm").kernels == 1 and plain.op("softmax").kernels == 1
    assert plain.totals.kernels == 3  # add | layer norm + scale | softmax
    ind = evaluate(g, h100(), EvalOptions(fusion=True, epilogue_fusion=False, norm_fusion=True))
    assert ind.op("norm").fused_into == "residual" and ind.op("softmax").fused_into == "scale"
    assert ind.totals.kernels == 1
    # the add's sum is read by the norm only: it is never stored, the norm's output takes its store
    assert ind.op("norm").dram_bytes < plain.op("norm").dram_bytes
    assert ind.latency_s < plain.latency_s


def test_the_compile_profile_and_no_other_fuses_norms():
    assert get_profile("compile").cost_options()["norm_fusion"] is True
    for name in ("eager", "sdpa", "tensorrt", "xla", "vllm", "fsdp2-compile"):
        assert get_profile(name).cost_options()["norm_fusion"] is False, name


def test_compiled_vit_layer_kernels():
    """Per ViT layer at batch 1: residual add + norm, q, k, v, QK^T, scale + softmax, PV, head merge, out
    projection, residual add + norm, fc1, GELU, fc2: 13 kernels, 16 when norms and softmax ran alone."""
    g = load_workload("vit_b16", batch=1, dtype="fp32", framework="compile", attention="decomposed")
    cost = get_profile("compile").cost_options()
    for norm_fusion, expected in ((True, 13), (False, 16)):
        r = evaluate(g, h100(), EvalOptions(**{**cost, "norm_fusion": norm_fusion}))
        assert sum(x.kernels for x in r.records if x.name.startswith("layers.3.")) == expected


def test_layout_optimisation_copies_kxk_weights_and_the_image():
    g = load_workload("resnet50", batch=1, dtype="fp32")
    out = inductor_layout_copies(g)
    copies = [op for op in out if op.name.endswith("_channels_last")]
    # ResNet-50: the 7x7 stem and the sixteen 3x3 bottleneck convolutions; 1x1 weights are already in order
    assert sum(op.name.endswith("weight_channels_last") for op in copies) == 17
    assert [op.name for op in copies if op.name.endswith("input_channels_last")] == ["conv1.input_channels_last"]
    conv1 = next(op for op in out if op.name == "conv1")
    assert conv1.inputs[1].name == "conv1.weight_channels_last" and out.meta["layout_copies"]
    with pytest.raises(ValueError, match="layout copies already applied"):
        inductor_layout_copies(out)
    # under torch.autocast the cast kernel writes the weight in the layout asked for: no copy of its own
    cast = inductor_layout_copies(autocast_weight_casts(load_workload("resnet50", batch=1, dtype="bf16")))
    assert [op.name for op in cast if op.name.endswith("_channels_last")] == ["conv1.input_channels_last"]


def _row(rid):
    ms, parsed = load_framework_rows()
    ix = [m.id for m in ms].index(rid)
    return ms[ix], parsed[ix]


def test_call_host_time_by_mode_and_loop():
    ro, (prof, opts) = _row("fw-050")  # ResNet-50 forward, mode='reduce-overhead'
    assert compiled_call_host_s(ro, prof, opts.get("mode")) == pytest.approx(176e-6 + 128e-6 + 41e-6)
    default, (prof_d, opts_d) = _row("fw-016")  # default mode: Dynamo's lookup, no graph replay
    assert compiled_call_host_s(default, prof_d, opts_d.get("mode")) == pytest.approx(176e-6)
    decode, (prof_g, opts_g) = _row("fw-057")  # gpt-fast's decode loop never synchronises: hidden
    assert compiled_call_host_s(decode, prof_g, opts_g.get("mode")) == 0.0
    assert compiled_call_host_s(default, get_profile("eager"), None) == 0.0
    # the decode step is hidden by gpt-fast's no-sync loop, not by its phase: the same step timed in a loop that
    # reads the token on the host every step (Hugging Face generate) pays Dynamo's lookup and the graph replay
    hf = dataclasses.replace(decode, framework_version="PyTorch 2.4, transformers generate()",
                             source="a Hugging Face model card", notes="model.generate with torch.compile")
    assert compiled_call_host_s(hf, prof_g, opts_g.get("mode")) == pytest.approx(176e-6 + 128e-6 + 41e-6)
    for rid in ("fw-071", "fw-075", "fw-082"):  # the ROCm blogs' gpt-fast copies and gpt-fast itself
        m_, (p_, o_) = _row(rid)
        assert compiled_call_host_s(m_, p_, o_.get("mode")) == 0.0, rid


def test_reduce_overhead_row_carries_the_call_host_time():
    m, (prof, opts) = _row("fw-050")
    with_call = predict_framework_row(m, prof, opts)
    without = predict_framework_row(m, dataclasses.replace(prof, call_host_s=0.0, graph_call_host_s=0.0), opts)
    assert with_call - without == pytest.approx(345e-6, rel=1e-9)
