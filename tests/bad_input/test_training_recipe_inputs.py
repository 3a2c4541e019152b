"""Bad training recipes on the command line: one located line, exit 2 (recomputation policy, MaxText's custom
policy, offload, fp8 / int8 linear recipes, hybrid sharding, MoE capacity factor)."""

from __future__ import annotations

import pytest
from contract import cli_exit, one_line

PLAN = ("predict", "llama-3-8b", "--hardware", "dgx-h100", "--train", "--dp", "8", "--fsdp", "--microbatch", "1",
        "--global-batch", "8", "--seq", "512")


run = cli_exit


@pytest.mark.parametrize("argv, parts", [
    (("--recompute", "selctive-op"), ("--recompute", "'selctive-op'", "did you mean 'selective-op'")),
    (("--recompute", "save_qkv"), ("--recompute", "'save_qkv'", "did you mean 'save_qkv_proj'")),
    (("--offload", "activatons"), ("--offload", "'activatons'", "did you mean 'activations'")),
    (("--capacity-factor", "0"), ("--capacity-factor", "got 0", "> 0")),
    (("--capacity-factor", "-1.5"), ("--capacity-factor", "got -1.5", "> 0")),
    (("--shard-group", "3"), ("shard_group", "got 3 with dp 8", "divisor of dp")),
    (("--recompute", "custom:query_prj=offload"), ("--recompute", "unknown tensor name", "'query_prj'",
                                                   "did you mean 'query_proj'")),
    (("--recompute", "custom:out_proj=offlaod"), ("--recompute", "'out_proj'", "'offlaod'",
                                                 "did you mean 'offload'")),
    (("--recompute", "custom:decoder_layer_input=remat"), ("--recompute", "decoder_layer_input",
                                                           "expected device or offload")),
    (("--recompute", "costum:out_proj=device"), ("--recompute", "'costum:out_proj=device'", "custom:NAME=CHOICE")),
    # another stack's recomputation under --framework (they had been priced generically)
    (("--framework", "megatron-core", "--recompute", "save_dot_except_mlpwi"),
     ("--recompute save_dot_except_mlpwi", "--framework megatron-core", "a MaxText remat_policy",
      "expected one of none, full, selective, modules:NAME,...")),
    (("--framework", "fsdp2", "--recompute", "modules:core_attn"),
     ("--recompute modules:core_attn", "--framework fsdp2", "Megatron-Core's recompute_modules",
      "expected one of none, full, selective-op")),
    (("--fp8-linears", "mxfp9"), ("--fp8-linears", "'mxfp9'", "did you mean 'mxfp8'")),
    (("--fp8-linears", "curent"), ("--fp8-linears", "'curent'", "did you mean 'current'")),
    (("--fp8-linears", "mxfp8"), ("fp8_linears mxfp8", "'h100-sxm5-80gb'", "arch 'hopper'", "blackwell")),
    # advertised by --help, it reached the graph builder as an unknown optimizer ("training_graph: optimizer")
    (("--optimizer", "none"), ("--optimizer none", "parallel plan", "adamw with a plan", "on one device")),
])
def test_bad_recipe_is_one_located_line(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...],
                                        parts: tuple[str, ...]) -> None:
    rc, err = run(capsys, *PLAN, *argv)
    one_line(rc, err, *parts)


def test_offload_without_a_host_link_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = run(capsys, "predict", "gpt2", "--hardware", "jetson-agx-orin-64gb", "--train", "--microbatch", "1",
                  "--offload", "activations")
    one_line(rc, err, "offload activations", "'jetson-agx-orin-64gb'", "no host link")


def test_capacity_factor_on_a_dense_model_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = run(capsys, *PLAN, "--capacity-factor", "1.25")
    one_line(rc, err, "capacity_factor 1.25", "no experts")


PP = ("predict", "gpt2", "--hardware", "dgx-h100", "--train", "--pp", "5", "--microbatch", "1", "--seq", "128")


@pytest.mark.parametrize("argv, parts", [
    ((), ("pp 5 does not divide layers=12", "nearest pp: 4 or 6", "--stage-layers")),
    (("--stage-layers", "2,2,2,2"), ("stage_layers", "got 4 counts", "pp x interleave = 5 x 1 = 5")),
    (("--stage-layers", "2,2,2,2,2"), ("stage_layers 2,2,2,2,2 sum to 10", "layers=12")),
    (("--stage-layers", "2,0,3"), ("--stage-layers", "'2,0,3'", "positive layer counts")),
    (("--pipeline-split", "torchtitn"), ("--pipeline-split", "'torchtitn'", "did you mean 'torchtitan'")),
    (("--pipeline-split", "megatron-loss"), ("megatron-loss split", "layers + loss = 13", "pp x interleave = 5")),
])
def test_bad_pipeline_split_is_one_located_line(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...],
                                                parts: tuple[str, ...]) -> None:
    rc, err = run(capsys, *PP, *argv)
    one_line(rc, err, *parts)


def test_a_custom_policy_offload_without_a_host_link_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = run(capsys, "predict", "gpt2", "--hardware", "jetson-agx-orin-64gb", "--train", "--microbatch", "1",
                  "--recompute", "custom:decoder_layer_input=offload")
    one_line(rc, err, "offload activations", "'jetson-agx-orin-64gb'", "no host link")


@pytest.mark.parametrize("policy", ["minimal_offloaded", "custom:decoder_layer_input=offload"])
def test_an_offloaded_policy_without_a_plan_or_a_host_link_is_refused(capsys: pytest.CaptureFixture[str],
                                                                      policy: str) -> None:
    rc, err = run(capsys, "predict", "gpt2", "--hardware", "jetson-agx-orin-64gb", "--train", "--batch", "1",
                  "--seq", "128", "--recompute", policy)
    one_line(rc, err, f"--recompute {policy}", "offload activations", "'jetson-agx-orin-64gb'", "no host link")


def test_an_offloaded_policy_without_a_plan_says_the_offload_is_not_priced(capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = run(capsys, "predict", "gpt2", "--hardware", "h100-sxm5-80gb", "--train", "--batch", "1", "--seq", "128",
                  "--recompute", "minimal_offloaded")
    assert rc == 0 and "--recompute minimal_offloaded" in err and "prices no host-link time" in err


MOE = ("predict", "mixtral-8x7b", "--hardware", "dgx-h100", "--train", "--ep", "8", "--microbatch", "1",
       "--seq", "2048")


@pytest.mark.parametrize("argv, parts", [
    (("--moe-dispatch", "einsm"), ("--moe-dispatch", "'einsm'", "einsum")),
    (("--moe-dispatch", "einsum"), ("moe_dispatch", "'einsum' with no capacity_factor", "capacity factor")),
    (("--grad-reduce-dtype", "fp16"), ("--grad-reduce-dtype", "'fp16'", "fp32", "bf16")),
    (("--param-dtype", "bf61"), ("--param-dtype", "'bf61'", "fp32", "bf16")),
    (("--loss-chunks", "0"), ("--loss-chunks", "0")),
    (("--moe-routing", "round-robn"), ("--moe-routing", "'round-robn'", "round-robin")),
])
def test_bad_moe_dispatch_and_gradient_dtype_are_one_located_line(capsys: pytest.CaptureFixture[str],
                                                                  argv: tuple[str, ...],
                                                                  parts: tuple[str, ...]) -> None:
    rc, err = run(capsys, *MOE, *argv)
    one_line(rc, err, *parts)
