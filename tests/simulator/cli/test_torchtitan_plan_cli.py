"""``predict --train --framework <torchtitan profile>`` with a parallel plan: the torchtitan profiles change the
model code (complex RoPE, repeat_kv, its RMSNorm) and carry a training stack, so a plan builds them, the same step
the published-row validation predicts (the CLI once refused them as graph changes no plan builds)."""

from __future__ import annotations

import json

import pytest

from simulator.cli.main import main
from simulator.engines.options import EvalOptions
from simulator.hardware import load_hardware
from simulator.parallel.compose import evaluate_plan
from workloads.frameworks import get_profile
from workloads.parallel import ParallelPlan

_ARGV = ["predict", "llama-3-8b", "--hardware", "dgx-h100", "--train", "--dp", "8", "--microbatch", "1",
         "--global-batch", "8", "--seq", "2048", "--json"]


@pytest.mark.parametrize(("flag", "profile"), [("fsdp2-compile", "fsdp2-compile"),
                                               ("torchtitan-compile", "fsdp2-compile"),
                                               ("torchtitan-eager", "torchtitan-eager"),
                                               ("fsdp2-compile-blocks", "fsdp2-compile-blocks")])
def test_torchtitan_profile_with_a_plan_is_the_validated_step(flag: str, profile: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*_ARGV, "--framework", flag]) == 0
    got = json.loads(capsys.readouterr().out)
    plan = ParallelPlan(tp=1, pp=1, dp=8, microbatch=1, global_batch=8)
    opts = EvalOptions(**get_profile(profile).cost_options())  # the stack's costing, as the validation passes it
    ref = evaluate_plan("llama-3-8b", load_hardware("dgx-h100"), plan, opts, train=True, seq=2048, framework=profile)
    assert got["latency_s"] == pytest.approx(ref.latency_s, rel=1e-12)
    assert got["latency_s"] > 0.2  # 8B on 8 H100s, 16k tokens: about 6 x 8e9 x 16384 / 8 / (0.4 x 989e12) s


def test_a_graph_changing_profile_without_a_stack_is_still_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*_ARGV, "--framework", "cuda-graphs"]) == 2  # eager and sdpa are built by plans now
    err = capsys.readouterr().err
    assert "--framework cuda-graphs" in err and "parallel plans do not build yet" in err
