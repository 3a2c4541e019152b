"""The full-iteration CUDA graph's deferred frees follow Megatron-Core's ``should_free_input`` (precision, dispatcher,
local experts), and the plan fields the graph brings are consistent: no host sync under a capture or with HybridEP's
rank budget, the rank budget only with HybridEP, and none of them on an inference step (library and sweep)."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.hardware import load_hardware
from simulator.parallel.compose import evaluate_plan
from simulator.report.memory import cross_stream_freed_inputs
from workloads.parallel import ParallelPlan, PlanError

GIB = 2**30
# Qwen3-30B-A3B (48 MoE layers, 128 experts, top-8, hidden 2048) over 8 H100s, EP 8 (16 local experts), 4 microbatches
# of one 4,096-token sequence, the combined 1F1B schedule captured whole
BASE = dict(dp=8, ep=8, microbatch=1, global_batch=32, moe_a2a_overlap=True, cuda_graph="full_iteration")


def _deferred(fp8: str | None = None, **kw: object) -> float:
    res = evaluate_plan("qwen3-30b-a3b", load_hardware("dgx-h100"), ParallelPlan(**{**BASE, **kw}), train=True,
                        seq=4096, fp8_linears=fp8)
    return max(res.stages, key=lambda st: st.memory_bytes).memory_breakdown()["reserve.cuda_graph_deferred_frees"]


@pytest.mark.parametrize(("kw", "fp8", "tensors", "rows"), [
    # HybridEP, budget int(4096 x 8 x 1.5) = 49,152 rows (a multiple of 256): bf16 keeps the mlp input (HybridEP's
    # dispatch_postprocess is an identity, the grouped GEMM saves it), so only moe_combine's input is freed
    (dict(moe_dispatch="hybridep", moe_rank_capacity_factor=1.5), None, 1, 49152),
    # fp8 linears: the casted copies are saved, the mlp input is freed too
    (dict(moe_dispatch="hybridep", moe_rank_capacity_factor=1.5), "current", 2, 49152),
    # the alltoall dispatcher with 16 local experts, bf16: moe_dispatch's permuted tokens, mlp's (copied by the chunk
    # sort) and moe_combine's; routed rows 4096 x 8
    (dict(), None, 3, 32768),
    # DeepEP, bf16: mlp's and moe_combine's
    (dict(moe_dispatch="deepep"), None, 2, 32768),
])
def test_deferred_frees_by_hand(kw: dict, fp8: str | None, tensors: int, rows: int) -> None:
    """4 microbatches x 48 layers x tensors x rows x 2048 x 2 B: 36 GiB (HybridEP bf16), 72 GiB (HybridEP fp8),
    72 GiB (alltoall bf16, 3 x 32,768 rows), 48 GiB (DeepEP bf16)."""
    assert _deferred(fp8, **kw) == 4 * 48 * tensors * rows * 2048 * 2


def test_freed_inputs_follow_should_free_input() -> None:
    # (dispatch, fp8, local experts) -> moe_dispatch + mlp + moe_combine, as megatron/core/models/common/utils.py
    assert [cross_stream_freed_inputs(d, fp8, n) for d, fp8, n in (
        ("hybridep", True, 16), ("hybridep", False, 16), ("hybridep", False, 1), ("sparse", False, 1),
        ("sparse", False, 16), ("sparse", True, 1), ("deepep", False, 1), ("deepep", True, 16))] == [2, 1, 1, 2, 3, 3, 2, 2]


@pytest.mark.parametrize(("kw", "needle"), [
    (dict(moe_dispatch="hybridep", moe_host_sync=True, cuda_graph="full_iteration"),
     "moe_host_sync: got true with cuda_graph 'full_iteration'; expected false"),
    (dict(moe_dispatch="hybridep", moe_host_sync=True, moe_rank_capacity_factor=1.5),
     "moe_host_sync: got true with moe_rank_capacity_factor 1.5; expected false"),
    (dict(moe_rank_capacity_factor=1.5),
     "moe_rank_capacity_factor: got 1.5 with moe_dispatch 'sparse'; expected moe_dispatch 'hybridep'"),
])
def test_contradictory_graph_fields_are_one_located_error(kw: dict, needle: str) -> None:
    with pytest.raises(PlanError) as exc:
        ParallelPlan(**kw)
    assert str(exc.value).startswith("plan: " + needle)
    assert ";" not in str(exc.value).split(needle)[1].split("(")[0], str(exc.value)  # one problem


def test_validation_rows_with_the_graph_do_not_sync() -> None:
    """train-144..147 state 'dropless' and the full-iteration graph with moe_expert_rank_capacity_factor 1.5: the plan
    keeps no per-layer host sync (HybridEP's static budget; a capture holds none); train-068, the same model without
    the graph, keeps it."""
    from simulator.parallel.training_validation import _plan, load_training_rows

    rows = {r.id: r for r in load_training_rows()}
    for rid in ("train-144", "train-145", "train-146", "train-147"):
        plan = _plan(rows[rid], 8 // rows[rid].ints["tp"])
        assert (plan.cuda_graph, plan.moe_rank_capacity_factor, plan.moe_host_sync) == ("full_iteration", 1.5, False)
    assert _plan(rows["train-068"], 8).moe_host_sync is True


@pytest.mark.parametrize(("kw", "field", "got"), [
    (dict(tp=4, pp=2, p2p_host_sync=True), "p2p_host_sync", "True"),
    (dict(tp=4, pp=2, cuda_graph="full_iteration"), "cuda_graph", "'full_iteration'"),
    (dict(tp=4, pp=2, moe_dispatch="hybridep", moe_rank_capacity_factor=1.5), "moe_rank_capacity_factor", "1.5"),
])
def test_training_fields_on_an_inference_plan_are_refused(kw: dict, field: str, got: str) -> None:
    with pytest.raises(PlanError) as exc:
        evaluate_plan("qwen3-30b-a3b", load_hardware("dgx-h100"), ParallelPlan(**kw), phase="prefill", seq=1024)
    assert str(exc.value) == (f"plan: {field}: training only; got {field}={got} for an inference step (phase "
                              "'prefill'); expected train=True (--train), or the plan without them")


def test_a_sweep_point_with_them_on_an_inference_phase_is_an_error_row(tmp_path: Path) -> None:
    from simulator.sweep import load_results, run_sweep

    f = tmp_path / "p.toml"
    f.write_text('metrics = ["latency_s"]\n[workload]\nmodel = "llama-3-8b"\nphase = "prefill"\nseq = 1024\n'
                 '[hardware]\nname = "dgx-h100"\n[options]\ntp = 4\npp = 2\n[axes.options]\n'
                 'p2p_host_sync = [false, true]\n', encoding="utf-8")
    run_sweep(f, tmp_path / "p.sqlite", scheduler="synchronous")
    rows = {bool(r["options.p2p_host_sync"]): r for r in load_results(tmp_path / "p.sqlite").to_dict("records")}
    assert rows[False]["latency_s"] > 0 and not isinstance(rows[False]["error"], str)
    assert rows[True]["error"].startswith("plan: p2p_host_sync: training only; got p2p_host_sync=True for an inference step "
                                          "(phase 'prefill'); expected train=True (--train)"), rows[True]
