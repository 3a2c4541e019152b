"""Transformer Engine 2.9's MXFP8 GEMMs swizzle both operands' block scales at every call: two kernels a dense
GEMM, two per 64 tensors a grouped one (transformer_engine/pytorch/csrc/extensions/gemm.cpp, csrc/util.cpp,
common/swizzle/swizzle.cu @ v2.9)."""

from __future__ import annotations

import dataclasses

import pytest

import workloads  # noqa: F401  (installs the semantics registry)
from hwmodels import gpu as gpu_model
from simulator.engines.analytical import EvalOptions
from simulator.hardware import load_hardware
from simulator.lowering.common import LoweringContext, lower
from simulator.lowering.gpu import PER_EXPERT_RULE, SCALE_SWIZZLE_SUFFIX, library_launches
from simulator.parallel.host_sync import sync_interval_excess
from workloads.ir import Attrs, GraphBuilder, Op
from workloads.precision import SCALE_SWIZZLE_ATTR

# Qwen3-30B-A3B at EP 8, micro-batch 1 (train-059): 16 local experts of 2,048 rows, d 2,048, fc1 2 x 768 wide
LE, ROWS, D, N1 = 16, 2048, 2048, 1536


@pytest.fixture(scope="module")
def b200():
    return load_hardware("b200")


def _ctx(dev) -> LoweringContext:
    return LoweringContext(dev, EvalOptions())


def _with(op: Op, **attrs) -> Op:
    return Op(op.name, op.kind, op.inputs, op.outputs, Attrs({**dict(op.attrs), **attrs}), op.group)


def _dense() -> Op:
    """The query/key/value projection of a 4,096-token microbatch: [4096, 2048] @ [2048, 4608], in MXFP8."""
    b = GraphBuilder("dense", dtype="bf16")
    b.op("matmul", [b.input("x", (4096, D)), b.weight("w_qkv", (D, 4608))], name="layers.0.attn.qkv")
    return _with(b.build({"phase": "forward"}).ops[0], compute_dtype="fp8_e4m3")


def _experts(le: int = LE) -> Op:
    b = GraphBuilder("moe", dtype="bf16")
    x = b.input("buf", (le, ROWS, D))
    b.op("grouped_matmul", [x, b.weight("experts.w_in", (le, D, N1))], name="layers.0.moe.experts_in",
         tokens=le * ROWS, experts_active=le, per_expert_streams=4)
    return _with(b.build({"phase": "forward"}).ops[0], compute_dtype="fp8_e4m3", fp8_quantize="mxfp8")


def _swizzles(ctx: LoweringContext, *elems: float) -> tuple[float, float]:
    """(work seconds, DRAM bytes) of one swizzle per operand: its E8M0 scales (1 byte per 32 elements) read
    and written (the engine adds each kernel's ``efficiency.kernel_device_time_s`` on top)."""
    sts = [gpu_model.streaming(x / 32, x / 32, 0.0, ctx.params("fp32")) for x in elems]
    secs = sum(max(float(s.compute_s), float(s.memory_s)) + float(s.latency_s) for s in sts)
    return secs, sum(float(s.dram_bytes) for s in sts)


def test_a_dense_mxfp8_gemm_launches_two_swizzles_from_its_te_call(b200):
    ctx = _ctx(b200)
    plain = lower(_dense(), ctx)
    swz = lower(_with(_dense(), **{SCALE_SWIZZLE_ATTR: True}), ctx)
    assert (plain.kernels, swz.kernels) == (1, 3)
    assert swz.rule == plain.rule + SCALE_SWIZZLE_SUFFIX
    # A's scales 4,096 x 2,048 / 32 = 262,144 bytes, B's 2,048 x 4,608 / 32 = 294,912 bytes
    secs, dram = _swizzles(ctx, 4096 * D, D * 4608)
    assert swz.dram_bytes - plain.dram_bytes == pytest.approx(dram)
    assert swz.device_time_s - plain.device_time_s == pytest.approx(secs)
    # launched from C++ inside the GEMM's one framework op: 2 library launches, not framework ops
    assert library_launches(swz.rule, swz.kernels) == 2 and library_launches(plain.rule, 1) == 0
    rec = [type("R", (), dict(time_s=0.0, kernels=3, rule=swz.rule))()]
    f, _ = sync_interval_excess(rec + rec, [0], 2, 20e-6, 0.0, launch_s=5e-6)
    assert f == pytest.approx(2 * (20e-6 + 2 * 5e-6))


@pytest.mark.parametrize("le, launches", [(16, 2), (64, 2), (128, 4)])
def test_a_grouped_mxfp8_gemm_swizzles_two_lists_of_up_to_64_tensors_a_kernel(b200, le, launches):
    ctx = _ctx(b200)
    plain = lower(_experts(le), ctx)
    swz = lower(_with(_experts(le), **{SCALE_SWIZZLE_ATTR: True}), ctx)
    # 16 GEMMs + 16 split quantisations + the row padding copy, then the swizzles of the A and B lists
    assert plain.kernels == 2 * le + 1 and swz.kernels == plain.kernels + launches
    assert swz.rule == plain.rule == PER_EXPERT_RULE + "+fp8-quant"
    # every kernel but the GEMM call's own and split_quantize's is a library launch
    assert library_launches(swz.rule, swz.kernels) == 2 * le - 1 + launches
    secs, dram = _swizzles(ctx, le * ROWS * D, le * D * N1)
    assert swz.dram_bytes - plain.dram_bytes == pytest.approx(dram)
    assert swz.device_time_s - plain.device_time_s == pytest.approx(secs)


def _graph_ops(recipe: str) -> dict[str, Op]:
    from workloads.parallel import ParallelPlan, plan_graphs
    from workloads.zoo.transformer import zoo_config

    cfg = dataclasses.replace(zoo_config("qwen3-30b-a3b"), layers=2)
    (sg,) = plan_graphs(cfg, ParallelPlan(microbatch=1), seq=512, train=True, dtype="bf16",
                        framework="megatron-core", fp8_linears=recipe)
    return {op.name: op for op in sg.graph.ops if op.name.startswith("layers.0.")}


def test_only_mxfp8_marks_the_te_gemms():
    mx = _graph_ops("mxfp8")
    marked = {n for n, op in mx.items() if op.attrs.get(SCALE_SWIZZLE_ATTR)}
    experts = {f"layers.0.moe.experts_{s}{b}" for s in ("in", "out") for b in ("", ".bwd_data", ".bwd_weight")}
    assert experts <= marked  # every expert GEMM, the weight gradient's included
    # every marked op is an fp8 GEMM, and every fp8 GEMM of the layer is marked
    gemms = ("matmul", "grouped_matmul", "grouped_matmul_bwd_data", "grouped_matmul_bwd_weight")
    fp8_gemms = {n for n, op in mx.items() if op.kind in gemms and op.dtype.value == "fp8_e4m3"}
    assert marked == fp8_gemms
    assert not any(op.attrs.get(SCALE_SWIZZLE_ATTR) for op in _graph_ops("current").values())
