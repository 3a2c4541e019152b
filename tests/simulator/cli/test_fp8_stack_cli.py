"""--fp8-linears recipes checked against the --framework stack that runs them: a recipe another stack runs is one
located line and exit 2 from predict (one device and plans) and tune; Megatron-Core's own spelling of current
scaling (tensorwise) is answered with the name to use; tune skips the pairs a stack lacks."""

from __future__ import annotations

import json

import pytest

from simulator.cli.main import main
from workloads.frameworks import PROFILES
from workloads.parallel import ParallelPlan, PlanError, plan_graphs
from workloads.precision import FP8_RECIPES, STACK_RECIPES, fp8_stack_problem, stack_runs_recipe
from workloads.zoo.transformer import zoo_config

PLAN = ("predict", "llama-3-8b", "--hardware", "dgx-h100", "--train", "--tp", "8", "--microbatch", "1", "--seq", "2048")
ONE = ("predict", "llama-3-8b", "--hardware", "h100-sxm5-80gb", "--train", "--microbatch", "1", "--seq", "512")


def test_every_profile_states_its_recipes() -> None:
    # a new --framework profile must say which fp8/int8 linear recipes its stack runs
    assert set(STACK_RECIPES) == set(PROFILES)
    assert all(set(r) <= set(FP8_RECIPES) for r in STACK_RECIPES.values())


@pytest.mark.parametrize(("stack", "recipes"), [
    ("megatron-core", ("delayed", "current", "mxfp8")),  # TE via Megatron-Core's --fp8-recipe (fp8_utils.py)
    ("fsdp2", ("tensorwise", "rowwise")), ("fsdp2-compile", ("tensorwise", "rowwise")),  # torchtitan: torchao
    ("fsdp2-compile-blocks", ("tensorwise", "rowwise")), ("torchtitan-eager", ("tensorwise", "rowwise")),
    ("automodel", ("tensorwise", "rowwise")), ("automodel-compile", ("tensorwise", "rowwise")),  # AutoModel: torchao
    ("maxtext", ("int8",)), ("maxtext-cf", ("int8",)), ("xla", ("int8",)),  # AQT
    ("megatron-lm", ()), ("eager", ()), ("compile", ()), ("vllm", ()), ("trt-llm", ())])
def test_each_stack_runs_its_own_recipes_only(stack: str, recipes: tuple[str, ...]) -> None:
    assert tuple(r for r in FP8_RECIPES if stack_runs_recipe(r, stack)) == recipes
    for r in FP8_RECIPES:
        assert (fp8_stack_problem(r, stack) == "") == (r in recipes)


def test_no_framework_and_aliases() -> None:
    assert all(stack_runs_recipe(r, None) and stack_runs_recipe(r, "") for r in FP8_RECIPES)
    assert stack_runs_recipe("none", "megatron-lm") and stack_runs_recipe(None, "eager")
    assert stack_runs_recipe("current", "mcore") and not stack_runs_recipe("delayed", "torchtitan")


def test_megatron_tensorwise_says_current() -> None:
    msg = fp8_stack_problem("tensorwise", "megatron-core", "--fp8-linears")
    assert msg == ("--fp8-linears tensorwise: --framework megatron-core does not run this recipe; got 'tensorwise' "
                   "(torchao Float8Linear tensorwise); expected one of delayed, current, mxfp8 (Transformer Engine "
                   "through Megatron-Core's --fp8-recipe) or no --fp8-linears; did you mean 'current'? Megatron-Core's "
                   "--fp8-recipe tensorwise is Transformer Engine's current scaling (Float8CurrentScaling)")


def test_library_refuses_te_delayed_under_torchtitan() -> None:
    cfg = zoo_config("llama-3-8b")
    with pytest.raises(PlanError, match=r"^fp8_linears delayed: --framework fsdp2 does not run this recipe; got "
                                        r"'delayed' \(Transformer Engine DelayedScaling\); expected one of tensorwise, "
                                        r"rowwise \(torchao Float8Linear, torchtitan's float8.recipe_name\)"):
        plan_graphs(cfg, ParallelPlan(), train=True, seq=256, fp8_linears="delayed", framework="fsdp2")


@pytest.mark.parametrize(("argv", "start", "tail"), [
    ((*PLAN, "--framework", "megatron-core", "--fp8-linears", "tensorwise"),
     "--fp8-linears tensorwise: --framework megatron-core does not run this recipe",
     "did you mean 'current'? Megatron-Core's --fp8-recipe tensorwise is Transformer Engine's current scaling "
     "(Float8CurrentScaling)"),
    ((*PLAN, "--framework", "fsdp2", "--fp8-linears", "delayed"),
     "--fp8-linears delayed: --framework fsdp2 does not run this recipe; got 'delayed' (Transformer Engine "
     "DelayedScaling)", "expected one of tensorwise, rowwise (torchao Float8Linear, torchtitan's float8.recipe_name)"
                        " or no --fp8-linears"),
    ((*ONE, "--framework", "fsdp2-compile", "--fp8-linears", "current"),
     "--fp8-linears current: --framework fsdp2-compile does not run this recipe",
     "did you mean 'tensorwise'? torchao's tensorwise is the current per-tensor scaling this stack runs (torchao "
     "Float8Linear, an operand cast for every GEMM that reads it)"),
    ((*ONE, "--framework", "automodel", "--fp8-linears", "mxfp8"),
     "--fp8-linears mxfp8: --framework automodel does not run this recipe; got 'mxfp8' (Transformer Engine "
     "MXFP8BlockScaling)", "expected one of tensorwise, rowwise (torchao Float8Linear, NeMo AutoModel's fp8 "
                          "recipe_name) or no --fp8-linears"),
    ((*PLAN, "--framework", "megatron-lm", "--fp8-linears", "delayed"),
     "--fp8-linears delayed: --framework megatron-lm does not run this recipe",
     "expected no --fp8-linears (--framework megatron-lm runs no fp8 or int8 linear recipe)")])
def test_predict_refuses_a_recipe_the_stack_does_not_run(argv: tuple[str, ...], start: str, tail: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("nodeperf: error: " + start) and err.rstrip().endswith(tail)


def test_the_stacks_own_recipe_still_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*PLAN, "--framework", "megatron-core", "--fp8-linears", "current", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["latency_s"] > 0


TUNE = ("tune", "llama-3-8b", "--train", "--hardware", "dgx-h100", "--tp", "8", "--pp", "1", "--dp", "1",
        "--batch", "1", "--dtype", "bf16", "--fusion", "on", "--recompute", "full", "--json")


def test_tune_refuses_a_recipe_no_searched_stack_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*TUNE, "--framework", "fsdp2,automodel", "--fp8-linears", "tensorwise,delayed"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "--fp8-linears delayed: --framework fsdp2 does not run this recipe" in err
    assert err.rstrip().endswith("(nor does --framework automodel)")


def test_tune_skips_the_pairs_a_stack_does_not_run(capsys: pytest.CaptureFixture[str]) -> None:
    # tensorwise is torchao's (fsdp2), current Transformer Engine's (megatron-core): 2 stacks x 2 recipes, 2 run
    assert main([*TUNE, "--framework", "fsdp2,megatron-core", "--fp8-linears", "tensorwise,current"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["space"]["size"] == 4 and doc["space"]["valid"] == 2
    pairs = sorted((r["config"]["framework"], r["config"]["fp8_linears"]) for r in doc["best"])
    assert pairs == [("fsdp2", "tensorwise"), ("megatron-core", "current")]
