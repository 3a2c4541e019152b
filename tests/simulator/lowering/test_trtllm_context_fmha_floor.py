"""TensorRT-LLM's context attention (``EvalOptions.attention_kernel = "trtllm-fmha"``): its own fmha_v2 kernels, held
at least at the rate aiconfigurator measured them at on long prompts (``efficiency.context_fmha_tensor_fraction``).

Hand figures: Llama 3 70B at TP 2 (32 query heads, 4 K/V heads, head dim 128 per GPU), one causal prompt of 5,000
tokens: 4 x 128 x 32 x 5000 x 5001 / 2 = 204.84 GFLOP per layer (the pairs on and below the diagonal); at 0.481 of the H100 SXM's 989.4 TFLOP/s bf16 peak,
204.84e9 / 475.9e12 = 430.4 us of compute, where FlashAttention-3's estimate is about 320 us.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from hwmodels.catalog import load_device
from simulator.engines.analytical import EvalOptions, evaluate
from workloads.frameworks import get_profile
from workloads.serving import attention_graph
from workloads.zoo.transformer import zoo_config

CFG = zoo_config("llama-3-70b")
H100 = load_device("h100-sxm5-80gb")


def _attn(device, kernel: str, query: int, context: int = 0, batch: int = 1):
    g = attention_graph(CFG, batch=batch, query_tokens=query, tp=2, dtype="bf16", kv_dtype="fp8_e4m3",
                        kv_tokens=query + context)
    (rec,) = [r for r in evaluate(g, device, EvalOptions(attention_kernel=kernel, cuda_graphs=True)).records
              if r.kind == "attention"]
    return rec


def test_long_prompt_at_the_measured_rate():
    assert H100.efficiency.context_fmha_tensor_fraction == pytest.approx(0.481)
    trt, auto = _attn(H100, "trtllm-fmha", 5000), _attn(H100, "auto", 5000)
    assert trt.flops == pytest.approx(4 * 128 * 32 * 5000 * 5001 / 2)
    assert trt.compute_s == pytest.approx(204.84096e9 / (0.481 * 989.4e12), rel=1e-9)  # 430.4 us
    assert auto.compute_s < 0.33e-3 < 0.43e-3 < trt.time_s  # FlashAttention-3's estimate is under the floor
    assert "trtllm-fmha-rate" in trt.notes and "flash3 kernel" in trt.notes
    assert trt.dram_bytes == auto.dram_bytes  # traffic kept


def test_floor_only_where_it_binds():
    # a 500-token prompt: 2.05 GFLOP, 4.3 us at the floor, under the flash3 estimate (launch and latency included)
    assert _attn(H100, "trtllm-fmha", 500).time_s == _attn(H100, "auto", 500).time_s
    # a generation step (one query over a cache) is not a context kernel
    assert _attn(H100, "trtllm-fmha", 1, 4000, batch=8).time_s == _attn(H100, "auto", 1, 4000, batch=8).time_s


def test_no_measurement_keeps_the_flash_estimate():
    none = replace(H100, efficiency=replace(H100.efficiency, context_fmha_tensor_fraction=0.0))
    assert _attn(none, "trtllm-fmha", 5000).time_s == _attn(none, "auto", 5000).time_s


def test_tensorrt_llm_profiles_run_it():
    assert get_profile("trt-llm").attention_kernel == "trtllm-fmha"
    assert get_profile("trt-llm-pytorch").attention_kernel == "trtllm-fmha"
    assert get_profile("vllm").attention_kernel != "trtllm-fmha"
    with pytest.raises(ValueError, match="trtllm-fmha"):
        _attn(H100, "fmha", 5000)
