"""Transformer Engine 2.9's current and delayed scaling casts as they run, one linear by hand.

Current scaling (``Float8CurrentScalingQuantizer::quantize_impl``, pytorch/csrc/quantizer.cpp @ v2.9): an amax kernel
(``nvte_compute_amax_with_config``: a read of the 16-bit operand), a scale kernel (``nvte_compute_scale_from_amax``)
and the cast (``nvte_quantize_v2``: a second read, the fp8 write, and on Hopper the transposed copy in the same
kernel); a norm-fed operand's amax is computed by the norm (``rmsnorm_fwd``'s ``Impl::FUSED_NORM_AMAX_FP8``,
pytorch/csrc/extensions/normalization.cpp). Delayed scaling: one cast kernel, inside the norm for a norm-fed
operand (``Impl::FULLY_FUSED``). fp8 parameters are read as views."""

from __future__ import annotations

import pytest

import workloads  # noqa: F401  (installs the semantics registry)
from simulator import EvalOptions, evaluate
from simulator.engines.walk import TE_NORM_FUSED
from simulator.hardware import load_hardware
from workloads.ir import GraphBuilder, OpGraph
from workloads.precision import TE_NORM_FUSED_ATTR, fp8_gemm_reads_both_layouts, fp8_linears

TOKENS, D, N = 4096, 2048, 4608  # a 4,096-token microbatch, [2048, 4608] and [4608, 2048] projections
OPTS = EvalOptions(fusion=True, epilogue_fusion=True, l2_residency=False)


def _two_linears() -> OpGraph:
    """RMSNorm, a projection of its output (a LayerNormLinear), and a projection of that GEMM's output (a Linear)."""
    b = GraphBuilder("norm-linear-linear", dtype="bf16")
    x = b.input("x", (TOKENS, D))
    with b.group("layers.0.attn"):
        h = b.op("rmsnorm", [x, b.weight("norm_w", (D,))], name="norm")
        y = b.op("matmul", [h, b.weight("w_qkv", (D, N))], name="qkv")
        b.op("matmul", [y, b.weight("w_o", (N, D))], name="proj")
    return b.build({"phase": "forward"})


@pytest.fixture(scope="module")
def h100():
    return load_hardware("h100-sxm5-80gb")


def test_which_gpus_write_no_transposed_copy():
    # nvte_is_non_tn_fp8_gemm_supported, common/transformer_engine.cpp @ v2.9: 10.0 <= cc < 12.0, or cc >= 13.0
    assert not fp8_gemm_reads_both_layouts(90) and fp8_gemm_reads_both_layouts(100)
    assert not fp8_gemm_reads_both_layouts(120) and fp8_gemm_reads_both_layouts(130)
    assert TE_NORM_FUSED == TE_NORM_FUSED_ATTR  # the walk reads this name


def test_a_current_scaling_linear_on_h100_by_hand(h100):
    g = fp8_linears(_two_linears(), "current", fp8_params=True)
    names = [op.name for op in g.ops]
    # fp8 parameters: the weights are views, no amax, scale or cast of them
    assert "layers.0.attn.qkv.fp8_1.view" in names and not any(n.endswith(("amax_1", "cast_1")) for n in names)
    rep = evaluate(g, h100, OPTS)
    op = rep.op
    x_el, y_el = TOKENS * D, TOKENS * N  # 8,388,608 and 18,874,368 elements
    # norm-fed input: the norm computes the amax (4 bytes written, no kernel) ...
    assert op("layers.0.attn.qkv.amax_0").fused_into == "layers.0.attn.norm"
    assert op("layers.0.attn.qkv.amax_0").dram_bytes == 4
    # ... the scale is a kernel of its own (one fp32 read, one written) ...
    assert op("layers.0.attn.qkv.scale_0").kernels == 1 and op("layers.0.attn.qkv.scale_0").dram_bytes == 8
    # ... and the cast a third: the bf16 output read back (2 B an element), the scale (4 B), the fp8 write (1 B),
    # with the transposed copy (1 B an element) written by the same kernel on Hopper
    cast, tr = op("layers.0.attn.qkv.cast_0"), op("layers.0.attn.qkv.transpose_0")
    assert cast.kernels == 1 and cast.fused_into == ""
    assert cast.dram_bytes == 2 * x_el + 4 + x_el == 25_165_828
    assert tr.fused_into == "layers.0.attn.qkv.cast_0" and tr.kernels == 0 and tr.dram_bytes == x_el == 8_388_608
    # a GEMM-fed input: amax kernel (a full read), scale kernel, cast kernel (a second read): three kernels
    amax, scale = op("layers.0.attn.proj.amax_0"), op("layers.0.attn.proj.scale_0")
    cast, tr = op("layers.0.attn.proj.cast_0"), op("layers.0.attn.proj.transpose_0")
    assert (amax.kernels, scale.kernels, cast.kernels) == (1, 1, 1)
    assert amax.fused_into == "" and amax.dram_bytes == 2 * y_el + 4 == 37_748_740
    assert cast.dram_bytes == 2 * y_el + 4 + y_el == 56_623_108
    assert tr.dram_bytes == y_el == 18_874_368
    # the quantisation of the two inputs: 5 kernels of its own (the first amax in the norm's), 146,800,672 bytes
    te = [n for n in names if n.split(".")[-1].split("_")[0] in ("amax", "scale", "cast", "transpose")]
    assert sum(op(n).kernels for n in te) == 5
    assert sum(op(n).dram_bytes for n in te) == 4 + 8 + 25_165_828 + 8_388_608 + 37_748_740 + 8 + 56_623_108 \
        + 18_874_368 == 146_800_672


def test_on_b200_the_cast_writes_no_transposed_copy():
    rep = evaluate(fp8_linears(_two_linears(), "current", fp8_params=True), load_hardware("b200"), OPTS)
    assert rep.op("layers.0.attn.qkv.transpose_0").dram_bytes == 0
    assert rep.op("layers.0.attn.proj.transpose_0").dram_bytes == 0
    assert rep.op("layers.0.attn.qkv.cast_0").dram_bytes == 25_165_828  # the cast itself unchanged


def test_without_fp8_parameters_each_weight_is_quantised_in_three_kernels(h100):
    g = fp8_linears(_two_linears(), "current")
    rep = evaluate(g, h100, OPTS)
    w = D * N  # 9,437,184 elements
    assert [rep.op(f"layers.0.attn.qkv.{k}_1").kernels for k in ("amax", "scale", "cast")] == [1, 1, 1]
    assert rep.op("layers.0.attn.qkv.amax_1").dram_bytes == 2 * w + 4
    assert rep.op("layers.0.attn.qkv.cast_1").dram_bytes == 2 * w + 4 + w
    assert "layers.0.attn.qkv.transpose_1" not in {op.name for op in g.ops}  # weights: no activation copy


def test_delayed_scaling_casts_in_the_norm_and_on_its_own_after_a_gemm(h100):
    g = fp8_linears(_two_linears(), "delayed", fp8_params=True)
    assert not any(".amax_" in op.name or ".scale_" in op.name for op in g.ops)
    rep = evaluate(g, h100, OPTS)
    y_el = TOKENS * N
    # Impl::FULLY_FUSED: the norm writes the fp8 output (the cast takes the norm's store)
    assert rep.op("layers.0.attn.qkv.cast_0").fused_into == "layers.0.attn.norm"
    # after the GEMM: a kernel of its own (not the GEMM's epilogue), one read, the fp8 write and the transpose
    cast = rep.op("layers.0.attn.proj.cast_0")
    assert cast.fused_into == "" and cast.kernels == 1 and cast.dram_bytes == 2 * y_el + y_el == 56_623_104
    assert rep.op("layers.0.attn.proj.transpose_0").fused_into == "layers.0.attn.proj.cast_0"
