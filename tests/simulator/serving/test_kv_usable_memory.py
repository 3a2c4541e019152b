"""KV-cache blocks on an H100 come from the 79.18 GiB its runtime reports, not the marketed 80 GB (74.51 GiB)."""

from __future__ import annotations

from simulator.serving import ServeConfig, simulate_serving
from simulator.serving.kvcache import kv_cache_spec
from workloads.parallel import ParallelPlan
from workloads.zoo.transformer import zoo_config

GIB = 2**30
#: Llama 3.1 8B in bf16: (K, V) x 32 layers x 8 KV heads x 128 x 2 B = 128 KiB per token, 2 MiB per block of 16.
BLOCK = 16 * 2 * 32 * 8 * 128 * 2


def test_vllm_rule_by_hand_on_the_usable_figure():
    """floor((79.18 GiB x 0.9 - 16.06 GB - 0.5 GB) / 2 MiB) = floor((76,516,989,862 - 16,560,000,000) / 2,097,152)
    = 28,589 blocks; the marketed 80 GB would give floor((72e9 - 16.56e9) / 2 MiB) = 26,435."""
    args = dict(weights_bytes=16.06e9, activations_bytes=0.5e9, block_size=16, gpu_memory_utilization=0.9,
                dtype="bf16")
    kv = kv_cache_spec(zoo_config("llama-3.1-8b"), ParallelPlan(), capacity_bytes=79.18 * GIB, **args)
    assert kv.bytes_per_block == BLOCK and kv.blocks == 28589
    assert kv_cache_spec(zoo_config("llama-3.1-8b"), ParallelPlan(), capacity_bytes=80e9, **args).blocks == 26435
    # TensorRT-LLM's rule: floor((79.18 GiB - 16.56 GB) x 0.9 / 2 MiB) = 29,379
    free = kv_cache_spec(zoo_config("llama-3.1-8b"), ParallelPlan(), capacity_bytes=79.18 * GIB, sizing="free", **args)
    assert free.blocks == 29379


def test_serving_sizes_the_cache_from_the_runtime_total():
    s = simulate_serving("llama-3.1-8b", "h100-sxm5-80gb",
                         ServeConfig(arrival="burst", lengths="fixed:in=128,out=8", requests=2)).summary["kv_cache"]
    assert s["capacity_bytes_per_device"] == 79.18 * GIB
    assert s["blocks"] == int((79.18 * GIB * 0.9 - s["weights_bytes_per_device"] - s["activations_bytes_per_device"])
                              // s["bytes_per_block_per_device"])
