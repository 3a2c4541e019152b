"""The eager ops and host synchronisations SGLang 0.3.0 runs around each decode-graph replay, and where the
serving pricer charges them.

Counted in the sglang==0.3.0 wheel (``workloads.frameworks._SGLANG_03_DECODE_HOST``): 26 ops and 6
synchronisations a step, each op at the device's ``efficiency.framework_op_overhead_s`` (20 us) and each
synchronisation at ``efficiency.host_sync_s`` (5.8 us): 26 x 20 + 6 x 5.8 = 554.8 us a decode step."""

from __future__ import annotations

import pytest


def _pricer(framework: str, model: str = "llama-3-8b", system: str = "a100-sxm4-80gb", tp: int = 1,
            **overrides):  # noqa: ANN003, ANN202
    from simulator.serving.config import ServeConfig
    from simulator.serving.iteration import IterationPricer
    from simulator.serving.setup import _decode_host, _eager_options, _hardware, _options
    from workloads.parallel import ParallelPlan

    config = ServeConfig(framework=framework, **overrides)
    opts, profile = _options(config, None)
    return IterationPricer(model, _hardware(system), ParallelPlan(tp=tp), opts, dtype="bf16",
                           eager_options=_eager_options(profile, opts), graph_sizes=profile.graph_batch_sizes,
                           decode_host=_decode_host(config, profile))


def test_profiles_count_the_sglang_03_step_only() -> None:
    from workloads.frameworks import PROFILES

    p = PROFILES["sglang-0.3"]
    assert (p.decode_host_ops, p.decode_host_syncs) == (26, 6)
    assert "sglang==0.3.0" in p.decode_host_source
    # engines that launch step n + 1 while step n runs, or (vLLM V0) whose step is priced by its own host line
    for name in ("vllm", "vllm-v0", "sglang", "trt-llm", "trt-llm-pytorch"):
        assert (PROFILES[name].decode_host_ops, PROFILES[name].decode_host_syncs) == (0, 0)


@pytest.mark.parametrize(("model", "system", "tp"), [("llama-3-8b", "a100-sxm4-80gb", 1),
                                                     ("llama-3-70b", "dgx-h100", 4)])
def test_decode_host_time_by_hand(model: str, system: str, tp: int) -> None:
    assert _pricer("sglang-0.3", model, system, tp).decode_host_time() == pytest.approx(26 * 20e-6 + 6 * 5.8e-6)
    assert _pricer("sglang-0.3", model, system, tp).decode_host_time() == pytest.approx(554.8e-6)
    assert _pricer("vllm-v0", model, system, tp).decode_host_time() == 0.0


def test_charged_on_graphed_decode_steps_only() -> None:
    with_ops = _pricer("sglang-0.3")
    plain = _pricer("sglang-0.3")
    plain.decode_host = (0, 0)
    for batch in (1, 9, 20, 160):
        assert with_ops.decode_fixed(batch)[0] - plain.decode_fixed(batch)[0] == pytest.approx(554.8e-6, rel=1e-9)
        assert with_ops.step_host_time(batch) - plain.step_host_time(batch) == pytest.approx(554.8e-6, rel=1e-9)
    assert with_ops.iteration([], 16, 300.0, 16)[0] - plain.iteration([], 16, 300.0, 16)[0] == pytest.approx(554.8e-6)
    # a prompt iteration runs eagerly (no graph, forward_extend) and a batch above the largest captured size
    # (160) runs without the graph: neither is CudaGraphRunner.replay's path
    assert with_ops.iteration([(200, 0)], 0, 0.0, 1)[0] == pytest.approx(plain.iteration([(200, 0)], 0, 0.0, 1)[0])
    assert with_ops.decode_fixed(161)[0] == pytest.approx(plain.decode_fixed(161)[0], rel=1e-12)


def test_a_set_iteration_host_time_replaces_it() -> None:
    from simulator.serving.config import ServeConfig
    from simulator.serving.setup import _decode_host
    from workloads.frameworks import PROFILES

    prof = PROFILES["sglang-0.3"]
    assert _decode_host(ServeConfig(framework="sglang-0.3"), prof) == (26, 6)
    assert _decode_host(ServeConfig(framework="sglang-0.3", iteration_host_s=1e-3), prof) == (0, 0)
    assert _pricer("sglang-0.3", iteration_host_s=1e-3).decode_host_time() == 0.0


def test_a_decode_batch_above_the_largest_graph_runs_eagerly() -> None:
    """SGLang 0.3.0 replays a graph only up to its largest captured batch (``CudaGraphRunner.can_run``: 160);
    above it ``ModelRunner.forward_decode`` calls the module, priced as the eager prompt iterations are."""
    p = _pricer("sglang-0.3")
    assert p.graph_sizes[-1] == 160
    assert not p.eager_decode(160) and p.eager_decode(161)
    eager = p.prefill_pricer
    assert p.decode_fixed(161) == eager.decode_fixed(161)
    assert p.decode_segment(161, 450.0) == eager.decode_segment(161, 450.0)
    assert p.iteration([], 161, 450.0, 161) == eager.iteration([], 161, 450.0, 161)
    assert p.iteration([], 160, 450.0, 160) != eager.iteration([], 160, 450.0, 160)
    # eager dispatch (20 us a framework op) costs more than the graph's 2.5 us a kernel: one more sequence past
    # the last graph lengthens the step by more than the 554.8 us of host ops it no longer pays
    assert p.decode_fixed(161)[0] > p.decode_fixed(160)[0] + 1e-3
    # vLLM V0 captures up to 256 (its default max_num_seqs); TensorRT-LLM's PyTorch backend lists no sizes
    v0 = _pricer("vllm-v0")
    assert not v0.eager_decode(256) and v0.eager_decode(257)
    assert not _pricer("trt-llm-pytorch").eager_decode(10_000)
