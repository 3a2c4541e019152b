"""A MaxText policy keeps a tensor-parallel projection's reduced output (workloads.recompute.at_reduction).

MaxText tags ``out_proj`` and ``mlpwo`` on the value its einsum returns and XLA's partitioner reduces a dot's partial
sums where it is produced, so under tensor parallelism the kept (or offloaded) tensor is the reduce-scatter's output,
``1/tp`` of the matmul's, and the backward runs no second reduce-scatter to rebuild it. The experts' ``mlpwo`` is
tagged inside MaxText's MoE ``shard_map`` before its explicit ``psum_scatter``, so a grouped matmul keeps its own
per-chip output. Hand counts on small zoo decoders and on the Llama 4 Maverick row (train-134).
"""

from __future__ import annotations

import dataclasses
import warnings

import pytest

from workloads.parallel import ParallelPlan, plan_graphs
from workloads.zoo.transformer import zoo_config


def _step(model: str, tp: int, policy: str, seq: int = 8):
    cfg = dataclasses.replace(zoo_config(model), layers=2)
    plan = ParallelPlan(tp=tp, dp=1, sequence_parallel=tp > 1, microbatch=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return plan_graphs(cfg, plan, train=True, seq=seq, recompute=policy, dtype="bf16")[0].graph


def test_offloaded_out_proj_is_the_reduce_scatter_output_under_tp():
    g = _step("gpt2-small", 2, "custom:out_proj=offload")
    assert g.meta["offloaded_activations"] == ("layers.0.attn.out_reduce_scatter", "layers.1.attn.out_reduce_scatter")
    # kept, so the backward does not reduce-scatter the recomputed projection again
    assert not [op.name for op in g.ops if op.kind == "reduce_scatter" and "@recompute" in op.name
                and "attn.out" in op.name]


def test_offloaded_out_proj_is_the_matmul_output_without_tp():
    g = _step("gpt2-small", 1, "custom:out_proj=offload")
    assert g.meta["offloaded_activations"] == ("layers.0.attn.out", "layers.1.attn.out")


def test_expert_down_projection_keeps_its_per_chip_partial_sums():
    # the experts' mlpwo is tagged before moe.py's psum_scatter: the grouped matmul's own output stays offloaded
    g = _step("llama4-maverick-17b-128e", 2, "custom:moe_mlpwo=offload,out_proj=offload", seq=64)
    off = g.meta["offloaded_activations"]
    assert "layers.1.moe.experts_out" in off and "layers.1.moe.experts_reduce_scatter" not in off
    assert "layers.1.attn.out_reduce_scatter" in off and "layers.1.attn.out" not in off


def test_maverick_row_offloads_the_reduced_out_proj():
    # train-134: 16 sequences of 8192 tokens per tensor-parallel group of 4 chips, d 5120, 40/8 heads of 128.
    # Per layer and chip: decoder_layer_input (the residual, sequence-sharded) 16 x 2048 x 5120 x 2 B, q/k/v
    # 16 x 8192 x (1280 + 256 + 256) x 2 B, out_proj reduced 16 x 2048 x 5120 x 2 B; 48 layers
    from simulator.hardware import load_hardware
    from simulator.parallel.compose import evaluate_plan
    from simulator.parallel.training_validation import (
        _plan,
        load_training_rows,
        row_options,
        stated_recipe,
    )

    row = next(r for r in load_training_rows() if r.id == "train-134")
    recipe = stated_recipe(row)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = evaluate_plan(row["model"], load_hardware("tpu-v5p-256"), _plan(row, 32),
                            row_options(row, recipe["framework"]), train=True, seq=8192, dtype="bf16", **recipe)
    per_layer = 16 * 2048 * 5120 * 2 + 16 * 8192 * 1792 * 2 + 16 * 2048 * 5120 * 2
    assert res.stages[0].memory_breakdown()["host.activations_per_microbatch"] == pytest.approx(48 * per_layer)
