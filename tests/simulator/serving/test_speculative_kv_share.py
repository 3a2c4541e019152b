"""A speculative draft's KV cache takes its share of the budget: vLLM gives the draft as many blocks as the
target and sizes both so that together they use what the target's alone would have
(``vllm/spec_decode/spec_decode_worker.py`` ``SpecDecodeWorker.determine_num_available_blocks``,
``split_num_cache_blocks_evenly``). Only the draft's weights had come out of the cache: with gpt3-125m drafting
gpt3-6.7b on an H100 the target kept 7,486 blocks, where the two caches can hold 6,994 each."""

from __future__ import annotations

import math

from simulator.serving import ServeConfig, simulate_serving

BASE = dict(arrival="poisson:qps=2", lengths="fixed:in=64,out=16", requests=5)


def test_draft_cache_shares_the_budget() -> None:
    kv = simulate_serving("gpt3-6.7b", "h100-sxm5-80gb",
                          ServeConfig(**BASE, speculative="gpt3-125m,k=4,accept=0.7")).summary["kv_cache"]
    # per block of 16 tokens, bf16: 2 (K, V) x layers x heads x head_dim x 2 bytes x 16
    target, draft = 2 * 32 * 32 * 128 * 2 * 16, 2 * 12 * 12 * 64 * 2 * 16
    assert (kv["bytes_per_block_per_device"], kv["draft_bytes_per_block_per_device"]) == (target, draft) == \
        (8_388_608, 589_824)
    budget = kv["capacity_bytes_per_device"] * 0.9 - kv["weights_bytes_per_device"] - kv["activations_bytes_per_device"]
    alone = math.floor(budget / target)
    assert alone == 7486
    assert kv["blocks"] == int(alone * target / (target + draft)) == 6994
    assert kv["blocks"] * (target + draft) <= budget


def test_no_draft_keeps_the_whole_budget() -> None:
    kv = simulate_serving("gpt3-6.7b", "h100-sxm5-80gb", ServeConfig(**BASE)).summary["kv_cache"]
    assert kv["draft_bytes_per_block_per_device"] == 0.0
    budget = kv["capacity_bytes_per_device"] * 0.9 - kv["weights_bytes_per_device"] - kv["activations_bytes_per_device"]
    assert kv["blocks"] == math.floor(budget / kv["bytes_per_block_per_device"])
