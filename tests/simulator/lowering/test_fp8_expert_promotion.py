"""Transformer Engine's per-tensor fp8 recipes run GroupedLinear's input- and weight-gradient expert GEMMs without
fast accumulation (``general_grouped_gemm(..., use_split_accumulator=_2X_ACC_DGRAD / _2X_ACC_WGRAD)``), so the
model's per-expert GEMMs pay the FP32 promotions there as the linears do; the forward keeps fast accumulation."""

from __future__ import annotations

import dataclasses

import pytest

import workloads  # noqa: F401  (installs the semantics registry)
from simulator.engines.analytical import EvalOptions
from simulator.hardware import load_hardware
from simulator.lowering.common import LoweringContext
from simulator.lowering.gpu import _grouped_gemm_bwd, fp8_promotion
from workloads.ir import Attrs, GraphBuilder, Op
from workloads.precision import _fp8_experts

# Qwen3-30B-A3B's experts at EP 8 and micro-batch 1 (train-059): 16 local experts of 2,048 rows, d 2,048, fc1 1,536
LE, ROWS, D, N1 = 16, 2048, 2048, 1536


def _op(kind: str, name: str) -> Op:
    b = GraphBuilder("moe", dtype="bf16")
    if kind == "grouped_matmul":
        ins = [b.input("x", (LE, ROWS, D)), b.weight("w", (LE, D, N1))]
    else:  # the input gradient dy[rows, N1] @ w^T
        ins = [b.input("dy", (LE, ROWS, N1)), b.weight("w", (LE, D, N1))]
    b.op(kind, ins, name=name, tokens=LE * ROWS, experts_active=LE, per_expert_streams=4)
    return b.build({"phase": "forward"}).ops[0]


def _te(op: Op, recipe: str) -> Op:
    ops: list[Op] = []
    assert _fp8_experts(op, recipe, ops)
    return ops[0]


@pytest.mark.parametrize("recipe", ["delayed", "current"])
def test_te_backward_expert_gemms_split_accumulate(recipe):
    fwd = _te(_op("grouped_matmul", "layers.0.moe.experts_in"), recipe)
    bwd = _te(_op("grouped_matmul_bwd_data", "layers.0.moe.experts_in.bwd_data"), recipe)
    assert fwd.attrs.get("fp8_accumulation") is None
    assert bwd.attrs["fp8_accumulation"] == "split"


def test_mxfp8_expert_gemms_keep_fast_accumulation():
    bwd = _te(_op("grouped_matmul_bwd_data", "layers.0.moe.experts_in.bwd_data"), "mxfp8")
    assert bwd.attrs.get("fp8_accumulation") is None


def test_split_expert_gemms_pay_the_promotions_on_an_h100():
    # 16 experts' [2,048 x 2,048] outputs over K = 1,536 (12 intervals of 128): 16 x 2048^2 x 12 FP32 adds,
    # one FADD issue slot each: 805M / (66.9 TFLOP/s / 2 x 0.99) = 24.3 us, serial with the MMAs
    ctx = LoweringContext(load_hardware("h100-sxm5-80gb"), EvalOptions())
    split = _te(_op("grouped_matmul_bwd_data", "layers.0.moe.experts_in.bwd_data"), "current")
    fast = dataclasses.replace(split, attrs=Attrs({k: v for k, v in split.attrs.items() if k != "fp8_accumulation"}))
    a, b = _grouped_gemm_bwd(split, ctx), _grouped_gemm_bwd(fast, ctx)
    adds = 16.0 * ROWS * D * 12
    assert fp8_promotion(ctx, LE, ROWS, D, N1) == pytest.approx((adds / (66.9e12 / 2 * 0.99), adds))
    assert (a.compute_s - b.compute_s) * 1e6 == pytest.approx(24.3, abs=0.05)
    assert a.vector_flops - b.vector_flops == pytest.approx(adds)
    assert "fp8 split accumulation" in a.notes and "fp8 split accumulation" not in b.notes
