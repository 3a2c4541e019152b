"""The KV cache of sliding-window layers as vLLM V1's hybrid KV cache manager holds it (layout ``vllm-hybrid``:
layer groups sharing one pool of pages, window groups freeing the blocks behind their window) against every
layer at full context (layout ``full``, every other stack)."""

from __future__ import annotations

from collections import deque
from dataclasses import replace

import pytest

from simulator.serving import ServeConfig, ServingError, simulate_serving
from simulator.serving.kvcache import held_blocks, kv_cache_spec, kv_groups
from simulator.serving.scheduler import Limits, Seq, plan_iteration
from workloads.frameworks import get_profile
from workloads.parallel import ParallelPlan
from workloads.zoo.transformer import zoo_config

GIB = 2**30
#: H100 SXM5 80 GB as its runtime reports it (memory.hbm.usable_bytes: 79.18 GiB)
H100 = 79.18 * GIB
#: the device rule's inputs of gpt-oss-20b (bf16 weights) on one H100, as `serve` predicts them
GPT_OSS_20B = dict(capacity_bytes=H100, weights_bytes=41816238720.0, activations_bytes=802357248.0, block_size=16,
                   gpu_memory_utilization=0.9)
#: 79.18 GiB x 0.9 - 41,816,238,720 - 802,357,248 = 33,898,393,893.9 bytes for the cache
GPT_OSS_20B_FREE = 85018877624.32 * 0.9 - 41816238720.0 - 802357248.0


def test_groups_follow_vllms_group_size_rule():
    # gpt-oss: 12 (20b) / 18 (120b) window-128 layers and as many full ones -> two groups of 12 / 18 layers.
    # Gemma 3 12B: 40 window-1024 layers, 8 global -> group size 8 (40 >= 1.5 x 8): 5 window groups + 1 global.
    assert kv_groups(zoo_config("gpt-oss-20b"), layout="vllm-hybrid") == (12, ((128, 1), (0, 1)))
    assert kv_groups(zoo_config("gpt-oss-120b"), layout="vllm-hybrid") == (18, ((128, 1), (0, 1)))
    assert kv_groups(zoo_config("gemma3-12b"), layout="vllm-hybrid") == (8, ((1024, 5), (0, 1)))
    assert kv_groups(zoo_config("gemma3-12b"), layout="full") == (48, ((0, 1),))
    # pipeline stages: each stage's layers of each type (gemma3-12b, pp 2: 20 local, 4 global -> 5 + 1 groups of 4)
    assert kv_groups(zoo_config("gemma3-12b"), pp=2, layout="vllm-hybrid") == (4, ((1024, 5), (0, 1)))
    assert kv_groups(zoo_config("llama-3-8b"), layout="vllm-hybrid") == (32, ((0, 1),))
    # every layer local (Mistral 7B v0.1's sliding_window 4096): one group of 32 layers that frees as a window group
    mistral = replace(zoo_config("mistral-7b"), sliding_window=4096)
    assert kv_groups(mistral, layout="vllm-hybrid") == (32, ((4096, 1),))
    assert kv_groups(mistral, layout="full") == (32, ((0, 1),))
    with pytest.raises(ServingError, match="kv_window_layout: got 'hybrid'"):
        kv_groups(zoo_config("gemma3-12b"), layout="hybrid")


def test_held_blocks_by_hand():
    g = ((128, 1), (0, 1))
    # 8192 tokens, 8191 computed (the last decode): full group 512 blocks; the window group skips
    # (8191 - 128 + 1) // 16 = 504 of its 512 -> 8; 520 in all. A prompt prefilled in one chunk holds 2 x 512.
    assert held_blocks(8192, 8191, 16, g) == 520
    assert held_blocks(8192, 0, 16, g) == 1024
    # Gemma 3: 5 window-1024 groups skip (8191 - 1023) // 16 = 448 of 512 -> 64 each; 512 + 320 = 832
    assert held_blocks(8192, 8191, 16, ((1024, 5), (0, 1))) == 832
    # a window longer than the context skips nothing
    assert held_blocks(100, 99, 16, ((4096, 1), (0, 1))) == 14
    assert held_blocks(8192, 8191, 16, ((0, 1),)) == 512


def test_gpt_oss_20b_on_one_h100_before_and_after():
    cfg = zoo_config("gpt-oss-20b")
    full = kv_cache_spec(cfg, ParallelPlan(), dtype="bf16", **GPT_OSS_20B)
    hyb = kv_cache_spec(cfg, ParallelPlan(), dtype="bf16", window_layout="vllm-hybrid", **GPT_OSS_20B)
    # full: a block is 16 tokens x 2 (K, V) x 24 layers x 8 KV heads x 64 x 2 B = 786,432 B -> 43,104 blocks;
    # 8192-token requests take 512 each: 84 at once
    assert full.bytes_per_block == 786432 and full.blocks == int(GPT_OSS_20B_FREE // 786432) == 43104
    assert full.blocks // 512 == 84
    # hybrid: a page of 12 layers, 393,216 B -> 86,208 blocks; a decoding 8192-token request holds 520: 165 at once
    assert hyb.bytes_per_block == 393216 and hyb.blocks == 86208 and hyb.group_layers == 12
    assert hyb.blocks // held_blocks(8192, 8191, 16, hyb.groups) == 165
    # fp8 KV halves every page: 172,416 blocks, 331 requests of 8192 tokens (168 at full context)
    fp8 = kv_cache_spec(cfg, ParallelPlan(), dtype="fp8", window_layout="vllm-hybrid", **GPT_OSS_20B)
    assert fp8.bytes_per_block == 196608 and fp8.blocks == 172416 and fp8.blocks // 520 == 331
    assert kv_cache_spec(cfg, ParallelPlan(), dtype="fp8", **GPT_OSS_20B).blocks // 512 == 168


def test_gemma3_12b_on_one_h100_before_and_after():
    cfg = zoo_config("gemma3-12b")
    args = dict(capacity_bytes=H100, weights_bytes=23531576832.0, activations_bytes=1069547520.0, block_size=16,
                gpu_memory_utilization=0.9, dtype="bf16")
    free = 85018877624.32 * 0.9 - 23531576832.0 - 1069547520.0
    full = kv_cache_spec(cfg, ParallelPlan(), **args)
    hyb = kv_cache_spec(cfg, ParallelPlan(), window_layout="vllm-hybrid", **args)
    # 16 x 2 x 48 layers x 8 x 256 x 2 B = 6 MiB a block -> 8,251 blocks, 16 requests of 8192 tokens
    assert full.bytes_per_block == 6 * 2**20 and full.blocks == int(free // (6 * 2**20)) == 8251
    assert full.blocks // 512 == 16
    # pages of 8 layers (1 MiB) -> 49,510 blocks; 832 per decoding 8192-token request -> 59
    assert hyb.bytes_per_block == 2**20 and hyb.blocks == int(free // 2**20) == 49510
    assert hyb.blocks // 832 == 59


def test_a_model_without_windows_is_unchanged():
    cfg = zoo_config("llama-3-8b")
    args = dict(capacity_bytes=H100, weights_bytes=16060522496.0, activations_bytes=1006632960.0, block_size=16,
                gpu_memory_utilization=0.9, dtype="bf16")
    full, hyb = kv_cache_spec(cfg, ParallelPlan(), **args), kv_cache_spec(cfg, ParallelPlan(),
                                                                             window_layout="vllm-hybrid", **args)
    assert (full.blocks, full.bytes_per_block) == (hyb.blocks, hyb.bytes_per_block) == (28347, 2 * 2**20)
    assert not hyb.hybrid


def test_window_blocks_are_freed_as_decoding_advances():
    # one gpt-oss-like request of an 8000-token prompt: its prefill (one chunk) takes 500 blocks in each group;
    # its first decode (computed 8000, a slot for token 8001) holds 501 + (501 - (8000 - 127) // 16) = 510
    lim = Limits("vllm", max_num_seqs=8, budget=8192, block_size=16, shared_blocks=0, swap=False,
                 groups=((128, 1), (0, 1)))
    s = Seq(0, 0.0, 8000, 64)
    running, waiting, free = [], deque([s]), [2000]
    plan = plan_iteration(running, waiting, free, lim)
    assert plan.work == [(s, 8000)] and s.blocks == 1000 and free == [1000]
    s.computed, s.generated = 8000, 1
    plan_iteration(running, deque(), free, lim)
    assert s.blocks == 510 and free == [1490]
    # the same request with every layer at full context keeps its 501 blocks of 24 layers
    full = Limits("vllm", max_num_seqs=8, budget=8192, block_size=16, shared_blocks=0, swap=False)
    t = Seq(1, 0.0, 8000, 64)
    running2, free2 = [], [2000]
    plan_iteration(running2, deque([t]), free2, full)
    t.computed, t.generated = 8000, 1
    plan_iteration(running2, deque(), free2, full)
    assert t.blocks == 501 and free2 == [1499]


def test_vllm_profile_holds_windows_and_the_full_layout_queues_more():
    assert get_profile("vllm").kv_window_layout == "vllm-hybrid"
    assert {get_profile(n).kv_window_layout for n in ("vllm-v0", "sglang", "sglang-0.3", "trt-llm",
                                                      "trt-llm-pytorch")} == {"full"}
    # a cache of 131 blocks of 24 layers (gpu_memory_utilization 0.5025): two 1000-token prompts are admitted
    # (63 + 63 blocks) but two 1100-token requests need 2 x 69 = 138, so at full context the later one is
    # preempted while they decode (at 1040 tokens: 2 x 66 = 132 > 131). The hybrid pool (262 pages of 12 layers)
    # holds both: 126 each during their one-chunk prefill, then 63 + (63 - (1000 - 127) // 16) = 9 -> 72, at
    # most 69 + 9 = 78 each; pairs run together and nothing is preempted.
    runs = {}
    for lay in ("full", "vllm-hybrid"):
        runs[lay] = simulate_serving("gpt-oss-20b", "h100-sxm5-80gb", ServeConfig(
            arrival="burst", lengths="fixed:in=1000,out=100", requests=4, gpu_memory_utilization=0.5025,
            kv_window_layout=lay))
    full, hyb = runs["full"], runs["vllm-hybrid"]
    assert full.summary["kv_cache"]["blocks"] == 131 and hyb.summary["kv_cache"]["blocks"] == 262
    assert full.summary["preemptions"] >= 1 and hyb.summary["preemptions"] == 0
    fin = [r.finish_s for r in hyb.requests]
    assert fin[0] == fin[1] and fin[2] == fin[3] and fin[2] > fin[1]
    assert hyb.summary["makespan_s"] < full.summary["makespan_s"]


def test_bad_layout_is_refused():
    with pytest.raises(ServingError, match="kv_window_layout: got 'hybrid'; expected one of full, vllm-hybrid"):
        simulate_serving("gpt-oss-20b", "h100-sxm5-80gb", ServeConfig(arrival="burst", lengths="fixed:in=16,out=2",
                                                                      requests=1, kv_window_layout="hybrid"))
