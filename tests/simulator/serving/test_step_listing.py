"""The decode-step listing (:func:`simulator.serving.steplisting.decode_step_listing`): its parts add up to what the
serving loop charges a decode step, and its kernel counts are the model's structure, counted by hand.

Llama 3 70B (80 layers) on four GPUs: per layer four GEMMs (QKV, output projection, gate-up, down) and two
tensor-parallel all-reduces (after the output and down projections), one more all-reduce after the
vocabulary-parallel embedding: 320 GEMMs and 161 all-reduces a device; the LM head one GEMM and one all-gather;
vLLM V0's sampler six kernels (``vllm-v0`` ``sampler_kernels``); attention one kernel a layer."""

from __future__ import annotations

import pytest


def _pricer(framework: str, tp: int = 4, pp: int = 1):  # noqa: ANN202
    from simulator.serving import ServeConfig
    from simulator.serving.setup import prepare
    from workloads.parallel import ParallelPlan

    cfg = ServeConfig(arrival="poisson:qps=4", lengths="fixed:in=128,out=16", scheduler="orca", requests=2, seed=0,
                      framework=framework, dtype="bf16", mixed_prefill=False)
    return prepare("llama-3-70b", "dgx-h100", cfg, ParallelPlan(tp=tp, pp=pp)).pricer


@pytest.mark.parametrize(("framework", "tp", "pp"), [("vllm-v0", 4, 1), ("sglang-0.3", 4, 1), ("vllm-v0", 2, 2)])
def test_listing_adds_up_to_the_priced_decode_step(framework: str, tp: int, pp: int) -> None:
    from simulator.serving.steplisting import decode_step_listing

    p = _pricer(framework, tp, pp)
    rows = decode_step_listing(p, 16, 384)
    want = p.decode_fixed(16)[0] + p.decode_segment(16, 384)[1]
    assert sum(r.seconds for r in rows) == pytest.approx(want, rel=1e-9)


def test_listing_counts_the_kernels_of_a_tp4_llama_70b_step() -> None:
    from simulator.serving.steplisting import decode_step_listing

    rows = decode_step_listing(_pricer("vllm-v0"), 16, 384)

    def kernels(part: str, kind: str) -> int:
        return sum(r.kernels for r in rows if r.part == part and r.kind == kind)

    assert kernels("token-wise", "matmul") == 4 * 80
    assert kernels("token-wise", "all_reduce") == 2 * 80 + 1
    assert (kernels("lm head", "matmul"), kernels("lm head", "all_gather")) == (1, 1)
    assert [r.kind for r in rows if r.part == "sampler"] == ["to_fp32", "temperature", "softmax", "log_softmax",
                                                             "gather_rows", "argmax"]
    assert kernels("attention", "attention") == 80
    host = {r.kind: r.seconds for r in rows if r.part == "host"}
    # the vllm-v0 profile's lines at 16 sequences: 0.28 ms + 16 x 0.0296 ms, and 0.623 ms + 16 x 0.007 ms
    assert host["profile host line"] == pytest.approx(0.28e-3 + 16 * 0.0296e-3, rel=1e-12)
    assert host["sampler call"] == pytest.approx(0.617e-3 + 16 * 0.00708e-3, rel=1e-12)


def test_listing_of_a_two_stage_plan_lists_each_stage_and_the_head_on_the_last() -> None:
    """tp 2 x pp 2: each stage 40 layers (four GEMMs and two all-reduces a layer, the embedding's all-reduce on the
    first stage), one hand-off send from the first stage; the LM head on the last."""
    from simulator.serving.steplisting import decode_step_listing

    rows = decode_step_listing(_pricer("vllm-v0", 2, 2), 16, 384)

    def kernels(part: str, kind: str, stage: int) -> int:
        return sum(r.kernels for r in rows if (r.part, r.kind, r.stage) == (part, kind, stage))

    assert [kernels("token-wise", "matmul", s) for s in (0, 1)] == [4 * 40, 4 * 40]
    assert [kernels("token-wise", "all_reduce", s) for s in (0, 1)] == [2 * 40 + 1, 2 * 40]
    assert kernels("token-wise", "send", 0) == 1
    assert [kernels("lm head", "matmul", s) for s in (0, 1)] == [0, 1]
    assert {r.stage for r in rows if r.part == "sampler"} == {1}


@pytest.mark.parametrize(("batch", "why"), [(0, "got 0, below 1"), (17, "got 17, between bucket points 16 and 18"),
                                            (300, "got 300, between bucket points 288 and 320"),
                                            (1024, "got 1024, above the largest captured graph")])
def test_listing_refuses_a_batch_off_the_buckets(batch: int, why: str) -> None:
    from simulator.serving import ServingError
    from simulator.serving.steplisting import decode_step_listing

    with pytest.raises(ServingError, match=f"batch: {why}.*; expected a bucket point"):
        decode_step_listing(_pricer("vllm-v0"), batch, 384)


def test_vllm_v0_step_carries_ten_input_broadcasts_and_sglang_none() -> None:
    """vLLM 0.6.0 re-sends the model input every step (``broadcast_tensor_dict``: ten non-empty GPU tensors of a
    decode step, each one NCCL broadcast over the four ranks): 10 x the fabric model's small broadcast on four
    H100s, 8.42 us at 128 bytes (16 int64s) by its ring LL line (8.41 us at 64 B, 8.54 at 1 KiB); SGLang 0.3's
    ranks schedule for themselves (none)."""
    from hwmodels.collectives import select_algorithm
    from simulator.serving.steplisting import decode_step_listing

    one = float(select_algorithm("broadcast", 8 * 16, 4, "dgx-h100").time_s)
    assert one == pytest.approx(8.42e-6, abs=0.01e-6)
    for fw, n in (("vllm-v0", 10), ("sglang-0.3", 0)):
        row = next(r for r in decode_step_listing(_pricer(fw), 16, 384) if r.part == "input broadcast")
        assert (row.kernels, row.seconds) == (n, pytest.approx(n * one, rel=1e-12))


def test_one_device_has_no_input_broadcast() -> None:
    from simulator.serving import ServeConfig
    from simulator.serving.setup import prepare
    from workloads.parallel import ParallelPlan

    cfg = ServeConfig(arrival="poisson:qps=4", lengths="fixed:in=128,out=16", scheduler="orca", requests=2, seed=0,
                      framework="vllm-v0", dtype="bf16", mixed_prefill=False)
    p = prepare("llama-3-8b", "a100-sxm4-80gb", cfg, ParallelPlan(tp=1)).pricer
    assert p.step_broadcasts == 10 and p.step_broadcast_time(16) == 0.0
