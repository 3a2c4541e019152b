"""`predict --phase generate --framework P` prices a request as `serve` does for the stack P: at a trickle the two
agree for every serving profile (issue 27), including the stacks whose iteration host time, eager prompt iterations,
sampler host time or output hand-over `serve` counts (before, predict priced the GPU steps only: vllm-v0's TTFT was
24.4 ms against serve's 36.7 ms on Llama 3.1 8B, one H100, 1024 + 128 tokens)."""

from __future__ import annotations

import json

import pytest

from simulator.cli.main import main

BASE = ["llama-3.1-8b", "--hardware", "h100-sxm5-80gb"]


def _json(capsys, *argv: str) -> dict:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("stack", ["vllm", "trt-llm", "sglang", "trt-llm-pytorch", "sglang-0.3", "vllm-v0"])
def test_generate_agrees_with_serve_at_a_trickle_for_every_serving_stack(capsys, stack) -> None:
    gen = _json(capsys, "predict", *BASE, "--phase", "generate", "--input-len", "1024", "--output-len", "128",
                "--framework", stack, "--json")
    srv = _json(capsys, "serve", *BASE, "--arrival", "poisson:qps=0.02", "--lengths", "fixed:in=1024,out=128",
                "--requests", "3", "--framework", stack, "--seed", "1", "--json")
    assert gen["ttft_s"] == pytest.approx(srv["ttft_s"]["mean"], rel=0.02)
    assert gen["tpot_s"] == pytest.approx(srv["tpot_s"]["mean"], rel=0.02)
    # the GPU steps alone stay beside them, and the difference is the breakdown's host time
    assert gen["e2e_latency_s"] - gen["gpu_e2e_latency_s"] == pytest.approx(gen["breakdown"].get("host_s", 0.0),
                                                                             abs=1e-12)


@pytest.mark.parametrize(("stack", "adds"), [("vllm", False), ("trt-llm", False), ("vllm-v0", True)])
def test_the_gpu_steps_are_generate_requests_and_the_host_time_is_the_stacks(capsys, stack, adds) -> None:
    """The GPU-step figures are `generate_request`'s; vllm and trt-llm add no host time to a lone request, vllm-v0
    adds its eager prompt, its one-iteration output hand-over and its host time per step (docs/serving.md)."""
    from simulator.hardware import load_hardware
    from simulator.parallel.compose import generate_request
    from simulator.serving import ServeConfig
    from simulator.serving.setup import _options
    from workloads.parallel import ParallelPlan

    opts, _ = _options(ServeConfig(framework=stack), None)
    ref = generate_request("llama-3.1-8b", load_hardware("h100-sxm5-80gb"), ParallelPlan(), opts, input_len=1024,
                           output_len=128)
    gen = _json(capsys, "predict", *BASE, "--phase", "generate", "--input-len", "1024", "--output-len", "128",
                "--framework", stack, "--json")
    assert gen["gpu_ttft_s"] == pytest.approx(ref.extra["ttft_s"], rel=1e-12)
    assert gen["gpu_tpot_s"] == pytest.approx(ref.extra["tpot_s"], rel=1e-12)
    if adds:
        assert gen["ttft_s"] > 1.3 * gen["gpu_ttft_s"] and gen["tpot_s"] > 1.1 * gen["gpu_tpot_s"]
    else:
        assert gen["ttft_s"] == pytest.approx(gen["gpu_ttft_s"], rel=1e-9)
        assert gen["breakdown"].get("host_s", 0.0) == 0.0


def test_without_a_stack_or_beyond_tp_and_pp_generate_prices_the_gpu_steps(capsys) -> None:
    plain = _json(capsys, "predict", *BASE, "--phase", "generate", "--input-len", "512", "--output-len", "16", "--json")
    assert "gpu_ttft_s" not in plain
    dp = _json(capsys, "predict", "llama-3.1-8b", "--hardware", "dgx-h100", "--tp", "2", "--dp", "2", "--phase",
               "generate", "--input-len", "512", "--output-len", "16", "--framework", "vllm-v0", "--json")
    assert "gpu_ttft_s" not in dp  # serve runs replicas of a tp x pp plan, not data parallelism


def test_tune_ranks_a_generate_plan_by_the_figures_predict_gives(capsys) -> None:
    """One helper prices both: `tune --phase generate --framework vllm-v0` reads the plan's TTFT and TPOT as
    `predict` does (before, tune ranked by the GPU steps alone: 24.4 ms against predict's 36.7 ms)."""
    req = ("--phase", "generate", "--input-len", "1024", "--output-len", "128", "--framework", "vllm-v0")
    gen = _json(capsys, "predict", "llama-3.1-8b", "--hardware", "dgx-h100", "--tp", "1", *req, "--json")
    tuned = _json(capsys, "tune", "llama-3.1-8b", "--hardware", "dgx-h100", "--tp", "1", "--dp", "1", "--dtype",
                  "bf16", *req, "--json")
    m = tuned["best"][0]["metrics"]
    assert m["ttft_s"] == pytest.approx(gen["ttft_s"], rel=1e-12)
    assert m["tpot_s"] == pytest.approx(gen["tpot_s"], rel=1e-12)
    assert m["ttft_s"] > 1.3 * gen["gpu_ttft_s"]
