"""The eager ops and host synchronisations SGLang 0.3.0 runs outside the model's forward in a prompt (extend) step,
and where the serving pricer charges them.

Counted in the sglang==0.3.0 wheel (``workloads.frameworks._SGLANG_03_PROMPT_HOST``): 38 ops and 6 synchronisations a
prompt step and 2 ops more a prompt in it, each op at the device's ``efficiency.framework_op_overhead_s`` (20 us) and
each synchronisation at ``efficiency.host_sync_s`` (5.8 us): one prompt (38 + 2) x 20 + 6 x 5.8 = 834.8 us, three
prompts (38 + 6) x 20 + 34.8 = 914.8 us."""

from __future__ import annotations

import pytest


def _prompt_pricer(framework: str, model: str = "llama-3-8b", system: str = "a100-sxm4-80gb", tp: int = 1,
                   **overrides):  # noqa: ANN003, ANN202
    from simulator.serving.config import ServeConfig
    from simulator.serving.iteration import IterationPricer
    from simulator.serving.setup import (
        _decode_host,
        _eager_options,
        _hardware,
        _options,
        _prompt_host,
    )
    from workloads.parallel import ParallelPlan

    config = ServeConfig(framework=framework, **overrides)
    opts, profile = _options(config, None)
    return IterationPricer(model, _hardware(system), ParallelPlan(tp=tp), opts, dtype="bf16",
                           eager_options=_eager_options(profile, opts), graph_sizes=profile.graph_batch_sizes,
                           decode_host=_decode_host(config, profile), prompt_host=_prompt_host(config, profile))


def test_only_sglang_03_counts_prompt_host_ops() -> None:
    from workloads.frameworks import PROFILES

    p = PROFILES["sglang-0.3"]
    assert (p.prompt_host_ops, p.prompt_host_syncs, p.prompt_host_ops_per_seq) == (38, 6, 2)
    assert "sglang==0.3.0" in p.prompt_host_source and "prepare_for_extend" in p.prompt_host_source
    # vLLM V0's input preparation is inside its Vidur host line; the others overlap the host with the GPU
    for name in ("vllm", "vllm-v0", "sglang", "trt-llm", "trt-llm-pytorch"):
        prof = PROFILES[name]
        assert (prof.prompt_host_ops, prof.prompt_host_syncs, prof.prompt_host_ops_per_seq) == (0, 0, 0)


@pytest.mark.parametrize(("model", "system", "tp"), [("llama-3-8b", "a100-sxm4-80gb", 1),
                                                     ("llama-3-70b", "dgx-h100", 4)])
def test_prompt_host_time_by_hand(model: str, system: str, tp: int) -> None:
    p = _prompt_pricer("sglang-0.3", model, system, tp)
    assert p.prompt_host_time(0) == 0.0
    assert p.prompt_host_time(1) == pytest.approx((38 + 2) * 20e-6 + 6 * 5.8e-6)
    assert p.prompt_host_time(1) == pytest.approx(834.8e-6)
    assert p.prompt_host_time(3) == pytest.approx(914.8e-6)
    assert _prompt_pricer("vllm-v0", model, system, tp).prompt_host_time(1) == 0.0


def test_charged_on_prompt_iterations_only() -> None:
    with_ops = _prompt_pricer("sglang-0.3")
    plain = _prompt_pricer("sglang-0.3")
    plain.prompt_host = (0, 0, 0)
    plain.prefill_pricer.prompt_host = (0, 0, 0)
    one = with_ops.iteration([(200, 0)], 0, 0.0, 1)[0] - plain.iteration([(200, 0)], 0, 0.0, 1)[0]
    assert one == pytest.approx(834.8e-6, rel=1e-9)
    two = with_ops.iteration([(200, 0), (300, 0)], 0, 0.0, 2)[0] - plain.iteration([(200, 0), (300, 0)], 0, 0.0, 2)[0]
    assert two == pytest.approx(874.8e-6, rel=1e-9)
    # decode-only steps (graphed, and eager above the largest graph) run none of the extend path
    for batch in (1, 16, 161):
        assert with_ops.iteration([], batch, 300.0, batch) == plain.iteration([], batch, 300.0, batch)
        assert with_ops.decode_fixed(batch) == plain.decode_fixed(batch)


def test_a_set_iteration_host_time_replaces_the_prompt_ops() -> None:
    from simulator.serving.config import ServeConfig
    from simulator.serving.setup import _prompt_host
    from workloads.frameworks import PROFILES

    prof = PROFILES["sglang-0.3"]
    assert _prompt_host(ServeConfig(framework="sglang-0.3"), prof) == (38, 6, 2)
    assert _prompt_host(ServeConfig(framework="sglang-0.3", iteration_host_s=1e-3), prof) == (0, 0, 0)
    assert _prompt_pricer("sglang-0.3", iteration_host_s=1e-3).prompt_host_time(1) == 0.0


def test_a_lone_request_waits_for_the_prompt_ops() -> None:
    """One request on an idle server: its first token comes at the end of its prompt step, so its TTFT grows by
    exactly the one-prompt host time; its decode steps do not move."""
    from simulator.serving import ServeConfig, simulate_serving

    def run(**kw):  # noqa: ANN003, ANN202
        cfg = ServeConfig(framework="sglang-0.3", arrival="burst", lengths="fixed:in=256,out=8", requests=1, seed=0,
                          **kw)
        return simulate_serving("llama-3-8b", "a100-sxm4-80gb", cfg).summary

    import dataclasses

    import workloads.frameworks as fw

    base = run()
    prof = fw.PROFILES["sglang-0.3"]
    try:
        fw.PROFILES["sglang-0.3"] = dataclasses.replace(prof, prompt_host_ops=0, prompt_host_syncs=0,
                                                        prompt_host_ops_per_seq=0)
        without = run()
    finally:
        fw.PROFILES["sglang-0.3"] = prof
    assert base["prompt_host_s"] == pytest.approx(834.8e-6)
    assert without["prompt_host_s"] == 0.0
    assert base["ttft_s"]["mean"] - without["ttft_s"]["mean"] == pytest.approx(834.8e-6, rel=1e-6)
    assert base["tpot_s"]["mean"] == pytest.approx(without["tpot_s"]["mean"], rel=1e-12)
