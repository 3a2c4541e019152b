"""``ParallelPlan.recompute_output_copy``: set for the Megatron-Bridge rows whose stated stack predates Megatron-LM
f54403492e (the NeMo 25.09 / 25.11 containers, Megatron-LM 5455f0a0), checked, recorded, refused outside a
training step, stated on the command line, and priced on the GPT-OSS rows."""

from __future__ import annotations

import json

import pytest

from simulator.cli.main import main
from simulator.parallel import training_validation as tv
from workloads.parallel import ParallelPlan, PlanError

PLAN = ("predict", "gpt-oss-120b", "--hardware", "dgx-h100", "--train", "--ep", "8", "--microbatch", "1",
        "--seq", "1024", "--framework", "megatron-core")


def _rows() -> dict[str, tv.TrainingRecord]:
    return {r["id"]: r for r in tv.load_training_rows()}


def test_rows_copy_by_their_megatron_core() -> None:
    rows = _rows()
    bridge = [r for r in rows.values() if r["framework"].startswith("Megatron-Bridge")]
    on = sorted(r["id"] for r in bridge if tv._plan(r, 8).recompute_output_copy)
    # the 25.11 table (train-053..065) and pull request #1760's runs at Megatron-LM 5455f0a0 (train-150..153)
    assert on == [f"train-{n:03d}" for n in (*range(53, 66), *range(150, 154))]
    # 26.04 (Megatron-LM 580d53a8) and the 2026-04 / 2026-08 Bridge commits state no copying container
    assert not any(tv._plan(rows[f"train-{n:03d}"], 8).recompute_output_copy for n in (66, 67, 142, 143, 144))


def test_the_field_is_checked_and_recorded_only_when_set() -> None:
    with pytest.raises(PlanError, match=r"recompute_output_copy: got 'yes'; expected true or false"):
        ParallelPlan(recompute_output_copy="yes")
    assert "recompute_output_copy" not in ParallelPlan().to_json()
    assert ParallelPlan(recompute_output_copy=True).to_json()["recompute_output_copy"] is True


def test_cli_refuses_the_copy_without_an_output_discarding_module(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*PLAN, "--recompute", "modules:core_attn", "--recompute-output-copy"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "--recompute-output-copy: copies the recomputed outputs of Megatron-Core's CheckpointWithoutOutput " \
           "modules; got --recompute modules:core_attn; expected --recompute modules:NAME,... naming layernorm" in err
    assert main(["predict", "gpt-oss-120b", "--hardware", "dgx-h100", "--ep", "8", "--seq", "1024",
                 "--recompute-output-copy"]) == 2
    assert "a training recipe; got no --train" in capsys.readouterr().err


def test_cli_copy_lengthens_the_step(capsys: pytest.CaptureFixture[str]) -> None:
    args = [*PLAN, "--recompute", "modules:layernorm,moe_act", "--json"]
    assert main(args) == 0
    base = json.loads(capsys.readouterr().out)["latency_s"]
    assert main([*args, "--recompute-output-copy"]) == 0
    assert json.loads(capsys.readouterr().out)["latency_s"] > base
