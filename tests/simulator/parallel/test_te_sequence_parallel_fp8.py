"""Transformer Engine's current scaling under sequence parallelism (release_v2.9): a column-parallel input and a
row-parallel output gradient are quantised on the shard, their amax all-reduced over the TP group
(``_customize_quantizers_float8_current_scaling``), and all-gathered in fp8 (``gather_along_first_dim(...,
quantizer=...)``); the backward re-gathers the saved fp8 shard and adds the columnwise usage after the gather."""

from __future__ import annotations

import dataclasses

from simulator.engines.analytical import EvalOptions, evaluate
from simulator.hardware import load_hardware
from workloads.dtypes import DType
from workloads.ir import Op, OpGraph
from workloads.parallel import ParallelPlan, plan_graphs
from workloads.precision import QUANTIZE_OUTPUT_ATTR, TE_NORM_FUSED_ATTR
from workloads.zoo.transformer import zoo_config

CFG = dataclasses.replace(zoo_config("llama-3-8b"), layers=2)


def _graph(recipe: str = "current") -> OpGraph:
    plan = ParallelPlan(tp=2, sequence_parallel=True, fp8_param=True)
    return plan_graphs(CFG, plan, train=True, seq=256, fp8_linears=recipe, framework="megatron-core")[0].graph


def _op(g: OpGraph, name: str) -> Op:
    return next(op for op in g.ops if op.name == name)


def test_the_norm_output_shard_is_quantised_with_a_tp_amax_and_gathered_in_fp8() -> None:
    g = _graph()
    amax = _op(g, "layers.0.attn.sp_gather.amax_shard")
    assert amax.inputs[0].shape == (1, 128, 4096) and amax.attrs[TE_NORM_FUSED_ATTR] is True  # in the norm kernel
    assert _op(g, "layers.0.attn.sp_gather.amax_group").attrs["group_size"] == 2
    cast = _op(g, "layers.0.attn.sp_gather.cast_shard")
    gather = _op(g, "layers.0.attn.sp_gather")
    assert gather.inputs[0] == cast.outputs[0] and cast.outputs[0].dtype is DType.FP8_E4M3
    assert gather.outputs[0].shape == (1, 256, 4096) and gather.outputs[0].dtype is DType.FP8_E4M3
    # the forward GEMM reads the gathered fp8 tensor; no cast of the gathered 16-bit tensor is left
    assert _op(g, "layers.0.attn.qkv").inputs[0] == gather.outputs[0]
    assert not any(op.name.startswith("layers.0.attn.qkv.") and op.name.endswith("_0") and ".bwd_" not in op.name
                   for op in g.ops)


def test_the_backward_regathers_the_saved_fp8_shard_and_transposes_after_the_gather() -> None:
    g = _graph()
    regather = _op(g, "layers.0.attn.sp_gather@recompute")
    assert regather.inputs[0] == _op(g, "layers.0.attn.sp_gather.cast_shard").outputs[0]
    assert not any(op.name.startswith("layers.0.attn.sp_gather@recompute.") for op in g.ops)  # nothing re-quantised
    t = _op(g, "layers.0.attn.qkv.bwd_b.transpose_0")
    assert t.attrs[QUANTIZE_OUTPUT_ATTR] == "transpose" and t.inputs[0].shape == (256, 4096)
    assert not any(op.name.startswith("layers.0.attn.qkv.bwd_b.") and "amax" in op.name for op in g.ops)


def test_the_row_parallel_output_gradient_is_quantised_on_the_shard_once_for_both_gemms() -> None:
    g = _graph()
    dy = _op(g, "layers.0.attn.out_reduce_scatter.bwd")
    assert dy.inputs[0].shape == (1, 128, 4096) and dy.outputs[0].dtype is DType.FP8_E4M3
    assert _op(g, "layers.0.attn.out_reduce_scatter.bwd.amax_group").kind == "all_reduce"
    assert _op(g, "layers.0.attn.out.bwd_a").inputs[0] == dy.outputs[0]
    assert not any(op.name.startswith("layers.0.attn.out.bwd_") and ("amax" in op.name or "cast" in op.name)
                   for op in g.ops)


def test_the_transposed_copy_after_the_gather_costs_its_bytes_on_h100_and_nothing_on_b200() -> None:
    g = _graph()
    opts = EvalOptions(fusion=True)
    name = "layers.0.attn.qkv.bwd_b.transpose_0"
    h100 = {r.name: r for r in evaluate(g, load_hardware("h100-sxm5-80gb"), opts).records}[name]
    b200 = {r.name: r for r in evaluate(g, load_hardware("b200"), opts).records}[name]
    assert h100.dram_bytes == 2 * 256 * 4096  # the gathered fp8 tensor read, its transpose written
    assert b200.time_s == 0.0


def test_delayed_scaling_and_mxfp8_keep_the_16_bit_gather() -> None:
    for recipe in ("delayed", "mxfp8"):
        assert _op(_graph(recipe), "layers.0.attn.sp_gather").outputs[0].dtype is DType.BF16
