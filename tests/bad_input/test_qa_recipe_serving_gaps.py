"""Flags a new user's pass over the training recipes and `serve` / `tune --serve` found taken without a word or
answered with an unclear line; each is now one located line and exit 2:

* ``--recompute modules:NAME`` naming a module the model has no layer of (``moe_act`` on a dense model,
  ``mla_up_proj`` without latent attention, ``shared_experts`` on Mixtral, ``mlp`` on an all-MoE model) ran as
  ``none``; Megatron-Core itself refuses the first two (``TransformerConfig.__post_init__``);
* ``--fp8-linears`` with an 8-bit ``--dtype`` (the layers it keeps at ``--dtype`` then ran in fp8 too);
* ``serve --prefix-cache`` without a shared prefix in ``--lengths`` (nothing to reuse: the run was the run
  without it), ``serve --router least-loaded`` with one replica (nothing to route);
* ``tune`` with a serving-search option (``--slo``, ``--replicas``, ``--qps-max`` ...) but no ``--serve``, and
  ``tune --serve`` with the model search's ``--search`` / ``--trials`` / ``--all-rejected``;
* ``--hardware dgx-h100@500wx2`` read ``500wx2`` as an unknown power mode; it now names the order that works.
"""

from __future__ import annotations

import dataclasses

import pytest

from tests.bad_input.contract import cli_exit, one_line

ONE = ("predict", "gpt2", "--hardware", "h100-sxm5-80gb", "--train", "--seq", "128")
MIXTRAL = ("predict", "mixtral-8x7b", "--hardware", "dgx-h100", "--train", "--seq", "256", "--dp", "8", "--ep", "8",
           "--global-batch", "8", "--framework", "megatron-core")
SERVE = ("serve", "llama-3-8b", "--hardware", "h100-sxm5-80gb", "--requests", "4")
TUNE = ("tune", "gpt2", "--hardware", "h100-sxm5-80gb", "--phase", "decode", "--batch", "1")
TUNE_SERVE = ("tune", "llama-3-8b", "--serve", "--hardware", "h100-sxm5-80gb", "--slo", "ttft_p99<=500 ms")


@pytest.mark.parametrize(("policy", "need", "held"), [
    ("modules:moe_act", "MoE layers", "core_attn, layernorm, mlp"),
    ("modules:layernorm,mla_up_proj", "multi-latent attention", "core_attn, layernorm, mlp"),
    ("modules:moe", "MoE layers", "core_attn, layernorm, mlp"),
])
def test_recompute_module_the_dense_model_lacks(capsys: pytest.CaptureFixture[str], policy: str, need: str,
                                               held: str) -> None:
    name = policy.split(":")[1].split(",")[-1]
    rc, err = cli_exit(capsys, *ONE, "--recompute", policy)
    one_line(rc, err, f"recompute modules: {name!r} recomputes nothing; got {policy!r} on gpt2, which has no {need}; "
                      f"expected modules of its layers ({held})")


@pytest.mark.parametrize(("policy", "need"), [("modules:shared_experts", "shared experts"),
                                              ("modules:mlp", "dense MLP layers")])
def test_recompute_module_mixtral_lacks(capsys: pytest.CaptureFixture[str], policy: str, need: str) -> None:
    rc, err = cli_exit(capsys, *MIXTRAL, "--recompute", policy)
    one_line(rc, err, f"got {policy!r} on mixtral-8x7b, which has no {need}",
             "expected modules of its layers (core_attn, moe_act, layernorm, moe)")


def test_recompute_module_checked_on_the_whole_model_under_pipeline(capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = cli_exit(capsys, "predict", "gpt2", "--hardware", "dgx-h100", "--train", "--seq", "128", "--pp", "2",
                       "--dp", "4", "--global-batch", "8", "--recompute", "modules:moe_act")
    one_line(rc, err, "gpt2: recompute modules: 'moe_act' recomputes nothing", "which has no MoE layers")


def test_pipeline_stage_without_moe_layers_keeps_moe_act() -> None:
    """A stage holding only the dense first layer of a model whose other layers are MoE: ``moe_act`` names layers
    the model has, so it is taken (the check is on the whole model, not on one stage's layers)."""
    from workloads.parallel import ParallelPlan, plan_graphs
    from workloads.recompute import config_layers_held
    from workloads.zoo.transformer import zoo_config

    cfg = dataclasses.replace(zoo_config("deepseek-v3"), name="mla-tiny", vocab=256, d_model=64, layers=2, heads=4,
                              q_lora_rank=32, kv_lora_rank=16, rope_head_dim=8, head_dim=16, v_head_dim=16, d_ff=32,
                              dense_d_ff=96, shared_d_ff=32, experts=4, top_k=2, first_dense=1)
    assert config_layers_held(cfg) == {"MoE layers", "multi-latent attention", "shared experts", "dense MLP layers"}
    stages = plan_graphs(cfg, ParallelPlan(pp=2, microbatch=1, global_batch=2), seq=16, train=True,
                         recompute="modules:moe_act,mlp")
    assert [s.layers for s in stages] == [(0, 1), (1, 2)]
    assert any(op.name.endswith("moe.act@recompute") for op in stages[1].graph.ops)
    assert not any(op.kind == "moe_router" for op in stages[0].graph.ops)


@pytest.mark.parametrize("dtype", ["fp8_e4m3", "fp8", "int8"])
def test_fp8_linears_need_a_wider_dtype(capsys: pytest.CaptureFixture[str], dtype: str) -> None:
    rc, err = cli_exit(capsys, *ONE, "--dtype", dtype, "--fp8-linears", "rowwise")
    one_line(rc, err, f"predict: --fp8-linears rowwise: the other layers keep --dtype; got --dtype {dtype}; expected "
                      f"a 16- or 32-bit --dtype (bf16, fp16, fp32), or --dtype {dtype} without --fp8-linears")


@pytest.mark.parametrize("lengths", [None, "sharegpt", "fixed:in=64,out=4"])
def test_prefix_cache_needs_a_shared_prefix(capsys: pytest.CaptureFixture[str], lengths: str | None) -> None:
    extra = ("--lengths", lengths) if lengths else ()
    rc, err = cli_exit(capsys, *SERVE, "--prefix-cache", *extra)
    one_line(rc, err, f"--prefix-cache: no shared prompt prefix to reuse; got --lengths "
                      f"{lengths or 'fixed:in=512,out=128'!r}; expected --lengths ending in prefix=P")


def test_prefix_cache_without_prefix_in_the_python_api() -> None:
    from simulator.serving import ServeConfig, ServingError, simulate_serving

    with pytest.raises(ServingError, match=r"^prefix_cache: no shared prompt prefix to reuse; got lengths 'sharegpt'"):
        simulate_serving("llama-3-8b", "h100-sxm5-80gb", ServeConfig(lengths="sharegpt", prefix_cache=True,
                                                                     requests=2))


def test_least_loaded_router_needs_replicas(capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = cli_exit(capsys, *SERVE, "--router", "least-loaded")
    one_line(rc, err, "--router: spreads requests over replicas; got --router least-loaded with one replica; expected "
                      "--replicas N > 1 or --disaggregate prefill=P,decode=D")


@pytest.mark.parametrize(("argv", "flag"), [
    (("--slo", "ttft_p99<=2 s"), "--slo"), (("--replicas", "2"), "--replicas"), (("--qps-max", "100"), "--qps-max"),
    (("--lengths", "fixed:in=8,out=8"), "--lengths"), (("--kv-window-layout", "full"), "--kv-window-layout"),
    (("--probe-requests", "20"), "--probe-requests"),
])
def test_serving_search_options_need_serve(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...],
                                           flag: str) -> None:
    rc, err = cli_exit(capsys, *TUNE, *argv)
    one_line(rc, err, f"tune: {flag} is a serving-search option; got {flag} without --serve; expected --serve")


@pytest.mark.parametrize(("argv", "flag"), [(("--search", "random"), "--search"), (("--trials", "3"), "--trials"),
                                            (("--all-rejected", "--json"), "--all-rejected")])
def test_model_search_options_refused_with_serve(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...],
                                                 flag: str) -> None:
    rc, err = cli_exit(capsys, *TUNE_SERVE, *argv)
    one_line(rc, err, f"tune --serve: {flag} is a model-search option; got {flag} with --serve")


def test_power_limit_before_node_count(capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = cli_exit(capsys, "hardware", "show", "dgx-h100@500wx2")
    one_line(rc, err, "hardware 'dgx-h100@500wx2': node count after the power limit; got '@500wx2'; expected "
                      "NAMExN@<W>w, the limit last; did you mean 'dgx-h100x2@500w'?")


PLAN = ("predict", "gpt2", "--hardware", "dgx-h100", "--train", "--seq", "128", "--global-batch", "8")


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_schedule_without_pipeline(capsys: pytest.CaptureFixture[str], schedule: str) -> None:
    """``--schedule`` with ``--pp 1`` ran the data-parallel step as if it were not given."""
    rc, err = cli_exit(capsys, *PLAN, "--dp", "8", "--schedule", schedule)
    one_line(rc, err, f"predict: --schedule {schedule}: a pipeline schedule; got --pp 1, which runs no pipeline; "
                      "expected --pp > 1 (or no --schedule)")


@pytest.mark.parametrize("flag", [("--top", "3"), ("--no-aggregate",)])
def test_op_table_flags_with_a_plan(capsys: pytest.CaptureFixture[str], flag: tuple[str, ...]) -> None:
    """A plan's summary lists stages, not ops: ``--top`` / ``--no-aggregate`` changed nothing."""
    rc, err = cli_exit(capsys, *PLAN, "--pp", "2", "--dp", "4", *flag)
    one_line(rc, err, f"predict: {flag[0]}: shapes the op table of one device's step; got a parallel plan",
             f"expected no {flag[0]} with a parallel plan (every op: --csv FILE)")


def test_plan_line_names_context_parallelism(capsys: pytest.CaptureFixture[str]) -> None:
    """``--dp 4 --cp 2`` read "plan dp 4, 8 device(s)": the degrees did not multiply to the devices."""
    from simulator.cli.main import main

    assert main(["predict", "gpt2", "--hardware", "dgx-h100", "--train", "--seq", "128", "--global-batch", "4",
                 "--dp", "4", "--cp", "2"]) in (0, None)
    assert capsys.readouterr().out.splitlines()[0] == "gpt2 (train) on dgx-h100: plan dp 4, cp 2, 8 device(s)"


def test_sarathi_chunk_and_a_different_token_budget(capsys: pytest.CaptureFixture[str]) -> None:
    """Sarathi-Serve's budget is its chunk: ``--chunk 256 --max-batched-tokens 128`` ran a 256-token budget."""
    rc, err = cli_exit(capsys, *SERVE, "--scheduler", "sarathi", "--chunk", "256", "--max-batched-tokens", "128")
    one_line(rc, err, "chunk/max_batched_tokens: Sarathi-Serve's token budget per iteration is its chunk; got chunk "
                      "256 and max_batched_tokens 128; expected one of them (or both the same)")


@pytest.mark.parametrize(("argv", "flag", "stack"), [
    (("--hardware", "tpu-v5p-8", "--dp", "4", "--framework", "maxtext", "--cuda-graph", "full_iteration"),
     "--cuda-graph", "maxtext"),
    (("--hardware", "dgx-h100", "--pp", "2", "--dp", "4", "--framework", "fsdp2", "--p2p-host-sync"),
     "--p2p-host-sync", "fsdp2"),
])
def test_megatron_flags_under_another_stack(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], flag: str,
                                            stack: str) -> None:
    """CUDA graphs under MaxText on a TPU changed its step time (348 -> 364 ms for Llama 3 8B on v5p-8)."""
    rc, err = cli_exit(capsys, "predict", "gpt2", "--train", "--seq", "128", "--global-batch", "8", *argv)
    one_line(rc, err, f"predict: {flag}: a Megatron-Core setting; got --framework {stack}; expected --framework "
                      f"megatron-core or megatron-lm (or no --framework), or no {flag}")


def test_megatron_flag_on_a_tpu_without_framework(capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = cli_exit(capsys, "predict", "gpt2", "--train", "--seq", "128", "--global-batch", "4", "--hardware",
                       "tpu-v5p-8", "--dp", "4", "--cuda-graph", "full_iteration")
    one_line(rc, err, "predict: --cuda-graph: a Megatron-Core setting of NVIDIA GPUs; got tpu-v5p (Google tpu); "
                      "expected an NVIDIA GPU, or no --cuda-graph")


def test_plan_refuses_fp8_linears_with_an_fp8_step() -> None:
    """The plan layer refuses it too, so `tune` rejects an ``--dtype fp8`` x ``--fp8-linears`` configuration with
    this reason instead of ranking it."""
    from workloads.parallel import ParallelPlan, PlanError, plan_graphs

    with pytest.raises(PlanError, match=r"^gpt2: fp8_linears rowwise: the other layers keep the step's dtype; got "
                                        r"dtype fp8_e4m3; expected a 16- or 32-bit dtype"):
        plan_graphs("gpt2", ParallelPlan(), seq=64, train=True, dtype="fp8_e4m3", fp8_linears="rowwise")


def test_serve_header_names_the_power_limit(capsys: pytest.CaptureFixture[str]) -> None:
    """``serve --hardware h100-sxm5-80gb@500w`` read "on h100-sxm5-80gb", as if at the board's 700 W (predict's
    header names the limit)."""
    from simulator.cli.main import main

    assert main(["serve", "llama-3-8b", "--hardware", "h100-sxm5-80gb@500w", "--requests", "2"]) in (0, None)
    assert capsys.readouterr().out.startswith("llama-3-8b on h100-sxm5-80gb@500w (tp 1, pp 1) x 1 replica(s), ")
