"""Eager frameworks issue a forward convolution through cuDNN's convolution API: its host time per
call (``efficiency.framework_conv_op_overhead_s``) floors the op instead of the generic per-op time."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hwmodels"))
from gpu_devices import toy_gpu  # noqa: E402

from hwmodels.catalog import load_device  # noqa: E402
from simulator import EvalOptions, evaluate, simulate  # noqa: E402
from simulator.engines.analytical import CUDNN_CONV_RULES, host_floor_s  # noqa: E402
from simulator.engines.vectorized import evaluate_variants  # noqa: E402
from workloads.ir import GraphBuilder  # noqa: E402
from workloads.zoo import build_model  # noqa: E402


def _conv_relu(dtype: str = "bf16"):
    b = GraphBuilder("conv-relu", dtype=dtype)
    x = b.input("x", (1, 8, 8, 8))
    w = b.weight("w", (8, 8, 1, 1))
    y = b.op("conv2d", [x, w], name="conv", stride=1, padding=0)
    b.op("elementwise", [y], name="relu", op="relu")
    return b.build()


def _toy():
    return toy_gpu(framework_op_overhead_s=20e-6, framework_conv_op_overhead_s=52e-6)


def test_conv_call_time_floors_a_small_forward_conv():
    g = _conv_relu()
    plain = evaluate(g, _toy())
    eager = evaluate(g, _toy(), EvalOptions(eager_framework=True))
    conv, relu = eager.op("conv"), eager.op("relu")
    assert conv.rule in CUDNN_CONV_RULES
    # hand-computed: both ops' device times are far below their host times
    assert plain.op("conv").time_s < 5e-6
    assert conv.time_s == pytest.approx(52e-6, rel=1e-12) and conv.bound == "latency"
    assert relu.time_s == pytest.approx(20e-6, rel=1e-12)
    assert eager.latency_s == pytest.approx(72e-6, rel=1e-12)


def test_conv_call_time_needs_an_eager_framework():
    g = _conv_relu()
    # without an eager framework only the launch floor (2 us) applies; CUDA-graph replay has no host call
    for opts in (EvalOptions(), EvalOptions(cuda_graphs=True)):
        r = evaluate(g, _toy(), opts)
        assert r.op("conv").time_s < 52e-6
    assert host_floor_s("implicit-gemm", 1, 2e-6, _toy().efficiency, EvalOptions()) == pytest.approx(2e-6)
    assert host_floor_s("implicit-gemm", 1, 20e-6, _toy().efficiency,
                        EvalOptions(eager_framework=True)) == pytest.approx(52e-6)
    # a GEMM issued by the same framework keeps the generic per-op time; no kernel, no host floor
    assert host_floor_s("gemm", 1, 20e-6, _toy().efficiency, EvalOptions(eager_framework=True)) == 20e-6
    assert host_floor_s("implicit-gemm", 0, 20e-6, _toy().efficiency, EvalOptions(eager_framework=True)) == 0.0


def test_large_conv_stays_device_bound():
    # ResNet-50's first layers at batch 64 on an A100: the device time exceeds any host time
    a100 = load_device("a100-sxm4-40gb")
    g = build_model("resnet50", batch=64, dtype="fp16")
    eager = evaluate(g, a100, EvalOptions(eager_framework=True))
    plain = evaluate(g, a100)
    first = next(r for r in eager.records if r.kind == "conv2d")
    assert first.time_s == plain.op(first.name).time_s > a100.efficiency.framework_conv_op_overhead_s


def test_resnet50_batch1_eager_counts_every_forward_conv():
    a100 = load_device("a100-sxm4-40gb")
    g = build_model("resnet50", batch=1, dtype="fp16")
    eff = a100.efficiency
    r = evaluate(g, a100, EvalOptions(eager_framework=True))
    convs = [o for o in r.records if o.kind == "conv2d"]
    assert len(convs) == 53  # ResNet-50 v1.5: 1 stem + 16 blocks x 3 + 4 projection shortcuts
    # at batch 1 every one of them is host-bound: the call time, not the kernel, sets its time
    assert [o.time_s for o in convs] == pytest.approx([eff.framework_conv_op_overhead_s] * 53, rel=1e-12)
    assert all(o.bound == "latency" for o in convs)


def test_des_and_variants_follow_the_same_host_floor():
    a100 = load_device("a100-sxm4-40gb")
    g = build_model("resnet18", batch=1, dtype="bf16")
    opts = EvalOptions(eager_framework=True)
    ref = evaluate(g, a100, opts)
    des = simulate(g, a100, opts, streams=1)
    assert des.latency_s == pytest.approx(ref.latency_s, rel=1e-12)
    res = evaluate_variants(g, a100, {"efficiency.framework_conv_op_overhead_s": [10e-6, 52e-6, 80e-6]}, opts)
    assert res.latency_s[1] == pytest.approx(ref.latency_s, rel=1e-9)
    # resnet18 has 20 forward convs, each host-bound at batch 1 at these call times
    assert res.latency_s[2] - res.latency_s[1] == pytest.approx(20 * 28e-6, rel=1e-6)
