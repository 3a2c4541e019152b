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


def test_clamp_gradients_are_pytorchs_clamp_backward_kernels():
    ops = _by_name(_graph())
    grads = [name for name in ops if name.startswith(("moe.clamp_gate.bwd", "moe.clamp_up.bwd"))]
    # clamp_backward: a bool mask per clamped side, their logical_and_ with both sides, then where(mask, grad, 0)
    assert sorted(grads) == ["moe.clamp_gate.bwd", "moe.clamp_gate.bwd_le", "moe.clamp_up.bwd", "moe.clamp_up.bwd_and",
                             "moe.clamp_up.bwd_ge", "moe.clamp_up.bwd_le"]
    assert all(ops[n].kind == "elementwise_bwd" and ops[n].attrs["aten_fallback"] for n in grads)
    le, ge, both = ops["moe.clamp_gate.bwd_le"], ops["moe.clamp_up.bwd_ge"], ops["moe.clamp_up.bwd_and"]
    assert (le.attrs["op"], ge.attrs["op"], both.attrs["op"]) == ("le", "ge", "logical_and")
    # the comparisons read the clamped input (4 x 4,096 x 2,880 bf16) and write one byte an element
    assert le.inputs[0] is ops["moe.clamp_halves"].outputs[0] and ge.inputs[0] is ops["moe.clamp_halves"].outputs[1]
    assert le.outputs[0].dtype.value == "bool" and le.outputs[0].nbytes == 4 * 4096 * 2880
    assert both.inputs == (ge.outputs[0], ops["moe.clamp_up.bwd_le"].outputs[0])
    where = ops["moe.clamp_up.bwd"]
    assert where.attrs["op"] == "where" and where.inputs[0] is both.outputs[0]
    assert where.outputs[0].dtype.value == "bf16" and where.outputs[0].shape == (4, 4096, 2880)
    # the chunk's gradient concatenates the two halves' gradients
    halves = ops["moe.clamp_halves.bwd"]
    assert halves.kind == "concat" and halves.outputs[0].shape == (4, 4096, 5760)


def test_clip_without_bounds_keeps_one_gradient_kernel_and_bad_bounds_are_located():
    import pytest

    from workloads.ir import GraphBuilder, GraphError
    from workloads.training import training_graph

    def step(**attrs):
        b = GraphBuilder("c", dtype="bf16")
        y = b.op("matmul", [b.input("x", (4, 8)), b.weight("w", (8, 8))], name="mm")
        y = b.op("elementwise", [y], name="clamp", op="clip", **attrs)
        b.op("mse_loss", [y, b.input("t", (4, 8))], name="loss")
        return training_graph(b.build({"phase": "train"}))

    kinds = [op.attrs.get("op") for op in step().ops if op.name.startswith("clamp.bwd")]
    assert kinds == ["clip"]
    with pytest.raises(GraphError, match=r"op 'clamp' \(elementwise clip\): bounds: got 'upper'; expected one of "
                                         r"min, max, both"):
        step(bounds="upper")


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
