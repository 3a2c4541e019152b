"""SGLang's hybrid SWA memory (layout ``sglang-swa``): a pool of tokens for the full-attention layers and one for the
sliding-window layers, split by ``swa_full_tokens_ratio`` (0.8), admission needing room in both, the window pool
freeing a request's tokens outside its window; and the ``serve --kv-window-layout`` flag."""

from __future__ import annotations

from collections import deque

import pytest

from simulator.serving import ServeConfig, ServingError, simulate_serving
from simulator.serving.kvcache import (
    held_blocks,
    kv_cache_spec,
    sglang_swa_layers,
    sglang_swa_pools,
)
from simulator.serving.scheduler import Limits, Seq, plan_iteration
from workloads.frameworks import get_profile
from workloads.parallel import ParallelPlan
from workloads.zoo.transformer import zoo_config

GIB = 2**30
#: H100 SXM5 80 GB as its runtime reports it (memory.hbm.usable_bytes: 79.18 GiB), 0.9 of it for the engine
H100 = 79.18 * GIB
#: the device rule's inputs of gpt-oss-20b (bf16 weights) on one H100 (as test_sliding_window_kv.py)
GPT_OSS_20B = dict(capacity_bytes=H100, weights_bytes=41816238720.0, activations_bytes=802357248.0, block_size=16,
                   gpu_memory_utilization=0.9, dtype="bf16")
GEMMA3_12B = dict(capacity_bytes=H100, weights_bytes=23531576832.0, activations_bytes=1069547520.0, block_size=16,
                  gpu_memory_utilization=0.9, dtype="bf16")


def test_layers_and_the_pool_split_by_hand():
    assert sglang_swa_layers(zoo_config("gpt-oss-20b")) == ((128, 12), 12)
    assert sglang_swa_layers(zoo_config("gemma3-12b")) == ((1024, 40), 8)
    assert sglang_swa_layers(zoo_config("llama-3-8b")) is None
    # T per-layer tokens of 24 layers, 12 of them windowed: full = int(T x 24 / (0.8 x 12 + 12)) = T / 0.9, in
    # floating point as SGLang computes it (0.8 x 12 = 9.600000000000001): 900,000 -> 999,999, then int(x 0.8)
    assert sglang_swa_pools(900_000, 12, 12, 1) == (999_999, 799_999)
    assert sglang_swa_pools(1_000_000, 12, 12, 1) == (1_111_111, 888_888)
    # page-aligned to 16 tokens: 999,999 // 16 = 62,499 and 799,999 // 16 = 49,999
    assert sglang_swa_pools(900_000, 12, 12, 16) == (62_499, 49_999)


def test_gpt_oss_20b_on_one_h100_before_and_after():
    cfg = zoo_config("gpt-oss-20b")
    full = kv_cache_spec(cfg, ParallelPlan(), **GPT_OSS_20B)
    swa = kv_cache_spec(cfg, ParallelPlan(), window_layout="sglang-swa", **GPT_OSS_20B)
    # full: 43,104 blocks of 24 layers = 689,664 tokens at every layer. SGLang's split:
    # int(689,664 x 24 / 21.6) = 766,293 full-layer tokens -> 47,893 blocks of 16; int(766,293 x 0.8) = 613,034
    # window-layer tokens -> 38,314 blocks; each block 16 x 2 x 12 layers x 8 heads x 64 x 2 B = 393,216 B
    assert full.blocks == 43104 and full.tokens == 689664
    assert (swa.blocks, swa.swa_blocks, swa.swa_window) == (47893, 38314, 128)
    assert swa.bytes_per_block == swa.swa_bytes_per_block == 393216
    # both pools fit what the full layout had: (47,893 + 38,314) x 393,216 <= 43,104 x 786,432 + one block
    assert (swa.blocks + swa.swa_blocks) * 393216 <= (full.blocks + 1) * 786432
    # 8192-token requests decoding: full pool 512 blocks each -> 93 (84 before); window pool 8 each -> 4,789
    assert full.blocks // 512 == 84 and swa.blocks // 512 == 93
    assert held_blocks(8192, 8191, 16, ((128, 1),)) == 8 and swa.swa_blocks // 8 == 4789


def test_gemma3_12b_on_one_h100_before_and_after():
    cfg = zoo_config("gemma3-12b")
    full = kv_cache_spec(cfg, ParallelPlan(), **GEMMA3_12B)
    swa = kv_cache_spec(cfg, ParallelPlan(), window_layout="sglang-swa", **GEMMA3_12B)
    # full: 8,251 blocks of 6 MiB; 132,016 tokens (int(free / 393,216 B a token) = 132,030, page-aligned).
    # int(132,016 x 48 / (0.8 x 40 + 8)) = 158,419 -> 9,901 blocks of 8 layers (1 MiB);
    # int(158,419 x 0.8) = 126,735 -> 7,920 blocks of 40 layers (5 MiB)
    assert full.blocks == 8251
    assert (swa.blocks, swa.swa_blocks, swa.swa_window) == (9901, 7920, 1024)
    assert swa.bytes_per_block == 2**20 and swa.swa_bytes_per_block == 5 * 2**20
    # 8192-token requests decoding: 512 full-pool blocks (19 at once; 16 before, vLLM's hybrid manager 59) and
    # 512 - (8191 - 1023) // 16 = 64 window-pool blocks (123 at once): the full pool binds
    assert full.blocks // 512 == 16 and swa.blocks // 512 == 19
    assert held_blocks(8192, 8191, 16, ((1024, 1),)) == 64 and swa.swa_blocks // 64 == 123
    # 1,000-token requests sit inside the window: 63 blocks in each pool, the window pool binds (125 at once, 157
    # by the full pool)
    assert swa.swa_blocks // 63 == 125 and swa.blocks // 63 == 157


def test_a_model_without_windows_is_unchanged():
    cfg = zoo_config("llama-3-8b")
    args = dict(capacity_bytes=H100, weights_bytes=16060522496.0, activations_bytes=1006632960.0, block_size=16,
                gpu_memory_utilization=0.9, dtype="bf16")
    full = kv_cache_spec(cfg, ParallelPlan(), **args)
    swa = kv_cache_spec(cfg, ParallelPlan(), window_layout="sglang-swa", **args)
    assert (full.blocks, full.bytes_per_block) == (swa.blocks, swa.bytes_per_block) == (28347, 2 * 2**20)
    assert swa.swa_blocks == 0 and not swa.hybrid


def _check(running: list[Seq], free: list[int], totals: tuple[int, int]) -> None:
    assert sum(s.blocks for s in running) + free[0] == totals[0]
    assert sum(s.swa for s in running) + free[1] == totals[1]


def test_admission_needs_room_in_both_pools_and_the_window_pool_frees():
    lim = Limits("vllm", max_num_seqs=8, budget=8192, block_size=16, shared_blocks=0, swap=False, swa_window=128)
    a, b = Seq(0, 0.0, 8000, 64), Seq(1, 0.0, 2000, 64)
    running, waiting, free = [], deque([a, b]), [2000, 510]
    # a's prompt in one chunk: 500 blocks in each pool; b's first chunk (the 192 tokens left of the budget: 12 blocks
    # in each pool) fits the full pool's 1,500, not the window pool's 10
    plan = plan_iteration(running, waiting, free, lim)
    assert plan.work == [(a, 8000)] and (a.blocks, a.swa) == (500, 500) and free == [1500, 10]
    _check(running, free, (2000, 510))
    # a's first decode: 501 full blocks; the window pool keeps 501 - (8000 - 127) // 16 = 9 (491 freed), so b fits
    a.computed, a.generated = 8000, 1
    plan = plan_iteration(running, waiting, free, lim)
    assert plan.work == [(a, 1), (b, 2000)]
    assert (a.blocks, a.swa, b.blocks, b.swa) == (501, 9, 125, 125) and free == [1374, 376]
    _check(running, free, (2000, 510))


def test_free_and_held_stay_consistent_under_preemption():
    # four 1,000-token prompts in chunks of 512 against a window pool of 160 blocks (the full pool, 1,000, never
    # binds): chunks of later requests take window blocks the earlier ones still hold, so the last admitted are
    # preempted; every pass, free + held is each pool's size
    lim = Limits("vllm", max_num_seqs=8, budget=1024, block_size=16, shared_blocks=0, swap=False, swa_window=512)
    seqs = [Seq(i, 0.0, 1000, 40) for i in range(4)]
    running: list[Seq] = []
    waiting, free, totals = deque(seqs), [1000, 160], (1000, 160)
    preempted = finished = 0
    for _ in range(400):
        plan = plan_iteration(running, waiting, free, lim)
        for v in plan.preempted:
            assert v.blocks == 0 and v.swa == 0 and v.computed == 0
            waiting.appendleft(v)
        preempted += len(plan.preempted)
        _check(running, free, totals)
        if not plan.work:
            break
        for s, n in plan.work:
            s.computed += n
            if s.computed == s.n_in + s.generated:
                s.generated += 1
        for s in [s for s in running if s.generated >= s.n_out]:
            free[0] += s.blocks
            free[1] += s.swa
            s.blocks = s.swa = 0
            running.remove(s)
            finished += 1
        _check(running, free, totals)
    assert preempted >= 1 and finished == 4 and free == [1000, 160]


def test_a_run_holds_more_requests_than_the_full_layout():
    # gpt-oss-20b (bf16 weights) at gpu_memory_utilization 0.5025: the full layout has 131 blocks of 24 layers
    # (2,096 tokens); SGLang's split gives int(2,096 x 24 / 21.6) = 2,328 full-layer tokens (145 blocks) and
    # int(2,328 x 0.8) = 1,862 window-layer tokens (116 blocks). Two 1,100-token requests need 2 x 69 = 138 blocks:
    # at full context the later one is preempted. With the pools both fit the full pool (138 <= 145); the window
    # pool takes one 1,000-token prompt (63 blocks) at a time and keeps 63 - (1000 - 127) // 16 = 9 of it once
    # that request decodes, so the next prompt is admitted then (9 + 63 <= 116) and nothing is preempted
    runs = {}
    for lay in ("full", "sglang-swa"):
        runs[lay] = simulate_serving("gpt-oss-20b", "h100-sxm5-80gb", ServeConfig(
            arrival="burst", lengths="fixed:in=1000,out=100", requests=4, gpu_memory_utilization=0.5025,
            framework="sglang", kv_window_layout=lay))
    full, swa = runs["full"].summary, runs["sglang-swa"].summary
    assert full["kv_cache"]["blocks"] == 131 and full["kv_cache"]["window_layout"] == "full"
    assert (swa["kv_cache"]["blocks"], swa["kv_cache"]["swa_blocks"]) == (145, 116)
    assert swa["kv_cache"]["window_layout"] == "sglang-swa" and swa["kv_cache"]["swa_full_tokens_ratio"] == 0.8
    assert full["preemptions"] >= 1 and swa["preemptions"] == 0
    assert swa["makespan_s"] < full["makespan_s"]


def test_sglang_profile_keeps_the_full_layout():
    # the profile stands for SGLang >= 0.4 (its facts cite the v0.4 blog): 0.4.0 has no window pool, and the
    # releases that do (0.5.1, 0.5.5) turn it off for GPT-OSS and Gemma 2/3
    assert get_profile("sglang").kv_window_layout == "full"


def test_what_the_window_pool_does_not_model_is_refused():
    with pytest.raises(ServingError, match="kv_window_layout sglang-swa: got preemption swap"):
        simulate_serving("gpt-oss-20b", "h100-sxm5-80gb", ServeConfig(
            arrival="burst", lengths="fixed:in=16,out=2", requests=1, framework="sglang", preemption="swap",
            kv_window_layout="sglang-swa"))
