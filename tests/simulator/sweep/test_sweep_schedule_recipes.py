"""The schedule-recipe plan fields are sweep option keys: ``moe_a2a_overlap``, ``pipeline_microbatches`` and
``grad_sync_per_step`` as axes, each point ``evaluate_plan``'s step with them, and a point that leaves them out
keyed as before (their defaults are what every plan point's key already held)."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.engines.options import EvalOptions
from simulator.hardware import load_hardware
from simulator.parallel.compose import evaluate_plan
from simulator.sweep import load_experiment, load_results, run_sweep
from simulator.sweep.execute import _options_identity
from simulator.sweep.experiment import ExperimentError
from workloads.parallel import ParallelPlan

PIPE = ('metrics = ["latency_s"]\n[workload]\nmodel = "gpt2"\ntrain = true\nseq = 256\n[hardware]\nname = "dgx-h100"\n'
        '[options]\npp = 2\ndp = 2\nfsdp = true\nmicrobatch = 1\nglobal_batch = 8\n'
        '[axes.options]\npipeline_microbatches = [0, 2]\ngrad_sync_per_step = [false, true]\n')


def test_pipeline_axes_equal_evaluate_plan(tmp_path: Path) -> None:
    f = tmp_path / "p.toml"
    f.write_text(PIPE, encoding="utf-8")
    out = tmp_path / "p.sqlite"
    run_sweep(f, out, scheduler="synchronous")
    df = load_results(out)
    assert len(df) == 4 and df["error"].isna().all(), df["error"].tolist()
    hw = load_hardware("dgx-h100")
    lat = {}
    for row in df.to_dict("records"):
        k, once = int(row["options.pipeline_microbatches"]), bool(row["options.grad_sync_per_step"])
        plan = ParallelPlan(pp=2, dp=2, fsdp=True, microbatch=1, global_batch=8, pipeline_microbatches=k,
                            grad_sync_per_step=once)
        ref = evaluate_plan("gpt2", hw, plan, EvalOptions(plan=plan), train=True, seq=256).to_cost_report()
        assert row["latency_s"] == pytest.approx(ref.totals.latency_s, rel=1e-12), row
        lat[(k, once)] = row["latency_s"]
    # 4 microbatches in 2 schedule runs: a second fill and drain and, unless deferred, a second gradient sync;
    # with one run the deferral changes nothing
    assert lat[(2, False)] > lat[(2, True)] > lat[(0, False)] == lat[(0, True)]


def test_overlap_axis_reaches_the_plan_and_defaults_keep_keys() -> None:
    base = {"dp": 8, "ep": 8, "global_batch": 32}
    assert _options_identity(base) == _options_identity({**base, "moe_a2a_overlap": False, "pipeline_microbatches": 0,
                                                         "grad_sync_per_step": False})
    assert _options_identity({**base, "moe_a2a_overlap": True})["plan"]["moe_a2a_overlap"] is True


def test_bad_schedule_recipe_values_are_located(tmp_path: Path) -> None:
    f = tmp_path / "b.toml"
    f.write_text('[workload]\nmodel = "gpt2"\ntrain = true\n[hardware]\nname = "dgx-h100"\n'
                 '[options]\npp = 2\n[axes.options]\npipeline_microbatches = [-1]\n', encoding="utf-8")
    with pytest.raises(ExperimentError, match=r"pipeline_microbatches.*-1"):
        load_experiment(f)
    f.write_text('[workload]\nmodel = "gpt2"\ntrain = true\n[hardware]\nname = "dgx-h100"\n'
                 '[options]\nmoe_a2a_overlap = "yes"\n', encoding="utf-8")
    with pytest.raises(ExperimentError, match=r"moe_a2a_overlap.*yes"):
        load_experiment(f)
