"""KV-cache sizing rules of the engine profiles: ``device`` (vLLM: ``gpu_memory_utilization`` of the device less
weights and activations) and ``free`` (TensorRT-LLM: ``free_gpu_memory_fraction`` of what is left after them)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from simulator.serving import ServeConfig, ServingError, simulate_serving
from simulator.serving.kvcache import kv_cache_spec
from workloads.frameworks import get_profile
from workloads.parallel import ParallelPlan
from workloads.zoo.transformer import zoo_config

#: Llama 3 8B's KV bytes per token in FP8: (K, V) x 32 layers x 8 KV heads x 128 x 1 B = 64 KiB.
FP8_PER_TOKEN = 2 * 32 * 8 * 128


def test_free_rule_by_hand():
    """(141 GB - 8.03 GB - 0.13 GB) x 0.95 / (16 x 64 KiB) = 120,351 blocks; the device rule, the same inputs:
    (141 GB x 0.9 - 8.03 GB - 0.13 GB) / 1 MiB = 113,239 blocks."""
    cfg = zoo_config("llama-3.1-8b")
    args = dict(capacity_bytes=141e9, weights_bytes=8.03e9, activations_bytes=0.13e9, block_size=16,
                gpu_memory_utilization=0.9, dtype="fp8_e4m3")
    free = kv_cache_spec(cfg, ParallelPlan(), sizing="free", free_gpu_memory_fraction=0.95, **args)
    assert free.bytes_per_block == 16 * FP8_PER_TOKEN == 2**20
    assert free.blocks == int((141e9 - 8.03e9 - 0.13e9) * 0.95 // 2**20) == 120351
    assert (free.sizing, free.memory_fraction) == ("free", 0.95)
    dev = kv_cache_spec(cfg, ParallelPlan(), **args)
    assert dev.blocks == int((141e9 * 0.9 - 8.03e9 - 0.13e9) // 2**20) == 113239
    assert dev.to_json()["sizing"] == "device"
    # no fraction given: TensorRT-LLM's default 0.9: (132.84 GB x 0.9) / 1 MiB = 114,017
    assert kv_cache_spec(cfg, ParallelPlan(), sizing="free", **args).blocks == 114017
    # TP2 halves the bytes per block on each device: twice the blocks of the same free memory
    tp2 = kv_cache_spec(cfg, ParallelPlan(tp=2), sizing="free", free_gpu_memory_fraction=0.95, **args)
    assert tp2.bytes_per_block == 2**19 and tp2.blocks == 240703


def test_free_rule_leaves_the_cuda_context_out():
    """TensorRT-LLM reads the memory free after its process's CUDA context exists: (141 GB - 400 MiB - 8.03 GB
    - 0.13 GB) x 0.95 / 1 MiB = floor(125,799,541,120 / 1,048,576) = 119,971 blocks, 380 fewer than without it
    (400 MiB x 0.95 / 1 MiB); the device rule ignores it (vLLM's budget counts its own allocations only)."""
    cfg = zoo_config("llama-3.1-8b")
    args = dict(capacity_bytes=141e9, weights_bytes=8.03e9, activations_bytes=0.13e9, block_size=16,
                gpu_memory_utilization=0.9, dtype="fp8_e4m3", context_bytes=400 * 2**20)
    free = kv_cache_spec(cfg, ParallelPlan(), sizing="free", free_gpu_memory_fraction=0.95, **args)
    assert free.blocks == 119971 == 120351 - 380
    assert free.to_json()["context_bytes_per_device"] == 400 * 2**20
    dev = kv_cache_spec(cfg, ParallelPlan(), **args)
    assert dev.blocks == 113239 and dev.context_bytes == 0.0


def test_free_rule_no_block_is_located():
    cfg = zoo_config("llama-3.1-8b")
    with pytest.raises(ServingError, match=r"no block fits; got \(7\.45 GiB - weights 7\.48 GiB .* x "
                                           r"free_gpu_memory_fraction 0\.9"):
        kv_cache_spec(cfg, ParallelPlan(), capacity_bytes=8e9, weights_bytes=8.03e9, activations_bytes=0.1e9,
                      block_size=16, gpu_memory_utilization=0.9, dtype="fp8_e4m3", sizing="free")


def test_profiles_name_their_rule():
    assert get_profile("trt-llm-pytorch").kv_cache_sizing == "free"
    assert get_profile("trt-llm").kv_cache_sizing == "free"
    assert "calculateFreeMemBytes" in get_profile("trt-llm").kv_cache_sizing_source
    assert get_profile("vllm").kv_cache_sizing == "device"
    assert get_profile("sglang").kv_cache_sizing == "device"


def test_serving_uses_the_profile_rule():
    """The same deployment: TensorRT-LLM's rule at 0.95 gives the cache (C - W - A) x 0.95 of the weights and
    activations the run reports; vLLM's profile keeps C x 0.9 - W - A."""
    cfg = dict(arrival="burst", lengths="fixed:in=128,out=8", requests=2, dtype="fp8_e4m3")
    trt = simulate_serving("llama-3.1-8b", "hgx-h200", ServeConfig(framework="trt-llm-pytorch",
                                                                   free_gpu_memory_fraction=0.95, **cfg)).summary
    kv = trt["kv_cache"]
    c, w, a = kv["capacity_bytes_per_device"], kv["weights_bytes_per_device"], kv["activations_bytes_per_device"]
    assert kv["context_bytes_per_device"] == 400 * 2**20  # the CUDA context is not free memory
    assert kv["sizing"] == "free" and kv["blocks"] == int((c - 400 * 2**20 - w - a) * 0.95 // 2**20)
    vllm = simulate_serving("llama-3.1-8b", "hgx-h200", ServeConfig(framework="vllm", **cfg)).summary["kv_cache"]
    assert vllm["sizing"] == "device" and vllm["context_bytes_per_device"] == 0.0
    assert vllm["blocks"] == int((vllm["capacity_bytes_per_device"] * 0.9 - vllm["weights_bytes_per_device"]
                                  - vllm["activations_bytes_per_device"]) // 2**20)


def test_fraction_on_a_device_rule_profile_is_located():
    with pytest.raises(ServingError, match=r"free_gpu_memory_fraction: got 0\.95 with framework 'vllm'.*expected "
                                           r"gpu_memory_utilization"):
        simulate_serving("llama-3.1-8b", "hgx-h200", ServeConfig(requests=2, free_gpu_memory_fraction=0.95))


@pytest.mark.parametrize("bad", [0.0, 1.0, 1.5, -0.1, float("nan"), True])
def test_bad_fraction_is_located(bad):
    with pytest.raises(ServingError, match=r"free_gpu_memory_fraction: got .*; expected a fraction in \(0, 1\)"):
        simulate_serving("llama-3.1-8b", "hgx-h200", ServeConfig(requests=2, framework="trt-llm",
                                                                 free_gpu_memory_fraction=bad))


def test_bad_fraction_flag_exits_2():
    p = subprocess.run([sys.executable, "-m", "simulator.cli", "serve", "llama-3.1-8b", "--hardware", "hgx-h200",
                        "--framework", "trt-llm", "--free-gpu-memory-fraction", "1"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2 and "--free-gpu-memory-fraction" in p.stderr and "Traceback" not in p.stderr


def test_fraction_setting_is_read_and_checked(one_row_csv):
    from simulator.calibration.serving_validation import ServingDataError, read_serving_csv

    f = one_row_csv("frac.csv", settings="free_gpu_memory_fraction=0.95", settings_source="the guide")
    assert dict(read_serving_csv(f)[0].settings) == {"free_gpu_memory_fraction": 0.95}
    f = one_row_csv("frac.csv", settings="free_gpu_memory_fraction=95", settings_source="the guide")
    with pytest.raises(ServingDataError, match=r"frac.csv:2: settings: free_gpu_memory_fraction: got '95'; expected "
                                               r"a fraction in \(0, 1\)"):
        read_serving_csv(f)
