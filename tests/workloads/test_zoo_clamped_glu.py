"""GPT-OSS's clamped gated activation as Megatron-Core runs it (``FrameworkProfile.clamped_glu_families``):
``weighted_bias_quick_geglu_impl`` clamps the two halves of the first expert GEMM's output and concatenates them
with eager kernels, then copies the linear offset to the device from a CPU scalar (a host synchronisation)."""

from __future__ import annotations

import dataclasses

from workloads.frameworks import get_profile
from workloads.parallel import ParallelPlan, plan_graphs
from workloads.zoo.transformer import zoo_config


def _graph(model: str = "gpt-oss-20b", framework: str = "megatron-core", recompute: str = "none"):
    # by name: the stack reads the model's family (gpt-oss) from the zoo entry
    (sg,) = plan_graphs(model, ParallelPlan(microbatch=1, ep=8, dp=8), seq=4096, train=True, framework=framework,
                        recompute=recompute)
    return sg


def _by_name(sg):
    """Layer 0's ops by name less the ``layers.0.`` prefix."""
    return {op.name[len("layers.0."):]: op for op in sg.graph.ops if op.name.startswith("layers.0.")}


def test_megatron_core_profile_names_gpt_oss_for_its_clamps():
    prof = get_profile("megatron-core")
    assert prof.clamped_glu_families == ("gpt-oss",)
    assert any("weighted_bias_quick_geglu_impl" in s and "memcpy_and_sync" in s for s in prof.sources)
    assert get_profile("fsdp2").clamped_glu_families == ()


def test_gpt_oss_experts_clamp_each_half_then_concatenate():
    ops = _by_name(_graph())
    gate, up, cat = ops["moe.clamp_gate"], ops["moe.clamp_up"], ops["moe.clamp_cat"]
    # 32 experts over EP 8: 4 local experts of 8 x 4,096 x 4 / 32 = 4,096 rows; the GEMM's 2 x 2,880 columns
    assert ops["moe.clamp_halves"].inputs[0] is ops["moe.experts_in"].outputs[0]
    assert gate.outputs[0].shape == up.outputs[0].shape == (4, 4096, 2880)
    assert (gate.attrs["op"], up.attrs["op"]) == ("clip", "clip")
    assert cat.inputs == (gate.outputs[0], up.outputs[0]) and cat.outputs[0].shape == (4, 4096, 5760)
    # eager kernels: nothing fuses into them, nor they into the GEMM or the compiled activation
    assert all(op.attrs["aten_fallback"] for op in (gate, up, cat))
    # torch.tensor(linear_offset, device=...) after the cat: the host waits for the stream there
    assert cat.attrs["host_sync"] is True
    # the activation and the gated product read the clamped halves
    assert ops["moe.split_gate_up"].inputs[0] is cat.outputs[0]


def test_clamp_gradients_are_eager_kernels_and_the_chunks_concatenation():
    ops = _by_name(_graph())
    g, u, halves = ops["moe.clamp_gate.bwd"], ops["moe.clamp_up.bwd"], ops["moe.clamp_halves.bwd"]
    assert (g.kind, u.kind, halves.kind) == ("elementwise_bwd", "elementwise_bwd", "concat")
    assert g.attrs["aten_fallback"] and u.attrs["aten_fallback"]
    # each clamp's gradient reads the output gradient and the clamped input (the mask): two reads of 4 x 4,096 x
    # 2,880 bf16 values, one write
    assert [t.shape for t in g.inputs] == [(4, 4096, 2880), (4, 4096, 2880)]
    assert halves.outputs[0].shape == (4, 4096, 5760)


def test_moe_act_recompute_runs_the_clamps_and_their_sync_again():
    sg = _graph(recompute="modules:layernorm,moe_act")
    ops = _by_name(sg)
    for name in ("moe.clamp_gate@recompute", "moe.clamp_up@recompute", "moe.clamp_cat@recompute"):
        assert ops[name].attrs["aten_fallback"]
    assert ops["moe.clamp_cat@recompute"].attrs["host_sync"] is True
    syncs = [name for name, op in ops.items() if op.attrs.get("host_sync")]
    assert syncs == ["moe.clamp_cat", "moe.clamp_cat@recompute"]


def test_no_clamps_for_other_models_or_stacks():
    assert not any("clamp" in name for name in _by_name(_graph(framework="")))
    cfg = dataclasses.replace(zoo_config("gpt-oss-20b"), layers=1)  # a config object: no family, no clamps
    (sg,) = plan_graphs(cfg, ParallelPlan(microbatch=1, ep=8, dp=8), seq=4096, train=True, framework="megatron-core")
    assert not any("clamp" in op.name for op in sg.graph.ops)
