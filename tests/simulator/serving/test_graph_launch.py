"""The launch of a decode step's CUDA graph: its host time by the CUDA driver form, the step's kernel nodes,
and where the serving pricer charges it.

The forms are NVIDIA's measured repeat-launch overheads of a straight-line graph ("Constant Time Launch for
Straight-Line CUDA Graphs and Other Performance Enhancements", 2024): 2 us + 200 ns per node before CUDA 12.6,
2.5 us + ~1 ns per node with CUDA 12.6 and its driver. The node counts are the kernels of one device's decode
step, counted by hand from the Llama layer (docs/serving.md, "The decode step under load")."""

from __future__ import annotations

import pytest


def _pricer(model: str, system: str, tp: int, framework: str, graph_launch: str = ""):  # noqa: ANN202
    from simulator.serving.config import ServeConfig
    from simulator.serving.iteration import IterationPricer
    from simulator.serving.setup import _eager_options, _hardware, _options
    from workloads.parallel import ParallelPlan

    opts, profile = _options(ServeConfig(framework=framework), None)
    return IterationPricer(model, _hardware(system), ParallelPlan(tp=tp), opts, dtype="bf16",
                           eager_options=_eager_options(profile, opts), graph_sizes=profile.graph_batch_sizes,
                           graph_launch=graph_launch)


def test_launch_forms_by_hand() -> None:
    from workloads.frameworks import GRAPH_LAUNCH_FORMS, graph_launch_s

    assert GRAPH_LAUNCH_FORMS == {"pre-12.6": (2.0e-6, 200e-9), "12.6": (2.5e-6, 1e-9)}
    assert graph_launch_s("pre-12.6", 1205) == pytest.approx(2e-6 + 1205 * 200e-9)  # 243.0 us
    assert graph_launch_s("pre-12.6", 1205) == pytest.approx(243.0e-6)
    assert graph_launch_s("12.6", 1205) == pytest.approx(3.705e-6)
    assert graph_launch_s("", 1205) == 0.0


@pytest.mark.parametrize(("model", "system", "tp", "nodes"), [
    # 80 layers x (2 RMSNorms, 4 GEMMs, 2 RoPE, 2 KV appends, attention, 2 residual adds, activation, gate
    # multiply = 15 kernels with the two all-reduces) + embedding, its all-reduce, final norm, LM head, gather
    ("llama-3-70b", "dgx-h100", 4, 80 * 15 + 5),
    # one GPU: no all-reduce, no gather: 32 x 13 + embedding, final norm, LM head
    ("llama-3-8b", "a100-sxm4-80gb", 1, 32 * 13 + 3),
])
def test_decode_graph_nodes_are_the_step_kernels(model: str, system: str, tp: int, nodes: int) -> None:
    assert _pricer(model, system, tp, "sglang-0.3").graph_nodes() == nodes


def test_launch_is_serial_with_a_decode_step_only_when_a_form_is_set() -> None:
    plain = _pricer("llama-3-70b", "dgx-h100", 4, "vllm-v0")
    old = _pricer("llama-3-70b", "dgx-h100", 4, "vllm-v0", graph_launch="pre-12.6")
    new = _pricer("llama-3-70b", "dgx-h100", 4, "vllm-v0", graph_launch="12.6")
    assert plain.graph_launch_time() == 0.0
    for batch in (1, 16, 40):
        base = plain.decode_fixed(batch)[0]
        assert old.decode_fixed(batch)[0] - base == pytest.approx(243.0e-6, rel=1e-9)
        assert new.decode_fixed(batch)[0] - base == pytest.approx(3.705e-6, rel=1e-9)
        assert old.step_host_time(batch) - plain.step_host_time(batch) == pytest.approx(243.0e-6, rel=1e-9)
    # a decode-only iteration through iteration() pays it too; a prompt iteration (eager, no graph) does not
    assert old.iteration([], 16, 300.0, 16)[0] - plain.iteration([], 16, 300.0, 16)[0] == pytest.approx(243.0e-6)
    assert old.iteration([(200, 0)], 0, 0.0, 1)[0] == pytest.approx(plain.iteration([(200, 0)], 0, 0.0, 1)[0])
    # a decode batch above the largest captured graph runs eagerly, and a speculative verify step (k + 1 query
    # tokens a sequence) is not the captured decode graph: neither pays the launch
    above = old.graph_sizes[-1] + 1
    assert old.decode_fixed(above)[0] == pytest.approx(plain.decode_fixed(above)[0], rel=1e-12)
    assert old.iteration([], 16, 300.0, 16, verify=4)[0] == pytest.approx(plain.iteration([], 16, 300.0, 16,
                                                                                           verify=4)[0], rel=1e-12)


def test_no_graphs_no_launch() -> None:
    """A stack that replays no CUDA graph (eager PyTorch) pays no graph launch whatever the form."""
    from simulator.serving.iteration import IterationPricer
    from simulator.serving.setup import _hardware
    from workloads.parallel import ParallelPlan

    p = IterationPricer("llama-3-8b", _hardware("a100-sxm4-80gb"), ParallelPlan(), None, graph_launch="pre-12.6")
    assert p.graph_launch_time() == 0.0


def test_engine_profiles_leave_the_unstated_driver_unapplied() -> None:
    from workloads.frameworks import get_profile

    for name in ("vllm-v0", "sglang-0.3", "sglang", "vllm", "trt-llm"):
        assert get_profile(name).graph_launch == ""
    assert "no driver version" in get_profile("vllm-v0").graph_launch_source
    assert "torch 2.4.0" in get_profile("sglang-0.3").graph_launch_source


def test_setting_overrides_the_profile_and_bad_values_are_located() -> None:
    from simulator.serving import ServeConfig, ServingError, simulate_serving
    from simulator.serving.setup import _graph_launch
    from workloads.frameworks import get_profile

    prof = get_profile("sglang-0.3")
    assert _graph_launch(ServeConfig(framework="sglang-0.3"), prof) == ""
    assert _graph_launch(ServeConfig(framework="sglang-0.3", graph_launch="pre-12.6"), prof) == "pre-12.6"
    assert _graph_launch(ServeConfig(framework="sglang-0.3", graph_launch="none"), prof) == ""
    with pytest.raises(ServingError, match=r"graph_launch: got 'pre12.6'; expected one of pre-12.6, 12.6, none.*"
                                           r"did you mean 'pre-12.6'"):
        simulate_serving("llama-3-8b", "a100-sxm4-80gb", ServeConfig(requests=2, graph_launch="pre12.6"))
    # an engine that launches step n + 1 while step n runs hides the launch: a form there is refused
    assert get_profile("sglang-0.3").waits_each_step and get_profile("vllm-v0").waits_each_step
    assert not get_profile("sglang").waits_each_step and not get_profile("vllm").waits_each_step
    with pytest.raises(ServingError, match=r"graph_launch: got 'pre-12.6' with framework 'sglang', which launches "
                                           r"each step while the one before runs"):
        _graph_launch(ServeConfig(framework="sglang", graph_launch="pre-12.6"), get_profile("sglang"))
    assert _graph_launch(ServeConfig(framework="sglang", graph_launch="none"), get_profile("sglang")) == ""


def test_the_validation_reads_a_graph_launch_setting(one_row_csv) -> None:  # noqa: ANN001
    from simulator.calibration.serving_validation import ServingDataError, read_serving_csv

    f = one_row_csv("gl.csv", settings="graph_launch=12.6", settings_source="the run's nvidia-smi")
    assert dict(read_serving_csv(f)[0].settings) == {"graph_launch": "12.6"}
    f = one_row_csv("bad.csv", settings="graph_launch=12.5", settings_source="the run's nvidia-smi")
    with pytest.raises(ServingDataError, match=r"bad.csv:2: settings: graph_launch: got '12.5'; expected one of "
                                               r"pre-12.6, 12.6, none"):
        read_serving_csv(f)
