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

from hwmodels.catalog import load_device  # noqa: E402
from simulator import EvalOptions, evaluate  # noqa: E402
from simulator.calibration.frameworks_validation import (  # noqa: E402
    compiled_call_host_s,
    load_framework_rows,
    predict_framework_row,
    timed_sync_s,
)
from workloads.frameworks import (  # noqa: E402
    autocast_weight_casts,
    autotune_extern_shapes,
    autotuned_extern,
    get_profile,
    inductor_layout_copies,
)
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


def test_autotune_log_shapes_are_read_from_the_notes():
    m, _ = _row("fw-069")  # the ROCm blog's ViT under max-autotune: its printed AUTOTUNE log
    assert autotune_extern_shapes(m.notes) == (
        ("convolution", ((1, 3, 224, 224), (768, 3, 16, 16))),
        ("addmm", ((197, 768), (197, 768), (768, 768))),
        ("addmm", ((1, 1000), (1, 768), (768, 1000))),
    )
    m65, _ = _row("fw-065")  # ResNet-152: only the classifier's addmm went to the extern kernel
    assert autotune_extern_shapes(m65.notes) == (("addmm", ((1, 1000), (1, 2048), (2048, 1000))),)
    assert autotune_extern_shapes("no log here") == ()


def _linear_gelu():
    b = GraphBuilder("linear-gelu", dtype="bf16")
    x = b.input("x", (1, 197, 768))
    h = b.op("matmul", [x, b.weight("w", (768, 768)), b.weight("bias", (768,))], name="fc")
    b.op("elementwise", [h], name="act", op="gelu")
    p = b.op("matmul", [x, b.weight("w2", (768, 3072))], name="fc2")
    b.op("elementwise", [p], name="act2", op="gelu")
    return b.build()


def test_an_extern_winner_takes_no_epilogue_under_max_autotune():
    g = _linear_gelu()
    opts = EvalOptions(fusion=True, epilogue_fusion=True, norm_fusion=True, cuda_graphs=True)
    fused = evaluate(g, h100(), opts)
    assert fused.op("act").fused_into == "fc" and fused.totals.kernels == 2
    # the log names fc's shape (197 x 768 by 768 x 768) only: fc2 (768 x 3072) keeps its template's epilogue
    marked = autotuned_extern(g, (("addmm", ((197, 768), (197, 768), (768, 768))),))
    assert [op.name for op in marked if op.attrs.get("aten_fallback")] == ["fc"]
    ext = evaluate(marked, h100(), opts)
    assert ext.op("act").kernels == 1 and ext.op("act2").fused_into == "fc2" and ext.totals.kernels == 3
    assert autotuned_extern(g, ()) is g


def test_a_logged_extern_shape_that_matches_no_layer_is_one_located_error():
    # 196 rows (another sequence length) match neither linear layer of the 197-token graph: refused, not ignored
    from workloads.frameworks import FrameworkError

    g = _linear_gelu()
    with pytest.raises(FrameworkError) as err:
        autotuned_extern(g, (("addmm", ((197, 768), (197, 768), (768, 768))),
                             ("addmm", ((196, 768), (196, 768), (768, 768)))), "fw-069: notes")
    assert str(err.value) == (f"fw-069: notes: AUTOTUNE shape 'addmm(196x768, 196x768, 768x768)' matches no linear "
                              f"layer or convolution of graph {g.name!r}; expected the shapes of this graph's "
                              "contractions (addmm: bias, mat1 [rows, in], mat2 [in, out]; mm: mat1, mat2; "
                              "convolution: input, weight)")


def test_max_autotune_row_keeps_the_logged_extern_kernels():
    m, (prof, opts) = _row("fw-069")
    with_log = predict_framework_row(m, prof, opts)
    bare = dataclasses.replace(m, notes=m.notes.split(" AUTOTUNE log")[0])
    # 50 linear layers and the patch embedding ran as extern kernels: the epilogues they no longer take run alone
    assert with_log > predict_framework_row(bare, prof, opts)


def test_a_timer_that_synchronises_every_call_pays_one_host_sync():
    m, (prof, opts) = _row("fw-064")  # the ROCm blog's timed(): synchronize, fn(), synchronize per call
    dev = load_device(m.device)
    assert timed_sync_s(m, dev) == pytest.approx(5.8e-6)
    hf, _ = _row("fw-050")  # the Hugging Face page does not state its timer
    assert timed_sync_s(hf, load_device(hf.device)) == 0.0
    bare = dataclasses.replace(m, notes=m.notes.replace("fn(), synchronize, per call", "fn()"))
    assert predict_framework_row(m, prof, opts) - predict_framework_row(bare, prof, opts) == pytest.approx(5.8e-6)
