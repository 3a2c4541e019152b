"""Megatron-Core recipe facts in the plan and its memory: the gradient buffer's dtype (``grad_reduce_dtype``),
TE fp8 parameters (``fp8_param``) and what Megatron-Core's fused SwiGLU and MoE experts do not keep for the
backward; hand-computed bytes on Llama-3-8B and Qwen3-30B-A3B shapes."""

from __future__ import annotations

import dataclasses

import pytest

from simulator.hardware import load_hardware
from simulator.parallel.compose import _fused_unsaved, evaluate_plan
from workloads.parallel import ParallelPlan, PlanError, plan_graphs
from workloads.zoo.transformer import zoo_config

#: Llama-3-8B: 8.03e9 parameters; its linear layers, 32 x (4096 x 6144 + 4096 x 4096 + 4096 x 28672 + 14336 x 4096)
LINEAR = 32 * (4096 * 6144 + 4096 * 4096 + 4096 * 28672 + 14336 * 4096)


def test_new_plan_fields_read_as_before_at_their_defaults_and_are_checked() -> None:
    plain = ParallelPlan(dp=8, microbatch=1, global_batch=8)
    assert "grad_reduce_dtype" not in plain.to_json() and "fp8_param" not in plain.to_json()
    stated = ParallelPlan(dp=8, microbatch=1, global_batch=8, grad_reduce_dtype="bf16", fp8_param=True)
    assert stated.to_json()["grad_reduce_dtype"] == "bf16" and stated.to_json()["fp8_param"] is True
    with pytest.raises(PlanError, match=r"grad_reduce_dtype: got 'bf61'; expected fp32 or bf16.*'bf16'"):
        ParallelPlan(grad_reduce_dtype="bf61")
    with pytest.raises(PlanError, match="fp8_param: got 'yes'; expected true or false"):
        ParallelPlan(fp8_param="yes")  # type: ignore[arg-type]


def _memory(plan: ParallelPlan, **kw) -> dict[str, float]:
    res = evaluate_plan("llama-3-8b", load_hardware("dgx-b200"), plan, train=True, seq=1024, recompute="full", **kw)
    return res.to_json()["memory_breakdown"]


def test_bf16_gradient_buffer_and_fp8_parameters_on_a_distributed_optimizer() -> None:
    base = ParallelPlan(dp=8, microbatch=1, global_batch=8, zero_stage=1)
    fp32 = _memory(base, fp8_linears="current")
    bf16 = _memory(dataclasses.replace(base, grad_reduce_dtype="bf16", fp8_param=True), fp8_linears="current")
    n = fp32["parameters"] / 2  # bf16 weights: 2 bytes per parameter
    # Megatron-Core's main gradients: 4 bytes per parameter with grad_reduce_in_fp32, 2 without (ZeRO-1 keeps
    # them whole on every rank)
    assert fp32["gradients"] == pytest.approx(4 * n) and bf16["gradients"] == pytest.approx(2 * n)
    # TE's fp8 weight and its transpose, 2 bytes per linear parameter, cached beside the bf16 weights; fp8
    # parameters are those copies themselves
    assert fp32["buffers.fp8_weight_cache"] == 2 * LINEAR and bf16["buffers.fp8_weight_cache"] == 0.0
    assert fp32["total"] - bf16["total"] == pytest.approx(2 * n + 2 * LINEAR, rel=1e-3)
    explicit = _memory(dataclasses.replace(base, grad_reduce_dtype="fp32"), fp8_linears="current")
    assert explicit["gradients"] == fp32["gradients"]


def test_megatron_fused_swiglu_keeps_its_input_only() -> None:
    cfg = dataclasses.replace(zoo_config("llama-3-8b"), layers=2)
    mc = plan_graphs(cfg, ParallelPlan(), train=True, seq=512, framework="megatron-core")[0]
    # the SiLU output of each layer's gated MLP: 512 tokens x 14336 x 2 bytes, 2 layers
    assert _fused_unsaved(mc) == (2 * 512 * 14336 * 2.0, 2 * 512 * 14336 * 2.0)
    eager = plan_graphs(cfg, ParallelPlan(), train=True, seq=512)[0]
    assert _fused_unsaved(eager) == (0.0, 0.0)  # another stack keeps the unfused ops' tensors
    full = plan_graphs(cfg, ParallelPlan(), train=True, seq=512, framework="megatron-core", recompute="full")[0]
    assert _fused_unsaved(full)[0] == 0.0  # recomputed layers keep nothing of it anyway


def test_megatron_moe_experts_take_the_router_probabilities() -> None:
    cfg = dataclasses.replace(zoo_config("qwen3-30b-a3b"), layers=1)
    sg = plan_graphs(cfg, ParallelPlan(), train=True, seq=256, framework="megatron-core")[0]
    # 256 tokens x top-8 routed rows x 2048 (the experts' outputs at the combine) + 256 x 8 x 768 (SiLU), 2 bytes
    silu = 256 * 8 * 768 * 2.0
    combine = 256 * 8 * 2048 * 2.0
    assert _fused_unsaved(sg)[0] == pytest.approx(silu + combine)
