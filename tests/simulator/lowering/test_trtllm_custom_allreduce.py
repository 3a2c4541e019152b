"""TensorRT-LLM's custom all-reduce plugin as an engine all-reduce kernel (``all_reduce_kernel = "trtllm-custom"``).

The dispatch rule is the one read from ``allreducePlugin.cpp`` / ``customAllReduceUtils.h`` at the commit the v0.9.0
rows cite (hwmodels.collectives.TRTLLM_CUSTOM_AR_RULE): the workspace bound (16,000,000 bytes on 2 GPUs, 8,000,000
above, inclusive), one-shot below 1,000,000 bytes on <= 4 GPUs and below 500,000 bytes above, the 16-byte and
16 x world-size alignments, even world sizes up to 8. Times are vLLM's one-/two-stage fits (the same algorithm) plus
the input copy the plugin's kernels make in every call."""

from __future__ import annotations

import pytest

_US = 1e-6
_MIB = 1024 * 1024
_KW = {"cuda_graphs": True, "copy_bytes_per_s": 3.35e12}


@pytest.fixture(scope="module")
def h100():  # noqa: ANN201
    from hwmodels.collectives import load_collective_system

    return load_collective_system("dgx-h100")


def _ar(size: float, n: int, system, kernel: str = "trtllm-custom", **kw):  # noqa: ANN001, ANN202
    from hwmodels.collectives import engine_all_reduce

    return engine_all_reduce(kernel, size, n, system, **{**_KW, **kw})


@pytest.mark.parametrize(("size", "n", "stage"), [
    (999_984, 4, "1stage"),      # below 1,000,000 bytes on 4 GPUs: one-shot
    (1_000_000, 4, "2stage"),    # from 1,000,000 bytes: two-shot (1,000,000 = 64 x 15,625: aligned)
    (8_000_000, 4, "2stage"),    # the workspace, inclusive
    (499_968, 6, "1stage"),      # above 4 GPUs the bound is 500,000 bytes
    (500_064, 6, "2stage"),      # 96 x 5,209: aligned for two-shot on 6 GPUs
])
def test_dispatch_by_size_and_world(h100, size: int, n: int, stage: str) -> None:  # noqa: ANN001
    assert _ar(size, n, h100).stage == stage


@pytest.mark.parametrize(("size", "n", "stage"), [
    (8_000_016, 2, "1stage"),    # above the 8,000,000-byte workspace of larger worlds: still the plugin's on 2 GPUs
    (16_000_000, 2, "1stage"),   # the 2-GPU workspace, inclusive; one-shot at every size on 2 GPUs
    (16_000_016, 2, None),       # beyond it: NCCL
    (8_000_016, 4, None),        # the same message on 4 GPUs: beyond the 8,000,000-byte workspace
])
def test_two_gpu_workspace_bound_by_the_dispatch_rule(size: int, n: int, stage: str | None) -> None:
    from hwmodels.collectives import engine_all_reduce_stage

    assert engine_all_reduce_stage("trtllm-custom", size, n) == stage


def test_two_gpus_stay_nccl_for_want_of_a_table(h100) -> None:  # noqa: ANN001
    """The plugin takes 2-GPU messages up to 16,000,000 bytes, but no 2-GPU timing of either kernel was found."""
    from hwmodels.collectives import engine_all_reduce_stage

    assert engine_all_reduce_stage("trtllm-custom", 2 * _MIB, 2) == "1stage"
    assert _ar(2 * _MIB, 2, h100) is None


def test_both_kernels_are_priced_from_one_table(h100) -> None:  # noqa: ANN001
    from hwmodels.collectives import ENGINE_ALL_REDUCE_KERNELS

    trt, vllm = ENGINE_ALL_REDUCE_KERNELS["trtllm-custom"], ENGINE_ALL_REDUCE_KERNELS["vllm-custom"]
    assert trt.fits.keys() == vllm.fits.keys() == {("nvlink4-nvswitch3", 4), ("nvlink4-nvswitch3", 6)}
    for key, fit in trt.fits.items():
        assert (fit.one_stage, fit.two_stage) == (vllm.fits[key].one_stage, vllm.fits[key].two_stage)
        assert fit.source.startswith(vllm.fits[key].source)


@pytest.mark.parametrize(("size", "n", "why"), [
    (8_000_064, 4, "above the 8,000,000-byte workspace"),
    (1_000_016, 4, "two-shot needs a multiple of 16 x 4 bytes"),
    (500_000, 6, "two-shot needs a multiple of 16 x 6 bytes"),
    (1000, 4, "not a multiple of 16 bytes"),
    (2 * _MIB, 8, "no published 8-GPU table"),
    (2 * _MIB, 3, "odd world size"),
])
def test_messages_it_hands_to_nccl(h100, size: int, n: int, why: str) -> None:  # noqa: ANN001
    assert _ar(size, n, h100) is None, why


def test_two_shot_time_is_vllms_two_stage_plus_the_input_copy(h100) -> None:  # noqa: ANN001
    """2 MiB on 4 H100s: 13.36 us + 2 MiB x 7.29 us/MiB = 27.94 us (vLLM PRs #24532 / #24111), plus the copy into the
    shared buffer, 2 x 2 MiB / 3.35 TB/s = 1.252 us, paid under CUDA graphs too (vLLM's registered buffers skip it)."""
    res = _ar(2 * _MIB, 4, h100)
    assert res.stage == "2stage"
    assert res.copy_s == pytest.approx(2 * 2 * _MIB / 3.35e12, rel=1e-12)
    assert res.time_s == pytest.approx(27.94 * _US + 1.2520310e-6, rel=1e-6)
    vllm = _ar(2 * _MIB, 4, h100, kernel="vllm-custom")
    assert vllm.copy_s == 0.0 and vllm.time_s == pytest.approx(27.94 * _US, rel=1e-9)
    assert "sgl-project/sglang PR #2511" in res.source and "sgl-project/sglang PR #2688" in res.source


def test_one_shot_below_a_megabyte_where_vllm_runs_two_stages(h100) -> None:  # noqa: ANN001
    """768 KiB on 4 GPUs: vLLM runs two stages from 512 KiB, TensorRT-LLM's plugin one shot below 1,000,000 bytes:
    6.0 + 0.75 x 8.0 = 12.0 us plus the copy (2 x 768 KiB / 3.35 TB/s = 0.4695 us)."""
    size = 768 * 1024
    res = _ar(size, 4, h100)
    assert res.stage == "1stage" and _ar(size, 4, h100, kernel="vllm-custom").stage == "2stage"
    assert res.time_s == pytest.approx(12.0 * _US + 2 * size / 3.35e12, rel=1e-9)


_SENTENCE = "All-reduces by the TensorRT-LLM custom all-reduce plugin (AUTO strategy): trtllm-build 0.9.0 enables it."


@pytest.mark.parametrize(("framework", "notes", "kernel"), [
    ("TensorRT-LLM v0.9.0 (gptSessionBenchmark)", f"Kernels launched one by one. {_SENTENCE}", "trtllm-custom"),
    ("TensorRT-LLM v0.9.0 (gptSessionBenchmark)", _SENTENCE, "trtllm-custom"),
    # the sentence on a row of another stack
    ("vLLM 0.5.0", f"Kernels launched one by one. {_SENTENCE}", "nccl"),
    ("", _SENTENCE, "nccl"),
    # the plugin named in another sentence: no switch
    ("TensorRT-LLM v0.5 (gptSessionBenchmark)", "The build does not pass --use_custom_all_reduce, so the "
     "TensorRT-LLM custom all-reduce plugin is off.", "nccl"),
    ("TensorRT-LLM v0.9.0 (gptSessionBenchmark)", "Unlike the TensorRT-LLM custom all-reduce plugin (AUTO strategy): "
     "NCCL here.", "nccl"),
])
def test_row_notes_switch_the_kernel_on(framework: str, notes: str, kernel: str) -> None:
    from simulator.calibration.predict import run_options

    row = {"source": "WhiteD2125/TensorRT-LLM docs/source/performance/perf-overview.md", "metric_reported": "",
           "dtype": "fp16", "notes": notes, "framework": framework}
    assert run_options(row)[0].all_reduce_kernel == kernel
