"""--recompute names checked against the --framework stack's own option set: a name another stack has is one
located line and exit 2 from predict (one device and plans) and tune; the stack's own names still run."""

from __future__ import annotations

import json

import pytest

from simulator.cli.main import main
from workloads.frameworks import PROFILES
from workloads.recompute import STACK_POLICIES, check_stack_policy, stack_accepts

PLAN = ("predict", "llama-3-8b", "--hardware", "dgx-h100", "--train", "--tp", "8", "--microbatch", "1", "--seq", "2048")


def test_every_profile_states_its_policies() -> None:
    # a new --framework profile must say which recomputation its stack has
    assert set(STACK_POLICIES) == set(PROFILES)


@pytest.mark.parametrize(("stack", "policy"), [
    ("megatron-core", "save_dot_except_mlpwi"), ("megatron-core", "qkv_proj_offloaded"),
    ("megatron-core", "selective-op"), ("fsdp2", "minimal"), ("fsdp2", "modules:core_attn"),
    ("fsdp2", "selective"), ("eager", "minimal"), ("automodel", "selective-op"),
    ("megatron-lm", "modules:core_attn"), ("maxtext", "modules:core_attn"), ("maxtext", "selective"),
    ("vllm", "full")])
def test_cross_stack_names_are_refused(stack: str, policy: str) -> None:
    assert not stack_accepts(policy, stack)
    with pytest.raises(ValueError, match=rf"^--recompute {policy}: --framework {stack} has no such activation "
                                         rf"recomputation; got '{policy}'"):
        check_stack_policy(policy, stack)


@pytest.mark.parametrize(("stack", "policy"), [
    ("megatron-core", "selective"), ("megatron-core", "modules:layernorm,moe_act"), ("megatron-core", "full"),
    ("megatron-lm", "selective"), ("fsdp2", "selective-op"), ("fsdp2-compile", "full"), ("automodel", "full"),
    ("maxtext", "save_dot_except_mlpwi"), ("maxtext-cf", "custom:decoder_layer_input=offload"),
    ("maxtext", "full"), ("eager", "full"), ("vllm", "none"), (None, "minimal")])
def test_each_stacks_own_names_are_accepted(stack: str | None, policy: str) -> None:
    assert stack_accepts(policy, stack) and check_stack_policy(policy, stack) == policy


def test_predict_plan_refuses_a_maxtext_policy_under_megatron(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*PLAN, "--framework", "megatron-core", "--recompute", "save_dot_except_mlpwi"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("nodeperf: error: --recompute save_dot_except_mlpwi: --framework megatron-core has no such "
                          "activation recomputation; got 'save_dot_except_mlpwi' (a MaxText remat_policy")
    assert "expected one of none, full, selective, modules:NAME,..." in err


def test_predict_one_device_and_did_you_mean(capsys: pytest.CaptureFixture[str]) -> None:
    one = ("predict", "llama-3-8b", "--hardware", "h100-sxm5-80gb", "--train", "--batch", "1", "--seq", "512")
    assert main([*one, "--framework", "fsdp2", "--recompute", "selective"]) == 2
    err = capsys.readouterr().err
    assert "expected one of none, full, selective-op; did you mean 'selective-op'?" in err


def test_tpu_maxtext_refuses_megatron_modules(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "llama-3-8b", "--hardware", "tpu-v5p-8", "--train", "--dp", "4", "--fsdp",
                 "--microbatch", "1", "--seq", "2048", "--framework", "maxtext", "--recompute", "modules:core_attn"]) == 2
    assert "Megatron-Core's recompute_modules" in capsys.readouterr().err


def test_the_stacks_own_policy_still_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*PLAN, "--framework", "megatron-core", "--recompute", "modules:core_attn", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["latency_s"] > 0


TUNE = ("tune", "llama-3-8b", "--train", "--hardware", "dgx-h100", "--tp", "8", "--pp", "1", "--dp", "1",
        "--batch", "1", "--dtype", "bf16", "--fusion", "on", "--json")


def test_tune_refuses_a_policy_no_searched_stack_has(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*TUNE, "--framework", "fsdp2,megatron-core", "--recompute", "full,minimal"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "--recompute minimal: --framework fsdp2 has no such activation recomputation" in err
    assert "(nor does --framework megatron-core)" in err


def test_tune_skips_the_pairs_a_stack_does_not_have(capsys: pytest.CaptureFixture[str]) -> None:
    # selective is Megatron's: searched under megatron-core, skipped under fsdp2 (2 stacks x 2 policies - 1 pair)
    assert main([*TUNE, "--framework", "fsdp2,megatron-core", "--recompute", "selective,full"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["space"]["size"] == 4 and doc["space"]["valid"] == 3
    pairs = sorted((r["config"]["framework"], r["config"]["recompute"]) for r in doc["best"])
    assert pairs == [("fsdp2", "full"), ("megatron-core", "full"), ("megatron-core", "selective")]
