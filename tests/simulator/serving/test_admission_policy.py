"""KV admission policies: ``max-utilization`` (admit on the blocks needed now, preempt when short) and
``no-evict`` (TensorRT-LLM's GUARANTEED_NO_EVICT: admit only when the whole output's blocks fit)."""

from __future__ import annotations

import subprocess
import sys
from collections import deque

import pytest

from simulator.serving import ServeConfig, ServingError, simulate_serving
from simulator.serving.scheduler import Limits, Seq, plan_iteration, reserve_tokens


def _seq(i: int, n_in: int, n_out: int, computed: int = 0, generated: int = 0, blocks: int = 0) -> Seq:
    s = Seq(i, 0.0, n_in, n_out)
    s.computed, s.generated, s.blocks = computed, generated, blocks
    return s


def _lim(no_evict: bool) -> Limits:
    return Limits("orca", max_num_seqs=8, budget=64, block_size=4, shared_blocks=0, swap=False, no_evict=no_evict)


def test_no_evict_holds_a_request_back_until_its_reserve_fits():
    # a runs (8 + 8 tokens: 4 blocks of 4 reserved at admission), 6 blocks free. b (8 + 12 = 20 tokens) reserves
    # 5 blocks -> 1 left; c (4 + 4 = 8 tokens) needs 2 -> held back (and, first come first served, so is anything
    # behind it).
    a = _seq(0, 8, 8, computed=8, generated=1, blocks=4)
    b, c = _seq(1, 8, 12), _seq(2, 4, 4)
    running, waiting, free = [a], deque([b, c]), [6]
    plan = plan_iteration(running, waiting, free, _lim(True))
    assert [(s.id, n) for s, n in plan.work] == [(0, 1), (1, 8)]
    assert a.blocks == 4 and b.blocks == 5 and free == [1] and list(waiting) == [c] and not plan.preempted
    # the same queue under max-utilization: b takes the 2 blocks of its prompt, c the 1 of its prompt
    a2 = _seq(0, 8, 8, computed=8, generated=1, blocks=2)
    running2, waiting2, free2 = [a2], deque([_seq(1, 8, 12), _seq(2, 4, 4)]), [6]
    plan2 = plan_iteration(running2, waiting2, free2, _lim(False))
    assert [(s.id, n) for s, n in plan2.work] == [(0, 1), (1, 8), (2, 4)]
    assert a2.blocks == 3 and free2 == [6 - 1 - 2 - 1] and not waiting2
    # a finishes and frees its 4 blocks: 5 free, c's 2 fit; b's decodes take no block (its 5 are reserved)
    running.remove(a)
    free[0] += a.blocks
    b.computed, b.generated = 8, 1
    plan = plan_iteration(running, waiting, free, _lim(True))
    assert [(s.id, n) for s, n in plan.work] == [(1, 1), (2, 4)] and c.blocks == 2 and free == [3]


def test_no_evict_reserve_takes_look_ahead_slots():
    lim = Limits("orca", max_num_seqs=8, budget=64, block_size=4, shared_blocks=0, swap=False, steps=4, no_evict=True)
    s = _seq(0, 6, 7)
    assert reserve_tokens(s, lim) == 6 + 7 + 3  # 3 multi-step look-ahead slots: 16 tokens, 4 blocks
    free = [4]
    plan_iteration([], deque([s]), free, lim)
    assert s.blocks == 4 and free == [0]


def test_no_evict_never_preempts_and_runs_blocks_over_the_reserve_at_once():
    # 16 requests of 128 + 1024 tokens (72 blocks of 16 each) at once on a cache of 373 blocks (llama-2-7b on an
    # H100, 79.18 GiB as the runtime reports it, with gpu_memory_utilization 0.2): no-evict runs
    # floor(373 / 72) = 5 at a time and preempts none;
    # max-utilization admits all 16 and preempts when the cache runs out
    base = dict(arrival="burst", lengths="fixed:in=128,out=1024", requests=16, scheduler="orca",
                gpu_memory_utilization=0.2)
    mu = simulate_serving("llama-2-7b", "h100-sxm5-80gb", ServeConfig(**base))
    ne = simulate_serving("llama-2-7b", "h100-sxm5-80gb", ServeConfig(**base, admission="no-evict"))
    assert ne.summary["kv_cache"]["blocks"] == mu.summary["kv_cache"]["blocks"] == 373
    assert ne.summary["preemptions"] == 0 and mu.summary["preemptions"] > 0
    assert max(it.seqs for it in ne.iterations) == 373 // 72 == 5
    assert max(it.seqs for it in mu.iterations) == 16
    assert len(ne.requests) == 16 and all(r.output_len == 1024 for r in ne.requests)
    assert ne.summary["limits"]["admission"] == "no-evict" and mu.summary["limits"]["admission"] == "max-utilization"


def test_bad_admission_is_located():
    with pytest.raises(ServingError, match=r"admission: got 'no-evct'; expected one of max-utilization, no-evict.*"
                                           r"did you mean 'no-evict'"):
        simulate_serving("llama-2-7b", "h100-sxm5-80gb", ServeConfig(requests=2, admission="no-evct"))


def test_bad_admission_flag_exits_2():
    p = subprocess.run([sys.executable, "-m", "simulator.cli", "serve", "llama-2-7b", "--hardware", "h100-sxm5-80gb",
                        "--admission", "evict"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "--admission" in p.stderr and "Traceback" not in p.stderr


def test_admission_setting_is_read_and_checked(one_row_csv):
    from simulator.calibration.serving_validation import ServingDataError, read_serving_csv

    for value in ("no-evict", "no_evict"):
        f = one_row_csv("adm.csv", settings=f"admission={value}", settings_source="the engine's code")
        if value == "no-evict":
            assert dict(read_serving_csv(f)[0].settings) == {"admission": "no-evict"}
    with pytest.raises(ServingDataError, match=r"adm.csv:2: settings: admission: got 'no_evict'; expected one of "
                                               r"max-utilization, no-evict.*did you mean 'no-evict'"):
        read_serving_csv(f)
