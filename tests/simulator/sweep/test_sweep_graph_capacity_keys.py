"""The memory-only plan fields ``cuda_graph`` and ``moe_rank_capacity_factor`` are sweep option keys as their CLI
flags (--cuda-graph, --moe-rank-capacity-factor) are: they reach the point's plan, a point that leaves them out
keeps its key, and a bad value is one located line."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.sweep import load_experiment, load_results, run_sweep
from simulator.sweep.execute import _eval_options, _options_identity
from simulator.sweep.experiment import PLAN_KEYS, ExperimentError

HEAD = '[workload]\nmodel = "gpt2"\ntrain = true\n[hardware]\nname = "dgx-h100"\n'
# Qwen3-30B-A3B over 8 H100s, experts split 8 ways, 4 microbatches of one 4,096-token sequence, the combined 1F1B
# schedule under a full-iteration graph (as tests/simulator/cli/test_schedule_recipe_flags.py's MOE)
MOE = ('metrics = ["memory_bytes", "latency_s"]\n[workload]\nmodel = "qwen3-30b-a3b"\ntrain = true\nseq = 4096\n'
       '[hardware]\nname = "dgx-h100"\n[options]\nep = 8\ndp = 8\nmicrobatch = 1\nglobal_batch = 32\n'
       'moe_a2a_overlap = true\nmoe_dispatch = "hybridep"\ncuda_graph = "full_iteration"\n[axes.options]\nmoe_rank_capacity_factor = [1.5, 3.0]\n')


def test_fields_are_plan_keys_and_defaults_keep_keys() -> None:
    assert {"cuda_graph", "moe_rank_capacity_factor", "p2p_host_sync"} <= PLAN_KEYS
    base = {"dp": 8, "ep": 8, "global_batch": 32, "moe_a2a_overlap": True, "moe_dispatch": "hybridep"}
    assert _options_identity(base) == _options_identity({**base, "cuda_graph": "", "moe_rank_capacity_factor": None})
    plan = _eval_options({**base, "cuda_graph": "full_iteration", "moe_rank_capacity_factor": 1.5}).plan
    assert (plan.cuda_graph, plan.moe_rank_capacity_factor) == ("full_iteration", 1.5)


def test_capacity_axis_moves_the_graphs_deferred_frees(tmp_path: Path) -> None:
    """By hand (the CLI test's case, HybridEP in bf16): 4 microbatches x 48 MoE layers x 1 tensor (moe_combine's
    input) x (4096 tokens x top-8 x F rows) x 2048 x 2 B held by the capture: 36 GiB at F = 1.5, 72 GiB at F = 3;
    the step time does not move."""
    f = tmp_path / "g.toml"
    f.write_text(MOE, encoding="utf-8")
    out = tmp_path / "g.sqlite"
    run_sweep(f, out, scheduler="synchronous")
    df = load_results(out)
    assert len(df) == 2 and df["error"].isna().all(), df["error"].tolist()
    rows = {float(r["options.moe_rank_capacity_factor"]): r for r in df.to_dict("records")}
    assert rows[3.0]["memory_bytes"] - rows[1.5]["memory_bytes"] == pytest.approx(36 * 2**30, rel=1e-12)
    assert rows[3.0]["latency_s"] == rows[1.5]["latency_s"]


@pytest.mark.parametrize(("options", "match"), [
    ('cuda_graph = "full_iter"', r"cuda_graph.*full_iter.*expected one of full_iteration.*did you mean"),
    ("moe_rank_capacity_factor = 0", r"moe_rank_capacity_factor.*must be > 0; got 0"),
    ('moe_rank_capacity_factor = "1.5"', r"moe_rank_capacity_factor.*not a number; got '1.5'"),
])
def test_bad_values_are_one_located_line(tmp_path: Path, options: str, match: str) -> None:
    f = tmp_path / "b.toml"
    f.write_text(HEAD + "[options]\n" + options + "\n", encoding="utf-8")
    with pytest.raises(ExperimentError, match=match) as err:
        load_experiment(f)
    assert len(err.value.problems) == 1 and "\n" not in err.value.problems[0], err.value.problems
