"""A training step's parts add up to its time, in the JSON and in `predict`'s summary line, and each stage's
``optimizer_s`` is the update its devices run (the shard's under ZeRO and FSDP), as the step counts it."""

from __future__ import annotations

import re

import pytest

from simulator.cli.main import main
from simulator.cli.parallel import STEP_PARTS
from simulator.hardware import load_hardware
from simulator.parallel.compose import evaluate_plan
from workloads.parallel import ParallelPlan

_TRAIN = {"train": True, "seq": 1024}


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_fsdp2_summary_counts_the_copy_out_kernels(capsys: pytest.CaptureFixture[str]) -> None:
    """FSDP2's all-gather copy-out kernels run on the compute stream (stacks.ShardedStep.tail_s): the summary line
    used to leave them out, its shares summing to about 97% of the step."""
    argv = ("predict", "llama-2-7b", "--train", "--hardware", "dgx-h100", "--fsdp", "--dp", "8", "--framework",
            "fsdp2", "--seq", "1024", "--global-batch", "8")
    rc, out, err = _cli(capsys, *argv)
    assert rc == 0, err
    line = next(ln for ln in out.splitlines() if ln.startswith("Where the time goes"))
    assert "FSDP copy-out" in line
    shares = [float(x) for x in re.findall(r"\(([0-9.]+)%\)", line)]
    assert sum(shares) == pytest.approx(100.0, abs=0.3)  # each share printed to 0.1%
    res = evaluate_plan("llama-2-7b", load_hardware("dgx-h100"), ParallelPlan(dp=8, fsdp=True, global_batch=8),
                        framework="fsdp2", **_TRAIN)
    b = res.breakdown
    assert b["fsdp_copy_out_s"] > 0
    assert sum(b.get(k, 0.0) for k in STEP_PARTS) == pytest.approx(res.latency_s, rel=1e-12)


def test_stage_optimizer_seconds_are_the_shard_update() -> None:
    """Llama 2 7B (dense) on 8 H100s: ZeRO-1 shards the AdamW update 8 ways, so each stage's ``optimizer_s`` is the
    unsharded plan's / 8 and equals the step's ``breakdown['optimizer_s']`` (it was the whole model's update, 8x)."""
    dgx = load_hardware("dgx-h100")
    whole = evaluate_plan("llama-2-7b", dgx, ParallelPlan(dp=8, global_batch=8), **_TRAIN)
    zero1 = evaluate_plan("llama-2-7b", dgx, ParallelPlan(dp=8, zero_stage=1, global_batch=8), **_TRAIN)
    assert whole.stages[0].optimizer_s == pytest.approx(whole.breakdown["optimizer_s"], rel=1e-12)
    assert zero1.stages[0].optimizer_s == pytest.approx(whole.stages[0].optimizer_s / 8, rel=1e-12)
    assert zero1.stages[0].optimizer_s == pytest.approx(zero1.breakdown["optimizer_s"], rel=1e-12)


def test_stage_optimizer_seconds_under_maxtext_shard_groups() -> None:
    """MaxText over two v5e-16 slices with FSDP inside each (shard group 16 of dp 32): the update is sharded 16
    ways, not 32 (stacks.apply_stack), and the stage reports the same seconds as the step."""
    res = evaluate_plan("llama-2-7b", load_hardware("tpu-v5e-16x2"),
                        ParallelPlan(dp=32, fsdp=True, shard_group=16, global_batch=32), framework="maxtext",
                        recompute="full", **_TRAIN)
    one = evaluate_plan("llama-2-7b", load_hardware("tpu-v5e-16x2"),
                        ParallelPlan(dp=32, fsdp=True, global_batch=32), framework="maxtext", recompute="full",
                        **_TRAIN)
    assert res.breakdown["optimizer_s"] == pytest.approx(2 * one.breakdown["optimizer_s"], rel=1e-12)
    assert res.stages[0].optimizer_s == pytest.approx(res.breakdown["optimizer_s"], rel=1e-12)
    assert one.stages[0].optimizer_s == pytest.approx(one.breakdown["optimizer_s"], rel=1e-12)


def test_stage_graphs_power_cap_warnings_are_given_once() -> None:
    """GPT-3 175B on 1,024 A100s (tp 8, pp 16): the first and last stages' graphs cap 36 and 37 ops at the 400 W
    TDP; the step warns once with the range, where it printed one line per distinct count."""
    from simulator.parallel.compose import _merged_counts

    rest = "op(s) power-capped at TDP 400 W: clocks and throughput scaled down so average power stays within the limit"
    got = _merged_counts({f"36 {rest}", f"37 {rest}", "another warning"})
    assert got == {f"36-37 {rest.replace('op(s) ', 'op(s) per stage ', 1)}", "another warning"}
    assert _merged_counts({f"5 {rest}"}) == {f"5 {rest}"}


def test_a_plan_smaller_than_its_system_warns(capsys: pytest.CaptureFixture[str]) -> None:
    """dp 8 on two DGX H100 nodes leaves 8 GPUs idle: the header's '8 device(s)' was the only sign (one device on
    a system has warned of its idle devices all along)."""
    argv = ("predict", "llama-2-7b", "--train", "--hardware", "dgx-h100x2", "--dp", "8", "--fsdp", "--seq", "1024",
            "--global-batch", "8")
    rc, out, err = _cli(capsys, *argv)
    assert rc == 0 and "plan dp 8 (ZeRO-3), 8 device(s)" in out
    assert "dgx-h100x2 has 16 devices; the plan occupies 8 of them and 8 stay unused" in err
    rc, out, err = _cli(capsys, *argv[:4], "dgx-h100", *argv[5:])
    assert rc == 0 and "stay unused" not in err


def test_step_energy_counts_each_ranks_shard_of_the_update() -> None:
    """ZeRO-1 over 8 ranks: each runs 1/8 of the AdamW update, so the step's dynamic energy is the unsharded plan's
    less 7/8 of the update's energy on each of the 8 ranks (it counted every rank updating the whole stage: 8x the
    update's energy: 12.5 kJ, 6%, of a Llama 3 70B FSDP2 step on 64 H100s). The forward and backward passes are
    the same graphs."""
    dgx = load_hardware("dgx-h100")
    whole = evaluate_plan("llama-2-7b", dgx, ParallelPlan(dp=8, global_batch=8), **_TRAIN)
    zero1 = evaluate_plan("llama-2-7b", dgx, ParallelPlan(dp=8, zero_stage=1, global_batch=8), **_TRAIN)
    update = sum(r.dynamic_energy_j for r in whole.reports[0].records
                 if r.group == "optimizer" or r.group.startswith("optimizer."))
    assert update > 0
    a, b = whole.to_cost_report().totals, zero1.to_cost_report().totals
    assert b.dynamic_energy_j == pytest.approx(a.dynamic_energy_j - 8 * update * 7 / 8, rel=1e-9)
    assert a.dynamic_energy_j - b.dynamic_energy_j == pytest.approx(7 * update, rel=1e-9)


def test_a_plan_that_fits_logs_no_stage_graph_verdict(caplog: pytest.LogCaptureFixture) -> None:
    """Llama 2 7B FSDP over a v5e-16 fits (8.8 of 16 GiB); its stage graph holds the unsharded state and the gradient
    collective's graph the whole gradient buffer, and the engine logged both as 'does not fit on tpu-v5e: needs
    102.40 GiB ... optimizer state 75.31' and '... 25.89 GiB' on every call from Python (a study's log)."""
    import logging

    with caplog.at_level(logging.WARNING):
        res = evaluate_plan("llama-2-7b", load_hardware("v5e-16"), ParallelPlan(dp=16, fsdp=True, microbatch=2),
                            train=True, seq=2048, recompute="full", framework="maxtext")
    assert res.fits_in_memory
    assert not [r for r in caplog.records if "does not fit" in r.getMessage()]


def test_tensor_parallel_overlap_takes_its_share_off_the_bubble() -> None:
    """Megatron-Core's overlapped tensor-parallel collectives shorten every stage, and with them the pipeline's
    fill and drain: the breakdown kept the un-overlapped bubble (Llama 3 70B on 64 H100s, tp 8 pp 4: parts 1.2%
    over the step, 'Where the time goes' at 101.2%) and ``bubble_fraction`` the un-overlapped pipeline's."""
    res = evaluate_plan("llama-2-13b", load_hardware("dgx-h100x4"),
                        ParallelPlan(tp=8, pp=4, sequence_parallel=True, global_batch=16), train=True, seq=4096,
                        framework="megatron-core")
    b = res.breakdown
    assert b["tp_comm_hidden_s"] > 0 and b["bubble_s"] > 0
    assert sum(b.get(k, 0.0) for k in STEP_PARTS) == pytest.approx(res.latency_s, rel=1e-12)
    assert b["bubble_s"] == pytest.approx(res.pipeline.bubble_s, rel=1e-12)
    assert res.pipeline.step_s + b["optimizer_s"] + b["dp_sync_exposed_s"] == pytest.approx(res.latency_s, rel=1e-9)
