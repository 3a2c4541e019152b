"""Megatron-Core's GEMM epilogues (``FrameworkProfile.epilogue_bias_only``): a linear's bias add joins the GEMM;
the activation with its gated product, and each residual add, run as kernels of their own (Megatron's
``bias_swiglu_impl`` and ``bias_dropout_add``), priced at the element-wise costs by hand."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hwmodels"))
from gpu_devices import h100  # noqa: E402

from simulator import EvalOptions, evaluate  # noqa: E402
from simulator.engines.walk import OUTSIDE_EPILOGUE  # noqa: E402
from workloads.frameworks import get_profile  # noqa: E402
from workloads.ir import GraphBuilder  # noqa: E402
from workloads.zoo.transformer import TransformerConfig, build  # noqa: E402

# DRAM traffic only (no L2 reuse between kernels), the GEMMs taking epilogues as Megatron-Core's profile says
OPTS = EvalOptions(fusion=True, epilogue_fusion=True, l2_residency=False)
T, D, FF = 16, 64, 256  # tokens, model width, MLP width
BF16 = 2


def _layer(framework: str, **kw):
    cfg = TransformerConfig("tiny", vocab=1000, d_model=D, layers=1, heads=4, d_ff=FF, mlp="swiglu", norm="rmsnorm",
                            pos="rope", tied_embeddings=False, qkv_bias=False, out_bias=False, mlp_bias=False, **kw)
    return build(cfg, batch=1, seq=T, framework=framework)


def test_the_megatron_profile_keeps_only_bias_adds_in_the_gemm_epilogue():
    prof = get_profile("megatron-core")
    assert prof.epilogue_fusion and prof.epilogue_bias_only and "fused_bias_swiglu.py" in prof.epilogue_bias_only_source
    assert not get_profile("tensorrt").epilogue_bias_only and not get_profile("torchtitan").epilogue_bias_only


def test_a_bias_add_joins_the_gemm_and_a_marked_activation_runs_as_its_own_kernel():
    b = GraphBuilder("fc", dtype="bf16")
    x = b.input("x", (T, D))
    y = b.op("matmul", [x, b.weight("w", (D, FF))], name="fc")
    y = b.op("elementwise", [y, b.weight("bias", (FF,))], name="bias", op="add")
    b.op("elementwise", [y], name="act", op="gelu", **{OUTSIDE_EPILOGUE: True})
    r = evaluate(b.build(), h100(), OPTS)
    assert r.op("bias").fused_into == "fc"
    act = r.op("act")
    assert act.fused_into == "" and act.kernels == 1
    # the activation reads the biased GEMM output and writes its own: 2 x T x FF x 2 bytes
    assert act.dram_bytes == 2 * T * FF * BF16
    assert r.totals.kernels == 2


def test_a_megatron_layer_runs_swiglu_and_the_residual_adds_as_kernels_of_their_own():
    r = evaluate(_layer("megatron-core"), h100(), OPTS)
    act, mul = r.op("layers.0.mlp.act"), r.op("layers.0.mlp.gate_mul")
    # bias_swiglu_impl: one kernel reading the gate and up halves of fc1's output and writing the product
    assert act.fused_into == "" and act.kernels == 1 and mul.fused_into == "layers.0.mlp.act" and mul.kernels == 0
    assert act.dram_bytes + mul.dram_bytes == 3 * T * FF * BF16
    for name in ("layers.0.attn_residual", "layers.0.mlp_residual"):
        add = r.op(name)  # bias_dropout_add: the branch output and the residual read, the sum written
        assert add.fused_into == "" and add.kernels == 1
        assert add.dram_bytes == 3 * T * D * BF16


def test_without_the_rule_the_same_ops_join_the_gemms():
    r = evaluate(_layer(""), h100(), OPTS)
    assert r.op("layers.0.mlp.act").fused_into == "layers.0.mlp.gate_up"
    assert r.op("layers.0.mlp.gate_mul").fused_into == "layers.0.mlp.act"
    assert r.op("layers.0.mlp_residual").fused_into == "layers.0.mlp.down"


def test_the_experts_swiglu_runs_after_the_grouped_gemm():
    g = _layer("megatron-core", experts=4, top_k=2)
    r = evaluate(g, h100(), OPTS)
    act, mul = r.op("layers.0.moe.act"), r.op("layers.0.moe.gate_mul")
    assert act.fused_into == "" and act.kernels == 1 and mul.fused_into == "layers.0.moe.act"
    rows = g.op("layers.0.moe.act").inputs[0].shape[:-1]  # the routed rows, as the grouped GEMM wrote them
    n = 1
    for s in rows:
        n *= s
    assert act.dram_bytes + mul.dram_bytes == 3 * n * FF * BF16
