"""Transformer Engine's per-tensor fp8 recipes run the forward GEMM with fast accumulation and the input- and
weight-gradient GEMMs with the split accumulator (TE ``_2X_ACC_FPROP = False``, ``_2X_ACC_DGRAD = True``,
``_2X_ACC_WGRAD = True``; ``Float8CurrentScaling.fp8_gemm_dgrad/wgrad = MMParams(use_split_accumulator=True)``),
so on Hopper their backward GEMMs pay the FP32 promotions, as torchao's do; MXFP8 (Blackwell) is left as it was."""

from __future__ import annotations

import dataclasses

import pytest

from simulator.engines.analytical import EvalOptions
from simulator.hardware import load_hardware
from simulator.lowering.common import LoweringContext
from simulator.lowering.gpu import _gemm
from workloads.ir import Attrs, OpGraph
from workloads.parallel import ParallelPlan, plan_graphs
from workloads.zoo.transformer import zoo_config

CFG = dataclasses.replace(zoo_config("llama-3-8b"), layers=1)


def _graph(recipe: str) -> OpGraph:
    return plan_graphs(CFG, ParallelPlan(), train=True, seq=2048, fp8_linears=recipe)[0].graph


def _accumulation(recipe: str) -> dict[str, str | None]:
    return {op.name: op.attrs.get("fp8_accumulation") for op in _graph(recipe).ops if op.attrs.get("compute_dtype")}


@pytest.mark.parametrize("recipe", ["delayed", "current"])
def test_te_backward_gemms_use_the_split_accumulator(recipe: str) -> None:
    acc = _accumulation(recipe)
    assert acc["layers.0.mlp.down"] is None  # fprop: fast accumulation
    assert acc["layers.0.mlp.down.bwd_a"] == acc["layers.0.mlp.down.bwd_b"] == "split"
    assert acc["layers.0.attn.qkv.bwd_b"] == "split"


def test_mxfp8_keeps_fast_accumulation() -> None:
    assert all(v is None for v in _accumulation("mxfp8").values())


def test_split_backward_gemm_pays_the_promotions_on_an_h100() -> None:
    # down projection's weight gradient: a 14336 x 4096 output over K = 2048 tokens: 14336 x 4096 x (2048 / 128)
    # FP32 adds, one per output element per 128 K elements (efficiency.fp8_promotion_interval), one FP32 lane slot each
    # (the vector rate counts an FMA as 2 FLOPs: simulator.lowering.gpu.FP32_FLOPS_PER_LANE_OP)
    dev = load_hardware("h100-sxm5-80gb")
    ctx = LoweringContext(dev, EvalOptions())
    op = next(o for o in _graph("current").ops if o.name == "layers.0.mlp.down.bwd_b")
    fast = dataclasses.replace(op, attrs=Attrs({k: v for k, v in op.attrs.items() if k != "fp8_accumulation"}))
    split_cost, fast_cost = _gemm(op, ctx), _gemm(fast, ctx)
    p = ctx.params("fp32")
    adds = 14336.0 * 4096 * (2048 / 128)
    assert split_cost.compute_s - fast_cost.compute_s == pytest.approx(adds / (p.vector_flops_per_s / 2 * p.vector_fraction))  # one FADD issue slot each
    assert "fp8 split accumulation" in split_cost.notes and "fp8 split accumulation" not in fast_cost.notes

