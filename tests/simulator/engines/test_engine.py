"""The analytical engine: composition, invariants, options, memory check, fallbacks and determinism."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hwmodels"))
from gpu_devices import h100, toy_gpu  # noqa: E402

from hwmodels.spec import SpecError, SystemSpec  # noqa: E402
from simulator import EvalOptions, evaluate  # noqa: E402
from simulator.lowering import LoweringContext, lower  # noqa: E402
from workloads.ir import GraphBuilder, UnsupportedOpError  # noqa: E402


def mlp(batch: int = 8, d: int = 1024, h: int = 4096, dtype: str = "bf16"):
    b = GraphBuilder("mlp", dtype=dtype)
    x = b.input("x", (batch, d))
    w1 = b.weight("w1", (d, h))
    w2 = b.weight("w2", (h, d))
    with b.group("block"):
        y = b.op("matmul", [x, w1], name="up")
        y = b.op("elementwise", [y], name="act", op="gelu")
        y = b.op("matmul", [y, w2], name="down")
        b.op("elementwise", [y, x], name="residual", op="add")
    return b.build(meta={"model": "mlp", "batch": batch})


def test_totals_are_sums_and_energies_add_up():
    r = evaluate(mlp(), h100())
    assert r.latency_s == pytest.approx(sum(o.time_s for o in r.records))
    assert r.energy_j == pytest.approx(sum(o.energy_j for o in r.records))
    for o in r.records:
        assert o.energy_j == pytest.approx(o.dynamic_energy_j + o.static_energy_j)
    assert r.totals.flops == sum(o.flops for o in r.records)
    assert r.totals.avg_power_w == pytest.approx(r.energy_j / r.latency_s)
    by_kind = r.breakdown("kind")
    assert sum(v["time_s"] for v in by_kind.values()) == pytest.approx(r.latency_s)
    assert sum(r.bound_breakdown.values()) == pytest.approx(1.0)


def test_bound_is_the_largest_component():
    g = mlp(batch=4096)
    for opts in (EvalOptions(), EvalOptions(cuda_graphs=True), EvalOptions(fusion=True)):
        for o in evaluate(g, h100(), opts).records:
            comps = {"compute": o.compute_s, "memory": o.memory_s, "latency": o.overhead_s}
            assert comps[o.bound] == max(comps.values()), o


def test_launch_floor_and_cuda_graphs():
    d = toy_gpu()  # launch 2 us, graph launch 1 us
    b = GraphBuilder("tiny", dtype="bf16")
    x = b.input("x", (16,))
    b.op("elementwise", [x], name="relu", op="relu")
    g = b.build()
    eager = evaluate(g, d).records[0]
    assert eager.time_s == pytest.approx(2e-6) and eager.bound == "latency"
    graphed = evaluate(g, d, EvalOptions(cuda_graphs=True)).records[0]
    assert graphed.time_s == pytest.approx(1e-6)


def test_gemm_record_carries_tile_and_waves():
    r = evaluate(mlp(batch=4096), h100())
    up = r.op("block.up")
    assert up.rule == "gemm" and up.tile and up.waves > 0 and up.ctas > 0
    assert up.bound == "compute"
    assert up.flops == 2 * 4096 * 1024 * 4096


def test_fusion_folds_elementwise_into_producer():
    g = mlp(batch=512)
    plain = evaluate(g, h100())
    fused = evaluate(g, h100(), EvalOptions(fusion=True))
    act = fused.op("block.act")
    assert act.fused_into == "block.up" and act.rule == "fused-epilogue" and act.kernels == 0
    res = fused.op("block.residual")
    assert res.fused_into == "block.down"
    assert fused.latency_s < plain.latency_s
    assert fused.totals.kernels == 2 and plain.totals.kernels == 4


def test_fused_epilogue_costs_the_same_special_functions_as_unfused():
    # rsqrt runs on the SFUs whether or not it is fused into its producer's epilogue
    from simulator.lowering import sfu_ops

    d = h100()
    b = GraphBuilder("norm", dtype="bf16")
    x = b.input("x", (512, 1024))
    w = b.weight("w", (1024, 1024))
    y = b.op("matmul", [x, w], name="mm")
    b.op("elementwise", [y], name="rs", op="rsqrt")
    g = b.build()
    rs_op = g.op("rs")
    assert sfu_ops(rs_op) == 512 * 1024
    fused = evaluate(g, d, EvalOptions(fusion=True)).op("rs")
    assert fused.fused_into == "mm"
    p = LoweringContext(d, EvalOptions()).params("fp32")
    # rsqrtf is one MUFU.RSQ and no FP32 instruction (hwmodels.gpu.ELEMENTWISE_INSTRUCTIONS): the SFU time alone
    assert fused.compute_s == pytest.approx(512 * 1024 / p.sfu_ops_per_s, rel=1e-12)


def test_l2_residency_makes_a_consumer_cheaper():
    d = h100()
    b = GraphBuilder("chain", dtype="bf16")
    x = b.input("x", (1024, 4096))
    y = b.op("elementwise", [x], name="a", op="silu")
    b.op("elementwise", [y], name="b", op="silu")
    g = b.build()
    warm = evaluate(g, d).op("b")
    cold = evaluate(g, d, EvalOptions(l2_residency=False)).op("b")
    assert warm.time_s < cold.time_s
    assert warm.dram_bytes == pytest.approx(cold.dram_bytes - 1024 * 4096 * 2)


def test_memory_check_infeasible_still_predicts():
    d = toy_gpu()  # 16 GiB
    b = GraphBuilder("big", dtype="bf16")
    x = b.input("x", (1, 65536))
    w = b.weight("w", (65536, 163840))  # 20 GiB of bf16 weights
    b.op("matmul", [x, w], name="fc")
    r = evaluate(b.build(), d)
    assert not r.fits_in_memory
    assert r.memory.weights_bytes == 65536 * 163840 * 2
    assert r.memory.message().startswith("does not fit on toy-gpu: needs 20.00 GiB, has 16.00 GiB (weights 20.00")
    assert r.latency_s > 0 and any("does not fit" in w for w in r.warnings)
    assert json.loads(r.to_json())["fits_in_memory"] is False


def test_memory_message_numbers():
    r = evaluate(mlp(), h100())
    m = r.memory
    assert m.required_bytes == 2 * (1024 * 4096 * 2) + m.activations_bytes
    assert m.fits and m.message().startswith("fits on test-h100: needs 0.02 GiB of 74.51 GiB")


def test_power_cap_keeps_every_op_under_tdp():
    d = toy_gpu()
    low = dataclasses.replace(d, power=dataclasses.replace(d.power, tdp_w=25.0, idle_w=20.0))
    g = mlp(batch=2048)
    capped = evaluate(g, low)
    free = evaluate(g, low, EvalOptions(power_cap=False))
    assert any(o.power_capped for o in capped.records)
    for o in capped.records:
        if o.time_s > 0:
            assert o.energy_j / o.time_s <= 25.0 * (1 + 1e-9)
    assert capped.latency_s > free.latency_s
    # the constant-energy stretch keeps each kernel's energy, but under a 5 W budget the GEMM kernel chosen is the
    # one fastest at the limit (hwmodels.gpu.GemmPower): the lowest-energy candidate, never more than the power-blind one
    assert capped.totals.dynamic_energy_j <= free.totals.dynamic_energy_j * (1 + 1e-12)
    for o in capped.records:
        if o.power_capped and o.time_s > 0:
            assert o.dynamic_energy_j / o.time_s == pytest.approx(25.0 - 20.0, rel=1e-9)  # held at the limit
    assert any("power-capped" in w for w in capped.warnings)


def test_fallback_is_marked_and_warned():
    b = GraphBuilder("g", dtype="bf16")
    x = b.input("x", (1024, 1024))
    b.op("generic", [x], name="mystery", op_type="Foo", output_shapes=((1024, 1024),), output_dtypes=("bf16",))
    r = evaluate(b.build(), h100())
    o = r.op("mystery")
    assert o.fallback and o.rule == "roofline-fallback"
    assert any("'generic'" in w and "roofline fallback" in w for w in r.warnings)


def test_views_cost_nothing():
    b = GraphBuilder("v", dtype="bf16")
    x = b.input("x", (4, 256))
    y = b.op("reshape", [x], name="r", shape=(1024,))
    b.op("elementwise", [y], name="e", op="relu")
    r = evaluate(b.build(), h100())
    assert r.op("r").time_s == 0 and r.op("r").rule == "view" and r.op("r").kernels == 0


def test_json_is_byte_identical_and_has_the_contract():
    g = mlp()
    a = evaluate(g, h100()).to_json()
    b = evaluate(mlp(), h100()).to_json()
    assert a == b
    d = json.loads(a)
    for key in ("model", "hardware", "latency_s", "energy_j", "avg_power_w", "flops", "memory_required_bytes",
                "fits_in_memory", "bound_breakdown", "ops"):
        assert key in d
    assert len(d["ops"]) == 4 and d["provenance"]["engine"] == "analytical"
    assert len(d["provenance"]["graph_sha256"]) == 64


def test_csv_and_table_writers():
    r = evaluate(mlp(), h100())
    lines = r.to_csv().strip().splitlines()
    assert lines[0].startswith("name,kind,group,category,dtype,time_s") and len(lines) == 5
    t = r.to_table(top=4)
    assert "Totals: latency" in t and "Memory: fits" in t and "block.up" in t


def test_system_spec_runs_on_its_device():
    d = h100()
    sysm = SystemSpec(name="two", description="2x test", device=d, count=2)
    r1 = evaluate(mlp(), sysm)
    r2 = evaluate(mlp(), d)
    assert r1.latency_s == r2.latency_s and r1.hardware == "two"


def test_bad_system_is_a_located_error():
    with pytest.raises(SpecError, match=r"evaluate: system: not a spec; got a str"):
        evaluate(mlp(), "h100")  # type: ignore[arg-type]


def test_unknown_device_kind_without_rules_is_unsupported():
    d = dataclasses.replace(h100(), kind="npu")
    op = mlp().ops[0]
    with pytest.raises(UnsupportedOpError, match=r"op 'block.up': no lowering rule for kind 'matmul' on npu device"):
        lower(op, LoweringContext(d, EvalOptions()))


def test_decode_attention_is_memory_bound():
    b = GraphBuilder("dec", dtype="bf16")
    q = b.input("q", (1, 32, 1, 128))
    k = b.tensor("k", (1, 8, 4096, 128), role="kv_cache")
    v = b.tensor("v", (1, 8, 4096, 128), role="kv_cache")
    b.op("attention", [q, k, v], name="attn", causal=True)
    r = evaluate(b.build(), h100())
    o = r.op("attn")
    assert o.bound == "memory" and o.rule == "flash-attention"
    assert r.memory.kv_cache_bytes == 2 * 8 * 4096 * 128 * 2


def test_eager_framework_floor_applies_per_op():
    d = toy_gpu(framework_op_overhead_s=20e-6)  # launch 2 us; eager framework 20 us per op
    b = GraphBuilder("tiny", dtype="bf16")
    x = b.input("x", (16,))
    y = b.op("elementwise", [x], name="relu", op="relu")
    b.op("elementwise", [y], name="neg", op="neg")
    g = b.build()
    plain = evaluate(g, d)
    assert plain.latency_s == pytest.approx(2 * 2e-6)
    eager = evaluate(g, d, EvalOptions(eager_framework=True))
    assert [r.time_s for r in eager.records] == pytest.approx([20e-6, 20e-6])
    assert all(r.bound == "latency" for r in eager.records)


def test_attention_kernel_option_selects_the_design():
    from simulator.lowering import attention_kernel_for

    b = GraphBuilder("attn", dtype="bf16")
    q = b.input("q", (4, 16, 4096, 128))
    k = b.input("k", (4, 16, 4096, 128))
    v = b.input("v", (4, 16, 4096, 128))
    b.op("attention", [q, k, v], name="attn")
    g = b.build()
    d = h100()
    assert attention_kernel_for(d, "auto") == "flash3"  # Hopper: warp-specialised kernels
    assert attention_kernel_for(dataclasses.replace(d, arch="ampere"), "auto") == "flash2"
    f3 = evaluate(g, d).op("attn")
    f2 = evaluate(g, d, EvalOptions(attention_kernel="flash2")).op("attn")
    assert "flash3" in f3.notes and "flash2" in f2.notes
    assert f3.compute_s < f2.compute_s  # overlap never costs more than serialisation
    with pytest.raises(ValueError, match=r"options.attention_kernel: unknown kernel design; got 'fa9'"):
        evaluate(g, d, EvalOptions(attention_kernel="fa9"))


def test_conv_weight_gradient_reads_x_not_its_im2col_matrix():
    """Implicit-GEMM wgrad reads X and dY from DRAM, never the 9x larger im2col matrix of a 3x3 conv."""
    from hwmodels.catalog import load_device
    from simulator.engines.analytical import evaluate
    from workloads.ir import GraphBuilder

    b = GraphBuilder("wgrad", "bf16")
    x = b.input("x", (32, 256, 28, 28))
    dy = b.input("dy", (32, 256, 28, 28))
    b.op("conv2d_bwd_weight", [x, dy], name="wgrad", weight_shape=(256, 256, 3, 3), stride=1, padding=1)
    rec = evaluate(b.build(), load_device("h100-sxm5-80gb")).records[0]
    compulsory = x.nbytes + dy.nbytes + 256 * 256 * 9 * 2
    im2col = 32 * 28 * 28 * 256 * 9 * 2
    assert compulsory <= rec.dram_bytes < 2 * compulsory < im2col
