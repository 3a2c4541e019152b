"""FSDP2's fp8 all-gather (``ParallelPlan.fsdp_fp8_all_gather``): torchao's ``WeightWithDynamicFloat8CastTensor``
gathers the fp8 linear weights 1 byte each (torchao/float8/fsdp_utils.py @ pytorch/ao eab345c), the GEMMs cast
no weight, and ``precompute_float8_dynamic_scale_for_fsdp`` reads the shards and all-reduces the amaxes once a
step. Bytes by hand on a 4-layer model; the rows whose notes state it; the refusals and the CLI flag."""

from __future__ import annotations

import dataclasses
import json

import pytest

from simulator.cli.main import main
from simulator.hardware import load_hardware
from simulator.parallel.compose import (
    _collective_times,
    _fp8_weight_numel,
    _gathered_weight_bytes,
    _grad_buffer_divisor,
    evaluate_plan,
    stage_graphs,
)
from simulator.parallel.training_validation import _fsdp_fp8_all_gather, _plan, load_training_rows
from tests.simulator.parallel.tiny_gqa import tiny_gqa
from workloads.parallel import ParallelPlan, PlanError

#: 4 layers, d 128, 8 query heads of 16, 2 key/value heads, SwiGLU 256, untied head, vocabulary 512
CFG = tiny_gqa("tiny-fp8-ag", layers=4)
#: a layer's 7 linear weights (q and o 128 x 128, k and v 128 x 32, SwiGLU 3 x 128 x 256) and all its parameters
LINEAR = 2 * 128 * 128 + 2 * 128 * 32 + 3 * 128 * 256
LAYER = LINEAR + 2 * 128
#: bf16 bytes of every parameter: embedding, 4 layers, final norm, head
BF16 = 2 * (512 * 128 + 4 * LAYER + 128 + 128 * 512)
#: FSDP2's root group (torchtitan wraps each block, then the model): embedding, final norm, head, bf16
ROOT = 2 * (512 * 128 + 128 + 128 * 512)
PLAN = ParallelPlan(dp=8, microbatch=1, global_batch=8, fsdp=True)
KW = {"train": True, "seq": 256, "recompute": "full", "fp8_linears": "tensorwise"}


def _parts(res) -> dict[str, float]:
    return dict(res.stages[0].memory_parts)


def test_fp8_linear_weights_are_gathered_one_byte_each() -> None:
    g = stage_graphs(CFG, dataclasses.replace(PLAN, fsdp_fp8_all_gather=True), **KW)[0].graph
    assert _fp8_weight_numel(g) == 4 * LINEAR  # the layers' linears; the head (torchtitan's "output") stays bf16
    assert _gathered_weight_bytes(g, dataclasses.replace(PLAN, fsdp_fp8_all_gather=True)) == BF16 - 4 * LINEAR
    assert _gathered_weight_bytes(g, PLAN) == BF16
    hw = load_hardware("dgx-h100")
    for on, want in ((True, BF16 - 4 * LINEAR), (False, BF16)):
        res = evaluate_plan(CFG, hw, dataclasses.replace(PLAN, fsdp_fp8_all_gather=on), **KW)
        ag = _collective_times([("all_gather", float(want))], 8, hw, 1, pad_to=_grad_buffer_divisor(PLAN))
        gather = res.breakdown["communication_s"] - res.breakdown["dp_sync_exposed_s"]
        # gathered before the forward and before the backward of the one microbatch, and after the update
        assert gather == pytest.approx(3 * ag[("all_gather", float(want))], rel=1e-9)


def test_gathered_buffers_hold_fp8_linears() -> None:
    hw = load_hardware("dgx-h100")
    bf16 = _parts(evaluate_plan(CFG, hw, PLAN, **KW))
    fp8 = _parts(evaluate_plan(CFG, hw, dataclasses.replace(PLAN, fsdp_fp8_all_gather=True), **KW))
    # the root group and two blocks in flight (FSDP_UNSHARDED_IN_FLIGHT); a block gathers 2 bytes a norm weight
    # and 1 byte a linear weight: 2 x 128 x 2 + LINEAR = 139,776 bytes, against 279,040 in bf16
    assert bf16["buffers.fsdp_unsharded_params"] == ROOT + 2 * 2 * LAYER == 820_480
    assert fp8["buffers.fsdp_unsharded_params"] == ROOT + 2 * (2 * LAYER - LINEAR) == 541_952
    # the all-gather stream keeps the largest group gathered: a bf16 block before, the bf16 root group now
    assert bf16["reserve.fsdp_all_gather_stream"] == 2 * LAYER and fp8["reserve.fsdp_all_gather_stream"] == ROOT
    # the gradients' reduce-scatter is unchanged (fp32 of the bf16 block)
    assert fp8["buffers.fsdp_reduce_scatter"] == bf16["buffers.fsdp_reduce_scatter"] == 4 * LAYER
    assert fp8["reserve.fsdp_reduce_scatter_stream"] == bf16["reserve.fsdp_reduce_scatter_stream"]


def test_pipelined_stage_holds_its_linears_in_fp8() -> None:
    # torchtitan's pipelined FSDP2 keeps a stage's parameters gathered through the step: stage 0 is the
    # embedding and 2 layers, 131,072 + 2 x 279,040 bytes in bf16, 131,072 + 2 x 139,776 with fp8 linears
    hw = load_hardware("dgx-h100")
    plan = ParallelPlan(pp=2, dp=4, microbatch=1, global_batch=8, fsdp=True)
    bf16 = _parts(evaluate_plan(CFG, hw, plan, **KW))
    fp8 = _parts(evaluate_plan(CFG, hw, dataclasses.replace(plan, fsdp_fp8_all_gather=True), **KW))
    assert bf16["buffers.fsdp_unsharded_params"] == 2 * 512 * 128 + 2 * 2 * LAYER
    assert fp8["buffers.fsdp_unsharded_params"] == 2 * 512 * 128 + 2 * (2 * LAYER - LINEAR)
    assert fp8["buffers.fsdp_unsharded_grads"] == bf16["buffers.fsdp_unsharded_grads"]  # fp32 accumulators


def test_no_gemm_casts_a_gathered_weight() -> None:
    on = stage_graphs(CFG, dataclasses.replace(PLAN, fsdp_fp8_all_gather=True), **KW)[0].graph
    off = stage_graphs(CFG, PLAN, **KW)[0].graph
    casts = [op.name for op in off.ops if op.name.endswith((".amax_1", ".cast_1")) and ".bwd_b" not in op.name]
    assert casts  # without it every GEMM reading a weight casts it (forward, recomputed forward, input gradient)
    weight_casts = [op for op in on.ops if op.name.endswith((".amax_1", ".cast_1")) and ".bwd_b" not in op.name
                    and any(t.role.value == "weight" for t in op.inputs)]
    assert weight_casts == []
    # the input-gradient GEMM reads the row-major weight, which torchao's preprocess_addmm copies column-major:
    # one fp8 copy of each layer's 4 linear GEMMs' weights (fused qkv, out, fused gate/up, down) per microbatch
    copies = [op for op in on.ops if op.name.endswith(".k_major_1") and ".bwd_a" in op.name]
    assert len(copies) == 4 * 4
    assert sum(op.inputs[0].numel for op in copies) == 4 * LINEAR
    assert all(op.inputs[0].dtype.value == "fp8_e4m3" for op in copies)


def test_scale_precompute_is_one_read_and_one_all_reduce() -> None:
    from simulator.engines.analytical import spec_of

    hw = load_hardware("dgx-h100")
    on = evaluate_plan(CFG, hw, dataclasses.replace(PLAN, fsdp_fp8_all_gather=True), **KW)
    off = evaluate_plan(CFG, hw, PLAN, **KW)
    dev = spec_of(hw)[0]
    rate = dev.main_memory.read_bandwidth_bytes_per_s * dev.efficiency.dram_bandwidth_fraction
    # torch._foreach_norm over the fp32 shards (4 bytes x 4 LINEAR / 8 ranks), one fp32 amax per weight (the graph's
    # 4 x 4 linears: fused qkv, out, fused gate/up, down)
    reduce_s = _collective_times([("all_reduce", 4.0 * 16)], 8, hw, 1)[("all_reduce", 4.0 * 16)]
    extra = on.breakdown["optimizer_s"] - off.breakdown["optimizer_s"]
    assert extra == pytest.approx(4.0 * 4 * LINEAR / 8 / rate + reduce_s, rel=1e-9)


def test_refusals() -> None:
    with pytest.raises(PlanError, match="fsdp_fp8_all_gather: got true without fsdp; expected fsdp"):
        ParallelPlan(dp=8, fsdp_fp8_all_gather=True)
    with pytest.raises(PlanError, match="fsdp_fp8_all_gather: got 1; expected true or false"):
        ParallelPlan(dp=8, fsdp=True, fsdp_fp8_all_gather=1)  # type: ignore[arg-type]
    hw = load_hardware("dgx-h100")
    plan = dataclasses.replace(PLAN, fsdp_fp8_all_gather=True)
    with pytest.raises(PlanError, match="got it with fp8_linears rowwise; expected fp8_linears tensorwise"):
        evaluate_plan(CFG, hw, plan, **{**KW, "fp8_linears": "rowwise"})
    with pytest.raises(PlanError, match="got it with no fp8_linears; expected fp8_linears tensorwise"):
        evaluate_plan(CFG, hw, plan, train=True, seq=256, recompute="full")
    with pytest.raises(PlanError, match="use fp8_param"):
        evaluate_plan(CFG, hw, plan, **{**KW, "fp8_linears": "current"})
    assert "fsdp_fp8_all_gather" not in PLAN.to_json() and plan.to_json()["fsdp_fp8_all_gather"] is True


def test_rows_that_state_it() -> None:
    rows = {r.id: r for r in load_training_rows()}
    stated = sorted(k for k, r in rows.items() if _fsdp_fp8_all_gather(r))
    assert stated == [f"train-{i:03d}" for i in (*range(25, 31), *range(49, 53))]
    assert _plan(rows["train-026"], 8).fsdp_fp8_all_gather and _plan(rows["train-050"], 32).fsdp_fp8_all_gather
    assert not _plan(rows["train-039"], 32).fsdp_fp8_all_gather  # 2D torchtitan row: its notes do not state it
    r = rows["train-050"]
    off = dataclasses.replace(r, raw={**r.raw, "notes": r["notes"].replace(
        "enable_fsdp_float8_all_gather", "enable_fsdp_float8_all_gather = false")})
    assert not _fsdp_fp8_all_gather(off)


BASE = ("predict", "llama-3-8b", "--hardware", "dgx-h100", "--train", "--dp", "8", "--fsdp", "--microbatch", "1",
        "--seq", "2048", "--recompute", "full", "--json")


def test_cli_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*BASE, "--fp8-linears", "tensorwise"]) == 0
    off = json.loads(capsys.readouterr().out)
    assert main([*BASE, "--fp8-linears", "tensorwise", "--fsdp-fp8-all-gather"]) == 0
    on = json.loads(capsys.readouterr().out)
    assert on["plan"]["fsdp_fp8_all_gather"] is True and "fsdp_fp8_all_gather" not in off["plan"]
    assert on["memory_per_device_bytes"] < off["memory_per_device_bytes"]


@pytest.mark.parametrize(("extra", "want"), [
    (("--fp8-linears", "rowwise", "--fsdp-fp8-all-gather"), "expected fp8_linears tensorwise"),
    (("--fsdp-fp8-all-gather",), "got it with no fp8_linears"),
])
def test_cli_refusals(capsys: pytest.CaptureFixture[str], extra: tuple[str, ...], want: str) -> None:
    assert main([*BASE, *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and want in err[0]


def test_cli_refuses_it_without_fsdp(capsys: pytest.CaptureFixture[str]) -> None:
    args = [a for a in BASE if a != "--fsdp"]
    assert main([*args, "--fp8-linears", "tensorwise", "--fsdp-fp8-all-gather"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "fsdp_fp8_all_gather: got true without fsdp" in err[0]


def test_graph_refuses_gathered_weights_of_another_recipe() -> None:
    from workloads.precision import fp8_linears

    g = stage_graphs(CFG, PLAN, train=True, seq=256, recompute="full")[0].graph
    with pytest.raises(ValueError, match="gathered fp8 weights with 'rowwise'; expected 'tensorwise'"):
        fp8_linears(g, "rowwise", gathered_weights=True)
