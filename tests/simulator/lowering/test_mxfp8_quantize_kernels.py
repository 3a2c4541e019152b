"""Transformer Engine 2.9's MXFP8 quantize as it runs: one ``nvte_quantize_v2`` kernel per 16-bit operand (per expert
split in a grouped linear), reading the tensor once and writing its rowwise and columnwise e4m3 copies, fused with no
kernel before it (``rmsnorm_fwd``'s ``Impl::UNFUSED`` for an MXFP8 quantizer, pytorch/csrc/extensions/normalization.cpp
@ v2.9), at the B200's measured share of the streaming rate (``efficiency.mxfp8_quantize_stream_fraction``)."""

from __future__ import annotations

import pytest

import workloads  # noqa: F401  (installs the semantics registry)
from hwmodels import gpu as gpu_model
from simulator import EvalOptions, evaluate
from simulator.engines.walk import QUANTIZE_OUTPUT, TE_QUANTIZE
from simulator.hardware import load_hardware
from simulator.lowering.common import LoweringContext, lower
from workloads.ir import Attrs, GraphBuilder, Op, OpGraph
from workloads.precision import (
    QUANTIZE_OUTPUT_ATTR,
    TE_QUANTIZE_ATTR,
    fp8_linears,
    fp8_weight_numel,
)

TOKENS, D, N = 4096, 2048, 4608  # a 4,096-token microbatch into a [2048, 4608] projection
OPTS = EvalOptions(fusion=True, epilogue_fusion=True, l2_residency=False)


@pytest.fixture(scope="module")
def b200():
    return load_hardware("b200")


def _norm_linear() -> OpGraph:
    """RMSNorm, then the query/key/value projection of its output (a LayerNormLinear's two halves)."""
    b = GraphBuilder("norm-linear", dtype="bf16")
    x = b.input("x", (TOKENS, D))
    with b.group("layers.0.attn"):
        h = b.op("rmsnorm", [x, b.weight("norm_w", (D,))], name="norm")
        b.op("matmul", [h, b.weight("w_qkv", (D, N))], name="qkv")
    return b.build({"phase": "forward"})


def test_the_b200_figure_is_its_derivation():
    # 8192 x 8192 bf16 -> rowwise + columnwise e4m3 with 1-byte scales: 134,217,728 read, 2 x 67,108,864 + 2 x
    # 2,097,152 written; 52.34 us measured, less 0.449 us DRAM latency and 1.56 us kernel_device_time_s
    dev = load_hardware("b200")
    moved = 134_217_728 + 2 * 67_108_864 + 2 * 2_097_152
    assert moved == 272_629_760
    streaming = (moved + 1.16e6) / (8e12 * 0.850)
    assert streaming / (52.34e-6 - 0.449e-6 - 1.56e-6) == pytest.approx(0.800, abs=5e-4)
    assert dev.efficiency.mxfp8_quantize_stream_fraction == 0.800
    assert load_hardware("h100-sxm5-80gb").efficiency.mxfp8_quantize_stream_fraction == 0.0  # no figure: streaming rate


def test_an_mxfp8_linear_quantizes_its_input_in_one_kernel_of_its_own(b200):
    g = fp8_linears(_norm_linear(), "mxfp8")
    ops = {op.name: op for op in g.ops}
    cast, col = ops["layers.0.attn.qkv.cast_0"], ops["layers.0.attn.qkv.columnwise_0"]
    assert cast.attrs[TE_QUANTIZE_ATTR] == col.attrs[TE_QUANTIZE_ATTR] == "mxfp8"
    assert col.attrs[QUANTIZE_OUTPUT_ATTR] == "columnwise"
    assert (TE_QUANTIZE, QUANTIZE_OUTPUT) == (TE_QUANTIZE_ATTR, QUANTIZE_OUTPUT_ATTR)  # the walk reads these names
    rep = evaluate(g, b200, OPTS)
    q, c = rep.op("layers.0.attn.qkv.cast_0"), rep.op("layers.0.attn.qkv.columnwise_0")
    # the quantize is a kernel of its own (the norm writes its bf16 output, the quantize reads it back) ...
    assert q.fused_into == "" and q.kernels == 1
    assert rep.op("layers.0.attn.norm").kernels == 1
    # ... that writes the columnwise copy from the same read: 4096 x 2048 = 8,388,608 elements, read 2 bytes
    # each, written 1 byte rowwise (the cast) and 1 byte columnwise (the copy, no read of its own)
    elems = TOKENS * D
    assert q.dram_bytes == 2 * elems + elems == 25_165_824
    assert c.fused_into == "layers.0.attn.qkv.cast_0" and c.kernels == 0 and c.dram_bytes == elems
    # at 0.800 of the streaming rate
    st = gpu_model.streaming(2.0 * elems, 1.0 * elems, 0.0, LoweringContext(b200, OPTS).params("fp32"))
    assert q.memory_s == pytest.approx(float(st.memory_s) / 0.800)
    assert c.memory_s == pytest.approx(elems / (8e12 * 0.850 * 0.800))
    # the same cast without the mark (a compiler's generated cast) fuses into the norm, as it did before
    plain = OpGraph(g.name, [Op(o.name, o.kind, o.inputs, o.outputs,
                                Attrs({k: v for k, v in o.attrs.items()
                                       if k not in (TE_QUANTIZE_ATTR, QUANTIZE_OUTPUT_ATTR)}), o.group)
                             for o in g.ops], g.meta)
    assert evaluate(plain, b200, OPTS).op("layers.0.attn.qkv.cast_0").fused_into == "layers.0.attn.norm"
    # kernels: the norm, the quantize of the input, the quantize of the weight, the GEMM and its two scale swizzles
    assert rep.op("layers.0.attn.qkv").kernels == 3 and rep.totals.kernels == 6


def _experts(le: int = 16, rows: int = 2048, d: int = 2048, n: int = 1536, quantize: bool = True) -> Op:
    b = GraphBuilder("moe", dtype="bf16")
    x = b.input("buf", (le, rows, d))
    b.op("grouped_matmul", [x, b.weight("experts.w_in", (le, d, n))], name="layers.0.moe.experts_in",
         tokens=le * rows, experts_active=le, per_expert_streams=4)
    op = b.build({"phase": "forward"}).ops[0]
    extra = {"compute_dtype": "fp8_e4m3", **({"fp8_quantize": "mxfp8"} if quantize else {})}
    return Op(op.name, op.kind, op.inputs, op.outputs, Attrs({**dict(op.attrs), **extra}), op.group)


def test_split_quantize_runs_one_kernel_per_expert_split(b200):
    # Qwen3-30B-A3B at EP 8 (train-059): 16 splits of 2,048 x 2,048 bf16, each its own cast_mxfp8_2D_kernel
    ctx = LoweringContext(b200, EvalOptions())
    with_q, without = lower(_experts(), ctx), lower(_experts(quantize=False), ctx)
    assert with_q.kernels - without.kernels == 16
    per = 2048 * 2048  # elements of one split
    # one split: 8,388,608 bytes read, 2 x 4,194,304 written with 2 x 131,072 E8M0 scale bytes
    st = gpu_model.streaming(2.0 * per, 2.0 * per + 2.0 * per / 32, 2.0 * per, ctx.params("fp32"))
    assert float(st.dram_bytes) == 8_388_608 + 8_388_608 + 262_144
    one = max(float(st.compute_s), float(st.memory_s) / 0.800) + float(st.latency_s)
    assert with_q.dram_bytes - without.dram_bytes == pytest.approx(16 * float(st.dram_bytes))
    assert with_q.device_time_s - without.device_time_s == pytest.approx(16 * one)
    # each split pays its own latency and half-size bytes: 15 more of each than one kernel over all of them
    whole = gpu_model.streaming(32.0 * per, 32.0 * per + 32.0 * per / 32, 32.0 * per, ctx.params("fp32"))
    fixed = float(whole.latency_s) + 1.16e6 / (8e12 * 0.850 * 0.800)
    assert 16 * one - (float(whole.memory_s) / 0.800 + float(whole.latency_s)) == pytest.approx(15 * fixed)


def test_te_fp8_parameters_are_read_without_a_cast():
    # Transformer Engine's Linear takes a quantised parameter as is (get_weight_workspace returns it after
    # update_usage): with fp8 parameters the GEMM reads a view of the weight, no quantize kernel
    g = fp8_linears(_norm_linear(), "mxfp8", fp8_params=True)
    names = {op.name for op in g.ops}
    assert "layers.0.attn.qkv.cast_1" not in names and "layers.0.attn.qkv.fp8_1.view" in names
    assert "layers.0.attn.qkv.cast_0" in names  # the activation is still quantised
    view = next(op for op in g.ops if op.name == "layers.0.attn.qkv.fp8_1.view")
    assert view.kind == "reshape" and view.outputs[0].dtype.value == "fp8_e4m3"
    # the memory model's walk of the fp8 weights still finds the weight (its .fp8_1 operand)
    assert fp8_weight_numel(g) == D * N == fp8_weight_numel(fp8_linears(_norm_linear(), "mxfp8"))
    with pytest.raises(ValueError, match="fp8 parameters with 'tensorwise'"):
        fp8_linears(_norm_linear(), "tensorwise", fp8_params=True)


def test_a_megatron_plan_with_fp8_parameters_casts_no_mxfp8_weight():
    import dataclasses

    from workloads.parallel import ParallelPlan, plan_graphs
    from workloads.zoo.transformer import zoo_config

    cfg = dataclasses.replace(zoo_config("llama-3-8b"), layers=2)

    def casts(recipe: str, fp8_param: bool) -> int:
        (sg,) = plan_graphs(cfg, ParallelPlan(fp8_param=fp8_param), train=True, seq=256, framework="megatron-core",
                            fp8_linears=recipe)
        return sum(op.name.endswith(".cast_1") for op in sg.graph.ops)

    # 4 linears x 2 layers, the weight cast of the forward and of the input-gradient GEMM each: 16 without fp8
    # parameters; none with them under every Transformer Engine recipe (current and delayed scaling since their
    # activation casts are priced as TE runs them, test_te_current_scaling_kernels.py)
    assert casts("mxfp8", False) == 16 and casts("mxfp8", True) == 0
    assert casts("current", False) == casts("delayed", False) == 16
    assert casts("current", True) == casts("delayed", True) == 0
