"""`tune --train`'s training-recipe axes: named recomputation policies, fp8 linears, stack profiles,
data-parallel sharding (ZeRO, FSDP), interleaved pipelines, and plans that leave devices idle (``fill``).
Which configurations exist is counted by hand; the searched metrics are those of `predict`'s plan
composition; and a small ZeRO search has a best that the bytes of Adam decide by hand."""

from __future__ import annotations

import json

import pytest

from simulator.engines.analytical import EvalOptions
from simulator.hardware import load_hardware
from simulator.sweep.tune import TuneError, _valid_indices, tune
from simulator.sweep.tune_model import SHARDINGS, ModelProblem
from workloads.recompute import POLICIES


def _valid(problem: ModelProblem) -> list[dict[str, object]]:
    return [problem.space.config(i) for i in _valid_indices(problem) or []]


def test_custom_recompute_policies_are_axis_values() -> None:
    """MaxText custom policies search next to named ones; the CLI joins a custom policy's NAME=CHOICE items."""
    from simulator.cli.tune import _policies

    items = "full,custom:query_proj=offload,key_proj=offload,minimal,custom:out_proj=offload".split(",")
    joined = _policies(items)
    assert joined == ["full", "custom:query_proj=offload,key_proj=offload", "minimal", "custom:out_proj=offload"]
    problem = ModelProblem("gpt2", ["dgx-h100"], batch=(1,), dtypes=("bf16",), train=True, recompute=joined,
                           tp=(1,), pp=(1,), dp=(8,))
    assert {a.name: a.values for a in problem.space.axes}["recompute"] == tuple(joined)
    with pytest.raises(TuneError, match="--recompute: recompute custom: unknown tensor name; got 'query_prj'.*"
                                        "did you mean 'query_proj'"):
        ModelProblem("gpt2", ["dgx-h100"], batch=(1,), dtypes=("bf16",), train=True,
                     recompute=("custom:query_prj=offload",), tp=(1,), pp=(1,), dp=(8,))


def test_every_named_recompute_policy_is_an_axis_value() -> None:
    problem = ModelProblem("gpt2", ["dgx-h100"], batch=(1,), dtypes=("bf16",), train=True, recompute=POLICIES,
                           tp=(1,), pp=(1,), dp=(8,))
    axis = {a.name: a.values for a in problem.space.axes}["recompute"]
    assert axis == POLICIES and {"minimal", "save_qkv_proj", "selective-op", "minimal_offloaded"} <= set(axis)
    # without the flag the axis keeps its three historical values
    plain = ModelProblem("gpt2", ["dgx-h100"], batch=(1,), dtypes=("bf16",), train=True, tp=(1,), pp=(1,), dp=(8,))
    assert {a.name: a.values for a in plain.space.axes}["recompute"] == ("none", "selective", "full")
    assert "sharding" not in plain.space.names and "framework" not in plain.space.names


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"recompute": ("save_qkv",), "train": True}, "--recompute: unknown policy 'save_qkv'"),
    ({"sharding": ("zero4",), "train": True}, "did you mean 'zero3'"),
    ({"frameworks": ("megatron",), "train": True}, "--framework: unknown profile 'megatron'"),
    # a stack that runs on none of the devices: it was an empty search space that named no reason
    ({"frameworks": ("maxtext",), "train": True}, "--framework maxtext: does not run on dgx-h100 (NVIDIA gpu)"),
    ({"fp8_linears": ("tensorwise",)}, "--fp8-linears: fp8 linears are a training recipe"),
    ({"fp8_linears": ("blockwise",), "train": True}, "expected one of none, tensorwise, rowwise, delayed"),
    ({"interleave": (0,), "train": True}, "--interleave: got 0"),
    ({"fill": 1.5, "train": True}, "--fill: got 1.5"),
])
def test_bad_recipe_input_is_one_located_line(kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(TuneError) as err:
        ModelProblem("gpt2", ["dgx-h100"], batch=(1,), dtypes=("bf16",), tp=(1,), pp=(1,), dp=(8,),
                     **kwargs)  # type: ignore[arg-type]
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_recipes_need_a_plan() -> None:
    with pytest.raises(TuneError, match="training recipes of parallel plans"):
        ModelProblem("gpt2", ["h100-sxm5-80gb"], batch=(1,), dtypes=("bf16",), train=True, sharding=("zero1",))


def test_which_recipes_exist_on_which_device() -> None:
    # fp8 linears need fp8 tensor rates (H100: yes; A100, TPU v5p: no); a stack runs on the devices it names
    # (megatron-core: NVIDIA GPUs; maxtext: TPUs). dp 4 divides 8 GPUs and the 4 chips of a v5p-8.
    problem = ModelProblem("gpt2", ["dgx-h100", "dgx-a100", "tpu-v5p-8"], batch=(1,), dtypes=("bf16",), fusion=(False,), seq=128,
                           train=True, recompute=("full",), tp=(1,), pp=(1,), dp=(4,),
                           fp8_linears=("none", "delayed"), frameworks=("megatron-core", "maxtext"))
    got = sorted((c["hardware"], c["fp8_linears"], c["framework"]) for c in _valid(problem))
    assert got == [("dgx-a100", "none", "megatron-core"), ("dgx-h100", "delayed", "megatron-core"),
                   ("dgx-h100", "none", "megatron-core"), ("tpu-v5p-8", "none", "maxtext")]


def test_sharding_and_interleave_exist_only_where_they_mean_something() -> None:
    # (pp, interleave): (1, 1), (2, 1), (2, 2) -- virtual stages need a pipeline;
    # (dp, sharding): (1, none), (2, none), (2, zero1) -- nothing to shard over one replica
    problem = ModelProblem("gpt2", ["dgx-h100"], batch=(1,), dtypes=("bf16",), fusion=(False,), train=True, recompute=("full",),
                           tp=(1,), pp=(1, 2), dp=(1, 2), sharding=("none", "zero1"), interleave=(1, 2))
    valid = _valid(problem)
    assert len(valid) == 9
    assert all(c["pp"] > 1 for c in valid if c["interleave"] > 1)
    assert all(c["dp"] > 1 for c in valid if c["sharding"] != "none")
    plan = problem._plan({"tp": 2, "pp": 2, "dp": 2, "batch": 1, "sharding": "fsdp", "interleave": 2})
    assert (plan.fsdp, plan.zero, plan.schedule, plan.interleave) == (True, 3, "interleaved", 2)
    assert not plan.sequence_parallel  # only with sequence_parallel=True and tp > 1
    assert SHARDINGS["zero1"] == (1, False)


def test_global_batch_is_whole_microbatches_on_every_replica() -> None:
    # global batch 4: (dp, microbatch) with dp x microbatch dividing 4 -- (1,1) (1,2) (2,1) (2,2) (4,1)
    problem = ModelProblem("gpt2", ["dgx-h100"], batch=(1, 2), dtypes=("bf16",), fusion=(False,), train=True, recompute=("full",),
                           tp=(1,), pp=(1,), dp=(1, 2, 4, 8), global_batch=4)
    assert sorted((c["dp"], c["batch"]) for c in _valid(problem)) == [(1, 1), (1, 2), (2, 1), (2, 2), (4, 1)]


def test_fill_lets_a_plan_leave_devices_idle() -> None:
    # gpt2 on 8 GPUs, tp in {1,2,4,8}, pp in {1,3}, dp in {1,2}. Dividing 8: the 7 plans of 1, 2, 4 or 8 devices
    # with pp 1. With fill 0.7 (5.6 to 8 devices): tp8 (8), tp4 dp2 (8), tp2 pp3 (6), pp3 dp2 (6).
    kw = dict(batch=(1,), dtypes=("bf16",), fusion=(False,), train=True, recompute=("full",), tp=(1, 2, 4, 8), pp=(1, 3), dp=(1, 2))
    divides = ModelProblem("gpt2", ["dgx-h100"], **kw)  # type: ignore[arg-type]
    assert len(_valid(divides)) == 7
    filled = ModelProblem("gpt2", ["dgx-h100"], fill=0.7, **kw)  # type: ignore[arg-type]
    assert sorted((c["tp"], c["pp"], c["dp"]) for c in _valid(filled)) == [(1, 3, 2), (2, 3, 1), (4, 1, 2), (8, 1, 1)]


def test_zero_search_best_is_the_sharded_optimizer() -> None:
    """Llama 3 8B training on one DGX H100 (dp 8): unsharded, Adam's bf16 weights and gradients and fp32
    master, m and v take 16 bytes per parameter, 128 GB, more than an 80 GB H100 holds, so the search finds
    ZeRO-1 (4 + 12 / 8 = 5.5 bytes per parameter, 44 GB) and rejects the unsharded plan as not fitting. The
    best's metrics are `predict`'s plan composition with the same recipe."""
    from simulator.parallel.compose import evaluate_plan
    from workloads.parallel import ParallelPlan

    params = 8.03e9
    problem = ModelProblem("llama-3-8b", ["dgx-h100"], batch=(1,), dtypes=("bf16",), fusion=(False,), seq=512,
                           train=True, recompute=("full",), tp=(1,), pp=(1,), dp=(8,), global_batch=8,
                           sharding=("none", "zero1"), frameworks=("megatron-core",), fp8_linears=("none",))
    res = tune(problem, [], "throughput_per_s", "max", search="exhaustive", progress=False)
    assert [t.config["sharding"] for t in res.best] == ["zero1"]
    (rej,) = res.rejected
    assert rej.config["sharding"] == "none" and "does not fit" in rej.reason
    assert rej.metrics["memory_per_device"] >= 16 * params > 80e9
    best = res.best[0]
    assert 5.5 * params <= best.metrics["memory_per_device"] <= best.metrics["capacity"]
    r = evaluate_plan("llama-3-8b", load_hardware("dgx-h100"),
                      ParallelPlan(dp=8, microbatch=1, global_batch=8, zero_stage=1), EvalOptions(fusion=False),
                      train=True, seq=512, dtype="bf16", recompute="full", framework="megatron-core")
    assert best.metrics["latency_s"] == pytest.approx(r.latency_s, rel=1e-12)
    assert best.metrics["memory_per_device"] == pytest.approx(r.memory_per_device_bytes, rel=1e-12)


def test_cli_recipe_axes(capsys: pytest.CaptureFixture[str]) -> None:
    from simulator.cli.main import main

    argv = ["tune", "gpt2", "--hardware", "dgx-h100", "--train", "--seq", "128", "--batch", "1", "--dtype", "bf16",
            "--fusion", "off", "--tp", "2", "--pp", "1", "--dp", "4", "--recompute", "selective,modules:core_attn,layernorm",
            "--sharding", "zero1,fsdp", "--framework", "megatron-core", "--fp8-linears", "none",
            "--sequence-parallel", "--json"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    axes = doc["space"]["axes"]
    # Megatron-Core's own policies (a MaxText remat_policy under megatron-core is refused: test_recompute_stack_cli)
    assert axes["recompute"] == ["selective", "modules:core_attn,layernorm"] and axes["sharding"] == ["zero1", "fsdp"]
    assert axes["framework"] == ["megatron-core"] and doc["space"]["valid"] == 4
    assert main([*argv[:-1], "--sharding", "fsdp3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--sharding: unknown sharding 'fsdp3'" in err
