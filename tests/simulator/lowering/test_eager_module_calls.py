"""Eager PyTorch issues ops from nn.Module objects: a module holding parameters adds its call's Python to
its op's host time (``efficiency.framework_module_call_s``), a container module adds one call to the
first op it issues (``framework_container_call_s``). Counts come from the graph's module-path op names."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hwmodels"))
from gpu_devices import toy_gpu  # noqa: E402

from hwmodels.catalog import load_device  # noqa: E402
from simulator import EvalOptions, evaluate, simulate  # noqa: E402
from simulator.engines.analytical import module_call_counts  # noqa: E402
from simulator.engines.vectorized import evaluate_variants  # noqa: E402
from workloads.frameworks import get_profile  # noqa: E402
from workloads.ir import GraphBuilder  # noqa: E402
from workloads.zoo import build_model  # noqa: E402

EAGER = EvalOptions(eager_framework=True, eager_modules=True)


def _two_blocks():
    b = GraphBuilder("blocks", dtype="bf16")
    x = b.input("x", (4, 16))
    for i in range(2):
        g = b.weight(f"blocks.{i}.norm.weight", (16,))
        x = b.op("layernorm", [x, g], name=f"blocks.{i}.norm")
        w = b.weight(f"blocks.{i}.attn.q.weight", (16, 16))
        x = b.op("matmul", [x, w], name=f"blocks.{i}.attn.q")
        x = b.op("elementwise", [x], name=f"blocks.{i}.attn.scale", op="scale")
    b.op("elementwise", [x], name="head_act", op="relu")
    return b.build()


def _toy():
    return toy_gpu(framework_op_overhead_s=20e-6, framework_module_call_s=5e-6, framework_container_call_s=2e-6)


def test_counts_by_hand():
    # blocks, blocks.0 entered at blocks.0.norm (a LayerNorm with a weight: its own module call);
    # blocks.0.attn at blocks.0.attn.q (a Linear); the scale is functional; blocks.1 and blocks.1.attn likewise
    assert module_call_counts(_two_blocks()) == {
        "blocks.0.norm": (2, 1), "blocks.0.attn.q": (1, 1),
        "blocks.1.norm": (1, 1), "blocks.1.attn.q": (1, 1),
    }


def test_resnet50_module_tree():
    counts = module_call_counts(build_model("resnet50", batch=1))
    # containers: 4 stages + 16 bottlenecks + 4 downsample Sequentials; modules with parameters:
    # 53 BatchNorms and the classifier's Linear (the convolutions' call time includes their module)
    assert sum(c for c, _ in counts.values()) == 24
    assert sum(m for _, m in counts.values()) == 54


def test_training_step_counts_the_forward_only():
    from workloads.training import training_graph

    # autograd's backward and the optimizer step call no nn.Module: the counts stop at the loss
    step = training_graph(build_model("resnet18", batch=2, phase="train", dtype="fp16"))
    assert module_call_counts(step) == module_call_counts(build_model("resnet18", batch=2, dtype="fp16"))
    counts = module_call_counts(step)
    # resnet18: 4 stages + 8 basic blocks + 3 downsample Sequentials; 20 BatchNorms and the Linear
    assert (sum(c for c, _ in counts.values()), sum(m for _, m in counts.values())) == (15, 21)


def test_host_time_of_module_calls_by_hand():
    g = _two_blocks()
    r = evaluate(g, _toy(), EAGER)
    t = {o.name: o.time_s for o in r.records}
    assert t["blocks.0.norm"] == pytest.approx(20e-6 + 2 * 2e-6 + 5e-6, rel=1e-12)
    assert t["blocks.0.attn.q"] == pytest.approx(20e-6 + 2e-6 + 5e-6, rel=1e-12)
    assert t["blocks.1.attn.scale"] == pytest.approx(20e-6, rel=1e-12)
    assert t["head_act"] == pytest.approx(20e-6, rel=1e-12)
    assert r.latency_s == pytest.approx(7 * 20e-6 + 5 * 2e-6 + 4 * 5e-6, rel=1e-12)
    # a compiled program (eager_framework without modules) and a plain run pay no module calls
    compiled = evaluate(g, _toy(), EvalOptions(eager_framework=True))
    assert compiled.latency_s == pytest.approx(7 * 20e-6, rel=1e-12)
    assert evaluate(g, _toy(), EvalOptions(eager_modules=True)).latency_s < 7 * 20e-6


def test_profiles_say_which_stacks_call_modules():
    assert get_profile("eager").cost_options()["eager_modules"] is True
    assert get_profile("sdpa").cost_options()["eager_modules"] is True
    for name in ("compile", "cuda-graphs", "vllm", "tensorrt"):
        assert get_profile(name).cost_options()["eager_modules"] is False, name


def test_des_and_variants_follow_the_module_calls():
    a100 = load_device("a100-sxm4-40gb")
    g = build_model("resnet18", batch=1, dtype="bf16")
    ref = evaluate(g, a100, EAGER)
    assert ref.latency_s > evaluate(g, a100, EvalOptions(eager_framework=True)).latency_s
    des = simulate(g, a100, EAGER, streams=1)
    assert des.latency_s == pytest.approx(ref.latency_s, rel=1e-12)
    res = evaluate_variants(g, a100, {"efficiency.framework_module_call_s": [5e-6, 15e-6]}, EAGER)
    assert res.latency_s[0] == pytest.approx(ref.latency_s, rel=1e-9)
    # resnet18 at batch 1: every BatchNorm (20) and the Linear are host-bound, so 10 us more per module call
    assert res.latency_s[1] - res.latency_s[0] == pytest.approx(21 * 10e-6, rel=1e-6)
