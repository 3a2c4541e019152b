"""``predict --framework megatron-lm`` with a parallel plan: the profile's graph (the 2022 unfused attention, dropout,
its optimizer's passes) under the plan, the same step the published-row validation predicts."""

from __future__ import annotations

import json

import pytest

from simulator.cli.main import main
from simulator.hardware import load_hardware
from simulator.parallel.compose import evaluate_plan
from workloads.parallel import ParallelPlan


def test_megatron_lm_plan_through_the_cli_is_the_validated_step(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["predict", "gpt-22b-korthikanti2022", "--hardware", "dgx-a100x1", "--tp", "8", "--sequence-parallel",
            "--train", "--microbatch", "4", "--global-batch", "4", "--recompute", "selective", "--seq", "2048",
            "--dtype", "bf16", "--json"]
    assert main([*argv, "--framework", "megatron-lm"]) == 0
    got = json.loads(capsys.readouterr().out)
    plan = ParallelPlan(tp=8, pp=1, dp=1, microbatch=4, global_batch=4, sequence_parallel=True)
    ref = evaluate_plan("gpt-22b-korthikanti2022", load_hardware("dgx-a100x1"), plan, train=True, seq=2048,
                        recompute="selective", dtype="bf16", framework="megatron-lm")
    assert got["latency_s"] == pytest.approx(ref.latency_s, rel=1e-12)
    assert main(argv) == 0
    generic = json.loads(capsys.readouterr().out)
    # the unfused s x s attention core and the dropout kernels cost more than one fused attention kernel
    assert got["latency_s"] > 1.1 * generic["latency_s"]
