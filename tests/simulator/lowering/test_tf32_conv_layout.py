"""TF32 convolutions on NCHW tensors pay cuDNN's layout transforms (``simulator.lowering.gpu.TF32_LAYOUT_SOURCES``).

cuDNN's TF32 tensor-core convolutions are NHWC kernels (``sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_
nhwckrsc_nhwc``); on PyTorch's default NCHW fp32 tensors with TF32 allowed the library runs
``nchwToNhwcKernel<float>`` and ``nhwcToNchwKernel<float>`` around each call (pytorch/pytorch #81940, A100,
cuDNN 8.3.2). cuDNN also holds FFMA kernels that read NCHW as it is and takes them where they are faster
(tensorflow #56744). The checks: the transforms' bytes by hand at 4 bytes per element, the faster of the two
paths, which fp32 paths take them (TF32 allowed on a GPU with a TF32 rate) and which do not (SIMT fp32, a V100
without TF32), and the DeepLearningExamples ResNet-50 TF32 training step they price.
"""

from __future__ import annotations

import pytest

from simulator.engines.analytical import EvalOptions, evaluate
from simulator.hardware import load_hardware
from workloads.micro import build_micro

CONV = "conv2d:n=32,c=256,h=28,w=28,k=256,r=3,s=3,pad=1"


@pytest.fixture(scope="module")
def a100():
    return load_hardware("a100-sxm4-80gb")


def _rec(graph, dev, opts):
    return evaluate(graph, dev, opts).records[0]


def test_tf32_conv_pays_three_fp32_transforms(a100):
    g = build_micro(CONV, "tf32")
    nhwc = _rec(g, a100, EvalOptions(allow_tf32=True))
    nchw = _rec(g, a100, EvalOptions(allow_tf32=True, conv_layout="nchw"))
    x = y = 32 * 256 * 28 * 28 * 4  # 25.7 MB each: fp32 storage, whatever the TF32 math
    w = 256 * 256 * 9 * 4
    # x and w from DRAM (the graph's first op), the result from L2 (just written, 25.7 MB < 40 MB)
    assert nchw.dram_bytes - nhwc.dram_bytes == pytest.approx(2 * (x + w) + y, rel=1e-9)
    assert nchw.l2_bytes - nhwc.l2_bytes == pytest.approx(2 * (x + w + y), rel=1e-9)
    assert nchw.kernels == nhwc.kernels + 3
    assert nchw.rule == "implicit-gemm+nchw"
    # the transforms' DRAM bytes at the achievable DRAM rate, at least, on top of the NHWC kernel. Off the 400 W
    # cap: capped, the op's average power (the memory-bound transforms beside the TF32 kernel) is what the
    # limiter holds, so the kernel's share of the throttling falls and the op grows by less
    from hwmodels.paths import with_overrides

    free = with_overrides(a100, {"power.tdp_w": 4000.0})
    rate = a100.main_memory.read_bandwidth_bytes_per_s * a100.efficiency.dram_bandwidth_fraction
    grown = _rec(g, free, EvalOptions(allow_tf32=True, conv_layout="nchw")).time_s \
        - _rec(g, free, EvalOptions(allow_tf32=True)).time_s
    assert grown >= 0.99 * (2 * (x + w) + y) / rate
    assert nchw.time_s - nhwc.time_s < grown


def test_a_memory_bound_conv_takes_the_ffma_nchw_kernel(a100):
    """A 1 x 1, 64 -> 64 convolution at 56 x 56 (batch 16): the TF32 kernel alone is faster than the FFMA one,
    but not with its transforms (at least their DRAM bytes at the achievable rate), so cuDNN's faster choice
    is the FFMA kernel on NCHW as it is: the same cost as with TF32 off."""
    spec = "conv2d:n=16,c=64,h=56,w=56,k=64,r=1,s=1"
    tf32_nhwc = _rec(build_micro(spec, "tf32"), a100, EvalOptions(allow_tf32=True))
    tf32_nchw = _rec(build_micro(spec, "tf32"), a100, EvalOptions(allow_tf32=True, conv_layout="nchw"))
    ffma = _rec(build_micro(spec, "fp32"), a100, EvalOptions(conv_layout="nchw"))
    assert (tf32_nchw.rule, tf32_nchw.time_s, tf32_nchw.kernels) == ("implicit-gemm-simt", ffma.time_s, 1)
    x = y = 16 * 64 * 56 * 56 * 4
    w = 64 * 64 * 4
    rate = a100.main_memory.read_bandwidth_bytes_per_s * a100.efficiency.dram_bandwidth_fraction
    assert tf32_nhwc.time_s < ffma.time_s < tf32_nhwc.time_s + (2 * (x + w) + y) / rate


def test_fp32_with_tf32_allowed_is_the_tf32_path(a100):
    """An fp32 graph under allow_tf32 (PyTorch's cudnn.allow_tf32 default) takes the TF32 kernel and its
    transforms, exactly as a tf32 graph does."""
    opts = EvalOptions(allow_tf32=True, conv_layout="nchw")
    a, b = _rec(build_micro(CONV, "fp32"), a100, opts), _rec(build_micro(CONV, "tf32"), a100, opts)
    assert (a.time_s, a.dram_bytes, a.kernels, a.rule) == (b.time_s, b.dram_bytes, b.kernels, b.rule)


@pytest.mark.parametrize("device", ["a100-sxm4-80gb", "v100-sxm2-32gb", "t4"])
def test_simt_fp32_keeps_nchw_kernels(device):
    """Without a TF32 path (TF32 off, or a Volta/Turing GPU with TF32 allowed) fp32 convolutions run cuDNN's
    SIMT kernels on NCHW as it is: no transforms."""
    dev = load_hardware(device)
    g = build_micro(CONV, "fp32")
    for tf32 in (False, True):
        a = _rec(g, dev, EvalOptions(allow_tf32=tf32))
        b = _rec(g, dev, EvalOptions(allow_tf32=tf32, conv_layout="nchw"))
        if tf32 and device == "a100-sxm4-80gb":
            continue
        assert (a.time_s, a.dram_bytes, a.kernels, a.rule) == (b.time_s, b.dram_bytes, b.kernels, b.rule)


def test_dle_resnet50_tf32_training_step():
    """pub-058: DeepLearningExamples ResNet-50 TF32 training, batch 256, one A100-SXM4-80GB, NCHW (configs.yml
    sets memory_format nhwc for AMP only): 938 img/s = 272.9 ms per step. With the transforms the step is
    within 15% of it (it was 32% short without them; -4.3% at the A100's former DRAM figure, 0.758, -13.7% at
    gpu-stream's triad, 0.873: the batch-norm and NCHW weight-gradient kernels' own rates are not sourced). Each of the 158 convolution calls runs the TF32 kernel
    between its three transforms, or, where that is slower, the FFMA kernel on NCHW: the 1 x 1 convolutions
    of the 56 x 56 stage and their data gradients, whose transforms move the most bytes per FLOP."""
    from simulator.calibration.measurements import MeasurementSet
    from simulator.calibration.predict import GraphCache, default_predict

    row = next(m for m in MeasurementSet.load("hwmodels/measurements/published_gpu.csv") if m.id == "pub-058")
    assert row.median_s == pytest.approx(256 / 938, rel=1e-9)
    graph = GraphCache().get(row)
    dev = load_hardware(row.device)
    got = default_predict(graph, dev, row)
    assert got == pytest.approx(row.median_s, rel=0.15)
    opts = EvalOptions(allow_tf32=True, conv_layout="nchw")
    convs = [r for r in evaluate(graph, dev, opts).records if r.kind.startswith("conv2d")]
    assert len(convs) == 158 and all(r.rule.endswith("+nchw") or r.rule.endswith("-simt") for r in convs)
    simt = [r for r in convs if r.rule.endswith("-simt")]
    assert simt and all(r.name.startswith("layer1.") and r.kind != "conv2d_bwd_weight" for r in simt)


def test_resnet50_tf32_nchw_slowdown_is_in_the_published_band():
    """NCHW over NHWC for a TF32 ResNet-50 forward (batch 64) and training step (batch 256) on an A100: the
    same band as the 16-bit check in test_conv_layout.py (published channels-last gains of 20-38%: MosaicML's
    method card, Inductor's decide_layout_opt); NVIDIA's TensorFlow note on TF32 (tensorflow #58054) reports
    about 20% for convnet inference, the band's lower edge. The model gives 1.43 and 1.43."""
    from workloads.training import training_graph
    from workloads.zoo import build_model

    a100 = load_hardware("a100-sxm4-80gb")
    nhwc, nchw = EvalOptions(allow_tf32=True), EvalOptions(allow_tf32=True, conv_layout="nchw")
    for g in (build_model("resnet50", batch=64, dtype="tf32"),
              training_graph(build_model("resnet50", batch=256, phase="train", dtype="tf32"))):
        ratio = evaluate(g, a100, nchw).totals.latency_s / evaluate(g, a100, nhwc).totals.latency_s
        assert 1.2 <= ratio <= 1.5, ratio


def test_vectorised_sweep_takes_the_faster_path_per_variant():
    """The sweep engine picks the faster of the two paths per hardware variant, as the scalar engine does."""
    from hwmodels.paths import with_overrides
    from simulator.engines.vectorized import evaluate_variants
    from workloads.zoo import build_model

    a100 = load_hardware("a100-sxm4-80gb")
    opts = EvalOptions(allow_tf32=True, conv_layout="nchw")
    g = build_model("resnet18", batch=16, dtype="tf32")
    bws = [0.8e12, 2.0e12]
    got = evaluate_variants(g, a100, {"memory.hbm.read_bandwidth_bytes_per_s": bws}, opts).latency_s
    want = [evaluate(g, with_overrides(a100, {"memory.hbm.read_bandwidth_bytes_per_s": b}), opts).totals.latency_s
            for b in bws]
    assert [float(x) for x in got] == pytest.approx(want, rel=1e-9)
