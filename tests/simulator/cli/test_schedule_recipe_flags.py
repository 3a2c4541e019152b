"""--moe-a2a-overlap, --pipeline-microbatches and --grad-sync-per-step reach the plan: each CLI step is
``evaluate_plan``'s with the field set, and moves the step the way its mechanism says (hand-checked below)."""

from __future__ import annotations

import json

import pytest

from simulator.cli.main import main
from simulator.engines.options import EvalOptions
from simulator.hardware import load_hardware
from simulator.parallel.compose import evaluate_plan
from workloads.frameworks import get_profile
from workloads.parallel import ParallelPlan

# Qwen3-30B-A3B over 8 H100s, experts split 8 ways, 4 microbatches of one 4,096-token sequence
MOE = ("predict", "qwen3-30b-a3b", "--hardware", "dgx-h100", "--train", "--ep", "8", "--dp", "8", "--microbatch", "1",
       "--global-batch", "32", "--seq", "4096", "--framework", "megatron-core", "--json")
# Llama-2-7B on 2 stages x 4 FSDP2 ranks, 8 microbatches a rank (torch.distributed.pipelining: the fsdp2 stack)
PIPE = ("predict", "llama-2-7b", "--hardware", "dgx-h100", "--train", "--pp", "2", "--dp", "4", "--fsdp",
        "--microbatch", "1", "--global-batch", "32", "--seq", "4096", "--framework", "fsdp2", "--json")


def _run(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], *extra: str) -> dict:
    assert main([*argv, *extra]) == 0
    return json.loads(capsys.readouterr().out)


def _ref(model: str, plan: ParallelPlan, profile: str) -> float:
    opts = EvalOptions(**get_profile(profile).cost_options())  # the stack's costing, as predict passes it
    return evaluate_plan(model, load_hardware("dgx-h100"), plan, opts, train=True, seq=4096,
                         framework=profile).latency_s


def test_moe_a2a_overlap_is_the_evaluated_plan_and_hides_all_to_alls(capsys: pytest.CaptureFixture[str]) -> None:
    free, over = _run(capsys, MOE), _run(capsys, MOE, "--moe-a2a-overlap")
    assert over["plan"]["moe_a2a_overlap"] is True and "moe_a2a_overlap" not in free["plan"]
    plan = ParallelPlan(dp=8, ep=8, microbatch=1, global_batch=32, moe_a2a_overlap=True)
    assert over["latency_s"] == pytest.approx(_ref("qwen3-30b-a3b", plan, "megatron-core"), rel=1e-12)
    # no pipeline: one warm-up forward, then 4 - 1 = 3 steady forward-backward pairs, each hiding min(compute,
    # share x all-to-all) of a microbatch: here the all-to-alls (about 63 ms a microbatch against over 200 ms of
    # compute) beside compute that keeps 100 of the H100's 132 SMs (NCCL's all-to-all holds one per channel, 32
    # peer-to-peer channels), so the step shortens by 100/132 of 3 microbatches' all-to-alls
    a2a = free["breakdown_by_kind"]["all_to_all"]["time_s"]  # one microbatch's forward and backward all-to-alls
    assert 0.05 < a2a < 0.08
    assert over["a2a_overlap_hidden_s"] == pytest.approx(3 * a2a * 100 / 132, rel=1e-9)
    assert free["latency_s"] - over["latency_s"] == pytest.approx(3 * a2a * 100 / 132, rel=1e-9)


def test_pipeline_microbatches_pays_a_bubble_and_a_sync_per_schedule_run(capsys: pytest.CaptureFixture[str]) -> None:
    one, runs = _run(capsys, PIPE), _run(capsys, PIPE, "--pipeline-microbatches", "2")
    assert runs["plan"]["pipeline_microbatches"] == 2 and "pipeline_microbatches" not in one["plan"]
    plan = ParallelPlan(pp=2, dp=4, fsdp=True, microbatch=1, global_batch=32, pipeline_microbatches=2)
    assert runs["latency_s"] == pytest.approx(_ref("llama-2-7b", plan, "fsdp2"), rel=1e-12)
    # 8 microbatches in 4 schedule runs of 2: each run fills and drains the 2 stages (bubble 4x, within the
    # small difference of the runs' gradient accumulation) and reduce-scatters its gradients (4x)
    assert runs["latency_s"] > one["latency_s"]
    assert runs["breakdown"]["bubble_s"] / one["breakdown"]["bubble_s"] == pytest.approx(4, rel=0.02)
    assert runs["breakdown"]["dp_sync_exposed_s"] == pytest.approx(4 * one["breakdown"]["dp_sync_exposed_s"], rel=1e-9)


def test_grad_sync_per_step_syncs_once_a_step(capsys: pytest.CaptureFixture[str]) -> None:
    one = _run(capsys, PIPE)
    runs = _run(capsys, PIPE, "--pipeline-microbatches", "2")
    once = _run(capsys, PIPE, "--pipeline-microbatches", "2", "--grad-sync-per-step")
    assert once["plan"]["grad_sync_per_step"] is True and "grad_sync_per_step" not in runs["plan"]
    plan = ParallelPlan(pp=2, dp=4, fsdp=True, microbatch=1, global_batch=32, pipeline_microbatches=2,
                        grad_sync_per_step=True)
    assert once["latency_s"] == pytest.approx(_ref("llama-2-7b", plan, "fsdp2"), rel=1e-12)
    # the reduce-scatter and the re-gather of the stage's weights once a step, as with one schedule run;
    # the 4 runs' bubbles stay
    assert once["latency_s"] < runs["latency_s"]
    for k in ("dp_sync_exposed_s", "communication_s"):
        assert once["breakdown"][k] == pytest.approx(one["breakdown"][k], rel=1e-9)
    assert once["breakdown"]["communication_s"] < runs["breakdown"]["communication_s"]


def test_full_iteration_graph_flags_add_the_captures_deferred_frees(capsys: pytest.CaptureFixture[str]) -> None:
    """--cuda-graph full_iteration with --moe-a2a-overlap and HybridEP's --moe-rank-capacity-factor 1.5: memory only.
    By hand, bf16: 4 microbatches x 48 MoE layers x 1 tensor (moe_combine's input; HybridEP's mlp input is kept for
    the backward outside fp8) x (4096 tokens x top-8 x 1.5 = 49,152 rows) x 2048 x 2 B = 36 GiB that the capture
    cannot reuse; the step time is the plan's without the flags."""
    over = _run(capsys, MOE, "--moe-a2a-overlap", "--moe-dispatch", "hybridep")
    graph = _run(capsys, MOE, "--moe-a2a-overlap", "--moe-dispatch", "hybridep", "--cuda-graph", "full_iteration",
                 "--moe-rank-capacity-factor", "1.5")
    assert graph["plan"]["cuda_graph"] == "full_iteration" and graph["plan"]["moe_rank_capacity_factor"] == 1.5
    assert "cuda_graph" not in over["plan"]
    assert graph["latency_s"] == over["latency_s"]
    deferred = graph["memory_breakdown"]["reserve.cuda_graph_deferred_frees"]
    assert deferred == 4 * 48 * 1 * 49152 * 2048 * 2 == 36 * 2**30
    assert "reserve.cuda_graph_deferred_frees" not in over["memory_breakdown"]
    assert graph["memory_per_device_bytes"] == pytest.approx(over["memory_per_device_bytes"] + deferred, rel=1e-12)


def test_rank_capacity_factor_on_a_dense_model_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """An MoE option on a model without experts is one located line and exit 2, not a flag silently dropped."""
    rc = main(["predict", "llama-3-8b", "--train", "--hardware", "dgx-h100", "--dp", "8", "--microbatch", "1",
               "--global-batch", "8", "--moe-dispatch", "hybridep", "--moe-rank-capacity-factor", "1.5"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert "moe_rank_capacity_factor 1.5: the model has no experts; expected no MoE options" in err[0]


@pytest.mark.parametrize("model, flags", [
    ("llama-3-8b", ("--p2p-host-sync",)), ("llama-3-8b", ("--cuda-graph", "full_iteration")),
    ("qwen3-30b-a3b", ("--moe-rank-capacity-factor", "1.5")),
])
def test_training_schedule_flags_without_train_are_refused(capsys: pytest.CaptureFixture[str], model: str,
                                                           flags: tuple[str, ...]) -> None:
    """Training recipes on an inference plan: --p2p-host-sync was priced into a prefill (a sync after each stage's
    send), --cuda-graph and --moe-rank-capacity-factor changed nothing; each is one located line and exit 2, as
    --moe-a2a-overlap is."""
    rc = main(["predict", model, "--hardware", "dgx-h100", "--tp", "4", "--pp", "2", "--phase", "prefill", "--batch", "1",
               *flags])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert f"predict: {flags[0]}: a training recipe; got no --train; expected --train" in err[0]
