"""The tensor-parallel all-reduces of a serving decode step: how many, of what size, priced by which rule.

These pin the accounting docs/serving.md ("The decode step under load", all-reduce paragraph) compares with
the engines' own all-reduce kernels: Llama 3 70B on 4 H100s carries one all-reduce after the vocab-parallel
embedding and two a layer (attention output, MLP down projection), each of ``batch x hidden x 2`` bytes,
priced as NCCL's tuner would run them (ring, LL protocol at these sizes) where the stack hands them to NCCL, and as
vLLM's custom all-reduce (one-stage / two-stage by size, vLLM PRs #24532 / #24111) where the profile runs it."""

from __future__ import annotations

import pytest


def _decode_step(framework: str, model: str, system: str, tp: int, batch: int, kernel: str | None = None):  # noqa: ANN202
    from dataclasses import replace

    from simulator.parallel.compose import evaluate_plan
    from simulator.serving.config import ServeConfig
    from simulator.serving.setup import _hardware, _options
    from workloads.parallel import ParallelPlan

    opts, _profile = _options(ServeConfig(framework=framework), None)
    if kernel is not None:
        opts = replace(opts, all_reduce_kernel=kernel)
    return evaluate_plan(model, _hardware(system), ParallelPlan(tp=tp), opts, phase="prefill", seq=1, batch=batch,
                         dtype="bf16")


@pytest.mark.parametrize(("tp", "batch"), [(4, 16), (4, 40), (8, 64)])
def test_70b_decode_step_carries_161_allreduces_of_the_batch_activations(tp: int, batch: int) -> None:
    from hwmodels.collectives import select_algorithm

    res = _decode_step("vllm-v0", "llama-3-70b", "dgx-h100", tp, batch, kernel="nccl")
    recs = [r for rep in res.reports for r in rep.records if r.kind == "all_reduce"]
    names = [r.name for r in recs]
    assert len(recs) == 1 + 2 * 80  # embedding + (attention out, MLP down) x 80 layers
    assert names[0] == "embed.tokens_all_reduce" and names[-1] == "layers.79.mlp.down_all_reduce"
    size = batch * 8192 * 2  # bf16 activations of the batch, hidden 8192
    want = float(select_algorithm("all_reduce", size, tp, "dgx-h100").time_s)
    assert {r.rule for r in recs} == {"ring-ll-all_reduce"}  # NCCL ring, LL protocol below 1 MiB
    for r in recs:
        assert float(r.time_s) == pytest.approx(want, rel=1e-9)
    # the all-reduces are part of the step's latency (TP ranks run in lock step; nothing overlaps them)
    assert float(res.latency_s) > len(recs) * want


def test_decode_allreduce_price_grows_with_the_padded_batch_not_below_the_floor() -> None:
    """At 16-256 KiB on 4 H100s the price is the NCCL LL floor (one size-independent figure); past it it grows."""
    from hwmodels.collectives import select_algorithm

    t = [float(select_algorithm("all_reduce", b * 8192 * 2, 4, "dgx-h100").time_s) for b in (1, 8, 16, 40, 64)]
    assert t[1] == pytest.approx(t[0], rel=1e-9) and t[2] == pytest.approx(t[0], rel=1e-9)
    assert t[2] < t[3] < t[4]


_US = 1e-6
_MIB = 1024 * 1024


@pytest.mark.parametrize(("batch", "stage", "want_us"), [
    (16, "1stage", 6.0 + 8.0 * 0.25),  # 256 KiB: one-stage below 512 KiB on 4 GPUs
    (40, "2stage", 13.36 + 7.29 * 0.625 + 6.5),  # 640 KiB: two-stage, with the fence of builds before PR #8558
])
def test_vllm_and_sglang_decode_allreduce_is_the_custom_kernel(batch: int, stage: str, want_us: float) -> None:
    for fw in ("vllm-v0", "sglang-0.3"):
        res = _decode_step(fw, "llama-3-70b", "dgx-h100", 4, batch)
        recs = [r for rep in res.reports for r in rep.records if r.kind == "all_reduce"]
        assert len(recs) == 161
        assert {r.rule for r in recs} == {f"vllm-custom-2024-{stage}-all_reduce"}
        # inside the decode CUDA graph: no input copy
        assert float(recs[0].time_s) == pytest.approx(want_us * _US, rel=1e-6)


def test_custom_allreduce_shortens_the_small_batch_step_and_not_the_tensorrt_llm_one() -> None:
    nccl = _decode_step("vllm-v0", "llama-3-70b", "dgx-h100", 4, 16, kernel="nccl")
    custom = _decode_step("vllm-v0", "llama-3-70b", "dgx-h100", 4, 16)
    from hwmodels.collectives import select_algorithm

    per = float(select_algorithm("all_reduce", 16 * 8192 * 2, 4, "dgx-h100").time_s) - 8.0 * _US
    assert float(nccl.latency_s) - float(custom.latency_s) == pytest.approx(161 * per, rel=0.02)
    trt = _decode_step("trt-llm-pytorch", "llama-3-70b", "dgx-h100", 4, 16)
    recs = [r for rep in trt.reports for r in rep.records if r.kind == "all_reduce"]
    assert {r.rule for r in recs} == {"ring-ll-all_reduce"}  # no published AllReduce-plugin table: NCCL


# the published rows the fits are read from (vLLM PRs #24532 and #24111, 4 H100 SXM, CUDA graphs, ms per call)
_CA_1STAGE = {0.5: (0.010, 0.010), 1.0: (0.014, 0.015), 1.5: (0.019, 0.019), 2.0: (0.023, 0.022),
              3.0: (0.030, 0.030), 4.0: (0.038, 0.038)}
_CA_2STAGE = {0.5: (0.017, 0.017), 1.0: (0.018, 0.018), 1.5: (0.025, 0.027), 2.0: (0.026, 0.027),
              3.0: (0.035, 0.035), 4.0: (0.042, 0.043)}


@pytest.mark.parametrize(("table", "tol_us", "which"), [(_CA_1STAGE, 1.0, 0), (_CA_2STAGE, 2.7, 1)])
def test_custom_allreduce_fit_reproduces_the_published_rows(table: dict, tol_us: float, which: int) -> None:
    from hwmodels.collectives import ENGINE_ALL_REDUCE_KERNELS

    fit = ENGINE_ALL_REDUCE_KERNELS["vllm-custom"].fits[("nvlink4-nvswitch3", 4)]
    lat, per_byte = (fit.one_stage, fit.two_stage)[which]
    for mib, (a, b) in table.items():
        t = lat + mib * _MIB * per_byte
        assert abs(t - (a + b) / 2 * 1e-3) <= tol_us * _US + 1e-12, (mib, t)


def test_custom_allreduce_dispatch_limits() -> None:
    from hwmodels.collectives import engine_all_reduce, load_collective_system

    h100 = load_collective_system("dgx-h100")
    kw = {"cuda_graphs": True, "copy_bytes_per_s": 3.35e12}
    one = engine_all_reduce("vllm-custom", 512 * 1024 - 16, 4, h100, **kw)
    two = engine_all_reduce("vllm-custom", 512 * 1024, 4, h100, **kw)
    assert (one.stage, two.stage) == ("1stage", "2stage")
    assert one.time_s == pytest.approx(6.0e-6 + (512 * 1024 - 16) * 8.0e-6 / _MIB)
    assert engine_all_reduce("vllm-custom", 8 * _MIB, 4, h100, **kw) is None  # the 8 MiB buffer: NCCL
    assert engine_all_reduce("vllm-custom", 8 * _MIB - 16, 4, h100, **kw).stage == "2stage"
    assert engine_all_reduce("vllm-custom", 1000, 4, h100, **kw) is None  # not a multiple of 16 bytes: NCCL
    assert engine_all_reduce("vllm-custom", 256 * 1024, 8, h100, **kw) is None  # no 8-GPU table: NCCL
    assert engine_all_reduce("vllm-custom", 128 * 1024, 6, h100, **kw).stage == "1stage"
    assert engine_all_reduce("vllm-custom", 256 * 1024, 6, h100, **kw).stage == "2stage"  # 6 GPUs: 256 KiB
    assert engine_all_reduce("vllm-custom", 256 * 1024, 4, load_collective_system("dgx-a100"), **kw) is None
    eager = engine_all_reduce("vllm-custom", _MIB, 4, h100, cuda_graphs=False, copy_bytes_per_s=2e12)
    assert eager.copy_s == pytest.approx(2 * _MIB / 2e12)
    assert eager.time_s - engine_all_reduce("vllm-custom", _MIB, 4, h100, **kw).time_s == pytest.approx(eager.copy_s)


def test_unknown_all_reduce_kernel_is_one_located_error() -> None:
    from simulator.engines.options import EvalOptions, options_from_settings

    with pytest.raises(ValueError, match=r"all_reduce_kernel.*'vllm-custm'.*vllm-custom"):
        EvalOptions(all_reduce_kernel="vllm-custm")
    with pytest.raises(ValueError, match=r"opts\.all_reduce_kernel.*expected one of nccl, vllm-custom"):
        options_from_settings({"all_reduce_kernel": "mscclpp"}, where="opts")


@pytest.mark.parametrize(("batch", "extra_us"), [(16, 0.0), (40, 6.5)])
def test_the_2024_kernel_differs_from_the_published_one_only_in_two_stage_calls(batch: int, extra_us: float) -> None:
    """vLLM PR #8558: 6~7 us off the two-stage kernel on H100 (its __threadfence_system); one-stage unchanged."""
    new = _decode_step("vllm-v0", "llama-3-70b", "dgx-h100", 4, batch, kernel="vllm-custom")
    old = _decode_step("vllm-v0", "llama-3-70b", "dgx-h100", 4, batch, kernel="vllm-custom-2024")
    assert float(old.latency_s) - float(new.latency_s) == pytest.approx(161 * extra_us * _US, abs=1e-9)
