"""`tune --train --pipeline-microbatches LIST`: the microbatches of one pipeline schedule run as a plan axis. Which
configurations exist is counted by hand, and a searched configuration's step is `predict`'s with the field set."""

from __future__ import annotations

import json

import pytest

from simulator.cli.main import main
from simulator.sweep.tune import TuneError, _valid_indices
from simulator.sweep.tune_model import ModelProblem


def _valid(problem: ModelProblem) -> list[dict[str, object]]:
    return [problem.space.config(i) for i in _valid_indices(problem) or []]


def test_schedule_runs_exist_only_with_stages_and_a_proper_divisor() -> None:
    # global batch 8 on dp 2 with microbatch 1: 4 microbatches a rank. (pp, N): pp 1 only with N 0; pp 2 with
    # N 0, 1, 2 (3 does not divide 4; 4 is one run, the plan of N 0)
    problem = ModelProblem("gpt2", ["dgx-h100"], batch=(1,), dtypes=("bf16",), fusion=(False,), train=True,
                           recompute=("none",), tp=(1,), pp=(1, 2), dp=(2,), global_batch=8,
                           pipeline_microbatches=(0, 1, 2, 3, 4))
    got = sorted((c["pp"], c["pipeline_microbatches"]) for c in _valid(problem))
    assert got == [(1, 0), (2, 0), (2, 1), (2, 2)]
    plan = problem._plan({"tp": 1, "pp": 2, "dp": 2, "batch": 1, "pipeline_microbatches": 2})
    assert (plan.pipeline_microbatches, plan.microbatches) == (2, 4)
    assert problem._plan({"tp": 1, "pp": 2, "dp": 2, "batch": 1, "pipeline_microbatches": 0}).pipeline_microbatches == 0


@pytest.mark.parametrize(("kw", "message"), [
    ({"train": False}, "--pipeline-microbatches: schedule runs of a training step; got no --train"),
    ({"pipeline_microbatches": (-1,)}, "--pipeline-microbatches: got -1; expected integers >= 0"),
])
def test_schedule_runs_refusals(kw: dict, message: str) -> None:
    args = {"batch": (1,), "dtypes": ("bf16",), "train": True, "pp": (2,), "pipeline_microbatches": (0, 2), **kw}
    with pytest.raises(TuneError, match=message.replace("(", r"\(")):
        ModelProblem("gpt2", ["dgx-h100"], **args)


def test_cli_schedule_runs_match_predict(capsys: pytest.CaptureFixture[str]) -> None:
    common = ["gpt2", "--hardware", "dgx-h100", "--train", "--seq", "256", "--dtype", "bf16", "--global-batch", "8"]
    assert main(["tune", *common, "--batch", "1", "--fusion", "off", "--recompute", "none", "--tp", "1", "--pp", "2",
                 "--dp", "2", "--pipeline-microbatches", "0,2", "--json"]) == 0
    best = {c["config"]["pipeline_microbatches"]: c["metrics"]["latency_s"]
            for c in json.loads(capsys.readouterr().out)["best"]}
    assert set(best) == {0, 2} and best[2] > best[0]  # a second fill and drain of the 2 stages
    assert main(["predict", *common, "--no-fusion", "--pp", "2", "--dp", "2", "--microbatch", "1",
                 "--pipeline-microbatches", "2", "--json"]) == 0
    assert best[2] == pytest.approx(json.loads(capsys.readouterr().out)["latency_s"], rel=1e-12)
