"""NCHW convolutions through cuDNN (``EvalOptions.conv_layout``, ``--conv-layout``).

cuDNN's 16-bit tensor-core convolutions are NHWC kernels; on PyTorch's default NCHW tensors the library
transforms x (or dy) and w into NHWC and the result back, one kernel each, on every call
(``simulator.lowering.gpu.CONV_LAYOUT_SOURCES``). The checks: the transforms' traffic and kernels by
hand, where they do not apply (fp32 on SIMT paths, non-NVIDIA devices, NHWC), the framework
profiles' layouts, and the whole-network slowdown against the published channels-last gain.
"""

from __future__ import annotations

import pytest

from simulator.cli.main import main
from simulator.engines.analytical import CONV_LAYOUTS, EvalOptions, evaluate
from simulator.hardware import load_hardware
from workloads.frameworks import compile_conv_layout, get_profile
from workloads.micro import build_micro
from workloads.training import training_graph
from workloads.zoo import build_model

CONV = "conv2d:n=32,c=256,h=28,w=28,k=256,r=3,s=3,pad=1"
NCHW = EvalOptions(conv_layout="nchw")


@pytest.fixture(scope="module")
def a100():
    return load_hardware("a100-sxm4-80gb")


def _rec(graph, dev, opts=None):
    return evaluate(graph, dev, opts).records[0]


def test_fp16_conv_pays_three_transforms(a100):
    g = build_micro(CONV, "fp16")
    nhwc, nchw = _rec(g, a100), _rec(g, a100, NCHW)
    x = y = 32 * 256 * 28 * 28 * 2
    w = 256 * 256 * 9 * 2
    # each transform reads its tensor and writes it back in the other layout; the result (12.8 MB) was just
    # written by the convolution and fits the A100's 40 MB L2, so its transform reads it from L2 (the engine's
    # residency rule); x and w come from DRAM (the graph's first op)
    assert nchw.dram_bytes - nhwc.dram_bytes == pytest.approx(2 * (x + w) + y, rel=1e-9)
    assert nchw.l2_bytes - nhwc.l2_bytes == pytest.approx(2 * (x + w + y), rel=1e-9)
    assert nchw.kernels == nhwc.kernels + 3
    assert nchw.rule == nhwc.rule + "+nchw"
    assert "3 layout transforms" in nchw.notes
    assert nchw.time_s > nhwc.time_s


def test_a_result_larger_than_l2_is_read_back_from_dram():
    """On a T4 (4 MB L2) the 12.8 MB result does not stay in L2: all three transforms read DRAM."""
    t4 = load_hardware("t4")
    g = build_micro(CONV, "fp16")
    nhwc, nchw = _rec(g, t4), _rec(g, t4, NCHW)
    x = y = 32 * 256 * 28 * 28 * 2
    w = 256 * 256 * 9 * 2
    assert nchw.dram_bytes - nhwc.dram_bytes == pytest.approx(2 * (x + w + y), rel=1e-9)
    # without the residency rule the A100 reads the result back from DRAM too
    a100 = load_hardware("a100-sxm4-80gb")
    off = EvalOptions(conv_layout="nchw", l2_residency=False)
    assert _rec(g, a100, off).dram_bytes - _rec(g, a100, EvalOptions(l2_residency=False)).dram_bytes == \
        pytest.approx(2 * (x + w + y), rel=1e-9)


def test_transforms_run_after_the_kernel_not_overlapped(a100):
    """The transforms are separate kernels: their time adds to the convolution's whatever bounds it."""
    g = build_micro(CONV, "fp16")
    nhwc, nchw = _rec(g, a100), _rec(g, a100, NCHW)
    dev = a100
    rate = dev.main_memory.read_bandwidth_bytes_per_s * dev.efficiency.dram_bandwidth_fraction
    act, w = 32 * 256 * 28 * 28 * 2, 256 * 256 * 9 * 2
    from_dram = 2 * (act + w) + act  # the result's transform reads it from L2 (test above)
    # at least the transforms' DRAM bytes at the achievable DRAM rate, on top of the NHWC kernel
    assert nchw.time_s - nhwc.time_s >= 0.99 * from_dram / rate


def test_simt_fp32_convs_are_left_alone(a100):
    """fp32 without TF32 runs cuDNN's SIMT kernels, which read NCHW as it is (TF32: test_tf32_conv_layout.py)."""
    g = build_micro(CONV, "fp32")
    a = _rec(g, a100)
    b = _rec(g, a100, NCHW)
    assert (a.time_s, a.dram_bytes, a.kernels) == (b.time_s, b.dram_bytes, b.kernels)


def test_non_nvidia_devices_are_left_alone():
    mi = load_hardware("mi300x")
    g = build_micro(CONV, "fp16")
    assert _rec(g, mi).time_s == _rec(g, mi, NCHW).time_s


def test_depthwise_convs_are_left_alone(a100):
    g = build_micro("conv2d:n=32,c=256,h=28,w=28,k=256,r=3,s=3,pad=1,groups=256", "fp16")
    assert _rec(g, a100).time_s == _rec(g, a100, NCHW).time_s


def test_training_graph_transforms_every_conv_call(a100):
    """fprop (x, w, y), dgrad (dy, w, dx) and wgrad (x, dy, dw): three transforms per call."""
    g = training_graph(build_model("resnet18", batch=8, phase="train", dtype="fp16"))
    a, b = evaluate(g, a100), evaluate(g, a100, NCHW)
    convs = [r for r in a.records if r.kind.startswith("conv2d")]
    assert convs and all(r.rule.startswith("implicit-gemm") for r in convs)
    assert b.totals.kernels - a.totals.kernels == 3 * len(convs)


def test_resnet50_amp_training_slowdown_matches_the_published_channels_last_gain(a100):
    """MosaicML's Channels Last method card: channels last 'accelerates ResNet-50 on ImageNet by about 30%
    on NVIDIA V100 and A100'; Inductor's decide_layout_opt carries measured channels-last/contiguous
    multipliers of 0.725-0.823 for dense convs (1.22-1.38x). The model's NCHW AMP training step should be
    in that neighbourhood, not at 1.0x nor at 2x. (1.51 while training batch norms read their operands once;
    1.45 since they read them twice, their reduction pass first: docs/accuracy.md, "DeepLearningExamples
    ResNet-50: the timed step and the stack".)"""
    g = training_graph(build_model("resnet50", batch=256, phase="train", dtype="fp16"))
    ratio = evaluate(g, a100, NCHW).totals.latency_s / evaluate(g, a100).totals.latency_s
    assert 1.2 <= ratio <= 1.5, ratio


def test_bad_layout_is_a_located_error():
    with pytest.raises(ValueError, match=r"options.conv_layout: unknown memory format; got 'NHCW'.*did you mean"):
        EvalOptions(conv_layout="NHCW")
    # the CLI's choices are the engine's list (predict and plot)
    from simulator.cli.main import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command" or hasattr(a, "choices") and
               isinstance(a.choices, dict))
    for cmd in ("predict", "plot"):
        parsers = [sub.choices[cmd]]
        parsers += [a.choices[k] for p in parsers for a in p._actions if isinstance(getattr(a, "choices", None), dict)
                    for k in a.choices]
        flags = [a for p in parsers for a in p._actions if "--conv-layout" in a.option_strings]
        assert flags and all(tuple(a.choices) == CONV_LAYOUTS for a in flags), cmd


def test_profiles_name_their_layout():
    assert get_profile("eager").cost_options()["conv_layout"] == "nchw"
    assert get_profile("sdpa").cost_options()["conv_layout"] == "nchw"
    assert get_profile("cuda-graphs").cost_options()["conv_layout"] == "nchw"
    assert get_profile("compile").cost_options()["conv_layout"] == "nhwc"
    assert get_profile("tensorrt").cost_options()["conv_layout"] == "nhwc"
    # torch.compile's layout optimisation arrived in torch 2.1 (pytorch/pytorch #99773)
    assert compile_conv_layout("torch 2.0.1") == "nchw"
    assert compile_conv_layout("PyTorch 2.0") == "nchw"
    assert compile_conv_layout("torch 2.1.0dev") == "nhwc"
    assert compile_conv_layout("PyTorch 2.4.0a0 (ROCm nightly)") == "nhwc"
    assert compile_conv_layout("torch 2.10.0") == "nhwc"
    # off by default on ROCm (pytorch/pytorch #111474: layout_opt_default = "1" if not torch.version.hip else "0")
    assert compile_conv_layout("PyTorch 2.4.0a0 (ROCm nightly)", "AMD") == "nchw"
    assert compile_conv_layout("torch 2.1.0", "amd") == "nchw"
    assert compile_conv_layout("PyTorch 2.4.0a0", "NVIDIA") == "nhwc"


def _latency(capsys, *argv) -> float:
    import json

    assert main(["predict", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)["totals"]["latency_s"]


def test_cli_flag_and_profile_default(capsys):
    base = ["resnet50", "--hardware", "a100-sxm4-80gb", "--batch", "64", "--dtype", "fp16"]
    nhwc = _latency(capsys, *base)
    nchw = _latency(capsys, *base, "--conv-layout", "nchw")
    eager = _latency(capsys, *base, "--framework", "eager")
    eager_cl = _latency(capsys, *base, "--framework", "eager", "--conv-layout", "nhwc")
    assert nchw > nhwc
    assert eager > eager_cl  # the eager profile's default is NCHW; the flag overrides it


def test_compile_on_rocm_runs_contiguous_convolutions_without_layout_copies(capsys):
    """Inductor's layout optimisation is off by default on ROCm (pytorch/pytorch #111474): on an MI210,
    ``--framework compile`` gives the NCHW prediction, without the channels-last copies of the image and the
    k x k weights that ``--conv-layout nhwc`` (the opt-in, TORCHINDUCTOR_LAYOUT_OPTIMIZATION=1) adds."""
    import json

    base = ["resnet50", "--hardware", "mi210", "--batch", "1", "--dtype", "bf16", "--framework", "compile"]
    default = _latency(capsys, *base)
    assert default == _latency(capsys, *base, "--conv-layout", "nchw")
    assert default < _latency(capsys, *base, "--conv-layout", "nhwc")
    assert main(["predict", *base, "--json"]) == 0
    names = [r["name"] for r in json.loads(capsys.readouterr().out)["ops"]]
    assert names and not any(n.endswith("_channels_last") for n in names)
    # an NVIDIA device keeps the optimisation and its copies
    assert main(["predict", base[0], "--hardware", "a100-sxm4-80gb", *base[3:], "--json"]) == 0
    names = [r["name"] for r in json.loads(capsys.readouterr().out)["ops"]]
    assert "conv1.weight_channels_last" in names


def test_cli_bad_layout_exits_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["predict", "resnet50", "--hardware", "a100-sxm4-80gb", "--conv-layout", "NCHW"])
    assert e.value.code == 2
    assert "--conv-layout" in capsys.readouterr().err


def test_transforms_are_launches_inside_the_cudnn_call(a100):
    """Under an eager framework the conv call's host time is the measured cuDNN call time (52 us); the three
    transforms it launches add a kernel launch each (5 us), not a framework op (20 us) each."""
    from simulator.engines.analytical import host_floor_s, launch_floor_s

    eff = a100.efficiency
    eager = EvalOptions(eager_framework=True, conv_layout="nchw")
    floor = launch_floor_s(a100, eager)
    got = host_floor_s("implicit-gemm+nchw", 4, floor, eff, eager)
    assert got == pytest.approx(eff.framework_conv_op_overhead_s + 3 * eff.launch_overhead_s, rel=1e-12)
    assert got == pytest.approx(52e-6 + 3 * 5e-6, rel=1e-9)
    # a backward convolution (issued by autograd: the generic per-op floor) with its transforms
    assert host_floor_s("implicit-gemm-dgrad+nchw", 4, floor, eff, eager) == pytest.approx(
        eff.framework_op_overhead_s + 3 * eff.launch_overhead_s, rel=1e-12)
    # replayed from a CUDA graph: every kernel, transforms included, at the graph launch floor
    graphs = EvalOptions(cuda_graphs=True, conv_layout="nchw")
    assert host_floor_s("implicit-gemm+nchw", 4, launch_floor_s(a100, graphs), eff, graphs) == pytest.approx(
        4 * eff.graph_launch_overhead_s, rel=1e-12)


def test_vectorised_sweep_equals_the_scalar_engine_in_nchw(a100):
    from hwmodels.paths import with_overrides
    from simulator.engines.vectorized import evaluate_variants

    g = training_graph(build_model("resnet18", batch=16, phase="train", dtype="fp16"))
    bws = [1.5e12, 2.0e12]
    got = evaluate_variants(g, a100, {"memory.hbm.read_bandwidth_bytes_per_s": bws}, NCHW).latency_s
    want = [evaluate(g, with_overrides(a100, {"memory.hbm.read_bandwidth_bytes_per_s": b}), NCHW).totals.latency_s
            for b in bws]
    assert [float(x) for x in got] == pytest.approx(want, rel=1e-9)


def test_discrete_event_engine_prices_the_transforms(a100):
    from simulator.engines.discrete_event import simulate

    g = build_model("resnet18", batch=16, dtype="fp16")
    a, b = simulate(g, a100), simulate(g, a100, NCHW)
    assert b.totals.latency_s > a.totals.latency_s
    assert b.totals.kernels - a.totals.kernels == 3 * sum(r.kind == "conv2d" for r in a.records)
