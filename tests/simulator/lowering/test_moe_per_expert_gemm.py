"""MoE grouped GEMMs as Transformer Engine's GroupedLinear runs them under Megatron-Core: one GEMM kernel per
local expert on 4 streams, the per-expert fp8 quantisation and Megatron-Core's fp8 row padding."""

from __future__ import annotations

import dataclasses

import pytest

import workloads  # noqa: F401  (installs the semantics registry)
from hwmodels import gpu as gpu_model
from simulator.engines.analytical import EvalOptions, host_floor_s
from simulator.hardware import load_hardware
from simulator.lowering.common import LoweringContext, lower
from simulator.lowering.gpu import (
    PER_EXPERT_RULE,
    SPLIT_QUANTIZE_KERNELS,
    _gemm_cost,
    library_launches,
)
from simulator.parallel.host_sync import sync_interval_excess
from workloads.frameworks import PROFILES, get_profile
from workloads.ir import Attrs, GraphBuilder, Op

# Qwen3-30B-A3B's experts at EP 8 and micro-batch 1 (train-059): 16 local experts of 2,048 rows each,
# d 2,048, fc1 width 2 x 768
LE, ROWS, D, N1 = 16, 2048, 2048, 1536


def _experts(le: int = LE, rows: int = ROWS, **attrs) -> Op:
    b = GraphBuilder("moe", dtype="bf16")
    x = b.input("buf", (le, rows, D))
    b.op("grouped_matmul", [x, b.weight("experts.w_in", (le, D, N1))], name="layers.0.moe.experts_in",
         tokens=le * rows, experts_active=le, **attrs)
    return b.build({"phase": "forward"}).ops[0]


@pytest.fixture(scope="module")
def b200():
    return load_hardware("b200")


def _ctx(dev) -> LoweringContext:
    return LoweringContext(dev, EvalOptions())


def _bwd_data(op: Op) -> Op:
    """The input-gradient GEMM of ``op`` (dy rows x N1 @ w^T), as the training derivation emits it."""
    b = GraphBuilder("moe_bwd", dtype="bf16")
    dy = b.input("dy", (LE, ROWS, N1))
    b.op("grouped_matmul_bwd_data", [dy, b.weight("experts.w_in", (LE, D, N1))], name=f"{op.name}.bwd_data",
         **{k: v for k, v in op.attrs.items()})
    return b.build({"phase": "backward"}).ops[0]


def test_megatron_core_profile_runs_one_gemm_per_expert_on_four_streams():
    mc = get_profile("megatron-core")
    assert (mc.grouped_gemm, mc.grouped_gemm_streams) == ("per_expert", 4)
    assert "multi_stream_cublas_gemm" in mc.grouped_gemm_source and mc.grouped_gemm_source in mc.sources
    # every other stack keeps the one fused kernel (MaxText's Megablox gmm, torch stacks)
    assert {p.name for p in PROFILES.values() if p.grouped_gemm != "fused"} == {"megatron-core"}


def test_per_expert_gemms_are_rounds_of_four_concurrent_gemms(b200):
    ctx = _ctx(b200)
    fused = lower(_experts(), ctx)
    per = lower(_experts(per_expert_streams=4), ctx)
    four = _gemm_cost(ctx, ROWS, N1, D, batch=4, dtype="bf16", in_bytes=2, out_bytes=2, b_shared=False,
                      rule=PER_EXPERT_RULE)
    assert (fused.kernels, per.kernels) == (1, 16)
    assert per.rule == PER_EXPERT_RULE and fused.rule == "grouped-gemm"
    # 16 experts on 4 streams: 4 rounds, each a batch of 4 GEMMs sharing the SMs
    assert per.compute_s == pytest.approx(4 * four.compute_s)
    assert per.memory_s == pytest.approx(4 * four.memory_s)
    assert per.latency_s == pytest.approx(4 * four.latency_s)
    assert per.matrix_flops == fused.matrix_flops == 2.0 * LE * ROWS * N1 * D
    # each round's waves are quantised on their own: never faster than the one batched kernel
    assert per.device_time_s >= fused.device_time_s
    assert "16 GEMM kernels (one per expert) on 4 streams, 4 rounds" in per.notes


def test_a_partial_last_round_is_a_smaller_batch(b200):
    ctx = _ctx(b200)
    per = lower(_experts(le=6, per_expert_streams=4), ctx)
    kw = dict(dtype="bf16", in_bytes=2, out_bytes=2, b_shared=False, rule=PER_EXPERT_RULE)
    four, two = (_gemm_cost(ctx, ROWS, N1, D, batch=b, **kw) for b in (4, 2))
    assert per.kernels == 6
    assert per.compute_s == pytest.approx(four.compute_s + two.compute_s)
    assert per.memory_s == pytest.approx(four.memory_s + two.memory_s)


def test_expert_launches_are_library_launches_on_the_host(b200):
    eff = b200.efficiency
    # one framework op (TE's general_grouped_gemm call) launches the 16 GEMMs from C++: 15 library launches
    assert library_launches(PER_EXPERT_RULE, 16) == 15
    assert library_launches(PER_EXPERT_RULE + "+fp8-quant", 33) == 31  # the GEMM call and split_quantize
    assert library_launches("grouped-gemm", 1) == 0 and library_launches("implicit-gemm+nchw") == 3
    # an eager stack's host floor: one framework op plus 15 launches at the launch floor
    eager = dataclasses.replace(EvalOptions(), eager_framework=True)
    fw = eff.framework_op_overhead_s
    assert host_floor_s(PER_EXPERT_RULE, 16, fw, eff, eager) == pytest.approx(fw + 15 * eff.launch_overhead_s)
    # in a host-sync interval: 20 us for the framework op, 5 us for each other launch (catalog defaults)
    rec = [type("R", (), dict(time_s=0.0, kernels=16, rule=PER_EXPERT_RULE))(),
           type("R", (), dict(time_s=0.0, kernels=1, rule="gemm"))()]
    f, _ = sync_interval_excess(rec, [1], 2, 20e-6, 0.0, launch_s=5e-6)
    assert f == pytest.approx(20e-6 + 15 * 5e-6 + 20e-6)


@pytest.mark.parametrize("recipe", ["mxfp8", "current", "delayed"])
def test_fp8_experts_quantise_their_operand_per_expert_split(b200, recipe):
    ctx = _ctx(b200)
    plain = _experts(per_expert_streams=4)
    fp8 = Op(plain.name, plain.kind, plain.inputs, plain.outputs,
             Attrs({**dict(plain.attrs), "compute_dtype": "fp8_e4m3", "fp8_quantize": recipe}), plain.group)
    gemm_only = Op(plain.name, plain.kind, plain.inputs, plain.outputs,
                   Attrs({**dict(plain.attrs), "compute_dtype": "fp8_e4m3"}), plain.group)
    c, g = lower(fp8, ctx), lower(gemm_only, ctx)
    per = SPLIT_QUANTIZE_KERNELS[recipe]
    quant_kernels = per if recipe == "delayed" else per * LE  # delayed: one fused multi_cast_transpose
    assert c.kernels == g.kernels + quant_kernels == LE + 1 + quant_kernels  # + the row padding copy
    assert c.rule == PER_EXPERT_RULE + "+fp8-quant"
    # the quantisation: 2-byte rows read (twice under current scaling: the amax first), rowwise and
    # columnwise fp8 copies written, MXFP8's 1-byte E8M0 scale per 32 elements in each copy; one kernel (chain)
    # per expert split, each with its own fixed costs, except delayed scaling's one fused kernel; MXFP8's kernel
    # at the B200's efficiency.mxfp8_quantize_stream_fraction (0.800) of the streaming rate
    elems = LE * ROWS * D
    splits = 1 if recipe == "delayed" else LE
    reads = (2 if recipe == "current" else 1) * 2 * elems
    scales = elems / 32 * 2 if recipe == "mxfp8" else 8 * LE
    st = gpu_model.streaming(reads / splits, (2 * elems + scales) / splits, 2 * elems / splits, ctx.params("fp32"))
    frac = 0.800 if recipe == "mxfp8" else 1.0
    assert c.dram_bytes - g.dram_bytes == pytest.approx(splits * float(st.dram_bytes))
    assert c.device_time_s - g.device_time_s == pytest.approx(
        splits * (max(float(st.compute_s), float(st.memory_s) / frac) + float(st.latency_s)))


def test_fp8_row_padding_copies_the_rows_at_the_model_width(b200):
    ctx = _ctx(b200)
    plain = _experts(per_expert_streams=4)
    fp8 = Op(plain.name, plain.kind, plain.inputs, plain.outputs,
             Attrs({**dict(plain.attrs), "compute_dtype": "fp8_e4m3"}), plain.group)
    bf, f8 = lower(plain, ctx), lower(fp8, ctx)
    gemm8 = _gemm_cost(ctx, ROWS, N1, D, batch=4, dtype="fp8_e4m3", in_bytes=1, out_bytes=2, b_shared=False,
                       rule=PER_EXPERT_RULE)
    # fc1's forward pads its input: one copy of every routed row at d = 2,048 in bf16
    pad = gpu_model.streaming(LE * ROWS * D * 2, LE * ROWS * D * 2, 0.0, ctx.params("fp32"))
    assert f8.kernels == bf.kernels + 1
    assert f8.dram_bytes == pytest.approx(4 * float(gemm8.dram_bytes) + float(pad.dram_bytes))
    assert "fp8 row padding copy" in f8.notes and "fp8 row padding" not in bf.notes
    # fc1's input-gradient GEMM unpads its output (dx at d); the weight-gradient GEMM pads nothing
    dx = _bwd_data(fp8)
    assert lower(dx, ctx).kernels == LE + 1
    dw = Op("layers.0.moe.experts_in.bwd_weight", "grouped_matmul_bwd_weight",
            (plain.inputs[0], dx.inputs[0]), (plain.inputs[1],), fp8.attrs, plain.group)
    assert lower(dw, ctx).kernels == LE


def _two_layer_moe() -> object:
    from workloads.zoo.transformer import zoo_config

    return dataclasses.replace(zoo_config("qwen3-30b-a3b"), layers=2)


def test_megatron_core_graphs_run_the_experts_per_expert_and_in_fp8():
    from workloads.parallel import ParallelPlan, plan_graphs

    def experts(framework: str, fp8: str | None) -> dict[str, Op]:
        (sg,) = plan_graphs(_two_layer_moe(), ParallelPlan(microbatch=1), seq=512, train=True, dtype="bf16",
                            framework=framework, fp8_linears=fp8)
        return {op.name: op for op in sg.graph.ops if op.kind.startswith("grouped_matmul")
                and op.name.startswith("layers.0.")}

    mc = experts("megatron-core", "mxfp8")
    names = {f"layers.0.moe.experts_{s}{b}" for s in ("in", "out") for b in ("", ".bwd_data", ".bwd_weight")}
    assert set(mc) == names
    assert all(op.attrs["per_expert_streams"] == 4 and op.dtype.value == "fp8_e4m3" for op in mc.values())
    # the forward quantises its input, the input-gradient GEMM the output gradient; the weight-gradient GEMM
    # reads both quantised copies
    quantised = {n for n, op in mc.items() if op.attrs.get("fp8_quantize") == "mxfp8"}
    assert quantised == {n for n in names if not n.endswith(".bwd_weight")}
    # without a stack the experts stay one fused kernel; without fp8 they stay bf16
    assert all("per_expert_streams" not in op.attrs for op in experts("", None).values())
    assert all(op.dtype.value == "bf16" for op in experts("megatron-core", None).values())
    # torchao's recipes quantise linears only (no grouped-GEMM path): the experts stay bf16
    assert all(op.dtype.value == "bf16" for op in experts("", "rowwise").values())


def test_alltoall_dispatcher_sorts_the_received_chunks_by_local_expert():
    from workloads.parallel import ParallelPlan, plan_graphs

    def sorts(framework: str, dispatch: str) -> dict[str, Op]:
        plan = ParallelPlan(dp=8, ep=8, microbatch=1, moe_dispatch=dispatch)
        (sg,) = plan_graphs(_two_layer_moe(), plan, seq=512, train=True, dtype="bf16", framework=framework)
        return {op.name: op for op in sg.graph.ops if "sort_chunks" in op.name and op.name.startswith("layers.0.")}

    mc = sorts("megatron-core", "sparse")
    assert set(mc) == {"layers.0.moe.sort_chunks", "layers.0.moe.unsort_chunks", "layers.0.moe.sort_chunks.bwd",
                       "layers.0.moe.unsort_chunks.bwd"}
    # 128 experts over EP 8: the 8 source ranks' chunks of 16 local experts, 512 tokens x top-8 / 128 = 32 rows
    # each (the capacity of a dropless buffer), d 2,048: (8, 16, 32, 2048) -> (16, 8, 32, 2048)
    fwd = mc["layers.0.moe.sort_chunks"]
    assert fwd.kind == "transpose" and fwd.attrs["perm"] == (1, 0, 2, 3)
    assert tuple(fwd.inputs[0].shape) == (8, 16, 32, 2048) and tuple(fwd.outputs[0].shape) == (16, 8, 32, 2048)
    # the flex dispatcher's HybridEP backend permutes inside its dispatch; stacks without the fact read in place
    assert sorts("megatron-core", "hybridep") == {} and sorts("", "sparse") == {}


def test_hardware_variants_of_per_expert_fp8_experts_match_one_by_one(b200):
    from hwmodels.spec import replace_path
    from simulator.engines.analytical import evaluate
    from simulator.engines.vectorized import evaluate_variants

    plain = _experts(per_expert_streams=4)
    b = GraphBuilder("moe", dtype="bf16")
    x = b.input("buf", (LE, ROWS, D))
    b.op("grouped_matmul", [x, b.weight("experts.w_in", (LE, D, N1))], name="layers.0.moe.experts_in",
         **{**dict(plain.attrs), "compute_dtype": "fp8_e4m3", "fp8_quantize": "mxfp8"})
    g = b.build({"phase": "forward"})
    bws = [4.0e12, 8.0e12]
    res = evaluate_variants(g, b200, {"memory.hbm.read_bandwidth_bytes_per_s": bws})
    for i, bw in enumerate(bws):
        one = replace_path(b200, "memory.hbm.read_bandwidth_bytes_per_s", bw)
        assert res.latency_s[i] == pytest.approx(evaluate(g, one, EvalOptions()).totals.latency_s, rel=1e-9)
