"""Scheduler options of the older engines by hand: prompts run alone (vLLM V0, SGLang <= 0.3), multi-step
scheduling (vLLM 0.6 --num-scheduler-steps), host time per iteration, and the settings column of the
published serving measurements."""

from __future__ import annotations

import math
from collections import deque

import pytest

from simulator.serving import ServeConfig, ServingError, simulate_serving
from simulator.serving.engine import Replica
from simulator.serving.scheduler import Limits, Seq, plan_iteration


def _seq(i: int, n_in: int, n_out: int, computed: int = 0, generated: int = 0, blocks: int = 0) -> Seq:
    s = Seq(i, 0.0, n_in, n_out)
    s.computed, s.generated, s.blocks = computed, generated, blocks
    return s


def test_prompts_run_alone_when_not_mixed():
    """mixed=False: a waiting prompt gets an iteration of its own; the decodes run in the next one."""
    lim = Limits("orca", max_num_seqs=4, budget=64, block_size=4, shared_blocks=0, swap=False, mixed=False)
    d = _seq(0, 6, 10, computed=7, generated=2, blocks=2)
    new = _seq(1, 10, 5)
    running, waiting, free = [d], deque([new]), [10]
    plan = plan_iteration(running, waiting, free, lim)
    assert [(s.id, n) for s, n in plan.work] == [(1, 10)] and not plan.decode_only
    assert new.blocks == 3 and free == [7] and running == [d, new]
    new.computed, new.generated = 10, 1  # the prompt's first token sampled
    plan = plan_iteration(running, deque(), free, lim)
    assert [(s.id, n) for s, n in plan.work] == [(0, 1), (1, 1)] and plan.decode_only
    # mixed (the default): the prompt rides with the decode
    lim_m = Limits("orca", max_num_seqs=4, budget=64, block_size=4, shared_blocks=0, swap=False)
    plan = plan_iteration([_seq(0, 6, 10, computed=7, generated=2, blocks=2)], deque([_seq(1, 10, 5)]), [10], lim_m)
    assert [(s.id, n) for s, n in plan.work] == [(0, 1), (1, 10)]


def test_multi_step_reserves_look_ahead_slots_outside_the_budget():
    """steps=4, blocks of 4: a decode at 7 computed tokens reserves room for 7 + 1 + 3 = 11 tokens (3 blocks);
    each decode takes 1 token of the budget, so a budget of 2 still runs both decodes."""
    lim = Limits("orca", max_num_seqs=4, budget=2, block_size=4, shared_blocks=0, swap=False, steps=4)
    a = _seq(0, 6, 10, computed=7, generated=2, blocks=2)
    b = _seq(1, 4, 10, computed=4, generated=1, blocks=1)  # 4 + 1 + 3 = 8 tokens: 2 blocks
    free = [5]
    plan = plan_iteration([a, b], deque(), free, lim)
    assert [(s.id, n) for s, n in plan.work] == [(0, 1), (1, 1)] and plan.decode_only
    assert (a.blocks, b.blocks) == (3, 2) and free == [3]


class _FlatPricer:
    """Every decode step costs ``step`` seconds (no attention growth); host time ``host`` per pass."""

    def __init__(self, step: float, host: float) -> None:
        self.step, self.host = step, host

    def host_time(self, seqs: int) -> float:
        return self.host

    step_host_time = host_time  # no graph launch priced (the pricer's host time serial with a step)

    def decode_fixed(self, batch: int) -> tuple[float, float]:
        return self.step + self.host, 1.0

    def longest_bound(self, longest: float, context: float = 0.0) -> int:  # noqa: ARG002 - no context dependence
        return 0

    def decode_segment(self, batch: int, context: float, longest: int = 0) -> tuple[float, float, float, float, float]:
        return math.inf, 0.0, 0.0, 0.0, 0.0

    def replays_graph(self, decodes: int, chunks: int = 0, verify: int = 1) -> bool:
        return not chunks

    def iteration(self, chunks: list[tuple[int, int]], decodes: int, context: float, sampled: int,
                  verify: int = 1, longest: int = 0) -> tuple[float, float]:
        """A prompt iteration: 20 ms, plus the host time."""
        return 0.020 + self.host, 1.0


def test_a_multi_step_block_by_hand():
    """steps=10, 10 ms a step, 1 ms host time once per block: the block ends at 101 ms whatever arrives; a
    sequence with 3 tokens left has its last token at the 3rd step but keeps its slot to the block's end,
    when its tokens are handed over with the block's others (vLLM 0.6 pythonizes them at the last step)."""
    lim = Limits("orca", max_num_seqs=8, budget=64, block_size=16, shared_blocks=0, swap=False, steps=10)
    rep = Replica(0, lim, blocks=100, pricer=_FlatPricer(0.010, 0.001))
    short = _seq(0, 16, 5, computed=17, generated=2, blocks=2)
    long = _seq(1, 16, 50, computed=17, generated=2, blocks=2)
    rep.running = [short, long]
    rep.free = [96]
    end = rep.step(0.0, next_arrival=0.005)  # an arrival 5 ms in does not cut the block
    assert end == pytest.approx(0.101)
    assert short.finish == pytest.approx(0.101) and short.generated == 5
    assert long.generated == 12 and long.computed == 27 and long.finish < 0
    assert rep.running == [long] and [s.id for s in rep.finished] == [0]
    assert rep.iterations[-1].steps == 10
    # one step at a time (steps=1): the run stops at the arrival, host time in every step
    lim1 = Limits("orca", max_num_seqs=8, budget=64, block_size=16, shared_blocks=0, swap=False)
    rep1 = Replica(0, lim1, blocks=100, pricer=_FlatPricer(0.010, 0.001))
    rep1.running, rep1.free = [_seq(0, 16, 5, computed=17, generated=2, blocks=2)], [98]
    rep1.waiting = deque()
    assert rep1.step(0.0, next_arrival=0.015) == pytest.approx(0.022)  # two steps of 11 ms


def test_multi_step_hands_the_first_token_over_at_the_next_launch():
    """vLLM 0.6 with async output processing and 10-step blocks, by hand (20 ms prompt step, 10 ms decode
    steps, 1 ms host time a pass): the prompt step ends at 21 ms; its token is handed over when the next
    block's first step is launched (22 ms: the output callback runs after the launch and a non-last step
    returns without waiting), not when that step ends (32 ms); the request's 4 later tokens come from steps
    1-4 of the block but are handed over with the block's end (122 ms; the client sees every token of a
    request one lag late), so its TPOT is (122 - 21) / 4 ms, not (62 - 21) / 4."""
    lim = Limits("orca", max_num_seqs=8, budget=64, block_size=16, shared_blocks=0, swap=False, steps=10,
                 mixed=False)
    rep = Replica(0, lim, blocks=100, pricer=_FlatPricer(0.010, 0.001), output_lag=True)
    q = _seq(0, 16, 5)
    rep.waiting.append(q)
    assert rep.step(0.0, next_arrival=math.inf) == pytest.approx(0.021)  # the prompt step
    assert q.first_token == pytest.approx(0.021) and rep.pending == [q]
    assert rep.step(0.021, next_arrival=math.inf) == pytest.approx(0.122)  # host 1 ms + 10 steps
    assert q.lag == pytest.approx(0.001)  # handed over at 22 ms
    assert q.finish == pytest.approx(0.122) and q.generated == 5
    assert ((q.finish + q.lag) - (q.first_token + q.lag)) / (q.n_out - 1) == pytest.approx(0.101 / 4)


def test_host_time_per_iteration_and_per_sequence():
    from simulator.hardware import load_hardware
    from simulator.serving.iteration import IterationPricer
    from workloads.parallel import ParallelPlan

    hw = load_hardware("h100-sxm5-80gb")
    base = IterationPricer("llama-2-7b", hw, ParallelPlan())
    host = IterationPricer("llama-2-7b", hw, ParallelPlan(), host_s=3e-4, host_per_seq_s=2e-5)
    assert host.host_time(10) == pytest.approx(3e-4 + 10 * 2e-5)
    t0, _ = base.iteration([(100, 0)], 7, 300.0, 8)
    t1, _ = host.iteration([(100, 0)], 7, 300.0, 8)
    assert t1 - t0 == pytest.approx(3e-4 + 8 * 2e-5, rel=1e-9)  # 1 prefill chunk + 7 decodes
    assert host.decode_fixed(16)[0] - base.decode_fixed(16)[0] == pytest.approx(3e-4 + 16 * 2e-5, rel=1e-9)


def test_vllm_v0_profile_host_figures():
    from workloads.frameworks import get_profile

    p = get_profile("vllm-v0")
    # the line through Vidur's SCHEDULE + PREPARE_INPUTS_E2E means at batch 8 (0.517 ms) and 64 (2.177 ms)
    assert p.iteration_host_s + 8 * p.iteration_host_per_seq_s == pytest.approx(0.517e-3, rel=0.01)
    assert p.iteration_host_s + 64 * p.iteration_host_per_seq_s == pytest.approx(2.177e-3, rel=0.01)
    assert get_profile("vllm").iteration_host_per_seq_s == 0.0


def test_sglang_03_profile_host_figures():
    """SGLang <= 0.3 (no overlap scheduler): the host time the overlap hides, per sequence and iteration, from
    sgl-project/sglang PR #1738: 10% more throughput with overlap; its overlap run took 58.79 s for 581,627
    generated tokens (one sequence in one iteration each), so 0.1 x 58.79 s / 581,627 = 10.1 us."""
    from simulator.calibration.serving_validation import engine_profile
    from workloads.frameworks import get_profile

    p = get_profile("sglang-0.3")
    assert p.iteration_host_per_seq_s == pytest.approx(0.1 * 58.79 / 581_627, rel=0.01)
    assert p.iteration_host_s == 0.0 and "#1738" in p.iteration_host_source
    assert get_profile("sglang").iteration_host_per_seq_s == 0.0  # v0.4 on: overlapped
    # kernels, graphs and padding as sglang: only the host time differs
    # the same costing as sglang but the all-reduce kernel of its build (vllm 0.5.5, before vLLM PR #8558)
    assert p.cost_options() == {**get_profile("sglang").cost_options(), "all_reduce_kernel": "vllm-custom-2024"}
    assert p.graph_batch_sizes == get_profile("sglang").graph_batch_sizes and p.graphs_decode_only
    assert engine_profile("sglang", "0.3.0") == "sglang-0.3" and engine_profile("sglang", "0.4.1") == "sglang"


def test_sglang_03_trickle_adds_its_host_time_per_step():
    """One request at a time: every iteration runs one sequence, so SGLang 0.3's TTFT (one prompt iteration) and
    TPOT (one decode step per token) exceed the overlapped profile's by exactly 10.1 us plus SGLang 0.3's
    sampler kernels over one row of logits (the prompt iteration's on its eager pricer); each decode step,
    replayed from a graph, adds the 26 eager ops and 6 host synchronisations around the replay (26 x 20 us +
    6 x 5.8 us = 554.8 us on the H100's catalog figures); the prompt iteration, eager, adds instead the 38 + 2 ops
    and 6 synchronisations outside its forward (834.8 us: tests/simulator/serving/test_prompt_host_ops.py)."""
    from simulator.serving.setup import prepare
    from workloads.parallel import ParallelPlan

    cfgs = {fw: ServeConfig(arrival="concurrency:n=1", lengths="fixed:in=300,out=40", requests=2, framework=fw)
            for fw in ("sglang", "sglang-0.3")}
    runs = {fw: simulate_serving("llama-2-7b", "h100-sxm5-80gb", c).summary for fw, c in cfgs.items()}
    a, b = runs["sglang"], runs["sglang-0.3"]
    pricer = prepare("llama-2-7b", "h100-sxm5-80gb", cfgs["sglang-0.3"], ParallelPlan()).pricer
    decode_sampler, prompt_sampler = pricer._sampler_point(1)[0], pricer.prefill_pricer._sampler_point(1)[0]
    assert 4 * 1e-6 < decode_sampler < 40e-6  # four kernels over 32,000 logits: launch-bound, none free
    assert b["ttft_s"]["mean"] - a["ttft_s"]["mean"] == pytest.approx(10.1e-6 + prompt_sampler + 834.8e-6, rel=1e-6)
    assert b["tpot_s"]["mean"] - a["tpot_s"]["mean"] == pytest.approx(10.1e-6 + decode_sampler + 554.8e-6, rel=1e-6)


def test_graphs_decode_only_profiles():
    """vLLM V0, SGLang and TensorRT-LLM's PyTorch backend replay CUDA graphs for decode-only batches only;
    vLLM V1 (piecewise graphs around attention) and the TensorRT engine backend do not switch."""
    from workloads.frameworks import get_profile

    flags = {n: get_profile(n).graphs_decode_only for n in ("vllm-v0", "sglang", "trt-llm-pytorch", "vllm", "trt-llm")}
    assert flags == {"vllm-v0": True, "sglang": True, "trt-llm-pytorch": True, "vllm": False, "trt-llm": False}
    assert all(get_profile(n).graphs_decode_source for n, on in flags.items() if on)


def test_prompt_iterations_run_without_graphs():
    """With eager options, an iteration carrying a prompt chunk is the eager pricer's (at a bucket point: the
    engines' eager prefill step plus the host time); a decode-only one stays the graph pricer's."""
    from dataclasses import replace

    from simulator.engines.analytical import EvalOptions
    from simulator.hardware import load_hardware
    from simulator.parallel.compose import evaluate_plan
    from simulator.serving.iteration import IterationPricer
    from workloads.parallel import ParallelPlan

    hw = load_hardware("h100-sxm5-80gb")
    graphs = EvalOptions(fusion=True, cuda_graphs=True)
    eager = replace(graphs, cuda_graphs=False, eager_framework=True, eager_modules=True)
    plain = IterationPricer("llama-2-7b", hw, ParallelPlan(), graphs, host_s=3e-4)
    split = IterationPricer("llama-2-7b", hw, ParallelPlan(), graphs, host_s=3e-4, eager_options=eager)
    step = evaluate_plan("llama-2-7b", hw, ParallelPlan(), eager, phase="prefill", seq=16, batch=1, dtype="bf16")
    t, _ = split.iteration([(16, 0)], 0, 0.0, 1)
    assert t == pytest.approx(step.latency_s + 3e-4, rel=1e-9)
    assert t > plain.iteration([(16, 0)], 0, 0.0, 1)[0]
    assert split.iteration([], 8, 300.0, 8) == plain.iteration([], 8, 300.0, 8)
    assert split.decode_fixed(8) == plain.decode_fixed(8)
    assert plain.prefill_pricer is None and split.prefill_pricer is not None
    assert split.engine_calls == plain.engine_calls and split.prefill_pricer.engine_calls > 0  # prompts priced there


def test_multi_step_delays_the_first_token_under_load():
    """A prompt arriving while a 10-step block runs waits for it: the median TTFT grows by several decode
    steps, the mean TPOT hardly moves (the same steps, scheduled less often)."""
    base = dict(arrival="poisson:qps=4", lengths="fixed:in=200,out=200", requests=120, seed=3, scheduler="orca")
    one = simulate_serving("llama-2-7b", "h100-sxm5-80gb", ServeConfig(**base, mixed_prefill=False)).summary
    ten = simulate_serving("llama-2-7b", "h100-sxm5-80gb",
                           ServeConfig(**base, mixed_prefill=False, scheduler_steps=10)).summary
    step = one["tpot_s"]["p50"]
    assert ten["ttft_s"]["p50"] > one["ttft_s"]["p50"] + 2 * step
    assert ten["ttft_s"]["p50"] < one["ttft_s"]["p50"] + 10 * step
    assert ten["tpot_s"]["mean"] == pytest.approx(one["tpot_s"]["mean"], rel=0.1)
    assert ten["limits"]["scheduler_steps"] == 10 and ten["limits"]["mixed_prefill"] is False


@pytest.mark.parametrize("kw, match", [
    ({"scheduler_steps": 0}, "scheduler_steps: got 0; expected a positive integer"),
    ({"scheduler": "static", "scheduler_steps": 4}, "options of the iteration-level schedulers"),
    ({"mixed_prefill": "no"}, "mixed_prefill: got 'no'; expected True or False"),
])
def test_bad_options_are_located(kw, match):
    with pytest.raises(ServingError, match=match):
        simulate_serving("llama-2-7b", "h100-sxm5-80gb", ServeConfig(requests=2, **kw))


def test_settings_column_is_read_and_checked(one_row_csv):
    from simulator.calibration.serving_validation import (
        ServingDataError,
        engine_profile,
        read_serving_csv,
    )

    rows = {r.id: r for r in read_serving_csv()}
    assert dict(rows["srv-003"].settings) == {"scheduler_steps": 10, "mixed_prefill": False, "max_num_seqs": 256,
                                              "max_batched_tokens": 4096, "arrival_seed": 1}  # vLLM 0.6.0 (its defaults)
    assert dict(rows["srv-001"].settings) == {"mixed_prefill": False, "arrival_seed": 1}  # SGLang 0.3.0, sglang client
    # vLLM main of September 2024 (V0; its server's defaults for Llama 3 70B), vLLM's client
    assert dict(rows["srv-052"].settings) == {"arrival_seed": 0, "mixed_prefill": False, "max_num_seqs": 256,
                                              "max_batched_tokens": 8192}
    # trtllm-bench's limits for Llama 3.1 8B FP8 on an H200 (in the notes and the settings): KV tokens =
    # (143,771 MiB - 8.03e9 B) x 0.95 / 64 KiB per token = 2.07e6 -> 8,081 requests of 256 tokens at 128/128 -> batch
    # min(8081, 4096) = 4096, tokens min(4096 x 2, 32768) = 8192; at 2048/128 (2,176 tokens a request): 951 -> 1024
    # (rounded up to 128), tokens 951 x 17 = 16,162 -> 16,384 (rounded up to 1024)
    assert "max_batch_size 4096, max_num_tokens 8192" in rows["srv-070"].notes
    assert dict(rows["srv-070"].settings) == {"max_num_seqs": 4096, "max_batched_tokens": 8192,
                                              "admission": "no-evict",  # trtllm-bench: GUARANTEED_NO_EVICT
                                              "free_gpu_memory_fraction": 0.95}  # the guide's KV fraction
    assert "max_batch_size 1024, max_num_tokens 16384" in rows["srv-076"].notes
    assert dict(rows["srv-076"].settings)["max_batched_tokens"] == 16384 and rows["srv-076"].scheduler == "orca"
    assert engine_profile("vllm", "0.6.0") == "vllm-v0" and engine_profile("vllm", "main") == "vllm"
    assert engine_profile("vllm", rows["srv-052"].engine_version) == "vllm-v0"
    assert engine_profile("tensorrt-llm", "1.0 (PyTorch backend)") == "trt-llm-pytorch"
    assert engine_profile("nim", "1.8.0") == "trt-llm"
    f = one_row_csv("bad.csv", settings="scheduler_step=10")
    with pytest.raises(ServingDataError, match=r"bad.csv:2: settings: unknown setting; got 'scheduler_step=10'.*"
                                               r"did you mean 'scheduler_steps'"):
        read_serving_csv(f)


def test_arrival_seed_setting_takes_zero_and_refuses_negatives(one_row_csv):
    from simulator.calibration.serving_validation import ServingDataError, read_serving_csv

    for value in ("0", "-1"):
        f = one_row_csv("seed.csv", settings=f"arrival_seed={value}", settings_source="the client's code")
        if value == "0":
            assert dict(read_serving_csv(f)[0].settings) == {"arrival_seed": 0}
    with pytest.raises(ServingDataError, match=r"seed.csv:2: settings: arrival_seed: got '-1'; expected a "
                                               r"non-negative integer"):
        read_serving_csv(f)


def test_a_setting_may_not_repeat_a_filled_column(one_row_csv):
    from simulator.calibration.serving_validation import ServingDataError, read_serving_csv

    f = one_row_csv("twice.csv", max_num_seqs="128", settings="max_num_seqs=256", settings_source="code")
    with pytest.raises(ServingDataError, match=r"twice.csv:2: settings: max_num_seqs given twice; got column "
                                               r"max_num_seqs '128'"):
        read_serving_csv(f)


def test_v0_async_output_hands_each_token_over_one_iteration_late():
    """vLLM V0 (profile vllm-v0): step n's outputs are returned when step n + 1 ends, so the first token of a
    two-token request reaches the client when its decode step ends, and the last one as late (TPOT unchanged);
    SGLang (no lag) hands it over when the prefill ends."""
    from workloads.frameworks import get_profile

    assert get_profile("vllm-v0").output_lag_steps == 1 and get_profile("sglang").output_lag_steps == 0
    runs = {}
    for fw in ("vllm-v0", "sglang"):
        cfg = ServeConfig(arrival="burst", lengths="fixed:in=64,out=2", scheduler="orca", requests=1, framework=fw)
        runs[fw] = simulate_serving("llama-2-7b", "h100-sxm5-80gb", cfg)
    v0, sg = runs["vllm-v0"], runs["sglang"]
    (prefill, decode), (q,) = v0.iterations, v0.requests
    assert q.first_token_s == pytest.approx(decode.end_s)  # delivered with the next iteration
    assert q.finish_s - q.first_token_s == pytest.approx(decode.end_s - prefill.end_s)  # the engine's own gap
    assert sg.requests[0].first_token_s == pytest.approx(sg.iterations[0].end_s)
