"""The decode step's costs outside the transformer graph: the sampler kernels after the LM head and the
padding of a decode batch to the captured CUDA-graph sizes (vLLM V0, SGLang)."""

from __future__ import annotations

import pytest

from workloads.serving import SAMPLER_KERNELS, graph_batch, sampler_graph


def test_graph_batch_pads_to_the_next_captured_size():
    from workloads.frameworks import get_profile

    v0 = get_profile("vllm-v0").graph_batch_sizes
    assert v0[:5] == (1, 2, 4, 8, 16) and v0[-1] == 256 and len(v0) == 35  # [1, 2, 4] + 8 * (1..32)
    assert [graph_batch(b, v0) for b in (1, 3, 5, 9, 17, 250, 256, 300)] == [1, 4, 8, 16, 24, 256, 256, 300]
    sg = get_profile("sglang").graph_batch_sizes
    assert sg[-1] == 160 and graph_batch(161, sg) == 161  # past the captured sizes: no graph, no padding
    assert graph_batch(7, ()) == 7
    assert get_profile("vllm").graph_batch_sizes == () and get_profile("vllm").sampler_kernels == ()
    assert get_profile("vllm-v0").graph_batch_source and get_profile("vllm-v0").sampler_source


def test_sampler_graph_moves_the_logits_bytes_the_kernels_do():
    from workloads.zoo.transformer import zoo_config

    cfg = zoo_config("llama-3-8b")
    g = sampler_graph(cfg, n=16, kernels=SAMPLER_KERNELS)
    assert [op.name for op in g.ops] == list(SAMPLER_KERNELS)
    cast = g.ops[0]
    assert cast.inputs[0].shape == (16, 128256) and cast.inputs[0].dtype.value == "bf16"
    assert cast.outputs[0].dtype.value == "fp32"
    assert g.ops[-1].outputs[0].shape == (16,)
    with pytest.raises(ValueError, match="kernel 'topk'"):
        sampler_graph(cfg, n=1, kernels=("topk",))
    with pytest.raises(ValueError, match="n: got 0"):
        sampler_graph(cfg, n=0, kernels=())


def test_pricer_adds_the_sampler_and_pads_the_decode_batch():
    from dataclasses import replace

    from simulator.engines.analytical import EvalOptions, evaluate, spec_of
    from simulator.hardware import load_hardware
    from simulator.serving.iteration import IterationPricer
    from workloads.parallel import ParallelPlan
    from workloads.zoo.transformer import zoo_config

    hw = load_hardware("a100-sxm4-80gb")
    opts = EvalOptions(fusion=True, cuda_graphs=True)
    plain = IterationPricer("llama-3-8b", hw, ParallelPlan(), opts)
    v0 = IterationPricer("llama-3-8b", hw, ParallelPlan(), opts, sampler=SAMPLER_KERNELS,
                         graph_sizes=(1, 2, 4, 8, 16))
    rep = evaluate(sampler_graph(zoo_config("llama-3-8b"), n=9, kernels=SAMPLER_KERNELS), spec_of(hw)[0],
                   replace(opts, fusion=False))
    sampler_s = sum(r.time_s for r in rep.records)
    assert len(rep.records) == 6 and sampler_s > 6 * 1e-6  # six kernels, none free
    # the LM head of 9 rows plus the sampler of 9 rows; the token-wise work at 16 (the captured size)
    assert v0.head_point(9)[0] == pytest.approx(plain.head_point(9)[0] + sampler_s, rel=1e-9)
    want = plain.dense(16)[0] + plain.head(9)[0] + v0._sampler_point(9)[0]
    assert v0.decode_fixed(9)[0] == pytest.approx(want, rel=1e-9)
    assert v0.decode_fixed(16)[0] == pytest.approx(plain.decode_fixed(16)[0] + v0._sampler_point(16)[0], rel=1e-9)
    # an iteration with a prompt chunk is not padded
    t_v0, _ = v0.iteration([(100, 0)], 9, 300.0, 10)
    t_plain, _ = plain.iteration([(100, 0)], 9, 300.0, 10)
    assert t_v0 - t_plain == pytest.approx(v0._sampler_point(10)[0], rel=1e-6)


def test_sglang_03_prices_its_sampler_after_the_lm_head():
    """SGLang 0.3's logits processor casts to fp32, its sampler divides by the temperature, takes the softmax
    and samples with FlashInfer (one pass over the probabilities); SGLang >= 0.4 (profile sglang) is unchanged."""
    from workloads.frameworks import get_profile

    p = get_profile("sglang-0.3")
    assert p.sampler_kernels == ("to_fp32", "temperature", "softmax", "argmax")
    assert "top_k_top_p_sampling_from_probs" in p.sampler_source and ".float()" in p.sampler_source
    assert get_profile("sglang").sampler_kernels == ()
    from workloads.zoo.transformer import zoo_config

    g = sampler_graph(zoo_config("llama-3-8b"), n=24, kernels=p.sampler_kernels)
    assert [op.name for op in g.ops] == ["to_fp32", "temperature", "softmax", "argmax"]
    # the softmax and the sampling pass read the fp32 probabilities: 24 x 128,256 x 4 bytes
    assert g.ops[2].inputs[0].dtype.value == "fp32" and g.ops[3].inputs[0].shape == (24, 128256)
